"""A lake table as tidemark keeps it: the binding's columns, the staged files' schema, and the
properties tidemark sets on the table (key, mode, owner) -- one model for Delta and Iceberg."""

from __future__ import annotations

import dataclasses
import json
import os
import re
from dataclasses import dataclass
from typing import Any, Callable, NamedTuple, Optional

import pyarrow as pa

from tidemark.collection.schema import pointer_tokens
from tidemark.drivers.common.columns import (
    DECIMAL,
    DOCUMENT_COLUMN,
    INSTANT,
    JSON,
    NUMBER,
    ROW_ID_COLUMN,
    TEXT,
    TIMESTAMP,
    Column,
    arrow_type,
    dumps,
    field_kind,
)
from tidemark.drivers.common.forms import FULL, LEAN, requested_form
from tidemark.errors import IncompatibleSchema, SpecError
from tidemark.protocol.messages import BindingSpec

KEY_PROPERTY = "tidemark.key"  # table properties, written by Apply
MODE_PROPERTY = "tidemark.deltaUpdates"
OWNER_PROPERTY = "tidemark.owner"  # {"materialization", "checkpoint_id"}: the one checkpoint that writes the table
DELETE_COLUMN = "_tidemark_delete"  # the staged files only: the row is a deletion
LEAN_PROPERTY = "tidemark.leanColumns"  # a lean table's value columns: {"NAME": KIND}, as Apply made them
JSON_COLUMN_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]{0,127}")  # an object/array property that gets a column


@dataclass(frozen=True, slots=True)
class LakeTable:
    """One binding's table."""

    name: str  # how stages and messages name it: a Delta table's location, an Iceberg table's NAMESPACE.TABLE
    keys: tuple[Column, ...]
    values: tuple[Column, ...]
    delta: bool
    identifier: tuple[str, ...] = ()  # Iceberg: namespace levels + table name
    partition_by: Optional[str] = None  # Iceberg: a column, identity partitions (resource ``partition_by``)
    lean: bool = False  # the row is its document: flow_document holds only the remainder (see lake.lean)
    top_keys: frozenset = frozenset()  # the key columns that are top-level properties

    @property
    def columns(self) -> tuple[Column, ...]:
        return self.keys + self.values

    @property
    def held(self) -> tuple[tuple[str, str], ...]:
        """A lean row's columns that hold top-level properties: (name, kind)."""
        if not self.lean:
            return ()
        keys = tuple((c.name, c.kind) for c in self.keys if c.name in self.top_keys)
        return keys + tuple((c.name, c.kind) for c in self.values)

    @property
    def read_names(self) -> list[str]:
        """The columns a read needs to rebuild each row's document, after the keys."""
        return [c.name for c in self.columns] + [DOCUMENT_COLUMN] if self.lean else [DOCUMENT_COLUMN]

    def arrow_schema(self) -> pa.Schema:
        """The table's schema (keys not null, the document not null unless lean)."""
        fields = [pa.field(c.name, arrow_type(c.kind), nullable=not c.is_key) for c in self.columns]
        return pa.schema(fields + [pa.field(DOCUMENT_COLUMN, pa.string(), nullable=self.lean)])

    def lean_text(self) -> str:
        """The :data:`LEAN_PROPERTY` of a lean table."""
        return dumps({c.name: c.kind for c in self.values})

    def staged_schema(self) -> pa.Schema:
        """A staged file's schema: the columns, the document, the delete marker."""
        fields = [pa.field(c.name, arrow_type(c.kind)) for c in self.columns]
        return pa.schema(fields + [pa.field(DOCUMENT_COLUMN, pa.string()), pa.field(DELETE_COLUMN, pa.bool_())])


