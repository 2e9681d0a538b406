"""Building blocks of the dialects' reducing SQL over JSON text (no dialect named here):
members replaced or inserted a few per call, names written without escapes."""

from __future__ import annotations

import json
from typing import Callable, Sequence

from tidemark.drivers.sql.model import dumps


def insert_nulls(fn: str, doc: str, nulls: Sequence[tuple[str, str]], per: int, path: Callable[[str], str]) -> str:
    """The ``nulls`` of :meth:`ReduceSql.set_members` put into ``doc`` (a JSON object, not
    NULL) by ``fn``, a ``JSON_INSERT``-like function (SQL NULL is inserted as ``null``; an
    existing member is never replaced, so the root path ``$`` inserts nothing: a member whose
    condition does not hold is given that path), ``per`` members per call; ``path(name)``:
    the member's JSON path literal."""
    out = doc
    for i in range(0, len(nulls), per):
        args = ", ".join(
            f"(CASE WHEN {where} THEN {path(name)} ELSE '$' END), NULL" for name, where in nulls[i : i + per]
        )
        out = f"{fn}({out}, {args})"
    return out


def replace_members(fn: str, doc: str, pairs: Sequence[tuple[str, str]], per: int, path: Callable[[str], str]) -> str:
    """``doc`` with each ``(name, JSON expression)`` of ``pairs`` replaced by ``fn`` (a
    ``JSON_REPLACE``-like function: a member absent from ``doc`` is not added), ``per`` pairs
    per call (a function's argument limit); ``path(name)``: the member's JSON path literal."""
    out = doc
    for i in range(0, len(pairs), per):
        args = ", ".join(f"{path(k)}, {e}" for k, e in pairs[i : i + per])
        out = f"{fn}({out}, {args})"
    return out


def unescaped_names(texts: Sequence[str]) -> Sequence[str]:
    """The texts with no escape a name does not need: SQLite 3.40 and MariaDB find a member by
    the text of its name (``$."é"`` does not find ``"\\u00e9"``), so a text holding a
    backslash is written again with only the escapes JSON requires (a property name the SQL
    names holds none of those: ``sql_reduction``)."""
    if not any("\\" in t for t in texts):
        return texts
    return [dumps(json.loads(t)) if "\\" in t else t for t in texts]
