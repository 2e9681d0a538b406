"""Reducing in SQLite (JSON1, 3.38+): the SQL form of each strategy over ``TEXT`` documents.

SQLite's JSON functions keep a member's JSON text exactly when it is picked (``doc -> path``
and ``json()`` do not re-print numbers) and parse numbers exactly (``->>``), but they print a
computed ``REAL`` with 15 significant digits (``0.1 + 0.2`` becomes ``0.3``), turn ``true``
into ``1`` through ``json_each``, merge nested objects recursively in ``json_patch`` (and
delete members set to ``null``), silently turn an integer ``+`` past 64 bits into a ``REAL``,
and cannot address a key holding ``"`` by a path before 3.45.  So:

* a computed ``REAL`` (a ``sum`` of numbers, a ``minimize`` of numbers) is printed by Python's
  ``repr`` (``tidemark_real``: the shortest text that reads back as the same double, as the
  Python fold writes it), registered on every connection by :func:`register`;
* ``sum`` checks its result in SQL — two integers whose sum left 64 bits, or a sum that is
  not finite — and calls ``tidemark_refuse``, which fails the statement naming the key, the
  property and both operands (:class:`Refusals`); nothing of the transaction is committed;
* the root's shallow merge (``OLD || NEW``: a later top-level member wins, objects are
  replaced, not merged) is ``json_patch`` where the batch's document holds no object and no
  ``null`` and neither text a backslash (there the two agree: ``json_patch`` compares member
  names by their text, escapes and all), else it joins, as text, the stored members the batch does
  not set and then the batch's, each member's JSON text taken by its full path (and, for a
  key holding ``"``, rebuilt from ``json_each``'s typed value);
* ``append`` joins the two arrays' texts; ``merge`` of a map (``additionalProperties`` of
  one scalar type: no member is ``null`` or an object) is ``json_patch`` where neither text
  holds a backslash, else the same join as the root's; an object of declared members with
  strategies of their own is merged as the root is (a member the schema does not declare
  may be an object or ``null``), then its other members set by ``json_replace``;
* the reduced members are put into the merged document by ``json_replace``, which never adds
  a member: a declared property absent on both sides stays absent;
* a lean row's remainder gets a nullable property's ``null`` by ``json_insert`` (``json_patch``
  would delete it), at the member's path where it is kept and at ``$`` (nothing) elsewhere.

Strings compare by SQLite's ``BINARY`` collation (UTF-8 bytes: code point order, as the Python
fold compares); booleans read back as ``1``/``0`` and are printed as ``true``/``false``.
"""

from __future__ import annotations

import json
import math
import sqlite3
import threading
from typing import Any, Optional

from tidemark.collection.decimals import MAX_DIGITS
from tidemark.collection.formats import instant, is_date_time_field
from tidemark.collection.members import flat_members
from tidemark.collection.plan import FieldPlan
from tidemark.collection.sql_plan import KEPT_ORDER, SQL_STRATEGIES
from tidemark.drivers.common.columns import member_kind
from tidemark.drivers.common.datetimes import from_sortable_text, sortable_text
from tidemark.drivers.sql import BOOLEAN, INTEGER, NUMBER, TIMESTAMP
from tidemark.drivers.sql.json_edits import insert_nulls, replace_members, unescaped_names
from tidemark.drivers.sql.kept_order import kept_order_rule
from tidemark.drivers.sql.model import DOCUMENT_COLUMN, Column, scale_of_kind
from tidemark.drivers.sql.reduce import NEW, OLD, ReduceSql
from tidemark.drivers.sql.refusals import sum_overflowed

DOUBLE_MAX = "1.7976931348623157e308"
#: a function takes at most 127 arguments (SQLITE_MAX_FUNCTION_ARG): members per json_replace
PAIRS = 60


def literal(text: str) -> str:
    return "'" + text.replace("'", "''") + "'"


def path(name: str) -> str:
    """The JSON path of a top-level member (``sql_reduction`` keeps names holding ``"`` or
    ``\\`` on the Python fold)."""
    return literal(f'$."{name}"')