def lake_table(
    label: str,
    name: str,
    binding: BindingSpec,
    *,
    identifier: tuple[str, ...] = (),
    partition_by: Optional[str] = None,
) -> LakeTable:
    """The binding's table ``name``; refuses a binding without a key and columns whose names
    collide (``label``: "delta table", "iceberg table")."""
    keys = tuple(Column(f.name, field_kind(f), True) for f in binding.key_fields)
    if not keys:
        raise SpecError(f"{label} {name!r}: no key fields")
    values = tuple(Column(f.name, field_kind(f)) for f in binding.value_fields)
    names = [c.name for c in keys + values] + [DOCUMENT_COLUMN, DELETE_COLUMN]
    dup = sorted({n for n in names if names.count(n) > 1})
    if dup:
        raise IncompatibleSchema(
            f"{label} {name!r}: column names collide: {dup} ({DOCUMENT_COLUMN!r} and {DELETE_COLUMN!r} are reserved)"
        )
    top = frozenset(f.name for f in binding.key_fields if pointer_tokens(f.pointer) == [f.name])
    return LakeTable(name, keys, values, bool(binding.delta_updates), identifier, partition_by, top_keys=top)


class TableForm(NamedTuple):
    """An existing table's form (FULL or LEAN), the value columns Apply recorded on a lean
    one (``{name: kind}``), and which of its columns are timestamps (``{name: bool}``)."""

    form: str
    recorded: dict
    timestamps: dict[str, bool]


def table_form(document_required: bool, properties: dict, timestamps: dict[str, bool]) -> TableForm:
    """An existing table's form (``timestamps``: whether each of its columns is a timestamp)."""
    if document_required:
        return TableForm(FULL, {}, timestamps)
    return TableForm(LEAN, json_property(properties, LEAN_PROPERTY) or {}, timestamps)


def as_stored(c: Column, timestamps: dict[str, bool]) -> Column:
    """A lean table's value column as the table holds it (``timestamps``: :class:`TableForm`'s):
    a date-time as its instant in a timestamp column -- a new column is one -- or as its text
    in the string column of a table made before; a string in a timestamp column (a date-time
    property that lost its format) stays there as an instant, the remainder keeping its text."""
    if (c.kind == TIMESTAMP and timestamps.get(c.name, True)) or (c.kind == TEXT and timestamps.get(c.name, False)):
        return Column(c.name, INSTANT)
    return c


def in_form(label: str, base: LakeTable, binding: BindingSpec, form: Optional[TableForm]) -> LakeTable:
    """``base`` (the binding's columns) in the form of its table (``form``: :func:`table_form`,
    None for a table not made yet: the form the binding asks for).  A lean model has a column
    for each top-level property the schema declares -- objects, arrays and unions as JSON
    text, where the name is a plain identifier, date-times as instants (:func:`as_stored`) --
    and keeps every column the table recorded (a property the schema no longer declares is
    still read back from its column)."""
    if base.delta:
        return base
    want = requested_form(binding.resource)
    if form is None:
        if want == FULL:
            return base
        recorded: dict = {}
        timestamps: dict[str, bool] = {}
    elif form.form == FULL:
        return base
    else:
        if want == FULL:
            raise IncompatibleSchema(
                f"{label} {base.name!r} holds lean rows (a column per property) and the resource asks for "
                "document: full; rebuild the view in the full form (`tidemark reset`), or drop the option. "
                "Nothing was changed"
            )
        recorded, timestamps = form.recorded, form.timestamps
    values = [as_stored(c, timestamps) for c in base.values]
    have = {c.name for c in base.columns} | {DOCUMENT_COLUMN, DELETE_COLUMN, ROW_ID_COLUMN}
    for c in values:
        kind = recorded.get(c.name)
        if kind is not None and (kind == JSON) != (c.kind == JSON):
            raise IncompatibleSchema(
                f"{label} {base.name!r}: column {c.name!r} holds {'JSON' if kind == JSON else kind} values, "
                f"the binding's schema now makes it {'JSON' if c.kind == JSON else c.kind} (an incompatible "
                "type change); keep the property's type, or rebuild the view (`tidemark reset`). Nothing was changed"
            )
    for name, kind in recorded.items():
        if name not in have and isinstance(kind, str):
            values.append(as_stored(Column(name, kind), timestamps))
            have.add(name)
    props = binding.schema.get("properties") if isinstance(binding.schema, dict) else None
    for name in props or ():
        if name not in have and JSON_COLUMN_NAME.fullmatch(name):
            values.append(Column(name, JSON))
            have.add(name)
    return dataclasses.replace(base, values=tuple(values), lean=True)


