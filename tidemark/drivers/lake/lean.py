"""The lean row of a lake table (Delta, Iceberg): the row is its document.

A new standard-updates table is lean by default (:mod:`tidemark.drivers.common.forms`):
each top-level property the schema declares has a column (scalars typed, objects, arrays
and unions as JSON text), and ``flow_document`` holds only the **remainder** -- the
members no column holds exactly -- or NULL when there is none.

The rule, per document and property (:func:`holds`): a column holds a value when it gives
back the same JSON value -- a string in a text column, an integer in 64 bits in an integer
column, a double (or an integer within 2^53) in a number column, a number that is a
multiple of a decimal column's places and fits its 38 digits, a boolean in a boolean
column, any value but ``null`` in a JSON column.  Everything else (``null``, a value of
another type than the column's, a property the schema does not declare, a key that is not
a top-level property) stays in the remainder.  So a lean table holds any document,
whatever the schema says, and reading is exact: the columns that are not NULL, then the
remainder's members over them (:func:`documents_of`).

A date-time (a new table's :data:`~tidemark.drivers.common.columns.INSTANT` column: UTC,
microseconds) is the one column that holds a value it may not give back: its instant,
rounded to the microsecond, for queries and sorting, while the remainder keeps the text
wherever the instant gives back another spelling (:mod:`tidemark.drivers.common.datetimes`:
an offset, ``.500``, more than six fraction digits, ``t``/``z``, a leap second).  A value
that is not a date-time, or names an instant outside the years 1 to 9999 in UTC (which
readers' ``datetime`` cannot hold), stays in the remainder only, the column NULL.  A table
made before keeps its text column (:data:`~tidemark.drivers.common.columns.TIMESTAMP`: a
string that gives back the text).

A table made full (``flow_document`` required: every table before the lean form, a
delta-updates table, ``resource: {document: full}``) keeps its form; reading it parses
the document column only.
"""

from __future__ import annotations

import math
from decimal import Decimal, InvalidOperation
from typing import Any, Callable, Optional, Sequence

import pyarrow as pa

from tidemark.drivers.common.columns import (
    BOOLEAN,
    DECIMAL_PRECISION,
    DOCUMENT_COLUMN,
    INSTANT,
    INTEGER,
    JSON,
    NUMBER,
    dumps,
    scale_of_kind,
)
from tidemark.drivers.common.datetimes import canonical_text, date_time_value
from tidemark.jsontext import loads

_INT64 = (-(2**63), 2**63 - 1)
_EXACT_DOUBLE = 2**53
# the instants a timestamp column holds: the years 1 to 9999 in UTC, which every reader's datetime
# holds (pyiceberg's file statistics, pyarrow's to_pylist)
_INSTANTS = (-62135596800_000000, 253402300799_999999)  # 0001-01-01T00:00:00Z, 9999-12-31T23:59:59.999999Z


def instant_value(text: Any) -> tuple[Optional[int], bool]:
    """A date-time column's value for ``text``: its instant in microseconds (None: not a
    date-time, or outside the years 1 to 9999), and whether the remainder keeps the text."""
    at, kept = date_time_value(text)
    if at is None or not _INSTANTS[0] <= at <= _INSTANTS[1]:
        return None, True
    return at, kept


def holds(kind: str, value: Any) -> bool:
    """Whether a column of ``kind`` gives back ``value`` as the same JSON value."""
    if value is None:
        return False
    py_type = type(value)
    if kind == JSON:
        return True
    if kind == INSTANT:
        return not instant_value(value)[1]
    if kind == BOOLEAN:
        return py_type is bool
    if kind == INTEGER:
        return py_type is int and _INT64[0] <= value <= _INT64[1]
    if kind == NUMBER:
        return (py_type is float and math.isfinite(value)) or (
            py_type is int and -_EXACT_DOUBLE <= value <= _EXACT_DOUBLE
        )
    scale = scale_of_kind(kind)
    if scale is not None:
        if py_type is not int and py_type is not float:
            return False
        try:
            exact = Decimal(repr(value)) if py_type is float else Decimal(value)
            rounded = exact.quantize(Decimal(1).scaleb(-scale))
        except (InvalidOperation, ValueError):
            return False
        if rounded != exact or len(rounded.as_tuple().digits) > DECIMAL_PRECISION:
            return False
        return py_type is int or float(rounded) == value
    return py_type is str  # text, date-time text


def lean_values(docs: Sequence[dict], held: Sequence[tuple[str, str]]) -> tuple[list[list], list[Optional[str]]]:
    """Per column of ``held`` ((property, column kind) of each column that holds a top-level
    property), the documents' values it holds (None where it does not; a date-time's instant
    in microseconds); and per document the JSON text of the members no column holds exactly,
    or None."""
    kinds = dict(held)
    columns: dict[str, list] = {name: [None] * len(docs) for name, _ in held}
    rests: list[Optional[str]] = []
    for i, doc in enumerate(docs):
        rest = None
        for k, v in doc.items():
            kind = kinds.get(k)
            if kind == INSTANT:
                at, kept = instant_value(v)
                columns[k][i] = at
                if not kept:
                    continue
            elif kind is not None and holds(kind, v):
                columns[k][i] = v
                continue
            if rest is None:
                rest = {}
            rest[k] = v
        rests.append(None if rest is None else dumps(rest))
    return [columns[name] for name, _ in held], rests


def _decimal(v: Any) -> Any:
    if not isinstance(v, Decimal):  # a double column of an older table
        return v
    return int(v) if v == v.to_integral_value() else float(v)


def documents_of(table: pa.Table, held: Sequence[tuple[str, str]], lean: bool) -> list[dict]:
    """The documents of rows read as columns (``held``'s and ``flow_document``): a lean
    row's columns that are not NULL, then its remainder's members over them; a full row's
    document column."""
    docs = table.column(DOCUMENT_COLUMN).to_pylist()
    names = [prop for prop, _ in held if prop in table.column_names]
    parse: list[tuple[str, Callable[[Any], Any]]] = [
        (prop, loads if kind == JSON else _decimal) for prop, kind in held if kind == JSON or scale_of_kind(kind)
    ]
    if not lean:  # the document, with each column read over the member it projects where they disagree
        return [_projected(loads(d), row, parse) for row, d in zip(table.select(names).to_pylist(), docs)]
    columns = table.select(names)
    for i, field in enumerate(columns.schema):
        if pa.types.is_timestamp(field.type):  # as microseconds (a datetime has no year 0 or 10000), then as text
            instants = columns.column(i).cast(pa.timestamp("us", tz=field.type.tz)).cast(pa.int64())
            columns = columns.set_column(i, field.name, instants)
            parse.append((field.name, canonical_text))
    out = []
    for row, rest in zip(columns.to_pylist(), docs):  # Arrow makes the dicts
        doc = {k: v for k, v in row.items() if v is not None}
        for prop, convert in parse:
            v = doc.get(prop)
            if v is not None:
                doc[prop] = convert(v)
        if rest is not None:
            doc.update(loads(rest))
        out.append(doc)
    return out


def _projected(doc: Any, row: dict, parse: Sequence[tuple[str, Any]]) -> Any:
    """A full row's document with its columns' values over the members they project, where a
    column disagrees (a person's edit of a column; written by tidemark, they are equal)."""
    if not isinstance(doc, dict):
        return doc
    convert = dict(parse)
    for prop, v in row.items():
        if v is None and prop not in doc:
            continue
        value = convert[prop](v) if prop in convert and v is not None else v
        if value != doc.get(prop):
            doc = {**doc, prop: value}
    return doc


__all__ = ["holds", "instant_value", "lean_values", "documents_of"]