def _unescaped(old: str, new: str) -> str:
    """Neither text holds a backslash: json_patch compares member names by their text, so
    ``"\\u00e9"`` and ``"é"`` would be two members."""
    return f"instr({old}, '\\') = 0 AND instr({new}, '\\') = 0"


def _joined(old: str, new: str) -> str:
    """The shallow merge of two objects: the members of ``old`` that ``new`` does not have
    (by their decoded names), then ``new``'s, joined as text (a JSON value's subtype does not
    survive the subquery, so json_group_object would quote them as strings)."""

    def member(doc: str) -> str:
        return (
            f"coalesce({doc} -> fullkey, CASE type WHEN 'real' THEN json(tidemark_real(value)) "
            "WHEN 'text' THEN json_quote(value) WHEN 'true' THEN json('true') WHEN 'false' THEN json('false') "
            "WHEN 'null' THEN json('null') ELSE json(value) END)"
        )

    return (
        f"json((SELECT '{{' || coalesce(group_concat(json_quote(k) || ':' || v, ','), '') || '}}' FROM "
        f"(SELECT key AS k, {member(old)} AS v FROM json_each({old}) "
        f"WHERE key NOT IN (SELECT key FROM json_each({new})) "
        f"UNION ALL SELECT key, {member(new)} FROM json_each({new}))))"
    )