def form_line(label: str, model: LakeTable, form: Optional[TableForm], binding: BindingSpec) -> str:
    """``tidemark check``'s line for one table."""
    where = f"{label} {model.name}" + ("" if form else " (new)")
    if model.delta:
        return f"{where}: full documents in flow_document (a delta-updates table keeps each document as it came)"
    if model.lean:
        return f"{where}: lean rows (a column per property; flow_document holds only what no column holds)"
    if form is not None:
        return f"{where}: full documents in flow_document (the table was made so, and keeps its form)"
    return f"{where}: full documents in flow_document: the resource asks for document: full"


def is_uri(p: str) -> bool:
    return "://" in p


def join_path(root: str, name: str) -> str:
    """``name`` under ``root``, a folder or a URI."""
    return root.rstrip("/") + "/" + name if is_uri(root) else os.path.join(root, name)


def json_property(properties: dict, name: str) -> Optional[dict]:
    """A table property holding a JSON object, or None."""
    text = properties.get(name)
    if not text:
        return None
    try:
        obj = json.loads(text)
    except ValueError:
        return None
    return obj if isinstance(obj, dict) else None


def owner_of(properties: dict) -> Optional[tuple[str, str]]:
    """(materialization, checkpoint id) of the table's owner property, or None."""
    obj = json_property(properties, OWNER_PROPERTY)
    try:
        return (str(obj["materialization"]), str(obj["checkpoint_id"])) if obj else None
    except KeyError:
        return None


def owner_text(materialization: str, checkpoint_id: Any) -> str:
    return dumps({"materialization": materialization, "checkpoint_id": str(checkpoint_id)})


def stages_of(state: Any) -> list[dict]:
    """The stages in a driver checkpoint: one per range's session, each naming its batch and files."""
    stages = state.get("stages") if isinstance(state, dict) else None
    return [s for s in (stages or {}).values() if isinstance(s, dict)]


def columns_to_add(where: str, model: LakeTable, properties: dict, existing: dict, type_of: Callable) -> list[Column]:
    """The columns ``model``'s existing table lacks, after checking that it is this binding's: its mode
    and key properties, the document column, and each column's type (``existing``: name ->
    type as ``type_of(kind)`` gives it).  Raises :class:`~tidemark.errors.IncompatibleSchema`
    naming ``where``."""
    if MODE_PROPERTY in properties and (properties[MODE_PROPERTY] == "true") != model.delta:
        mode = "delta-updates" if model.delta else "standard"
        raise IncompatibleSchema(
            f"{where} exists in the other mode; cannot switch it to {mode} updates (drop the table or use another one)"
        )
    names = [c.name for c in model.keys]
    if KEY_PROPERTY in properties and json.loads(properties[KEY_PROPERTY]) != names:
        raise IncompatibleSchema(
            f"{where}: key is {properties[KEY_PROPERTY]}, the binding's key is {names}; the key cannot change"
        )
    if DOCUMENT_COLUMN not in existing:
        raise IncompatibleSchema(f"{where} has no {DOCUMENT_COLUMN!r} column: not a tidemark table")
    missing = []
    for col in model.columns:
        have = existing.get(col.name)
        if have is None:
            if col.is_key:
                raise IncompatibleSchema(f"{where}: key column {col.name!r} is missing; the key cannot change")
            missing.append(col)
        elif have != type_of(col.kind) and not (col.kind.startswith(DECIMAL) and have == type_of(NUMBER)):
            # (an exact decimal in a double column: a table of a tidemark before 2026-11-28 keeps
            # its column, and each apply casts to it)
            raise IncompatibleSchema(
                f"{where}: column {col.name!r} is {have}, the binding needs "
                f"{type_of(col.kind)} (an incompatible type change)"
            )
    return missing
