"""What the SQL drivers (SQLite, PostgreSQL) share: identifiers, table models, value
coercion, the fenced checkpoints table's Open rule, quarantine rows, redaction.

The checkpoints table follows Estuary's ``flow_checkpoints_v1``::

    tidemark_checkpoints(materialization, key_begin, key_end, fence, checkpoint)
        primary key (materialization, key_begin, key_end)

Open (one endpoint transaction, see :func:`plan_open`):

1. bump the fence of every row of the materialization whose range overlaps the opened
   range (a zombie of the same range, or of a parent range before a split, or of a
   child range before a merge, can no longer commit);
2. pick the runtime checkpoint the opened range inherits: the narrowest row covering it
   (the exact row, or the parent after a split) — unless rows inside the range hold a
   *later* batch (a split followed by a merge), in which case the latest rows must
   cover the range and agree, else :class:`~tidemark.errors.RecoveryError`;
3. insert the exact range if it is missing, with the inherited checkpoint.

Commit verifies the fence with ``UPDATE ... WHERE materialization AND key_begin AND
key_end AND fence`` in the data transaction: zero rows means a newer session opened the
range, and the transaction rolls back with :class:`~tidemark.errors.FencedOff`.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Any, Iterable, Optional, Sequence

from tidemark.errors import FencedOff, IncompatibleSchema, RecoveryError, SpecError
from tidemark.protocol.messages import BindingSpec, Field, Range

CHECKPOINTS_TABLE = "tidemark_checkpoints"
QUARANTINE_TABLE = "tidemark_quarantine"
RESOURCES_TABLE = "tidemark_resources"  # which materialization and checkpoint write each table
DOCUMENT_COLUMN = "flow_document"
ROW_ID_COLUMN = "flow_row_id"  # delta-updates tables: append order

# Column kinds: the dialects map each to one SQL type.
TEXT, INTEGER, NUMBER, BOOLEAN, JSON, TIMESTAMP = "text", "integer", "number", "boolean", "json", "timestamp"


def quote_ident(name: str) -> str:
    """Quote an identifier (``"`` doubled); NUL cannot be stored and is refused."""
    name = str(name)
    if not name or "\x00" in name:
        raise SpecError(f"invalid SQL identifier {name!r}")
    return '"' + name.replace('"', '""') + '"'


def field_kind(f: Field) -> str:
    t = (f.type or "json").lower()
    if t == "string":
        return TIMESTAMP if (f.format or "") == "date-time" else TEXT
    if t == "integer":
        return INTEGER
    if t == "number":
        return NUMBER
    if t == "boolean":
        return BOOLEAN
    return JSON  # object, array, json, or a union of types


@dataclass(frozen=True, slots=True)
class Column:
    name: str
    kind: str
    is_key: bool = False


@dataclass(frozen=True, slots=True)
class TableModel:
    """The table of one binding: key columns, value columns, the document column."""

    name: str
    keys: tuple[Column, ...]
    values: tuple[Column, ...]
    delta: bool
    schema: Optional[str] = None  # PostgreSQL schema (None: the driver's default)

    @staticmethod
    def of(binding: BindingSpec, default_schema: Optional[str] = None) -> "TableModel":
        table = binding.resource.get("table") if isinstance(binding.resource, dict) else None
        if not isinstance(table, str) or not table:
            raise SpecError(f"binding of {binding.collection!r}: resource needs {{table: NAME}}, got {binding.resource!r}")
        keys = tuple(Column(f.name, field_kind(f), True) for f in binding.key_fields)
        if not keys:
            raise SpecError(f"binding {table!r}: no key fields")
        values = tuple(Column(f.name, field_kind(f)) for f in binding.value_fields)
        names = [c.name for c in keys + values] + [DOCUMENT_COLUMN] + ([ROW_ID_COLUMN] if binding.delta_updates else [])
        dup = {n for n in names if names.count(n) > 1}
        if dup:
            raise IncompatibleSchema(f"table {table!r}: column names collide: {sorted(dup)} "
                                     f"({DOCUMENT_COLUMN!r} and {ROW_ID_COLUMN!r} are reserved)")
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


def check_columns(model: TableModel, existing: dict[str, tuple[str, bool]], type_of, *, has_row_id: bool,
                  document_types: Optional[Sequence[str]] = None, required: Iterable[str] = (),
                  widens=None) -> list[Column]:
    """Compare a model with an existing table ``{column: (sql_type, is_primary_key)}``.

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
            "document, so tidemark did not make it (the table of a hand-written upsert?). Materialize into a "
            "table of another name, which tidemark creates, and replay the source into it")
    if document_types is not None and doc[0].lower() not in document_types:
        raise IncompatibleSchema(f"{where}: column {DOCUMENT_COLUMN!r} is {doc[0]}, tidemark needs "
                                 f"{' or '.join(document_types)}")
    if model.delta != has_row_id:
        mode = "delta-updates" if model.delta else "standard"
        raise IncompatibleSchema(f"{where} exists in the other mode; cannot switch it to {mode} updates "
                                 "(drop the table or use another one)")
    missing: list[Column] = []
    for col in model.columns:
        if col.name not in existing:
            if col.is_key:
                raise IncompatibleSchema(f"{where}: key column {col.name!r} is missing; the key cannot change")
            missing.append(col)
            continue
        sql_type, is_pk = existing[col.name]
        want = type_of(col.kind)
        if sql_type.lower() != want.lower() and not (widens and not col.is_key and widens(sql_type.lower(), col)):
            raise IncompatibleSchema(f"{where}: column {col.name!r} is {sql_type}, the binding needs {want} "
                                     "(an incompatible type change; drop or rename the column)")
        if not model.delta and is_pk != col.is_key:
            raise IncompatibleSchema(f"{where}: column {col.name!r} {'is' if is_pk else 'is not'} part of the "
                                     "primary key; the key cannot change")
    if not model.delta:
        pk = {n for n, (_t, is_pk) in existing.items() if is_pk}
        if pk != {c.name for c in model.keys}:
            raise IncompatibleSchema(f"{where}: primary key is {sorted(pk)}, the binding's key is "
                                     f"{[c.name for c in model.keys]}; the key cannot change")
    unwritten = sorted(set(required) - {c.name for c in model.columns} - {DOCUMENT_COLUMN, ROW_ID_COLUMN})
    if unwritten:
        raise IncompatibleSchema(
            f"{where}: column{'s' if len(unwritten) > 1 else ''} {', '.join(map(repr, unwritten))} "
            f"{'are' if len(unwritten) > 1 else 'is'} NOT NULL without a default, and no field of the "
            "binding writes it: give it a default, allow NULL, or use another table")
    return missing


_encode = json.JSONEncoder(separators=(",", ":"), ensure_ascii=False).encode


def coerce(kind: str, value: Any) -> Any:
    """A JSON value as the column wants it (JSON kinds as text); None stays None."""
    if value is None:
        return None
    if kind == JSON or isinstance(value, (dict, list)):
        return _encode(value)
    if kind == INTEGER and isinstance(value, float) and value.is_integer():
        return int(value)
    return value


def dumps(doc: Any) -> str:
    """Compact JSON text (one shared encoder: cheaper than ``json.dumps`` with options)."""
    return _encode(doc)


# ----------------------------------------------------------------- checkpoints


@dataclass(frozen=True, slots=True)
class CheckpointState:
    range: Range
    fence: int
    checkpoint: Optional[dict]


@dataclass(frozen=True, slots=True)
class OpenPlan:
    fence: int  # the opened range's fence after the bump
    checkpoint: Optional[dict]  # inherited runtime checkpoint
    insert: bool  # the exact row is missing
    refresh: bool = False  # the exact row exists but inherits a later checkpoint (split, then merge)


def _batch(cp: Optional[dict]) -> int:
    if isinstance(cp, dict):
        b = cp.get("batch_id")
        if isinstance(b, int) and not isinstance(b, bool):
            return b
    return -1


def identity(cp: Optional[dict]) -> tuple:
    """What makes two ranges' checkpoints "the same batch": the tidemark checkpoint and the
    batch identity (Spark query, batch id, source offsets) -- not the spec version or other
    fields, which may differ between the attempts that committed the ranges of one batch
    (e.g. a re-run after the configured shard count changed)."""
    if not isinstance(cp, dict) or _batch(cp) < 0:
        return ("whole", dumps(cp))  # not a tidemark runtime checkpoint: compare all of it
    return (dumps(cp.get("checkpoint_id")), _batch(cp), dumps(cp.get("query_id")), dumps(cp.get("offsets")))


def _covered(rng: Range, rows: Sequence[CheckpointState]) -> bool:
    pos = rng.key_begin
    for r in sorted(rows, key=lambda r: r.range.key_begin):
        if r.range.key_begin > pos:
            return False
        pos = max(pos, r.range.key_end + 1)
        if pos > rng.key_end:
            return True
    return pos > rng.key_end


def plan_open(materialization: str, rng: Range, overlapping: Sequence[CheckpointState]) -> OpenPlan:
    """Given the rows overlapping ``rng`` (fences *before* the bump), decide the Open.

    Every overlapping row's fence is bumped by one; see the module docstring."""
    bumped = [CheckpointState(r.range, r.fence + 1, r.checkpoint) for r in overlapping]
    exact = next((r for r in bumped if r.range == rng), None)
    fence = exact.fence if exact else max((r.fence for r in bumped), default=0) + 1
    if not bumped:
        return OpenPlan(fence, None, True)
    covering = sorted((r for r in bumped if r.range.covers(rng)),
                      key=lambda r: r.range.key_end - r.range.key_begin)
    if covering and not any(_batch(r.checkpoint) > _batch(covering[0].checkpoint) for r in bumped):
        return OpenPlan(fence, covering[0].checkpoint, exact is None)
    # A merge (or a split followed by a merge): the latest rows must cover and agree.
    top = max(_batch(r.checkpoint) for r in bumped)
    latest = [r for r in bumped if _batch(r.checkpoint) == top]
    cps = {identity(r.checkpoint) for r in latest}
    if len(cps) == 1 and _covered(rng, latest):
        cp = latest[0].checkpoint
        return OpenPlan(fence, cp, exact is None, exact is not None and identity(exact.checkpoint) != identity(cp))
    detail = ", ".join(f"{r.range.name}: batch {_batch(r.checkpoint)}" for r in sorted(bumped, key=lambda r: r.range.key_begin))
    raise RecoveryError(
        f"materialization {materialization!r}: range {rng.name} cannot inherit a checkpoint: the ranges "
        f"it overlaps disagree or leave a gap ({detail}). The ranges of one layout committed different "
        "batches or different runs; restore the endpoint's checkpoint rows, or start the view over with "
        f"`tidemark reset SPEC -m {materialization}`"
    )


def fenced_off(materialization: str, rng: Range, fence: int) -> FencedOff:
    return FencedOff(
        f"materialization {materialization!r} range {rng.name}: fence {fence} is stale — a newer session "
        "opened this key range (a retried or speculative task); this session's transaction was rolled back"
    )


def load_checkpoint(text: Any) -> Optional[dict]:
    if text is None:
        return None
    if isinstance(text, (bytes, bytearray, memoryview)):
        text = bytes(text).decode()
    return json.loads(text) if isinstance(text, str) else text


# ------------------------------------------------------------------- owners


def resources_ddl(table: str) -> str:
    return (f"CREATE TABLE IF NOT EXISTS {table} (resource TEXT PRIMARY KEY, materialization TEXT NOT NULL, "
            "checkpoint_id TEXT)")


def claim_resource(execute, p: str, table: str, resource: str, materialization: str, checkpoint_id: str) -> None:
    """Inside Apply's transaction: record that ``materialization`` of tidemark checkpoint
    ``checkpoint_id`` writes the table ``resource`` (a table of an older tidemark, recorded by
    nobody, is taken); refuse a table another materialization or checkpoint writes.
    ``execute(sql, params)`` runs a statement, ``p`` is the dialect's placeholder."""
    row = execute(f"SELECT materialization, checkpoint_id FROM {table} WHERE resource = {p}", (resource,)).fetchone()
    if row is None:
        execute(f"INSERT INTO {table} (resource, materialization, checkpoint_id) VALUES ({p}, {p}, {p})",
                (resource, materialization, checkpoint_id))
    elif tuple(row) != (materialization, checkpoint_id):
        raise RecoveryError(
            f"table {resource!r} is written by materialization {row[0]!r} of tidemark checkpoint {row[1]}, not by "
            f"{materialization!r} of checkpoint {checkpoint_id}; give this view its own table. Nothing was changed")


def owner_positions(rows, materialization: str, bindings, resource_of) -> list:
    """Positions of the bindings' tables from ``(resource, materialization, checkpoint_id)`` rows."""
    from tidemark.drivers.base import Position

    owners = {r[0]: (r[1], r[2]) for r in rows}
    out = []
    for b in bindings:
        owner = owners.get(resource_of(b))
        if owner is not None:
            out.append(Position(f"table {resource_of(b)}", owner[0], owner[1], -1, resource=b.resource_path))
    return out


# ------------------------------------------------------------------ quarantine


def quarantine_rows(materialization: str, batch_id: Any, rows: Iterable[dict]) -> list[tuple]:
    """Rows for ``tidemark_quarantine(materialization, batch_id, location, key_json, reason, value)``."""
    out = []
    for r in rows:
        value = r.get("value")
        if value is not None and not isinstance(value, str):
            value = dumps(value)
        key = r.get("key_json")
        if key is not None and not isinstance(key, str):
            key = dumps(key)
        loc = r.get("location")
        out.append((materialization, batch_id, None if loc is None else str(loc), key,
                    str(r.get("reason", "")), value))
    return out


# ------------------------------------------------------------------- redaction

_URL_PASSWORD = re.compile(r"(?P<pre>[a-z][a-z0-9+.-]*://[^:/@\s]*:)(?P<pw>[^@\s]*)(?P<post>@)", re.I)
_KV_PASSWORD = re.compile(r"(?P<pre>\bpassword\s*=\s*)(?P<pw>'(?:[^'\\]|\\.)*'|\S+)", re.I)
REDACTED = "********"


def redact(text: Any, secrets: Iterable[Optional[str]] = ()) -> str:
    """``text`` with passwords (URL, ``password=`` pairs and the given secrets) masked."""
    s = str(text)
    s = _URL_PASSWORD.sub(lambda m: m["pre"] + REDACTED + m["post"], s)
    s = _KV_PASSWORD.sub(lambda m: m["pre"] + REDACTED, s)
    for secret in secrets:
        if secret and len(secret) >= 1:
            s = s.replace(secret, REDACTED)
    return s