class SqliteReduce(ReduceSql):
    def __init__(self, quote, keys=(), lean: bool = False):
        super().__init__(quote)
        self.lean = lean  # a lean row's date-time column is its fixed-width UTC text
        #: the staged row's key, as JSON, for a refusal's message (``keys``: the quoted key columns)
        self.key_json = f"json_array({', '.join(f'{NEW}.{k}' for k in keys)})"

    def insert_head(self, table: str, target: str, source: str, staged: str) -> str:
        # ``WHERE true``: SQLite's parser would read ``ON CONFLICT`` as a join's ``ON``
        return f"INSERT INTO {table} AS {OLD} ({target}) SELECT {source} FROM {staged} WHERE true"

    def add(self, old: str, new: str, f) -> str:
        refuse = f"tidemark_refuse({literal(f.name)}, {self.key_json}, {old}, {new})"
        if f.scale is not None:  # an exact decimal: rounded to its places, 15 significant digits (decimals.py)
            s = f"(CASE WHEN typeof({old}) = 'integer' AND typeof({new}) = 'integer' THEN {old} + {new} ELSE round({old} + {new}, {f.scale}) END)"
            return f"(CASE WHEN abs({s}) >= 1e{MAX_DIGITS - f.scale} THEN {refuse} ELSE {s} END)"
        s = f"({old} + {new})"
        return (
            f"(CASE WHEN typeof({s}) = 'real' AND (typeof({old}) = 'integer' AND typeof({new}) = 'integer' "
            f"OR abs({s}) > {DOUBLE_MAX}) THEN {refuse} ELSE {s} END)"
        )

    def greatest(self, old: str, new: str, f) -> str:
        return f"max({old}, {new})"

    def instant(self, text: str) -> tuple[str, str, str]:
        zulu = f"upper(substr({text}, -1)) = 'Z'"
        second = f"substr({text}, 18, 2)"
        utc = (
            f"unixepoch(substr({text}, 1, 10) || 'T' || substr({text}, 12, 6) || "
            f"(CASE WHEN {second} = '60' THEN '59' ELSE {second} END) || "
            f"(CASE WHEN {zulu} THEN 'Z' ELSE substr({text}, -6) END))"
        )
        digits = f"length({text}) - 20 - (CASE WHEN {zulu} THEN 1 ELSE 6 END)"
        fraction = f"(CASE WHEN substr({text}, 20, 1) = '.' THEN rtrim(substr({text}, 21, {digits}), '0') ELSE '' END)"
        return utc, f"({second} = '60')", fraction

    def least(self, old: str, new: str, f) -> str:
        return f"min({old}, {new})"

    def concat_arrays(self, old: str, new: str) -> str:
        # both are the minified JSON text of an array (``->`` and ``json()`` print it so)
        return (
            f"(CASE WHEN {old} = '[]' THEN {new} WHEN {new} = '[]' THEN {old} "
            f"ELSE json(substr({old}, 1, length({old}) - 1) || ',' || substr({new}, 2)) END)"
        )

    def union_arrays(self, old: str, new: str, f: FieldPlan) -> str:
        # json_each of both arrays' text, grouped by value (a boolean is not the number 1;
        # 1 and 1.0 are one number), each value's first position orders them
        kind = (
            "CASE WHEN e.type IN ('true', 'false') THEN 'b' WHEN e.type IN ('integer', 'real') THEN 'n' ELSE e.type END"
        )
        text = (
            "CASE e.type WHEN 'true' THEN 'true' WHEN 'false' THEN 'false' WHEN 'null' THEN 'null' "
            "WHEN 'object' THEN e.value WHEN 'array' THEN e.value ELSE json_quote(e.value) END"
        )
        return (
            f"(CASE WHEN {old} IS NULL OR {new} IS NULL THEN NULL ELSE (SELECT json_group_array(json(u.j)) FROM "
            f"(SELECT min(e.id) AS o, min({text}) AS j FROM json_each({self.concat_arrays(old, new)}) AS e "
            f"GROUP BY {kind}, e.value ORDER BY o) AS u) END)"
        )

    def merge_documents(self, old: str, new: str) -> str:
        # json_patch is the root's shallow merge where no member of the batch's document is an
        # object (merged recursively) or null (deleted): where its text holds no ``{`` after the
        # first character and no ``null`` anywhere (a string holding either takes the long way)
        return (
            f"(CASE WHEN instr(substr({new}, 2), '{{') = 0 AND instr({new}, 'null') = 0 AND {_unescaped(old, new)} "
            f"THEN json_patch({old}, {new}) ELSE {_joined(old, new)} END)"
        )

    def document(self, alias: str) -> str:
        return f"{alias}.{self.quote(DOCUMENT_COLUMN)}"

    def member(self, doc: str, name: str) -> str:
        return f"({doc} -> {path(name)})"

    def typed(self, doc: str, name: str, col: Column) -> str:
        if col.kind == TIMESTAMP and self.lean:
            return self.to_timestamp(f"({doc} ->> {path(name)})")
        return f"({doc} ->> {path(name)})"

    # a lean row's date-time: fixed-width UTC text (tidemark.drivers.common.datetimes.sortable_text),
    # compared by a key of the instant: functions registered on the connection (``register``),
    # where the same in SQL nests deeper than SQLite's parser goes
    def to_timestamp(self, text: str) -> str:
        return f"tidemark_sortable({text})"

    def canonical_instant(self, expr: str) -> str:
        return f"tidemark_canonical({expr})"

    def precedes(self, a: str, b: str, f) -> str:
        if self.lean and is_date_time_field(f):
            return f"(tidemark_instant_key({a}) < tidemark_instant_key({b}))"
        return super().precedes(a, b, f)

    def set_members(self, doc: str, members, nulls=()) -> str:
        out = f"coalesce({doc}, '{{}}')"
        latest = list(dict(members).items())  # a name set twice: the later expression
        # json_patch: a member set to null is removed; one patch of many members, not one call
        # nested per member (SQLite's parser stack overflows past a few dozen nested calls)
        for i in range(0, len(latest), PAIRS):
            pairs = ", ".join(f"{literal(name)}, {e}" for name, e in latest[i : i + PAIRS])
            out = f"json_patch({out}, json_object({pairs}))"
        return f"NULLIF({insert_nulls('json_insert', out, nulls, PAIRS, path)}, '{{}}')"

    def with_object(self, doc: str, name: str, value: str) -> str:
        # json_set, not json_patch: a patch removes the object's null members (a kept null)
        out = f"coalesce({doc}, '{{}}')"
        return (
            f"NULLIF(CASE WHEN {value} IS NULL THEN json_remove({out}, {path(name)}) "
            f"ELSE json_set({out}, {path(name)}, json({value})) END, '{{}}')"
        )

    def kept_order(self, last, by, holds, old, new):
        # the rule in SQL nests deeper than SQLite's parser goes: kept_order_rule in Python
        args = ", ".join((str(int(last)), str(int(is_date_time_field(by))), *holds, *old, *new))
        return tuple(f"tidemark_kept_{part}({args})" for part in ("side", "time", "null"))

    def remainder(self, doc: str, names) -> str:
        out = doc
        names = list(names)
        for i in range(0, len(names), PAIRS * 2):
            out = f"json_remove({out}, {', '.join(path(n) for n in names[i : i + PAIRS * 2])})"
        return f"NULLIF({out}, '{{}}')"

    def to_json(self, expr: str, col: Column) -> str:
        if col.kind == BOOLEAN:
            return f"(CASE {expr} WHEN 1 THEN json('true') WHEN 0 THEN json('false') END)"
        if col.kind in (INTEGER, NUMBER) or scale_of_kind(col.kind) is not None:
            return f"(CASE WHEN typeof({expr}) = 'real' THEN json(tidemark_real({expr})) ELSE {expr} END)"
        return expr  # text: json_replace quotes it

    def with_members(self, doc: str, members, nullable, present=()) -> str:
        return replace_members("json_replace", doc, [*present, *members, *nullable], PAIRS, path)


