"""The order of JSON values that ``minimize`` / ``maximize`` and keyed merges use.

Pure Python (no Spark).
"""

from __future__ import annotations

from typing import Any, Sequence

from tidemark.collection.formats import instant
from tidemark.collection.schema import pointer_tokens

MISSING = object()  # what :func:`query` returns where a document holds nothing


def is_number(v: Any) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool)


def _rank(v: Any) -> int:
    if v is None:
        return 0
    if isinstance(v, bool):
        return 1
    if is_number(v):
        return 2
    if isinstance(v, str):
        return 3
    if isinstance(v, list):
        return 4
    return 5


def compare(a: Any, b: Any) -> int:
    """Total order of JSON values: null < booleans < numbers < strings < arrays < objects."""
    ra, rb = _rank(a), _rank(b)
    if ra != rb:
        return -1 if ra < rb else 1
    if ra == 0:
        return 0
    if ra in (1, 2, 3):
        return -1 if a < b else (1 if a > b else 0)
    if ra == 4:
        for x, y in zip(a, b):
            c = compare(x, y)
            if c:
                return c
        return (len(a) > len(b)) - (len(a) < len(b))
    ia, ib = sorted(a.items()), sorted(b.items())
    for (ka, va), (kb, vb) in zip(ia, ib):
        if ka != kb:
            return -1 if ka < kb else 1
        c = compare(va, vb)
        if c:
            return c
    return (len(ia) > len(ib)) - (len(ia) < len(ib))


def compare_date_time(a: Any, b: Any) -> int:
    """The order of a ``format: date-time`` location: strings that are RFC 3339 date-times
    by the instant they name (offsets applied, so ``…T10:00:00Z`` is before
    ``…T09:30:00-05:00``; equal instants tie), before every other string (by code point, as
    in :func:`compare`); other values as in :func:`compare`.  A total order, so ``minimize``
    and ``maximize`` stay associative even with a stored value that is not a date-time."""
    ia, ib = instant(a), instant(b)
    if ia is not None and ib is not None:
        return (ia > ib) - (ia < ib)
    if ia is not None and isinstance(b, str):
        return -1
    if ib is not None and isinstance(a, str):
        return 1
    return compare(a, b)


def is_date_time_location(applicable: Sequence[dict]) -> bool:
    """True if a schema that applies at the location says ``format: date-time``."""
    return any(s.get("format") == "date-time" for s in applicable)


def query(doc: Any, pointer: str) -> Any:
    cur = doc
    for token in pointer_tokens(pointer):
        if isinstance(cur, dict) and token in cur:
            cur = cur[token]
        elif isinstance(cur, list) and token.isdigit() and int(token) < len(cur):
            cur = cur[int(token)]
        else:
            return MISSING
    return cur


def compare_key(key: Sequence[str], a: Any, b: Any, orders: Sequence = ()) -> int:
    """Compare by key pointers; a pointer missing on one side orders before any value.
    ``orders``: per pointer, the comparison of its values (default :func:`compare`)."""
    for i, ptr in enumerate(key):
        x, y = query(a, ptr), query(b, ptr)
        if x is MISSING and y is MISSING:
            continue
        if x is MISSING:
            return -1
        if y is MISSING:
            return 1
        c = (orders[i] if i < len(orders) else compare)(x, y)
        if c:
            return c
    return 0
