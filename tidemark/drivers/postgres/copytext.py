"""COPY text for PostgreSQL: each value as ``COPY ... FROM STDIN`` (text format) wants it,
JSON through orjson, and the place of a character PostgreSQL cannot store (U+0000)."""

from __future__ import annotations

import re
from typing import Any, Callable, Optional

import orjson  # 3-5x faster JSON for Store (a core dependency of tidemark)

from tidemark.drivers.sql import INTEGER, JSON, NUMBER, TEXT, TIMESTAMP, dumps

# PostgreSQL's context line of a value COPY refused: the staging line and column
COPY_CONTEXT = re.compile(r"COPY tidemark_stage_\d+, line (\d+), column col(\d+):")  # staged_column(j)


def nul_path(value: Any, path: str = "") -> Optional[str]:
    """The JSON pointer of the first U+0000 in ``value`` (in a string or a property name),
    or None: PostgreSQL's text and jsonb cannot hold that character."""
    if isinstance(value, str):
        return (path or "/") if "\x00" in value else None
    if isinstance(value, dict):
        for k, v in value.items():
            here = path + "/" + str(k).replace("~", "~0").replace("/", "~1")
            if isinstance(k, str) and "\x00" in k:
                return here
            found = nul_path(v, here)
            if found is not None:
                return found
    elif isinstance(value, (list, tuple)):
        for i, v in enumerate(value):
            found = nul_path(v, f"{path}/{i}")
            if found is not None:
                return found
    return None


def json_dumps(doc: Any) -> str:
    try:
        return orjson.dumps(doc).decode()
    except TypeError:  # big integers, non-string keys: the stdlib
        return dumps(doc)


def copy_text(kind: str, v: Any) -> str:
    """One field in COPY's text format (``\\N`` is NULL; backslash, tab, newline, CR escaped)."""
    if v is None:
        return "\\N"
    if kind == JSON:
        return dumps(v).replace("\\", "\\\\")  # JSON text never holds raw control characters
    if v is True:
        return "t"
    if v is False:
        return "f"
    if isinstance(v, str):
        return v.replace("\\", "\\\\").replace("\t", "\\t").replace("\n", "\\n").replace("\r", "\\r")
    if isinstance(v, int):
        return str(v)
    if isinstance(v, float):
        return str(int(v)) if kind == INTEGER and v.is_integer() else repr(v)
    return dumps(v).replace("\\", "\\\\")  # an object or array in a scalar column: its JSON text


def _escape(v: str) -> str:
    if "\\" in v or "\t" in v or "\n" in v or "\r" in v:
        return v.replace("\\", "\\\\").replace("\t", "\\t").replace("\n", "\\n").replace("\r", "\\r")
    return v


def copy_converter(kind: str) -> Callable[[Any], str]:
    """A fast :func:`copy_text` for one column kind (the common value type first)."""
    if kind == TEXT or kind == TIMESTAMP:
        return lambda v: _escape(v) if v.__class__ is str else copy_text(kind, v)
    if kind == INTEGER:
        return lambda v: str(v) if v.__class__ is int else copy_text(kind, v)
    if kind == NUMBER:
        return lambda v: repr(v) if v.__class__ is float else copy_text(kind, v)
    if kind == JSON:
        return lambda v: "\\N" if v is None else json_dumps(v).replace("\\", "\\\\")
    return lambda v: copy_text(kind, v)


def encode_at(row: tuple, positions: list[int]) -> tuple:
    """``row`` with the JSON-column values at ``positions`` as JSON text."""
    out = list(row)
    for j in positions:
        if out[j] is not None:
            out[j] = json_dumps(out[j])
    return tuple(out)
