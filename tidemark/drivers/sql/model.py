"""Table models of SQL endpoints: column kinds, the table of a binding, schema checks,
value coercion, quarantine rows.  Dialect-free: names are quoted ANSI-style here
(``TableModel.ident``); a :class:`~tidemark.drivers.sql.dialect.Dialect` quotes for its
endpoint."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Iterable, Optional, Sequence

# re-exported (``X as X``): the SQL skeleton's names
from tidemark.drivers.common.columns import BOOLEAN as BOOLEAN
from tidemark.drivers.common.columns import DOCUMENT_COLUMN as DOCUMENT_COLUMN
from tidemark.drivers.common.columns import INTEGER as INTEGER
from tidemark.drivers.common.columns import JSON as JSON
from tidemark.drivers.common.columns import NUMBER as NUMBER
from tidemark.drivers.common.columns import QUARANTINE_TABLE as QUARANTINE_TABLE
from tidemark.drivers.common.columns import ROW_ID_COLUMN as ROW_ID_COLUMN
from tidemark.drivers.common.columns import TEXT as TEXT
from tidemark.drivers.common.columns import TIMESTAMP as TIMESTAMP
from tidemark.drivers.common.columns import Column as Column
from tidemark.drivers.common.columns import coerce as coerce
from tidemark.drivers.common.columns import dumps as dumps
from tidemark.drivers.common.columns import field_kind as field_kind
from tidemark.drivers.common.columns import quarantine_rows as quarantine_rows
from tidemark.drivers.common.columns import scale_of_kind as scale_of_kind
from tidemark.errors import IncompatibleSchema, SpecError
from tidemark.protocol.messages import BindingSpec

# The staging table of a binding (a temp table of the session) and its columns:
STORE_ORDER = "store_order"  # the Store's order in the transaction (a key stored twice: the last wins)
IS_DELETE = "is_delete"  # the row deletes its key
WAS_LOADED = "was_loaded"  # Load found the key (PostgreSQL updates those rows in place)
STAGED_DOCUMENT = "document"  # flow_document's text (a lean row: what no column holds), or the combined document


def staged_column(j: int) -> str:
    """The staging column of the view's ``j``-th column (keys first, then values)."""
    return f"col{j}"


#: an existing table's shape (a rebuild's cut-over compares two): {column: (sql type, is_primary_key, required)}
Shape = dict[str, tuple[str, bool, bool]]

CHECKPOINTS_TABLE = "tidemark_checkpoints"
RESOURCES_TABLE = "tidemark_resources"  # which materialization and checkpoint write each table
IDENTITIES_TABLE = "tidemark_identities"  # each table's view-identity record (runtime.view_identity)


def quote_ident(name: str) -> str:
    """Quote an identifier (``"`` doubled); NUL cannot be stored and is refused."""
    name = str(name)
    if not name or "\x00" in name:
        raise SpecError(f"invalid SQL identifier {name!r}")
    return '"' + name.replace('"', '""') + '"'


@dataclass(frozen=True, slots=True)
class TableModel:
    """The table of one binding: key columns, value columns, the document column."""

    name: str
    keys: tuple[Column, ...]
    values: tuple[Column, ...]
    delta: bool
    schema: Optional[str] = None  # PostgreSQL schema (None: the driver's default)
    #: the plan by which the endpoint reduces this binding's batches itself
    #: (``BindingSpec.endpoint_reduce``; :mod:`tidemark.drivers.sql.reduce`), or None
    reduce: Optional[Any] = None
    #: the row is the document: ``flow_document`` holds only what no column holds
    #: (:mod:`tidemark.drivers.sql.lean`)
    lean: bool = False
    #: the properties that may hold ``null`` (``type: [T, "null"]``: :attr:`FieldPlan.nullable`)
    #: of a lean table or one the endpoint reduces: a lean row's column is NULL for ``null``
    #: as for absent, and its remainder keeps the member ``null``
    nullable: frozenset[str] = frozenset()

    @staticmethod
    def of(binding: BindingSpec, default_schema: Optional[str] = None) -> "TableModel":
        table = binding.resource.get("table") if isinstance(binding.resource, dict) else None
        if not isinstance(table, str) or not table:
            raise SpecError(
                f"binding of {binding.collection!r}: resource needs {{table: NAME}}, got {binding.resource!r}"
            )
        # A date-time key is kept as the text tidemark keys by: as timestamptz/datetime, two
        # spellings of one instant ("…T10:00:00Z", "…T12:00:00+02:00") would be one row but two keys.
        keys = tuple(
            Column(f.name, TEXT if field_kind(f) == TIMESTAMP else field_kind(f), True) for f in binding.key_fields
        )
        if not keys:
            raise SpecError(f"binding {table!r}: no key fields")
        values = tuple(Column(f.name, field_kind(f)) for f in binding.value_fields)
        names = [c.name for c in keys + values] + [DOCUMENT_COLUMN] + ([ROW_ID_COLUMN] if binding.delta_updates else [])
        dup = {n for n in names if names.count(n) > 1}
        if dup:
            raise IncompatibleSchema(
                f"table {table!r}: column names collide: {sorted(dup)} "
                f"({DOCUMENT_COLUMN!r} and {ROW_ID_COLUMN!r} are reserved)"
            )
        schema = binding.resource.get("schema", default_schema)
        return TableModel(table, keys, values, bool(binding.delta_updates), schema)

    @property
    def columns(self) -> tuple[Column, ...]:
        return self.keys + self.values

    @property
    def ident(self) -> str:
        return (quote_ident(self.schema) + "." if self.schema else "") + quote_ident(self.name)

    @property
    def display(self) -> str:
        return f"{self.schema}.{self.name}" if self.schema else self.name


