"""Protocol messages: immutable, picklable, one class per message.

Runtime → driver messages are imperative (``Load``), driver → runtime replies are
past tense (``Loaded``).  Keys are tuples of JSON scalars (str, int, bool) in the
order of the collection key; documents are JSON-compatible Python objects.

Load, Loaded and the Stores carry *batches* (columnar tuples) for speed; the phase and
order rules are the same as for one key per message.  A Store has one class per form
(:data:`AnyStore`): documents, their JSON texts, or typed rows.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Optional

if TYPE_CHECKING:
    import pyarrow as pa

Key = tuple[Any, ...]  # tuple of str | int | bool
Doc = Any  # JSON-compatible value (usually a dict)
JsonObject = dict[str, Any]  # a JSON object: a config, a resource, a schema, a checkpoint

KEY_SPACE_MAX = 0xFFFFFFFF


@dataclass(frozen=True, slots=True)
class Range:
    """An inclusive range ``[key_begin, key_end]`` of the 32-bit key hash."""

    key_begin: int = 0
    key_end: int = KEY_SPACE_MAX

    def __post_init__(self) -> None:
        if not (0 <= self.key_begin <= self.key_end <= KEY_SPACE_MAX):
            raise ValueError(f"invalid key range [{self.key_begin:#x}, {self.key_end:#x}]")

    def contains(self, key_hash: int) -> bool:
        return self.key_begin <= key_hash <= self.key_end

    def covers(self, other: "Range") -> bool:
        return self.key_begin <= other.key_begin and other.key_end <= self.key_end

    def overlaps(self, other: "Range") -> bool:
        return self.key_begin <= other.key_end and other.key_begin <= self.key_end

    @property
    def name(self) -> str:
        return f"{self.key_begin:08x}-{self.key_end:08x}"

    @staticmethod
    def parse(name: str) -> "Range":
        """The Range of a :attr:`name` (``0000abcd-ffffffff``), as directories, subjects and
        checkpoint rows spell it."""
        begin, sep, end = str(name).partition("-")
        if not sep:
            raise ValueError(f"not a range name: {name!r}")
        return Range(int(begin, 16), int(end, 16))

    @staticmethod
    def split(n: int) -> list["Range"]:
        """``n`` ranges that split the key space evenly."""
        if n < 1:
            raise ValueError("shard count must be >= 1")
        size = (KEY_SPACE_MAX + 1) // n
        out = []
        for i in range(n):
            begin = i * size
            end = KEY_SPACE_MAX if i == n - 1 else (i + 1) * size - 1
            out.append(Range(begin, end))
        return out


@dataclass(frozen=True, slots=True)
class StateUpdate:
    """An update of the driver checkpoint: an RFC 7396 merge patch, or a replacement."""

    updated: Any = None
    merge_patch: bool = True


# --------------------------------------------------------------------------- setup


@dataclass(frozen=True, slots=True)
class Field:
    """A projected field of a binding: a top-level property (or a key component)."""

    name: str
    pointer: str
    type: str  # "string" | "integer" | "number" | "boolean" | "object" | "array" | "json"
    is_key: bool = False
    nullable: bool = True
    format: Optional[str] = None  # e.g. "date-time"
    scale: Optional[int] = None  # a "number" that is an exact decimal of this many places (multipleOf 10^-scale)


@dataclass(frozen=True, slots=True)
class BindingSpec:
    """What a driver learns of one binding: its resource, fields and mode."""

    resource: JsonObject
    collection: str
    key: tuple[str, ...]  # JSON pointers
    fields: tuple[Field, ...]  # key fields first, in key order, then value fields
    schema: JsonObject = field(default_factory=dict)
    delta_updates: bool = False
    #: the runtime sends no Loads: each Store carries the batch's combined document, which the
    #: endpoint reduces into the stored one itself (``Capabilities.endpoint_reduce``)
    endpoint_reduce: bool = False

    @property
    def key_fields(self) -> tuple[Field, ...]:
        return tuple(f for f in self.fields if f.is_key)

    @property
    def value_fields(self) -> tuple[Field, ...]:
        return tuple(f for f in self.fields if not f.is_key)

    @property
    def resource_path(self) -> tuple[str, ...]:
        """A short identity of the resource (e.g. ``("customers",)``)."""
        for k in ("table", "path", "topic", "subject", "stream", "key_prefix", "name"):
            if k in self.resource:
                return (str(self.resource[k]),)
        return tuple(str(v) for v in self.resource.values())


@dataclass(frozen=True, slots=True)
class Spec:
    """Ask the driver to describe itself."""


@dataclass(frozen=True, slots=True)
class SpecResponse:
    config_schema: JsonObject = field(default_factory=dict)
    resource_schema: JsonObject = field(default_factory=dict)
    documentation_url: str = ""


@dataclass(frozen=True, slots=True)
class Validate:
    materialization: str
    config: JsonObject
    bindings: tuple[BindingSpec, ...]


@dataclass(frozen=True, slots=True)
class ValidatedBinding:
    resource_path: tuple[str, ...]
    delta_updates: bool = False
    constraints: dict[str, str] = field(default_factory=dict)  # field name -> reason


@dataclass(frozen=True, slots=True)
class Validated:
    bindings: tuple[ValidatedBinding, ...] = ()


@dataclass(frozen=True, slots=True)
class Apply:
    materialization: str
    config: JsonObject
    bindings: tuple[BindingSpec, ...]
    version: str = ""
    dry_run: bool = False
    checkpoint_id: Optional[str] = None  # the tidemark checkpoint that will write the resources
    #: per binding, the view-identity record to keep with its resource where none is kept yet
    #: (:mod:`tidemark.runtime.view_identity`; returned by ``Driver.identities``); () records nothing
    identities: tuple[JsonObject, ...] = ()


@dataclass(frozen=True, slots=True)
class Applied:
    action_description: str = ""
    created: tuple[tuple[str, ...], ...] = ()  # resource paths Apply created (or would create, on a dry run)


# --------------------------------------------------------------------- transaction


@dataclass(frozen=True, slots=True)
class Open:
    materialization: str
    version: str
    range: Range
    state: Any = None  # the driver checkpoint from the recovery log (JSON)
    config: JsonObject = field(default_factory=dict)
    bindings: tuple[BindingSpec, ...] = ()


@dataclass(frozen=True, slots=True)
class Opened:
    runtime_checkpoint: Optional[JsonObject] = None


@dataclass(frozen=True, slots=True)
class Acknowledge:
    """The previous transaction committed to the recovery log.

    ``state`` carries the merged driver checkpoint (used by coordinator apply)."""

    state: Any = None


@dataclass(frozen=True, slots=True)
class Acknowledged:
    state: Optional[StateUpdate] = None


@dataclass(frozen=True, slots=True)
class Load:
    binding: int
    keys: tuple[Key, ...]


@dataclass(frozen=True, slots=True)
class Loaded:
    binding: int
    keys: tuple[Key, ...]
    docs: tuple[Doc, ...]


@dataclass(frozen=True, slots=True)
class Flush:
    pass


@dataclass(frozen=True, slots=True)
class Flushed:
    state: Optional[StateUpdate] = None


@dataclass(frozen=True, slots=True)
class Store:
    """Documents to store. All tuples have one entry per document.

    ``values`` holds, per document, the values of the binding's value fields in order.
    ``exists`` says the key was Loaded in this transaction (update vs insert).
    ``deletes`` marks documents whose key must be removed (hard delete).
    A binding the endpoint reduces gets :class:`StoreTexts` or :class:`StoreRows` from the
    runtime, but a driver may be sent documents for it too."""

    binding: int
    keys: tuple[Key, ...]
    values: tuple[tuple[Any, ...], ...]
    docs: tuple[Doc, ...]
    exists: tuple[bool, ...]
    deletes: tuple[bool, ...]


@dataclass(frozen=True, slots=True)
class StoreTexts:
    """The combined documents of a binding the endpoint reduces (``BindingSpec.endpoint_reduce``),
    each as its JSON text, one per key: the endpoint parses it where it stores it, and no
    Python object is made per document.  Nothing exists (no Loads) and nothing is deleted.
    On the wire, a ``store`` with ``texts``."""

    binding: int
    keys: tuple[Key, ...]
    texts: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class StoreRows:
    """The combined documents of a lean binding the endpoint reduces, for a driver whose
    ``Driver.typed_rows`` says so: their properties' typed values, one column per property
    (objects and arrays as JSON text), one row per key in the order of ``keys``, and where a
    lean row keeps a remainder (:data:`REMAINDER`) the JSON object of what no column holds.
    Never sent over the wire."""

    binding: int
    keys: tuple[Key, ...]
    rows: pa.Table


#: the column of :class:`StoreRows` holding each row's remainder: the JSON object text of the
#: members no column holds (a date-time's text its instant does not give back, a nullable
#: property's ``null``, the properties the schema does not declare), null where none; a
#: schema that declares a property of this name gets no typed rows
REMAINDER = "_tidemark_remainder"

#: a Store in any of its forms (what ``Transactor.store`` gets)
AnyStore = Store | StoreTexts | StoreRows


@dataclass(frozen=True, slots=True)
class Quarantine:
    """Invalid documents of this transaction, for the endpoint's dead-letter place.  Each
    row: ``{"binding", "location", "key_json", "reason", "value"}``.  Sent after the
    Stores, before StartCommit, to drivers declaring the ``quarantine`` capability."""

    rows: tuple[JsonObject, ...] = ()


@dataclass(frozen=True, slots=True)
class StartCommit:
    runtime_checkpoint: JsonObject


@dataclass(frozen=True, slots=True)
class StartedCommit:
    state: Optional[StateUpdate] = None


RUNTIME_MESSAGES = (
    Spec,
    Validate,
    Apply,
    Open,
    Acknowledge,
    Load,
    Flush,
    Store,
    StoreTexts,
    StoreRows,
    Quarantine,
    StartCommit,
)
DRIVER_MESSAGES = (SpecResponse, Validated, Applied, Opened, Acknowledged, Loaded, Flushed, StartedCommit)
