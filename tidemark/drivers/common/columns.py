"""The column model every table-like endpoint shares (SQL, Delta, Iceberg): column kinds,
the document column, value coercion, compact JSON, quarantine rows."""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Iterable, Optional, Sequence

import pyarrow as pa

from tidemark.protocol.messages import Field

if TYPE_CHECKING:
    from tidemark.collection.plan import FieldPlan

QUARANTINE_TABLE = "tidemark_quarantine"
DOCUMENT_COLUMN = "flow_document"
ROW_ID_COLUMN = "flow_row_id"  # delta-updates tables: append order

# Column kinds: each endpoint maps each to one type of its own.
TEXT, INTEGER, NUMBER, BOOLEAN, JSON, TIMESTAMP = "text", "integer", "number", "boolean", "json", "timestamp"
# a lake's lean row: a date-time as its instant (UTC, microseconds; TIMESTAMP is its text there)
INSTANT = "instant"


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


def member_kind(f: FieldPlan) -> str:
    """The column kind of a compiled scalar's JSON type (a property without a column, an
    object's member; an exact decimal's, as its places)."""
    if f.scale is not None:
        return decimal_kind(f.scale)
    return {"integer": INTEGER, "number": NUMBER, "boolean": BOOLEAN}.get(f.type, TEXT)


@dataclass(frozen=True, slots=True)
class Column:
    name: str
    kind: str
    is_key: bool = False


_encode = json.JSONEncoder(separators=(",", ":"), ensure_ascii=False).encode


INT64 = 2**63  # a 64-bit integer column holds [-INT64, INT64)
DOUBLE_EXACT = 2**53  # a double holds every integer up to this magnitude


def holds(kind: str, value: Any) -> bool:
    """Whether a column of ``kind`` holds ``value`` exactly: a 64-bit integer column no
    integer beyond 64 bits, a double no integer beyond 2^53.  Where it cannot, a full
    table's column is NULL and its document keeps the value."""
    cls = value.__class__
    if kind == INTEGER:
        if cls is int:
            return -INT64 <= value < INT64
        if cls is float:
            return value.is_integer() and -INT64 <= value < INT64
    elif kind == NUMBER and cls is int:
        return -DOUBLE_EXACT <= value <= DOUBLE_EXACT
    return True


def held(kinds: Sequence[str], values: tuple) -> tuple:
    """``values`` of columns of ``kinds``, each None where its column cannot hold it exactly (:func:`holds`)."""
    return tuple([v if holds(k, v) else None for k, v in zip(kinds, values)])


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


# Arrow, for the table-format endpoints (Delta, Iceberg): their staged and loaded rows
ARROW_TYPES = {
    INTEGER: pa.int64(),
    NUMBER: pa.float64(),
    BOOLEAN: pa.bool_(),
    INSTANT: pa.timestamp("us", tz="UTC"),  # its values: microseconds since 1970-01-01T00:00:00Z
}  # others: string


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
        except (pa.ArrowInvalid, pa.ArrowTypeError, TypeError, OverflowError):
            pass  # e.g. 3.0 for an integer, an object in a scalar column, an integer beyond 64 bits
    if kind == INTEGER:  # beyond 64 bits: NULL in the column (the document holds the number)
        values = [None if isinstance(v, int) and not -(2**63) <= v < 2**63 else v for v in values]
    return pa.array([coerce(kind, v) for v in values], arrow_type(kind))


def key_of(model, values: Sequence[Any]) -> tuple:
    """A stored row's key (JSON key columns parsed back) as the protocol's tuple."""
    out = []
    for col, v in zip(model.keys, values):
        if col.kind == JSON and isinstance(v, str):
            v = json.loads(v)
        out.append(v)
    return tuple(out)