def check_columns(
    model: TableModel,
    existing: dict[str, tuple[str, bool]],
    type_of: Callable[[Column], str],
    *,
    has_row_id: bool,
    document_types: Optional[Sequence[str]] = None,
    required: Iterable[str] = (),
    widens: Optional[Callable[[str, Column], bool]] = None,
) -> list[Column]:
    """Compare a model with an existing table ``{column: (sql_type, is_primary_key)}``;
    ``type_of(column)`` is the SQL type the model wants for a column.

    Returns the columns to add (nullable); raises IncompatibleSchema for a changed type,
    a changed key, a changed delta-updates mode, a table without the document column (one
    tidemark did not make, e.g. the target of a hand-written upsert), a document column of
    another type than ``document_types`` (if given), or a column in ``required`` (NOT NULL
    without a default) that tidemark would not write.  A value column whose type changed
    passes where ``widens(existing_type, column)`` says the driver can widen it."""
    where = f"table {model.display!r}"
    doc = existing.get(DOCUMENT_COLUMN)
    if doc is None:
        raise IncompatibleSchema(
            f"{where} exists but has no {DOCUMENT_COLUMN!r} column, where tidemark keeps each key's reduced "
            "document, so tidemark did not make it (the table of a hand-written upsert?). To start the view from "
            f"its rows, adopt it: `tidemark adopt SPEC -m MATERIALIZATION --from {model.display}` into a table "
            "of another name (docs/from-foreachbatch.md); or materialize into a table of another name and replay "
            "the source into it"
        )
    if document_types is not None and doc[0].lower() not in document_types:
        raise IncompatibleSchema(
            f"{where}: column {DOCUMENT_COLUMN!r} is {doc[0]}, tidemark needs {' or '.join(document_types)}"
        )
    if model.delta != has_row_id:
        mode = "delta-updates" if model.delta else "standard"
        raise IncompatibleSchema(
            f"{where} exists in the other mode; cannot switch it to {mode} updates (drop the table or use another one)"
        )
    missing: list[Column] = []
    for col in model.columns:
        if col.name not in existing:
            if col.is_key:
                raise IncompatibleSchema(f"{where}: key column {col.name!r} is missing; the key cannot change")
            missing.append(col)
            continue
        sql_type, is_pk = existing[col.name]
        want = type_of(col)
        if col.is_key and col.kind == TEXT and any(t in sql_type.lower() for t in ("timestamp", "datetime")):
            raise IncompatibleSchema(
                f"{where}: key column {col.name!r} is {sql_type}, where two spellings of one instant "
                '("…T10:00:00Z", "…T12:00:00+02:00") are one row but two keys to tidemark: their contributions '
                "would overwrite each other, or a batch holding both would fail. tidemark keeps a date-time key as "
                f"its text ({want}); start this view over with `tidemark reset` to rebuild the table so"
            )
        if sql_type.lower() != want.lower() and not (widens and not col.is_key and widens(sql_type.lower(), col)):
            raise IncompatibleSchema(
                f"{where}: column {col.name!r} is {sql_type}, the binding needs {want} "
                "(an incompatible type change; drop or rename the column)"
            )
        if not model.delta and is_pk != col.is_key:
            raise IncompatibleSchema(
                f"{where}: column {col.name!r} {'is' if is_pk else 'is not'} part of the "
                "primary key; the key cannot change"
            )
    if not model.delta:
        pk = {n for n, (_t, is_pk) in existing.items() if is_pk}
        if pk != {c.name for c in model.keys}:
            raise IncompatibleSchema(
                f"{where}: primary key is {sorted(pk)}, the binding's key is "
                f"{[c.name for c in model.keys]}; the key cannot change"
            )
    unwritten = sorted(set(required) - {c.name for c in model.columns} - {DOCUMENT_COLUMN, ROW_ID_COLUMN})
    if unwritten:
        raise IncompatibleSchema(
            f"{where}: column{'s' if len(unwritten) > 1 else ''} {', '.join(map(repr, unwritten))} "
            f"{'are' if len(unwritten) > 1 else 'is'} NOT NULL without a default, and no field of the "
            "binding writes it: give it a default, allow NULL, or use another table"
        )
    return missing