class Refusals(threading.local):
    """What the last ``tidemark_refuse`` call of this thread said (the exception sqlite3
    raises for a failing function says only that it failed); a statement runs its functions
    in the thread that executes it."""

    last: Optional[tuple] = None  # (name, key, left, right)

    def refuse(self, name: str, key: str, left: Any, right: Any) -> None:
        self.last = (name, json.loads(key), left, right)
        raise ValueError(f"/{name}: 'sum' overflowed")  # sqlite3 turns an OverflowError into 'string or blob too big'


def real(x: Any) -> Optional[str]:
    """A double as the Python fold writes it (``repr``: shortest round trip)."""
    if x is None:
        return None
    x = float(x)
    if not math.isfinite(x):
        raise ValueError(f"{x!r} is not a JSON number")
    return repr(x)


REFUSALS = Refusals()


def instant_key(text: Any) -> Optional[str]:
    """Text that sorts as the Python fold orders date-times (:func:`~tidemark.collection.formats.instant`:
    the UTC second, a leap second after it, then the fraction's digits as bytes); None if not one."""
    key = instant(text) if isinstance(text, str) else None
    if key is None:
        return None
    seconds, leap, fraction = key
    return f"{seconds + INSTANT_OFFSET:020d}{int(leap)}{fraction}"


INSTANT_OFFSET = 10**12  # seconds: every year from 0000 on is positive


def register(con: sqlite3.Connection) -> None:
    """The functions the reduce statements call, on one connection."""
    con.create_function("tidemark_real", 1, real, deterministic=True)
    con.create_function("tidemark_refuse", 4, REFUSALS.refuse)
    con.create_function("tidemark_sortable", 1, sortable_text, deterministic=True)
    con.create_function("tidemark_canonical", 1, _canonical, deterministic=True)
    con.create_function("tidemark_instant_key", 1, instant_key, deterministic=True)
    for part in range(3):
        con.create_function(
            f"tidemark_kept_{('side', 'time', 'null')[part]}",
            10,
            lambda last, date_time, *a, _part=part: kept_order_rule(last, instant if date_time else None, *a)[_part],
            deterministic=True,
        )


def _canonical(column: Optional[str]) -> Optional[str]:
    return None if column is None else from_sortable_text(column)


def refused(model, exc: Exception) -> Optional[Exception]:
    """A DriverError naming the key and property for a refused sum, else None."""
    why, REFUSALS.last = REFUSALS.last, None
    if not isinstance(exc, sqlite3.OperationalError) or why is None:
        return None
    name, key, left, right = why
    col = next((c for c in model.values if c.name == name), None)
    members = [m for f in (model.reduce.fields if model.reduce else ()) for m in flat_members(f) if m.name == name]
    if col is not None:
        kind = col.kind
    elif members:  # an object's member (``object/member``)
        kind = member_kind(members[0])
    else:
        kind = INTEGER if isinstance(left + right, int) else NUMBER
    return sum_overflowed(model, name, kind, key, left, right)


#: the strategies SQLite reduces itself (``Capabilities.endpoint_reduce``)
ENDPOINT_REDUCE = SQL_STRATEGIES | {KEPT_ORDER}

__all__ = ["SqliteReduce", "register", "refused", "unescaped_names", "ENDPOINT_REDUCE"]
