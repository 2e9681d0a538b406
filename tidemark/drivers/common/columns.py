"""The column model every table-like endpoint shares (SQL, Delta, Iceberg): column kinds,
the document column, value coercion, compact JSON, quarantine rows."""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any, Callable, Iterable, Optional, Sequence

import pyarrow as pa

from tidemark.errors import IncompatibleSchema
from tidemark.protocol.messages import Field

QUARANTINE_TABLE = "tidemark_quarantine"
KEY_PROPERTY = "tidemark.key"  # table properties of table-format endpoints (Delta, Iceberg), written by Apply
MODE_PROPERTY = "tidemark.deltaUpdates"
OWNER_PROPERTY = "tidemark.owner"  # {"materialization", "checkpoint_id"}: the one checkpoint that writes the table
DELETE_COLUMN = "_tidemark_delete"  # the table-format endpoints' staged files only: the row is a deletion
DOCUMENT_COLUMN = "flow_document"
ROW_ID_COLUMN = "flow_row_id"  # delta-updates tables: append order

# Column kinds: each endpoint maps each to one type of its own.
TEXT, INTEGER, NUMBER, BOOLEAN, JSON, TIMESTAMP = "text", "integer", "number", "boolean", "json", "timestamp"


DECIMAL = "decimal:"  # + places: an exact decimal (``multipleOf`` 10^-s), e.g. "decimal:2"


def decimal_kind(scale: int) -> str:
    return f"{DECIMAL}{scale}"


def scale_of_kind(kind: str) -> Optional[int]:
    """The places of a decimal column kind, or None for the other kinds."""
    return int(kind[len(DECIMAL) :]) if kind.startswith(DECIMAL) else None


def base_kind(kind: str) -> str:
    """A decimal kind as a number (endpoints without a decimal type: doubles hold it exactly)."""
    return NUMBER if kind.startswith(DECIMAL) else kind


def field_kind(f: Field) -> str:
    t = (f.type or "json").lower()
    if t == "string":
        return TIMESTAMP if (f.format or "") == "date-time" else TEXT
    if t == "integer":
        return INTEGER
    if t == "number":
        return NUMBER if f.scale is None else decimal_kind(f.scale)
    if t == "boolean":
        return BOOLEAN
    return JSON  # object, array, json, or a union of types


@dataclass(frozen=True, slots=True)
class Column:
    name: str
    kind: str
    is_key: bool = False


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


def quarantine_row(materialization: str, batch: Any, resource: Any, row: dict) -> dict:
    """A quarantined document as the push endpoints and the store keep it: the columns of the
    SQL endpoints' ``tidemark_quarantine``, and the resource name of its binding."""
    return {
        "materialization": materialization,
        "batch_id": batch,
        "resource": resource,
        "location": row.get("location"),
        "key_json": row.get("key_json"),
        "reason": str(row.get("reason", "")),
        "value": row.get("value"),
    }


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
        out.append((materialization, batch_id, None if loc is None else str(loc), key, str(r.get("reason", "")), value))
    return out


def columns_to_add(
    where: str,
    keys: Sequence[Column],
    columns: Sequence[Column],
    delta: bool,
    properties: dict,
    existing: dict,
    type_of: Callable[[str], Any],
) -> list[Column]:
    """The columns an existing table of a table-format endpoint (Delta, Iceberg) lacks, after
    checking that it is this binding's: its mode and key properties, the document column, and
    each column's type (``existing``: name -> type as ``type_of(kind)`` gives it).  Raises
    :class:`~tidemark.errors.IncompatibleSchema` naming ``where``."""
    if MODE_PROPERTY in properties and (properties[MODE_PROPERTY] == "true") != delta:
        mode = "delta-updates" if delta else "standard"
        raise IncompatibleSchema(
            f"{where} exists in the other mode; cannot switch it to {mode} updates (drop the table or use another one)"
        )
    names = [c.name for c in keys]
    if KEY_PROPERTY in properties and json.loads(properties[KEY_PROPERTY]) != names:
        raise IncompatibleSchema(
            f"{where}: key is {properties[KEY_PROPERTY]}, the binding's key is {names}; the key cannot change"
        )
    if DOCUMENT_COLUMN not in existing:
        raise IncompatibleSchema(f"{where} has no {DOCUMENT_COLUMN!r} column: not a tidemark table")
    missing = []
    for col in columns:
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


# Arrow, for the table-format endpoints (Delta, Iceberg): their staged and loaded rows
ARROW_TYPES = {INTEGER: pa.int64(), NUMBER: pa.float64(), BOOLEAN: pa.bool_()}  # others: string


DECIMAL_PRECISION = 38  # digits of an exact decimal column (Delta, Iceberg, SQL): any sum of them fits


def arrow_type(kind: str) -> pa.DataType:
    scale = scale_of_kind(kind)
    if scale is not None:
        return pa.decimal128(DECIMAL_PRECISION, scale)
    return ARROW_TYPES.get(base_kind(kind), pa.string())


def column(kind: str, values: list) -> pa.Array:
    """A typed column of JSON values (JSON kinds as text; exact decimals as decimals: a
    document's number is the double nearest its text, rounded to the column's places)."""
    if kind.startswith(DECIMAL):
        try:
            return pa.array(values, pa.float64()).cast(arrow_type(kind))
        except (pa.ArrowInvalid, pa.ArrowTypeError, TypeError):
            from decimal import Decimal

            return pa.array(
                [None if v is None else Decimal(repr(v)) if isinstance(v, float) else Decimal(v) for v in values],
                arrow_type(kind),
            )
    if kind != JSON:
        try:
            return pa.array(values, arrow_type(kind))
        except (pa.ArrowInvalid, pa.ArrowTypeError, TypeError):
            pass  # e.g. 3.0 for an integer, an object in a scalar column
    return pa.array([coerce(kind, v) for v in values], arrow_type(kind))


def key_of(model, values: Sequence[Any]) -> tuple:
    """A stored row's key (JSON key columns parsed back) as the protocol's tuple."""
    out = []
    for col, v in zip(model.keys, values):
        if col.kind == JSON and isinstance(v, str):
            v = json.loads(v)
        out.append(v)
    return tuple(out)


def stages_of(state: Any) -> list[dict]:
    """The staged-files endpoints' (Delta, Iceberg) stages in a driver checkpoint: one per
    range's session, each naming its batch and files."""
    stages = state.get("stages") if isinstance(state, dict) else None
    return [s for s in (stages or {}).values() if isinstance(s, dict)]
