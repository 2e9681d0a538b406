"""Reducing in MariaDB (10.6+, ``JSON_TABLE``): the SQL form of each strategy over ``json``
(``longtext``) documents.  MySQL 8 keeps the Load path (its binary JSON differs, and it is not
tested here).

The statement is ``INSERT INTO view (…) SELECT … FROM staging s ON DUPLICATE KEY UPDATE …``.
MariaDB assigns left to right, each assignment seeing the ones before it, so the document is
set first — from the stored row's columns and document (``view.col``) and the staged
document (``s.document``) — and then every value column is read back from the new document.  In
that clause ``VALUES(col)`` is the staged row's value; a subquery may name ``s.document`` but not
``VALUES()``.

* ``sum`` is ``+``: past 64 bits (``bigint``) or not finite (``double``) MariaDB raises 1690,
  and the transactor names the key (:func:`overflow_query`);
* ``maximize`` / ``minimize``: ``GREATEST`` / ``LEAST``; strings compared as their UTF-8
  bytes (code point order, as the Python fold compares);
* an exact decimal's ``sum`` (``multipleOf`` 10^-s) is ``decimal`` arithmetic cast to
  ``decimal(15, s)``: past 15 significant digits MariaDB raises 1264, as the fold refuses it;
* ``append``: ``JSON_MERGE_PRESERVE`` of two arrays (their concatenation); ``merge`` of a map
  (scalar members, never null): ``JSON_MERGE_PATCH``;
* ``union``: the concatenation's elements (``JSON_TABLE``), the first of each value, in
  order; values are equal as the fold compares them (strings by their bytes, numbers by
  value: 1 and 1.0 are one, an integer beyond 2^53 by its digits);
* the root's shallow merge: ``JSON_MERGE_PATCH`` where the batch's document holds no object
  and no ``null`` (there the two agree); else, as text, the stored members whose names the
  staged document does not have (names from ``JSON_KEYS``, values from ``JSON_TABLE(doc,
  '$.*')`` in the same order, each as its JSON text) and then the staged document's members.
  (``JSON_MERGE_PATCH`` with the staged names set to null would be shorter, but MariaDB 10.11
  deletes only some of several members that way: ``JSON_MERGE_PATCH('{"b": 1, "k": "a"}',
  '{"k": null, "b": null}')`` is ``{"k": "a"}``.)  ``group_concat_max_len`` is raised at
  connect, so a long document is not cut.  An object of declared members with strategies
  of their own is merged so too (its members are scalars, but one the schema does not
  declare may be an object or ``null``), the subquery naming the staged object through
  ``s.document`` (:meth:`MariaReduce._staged`), then its members set by ``JSON_REPLACE``;
* the reduced members go in by ``JSON_REPLACE``, which never adds a member; a lean row's
  remainder gets a nullable property's ``null`` by ``JSON_INSERT`` (``JSON_MERGE_PATCH`` would
  delete it), in the same ``set_members`` as the date-times' texts: MariaDB 10.11.19 crashes
  (signal 11) on a ``NULLIF`` of ``JSON_INSERT`` over another ``NULLIF`` of
  ``JSON_MERGE_PATCH`` over the root's merge; a lean statement asks the staged document
  (``s.document``) whether the batch holds a member, not the staged remainder's expression;
* a ``date-time`` column (naive UTC ``datetime(6)``) is computed from the RFC 3339 text: the
  local time less its offset.  In a lean table the remainder keeps the text where the
  column does not give it back (``drivers/sql/lean.py``), and the statement assigns all
  columns at once (``SIMULTANEOUS_ASSIGNMENT``, as PostgreSQL does): the remainder's texts
  are picked by the stored columns' values.

MariaDB finds ``$."é"`` only where the name is written so (not ``"\\u00e9"``): staged texts
holding a backslash are written again without the escapes names do not need
(:func:`tidemark.drivers.sql.json_edits.unescaped_names`).
"""

from __future__ import annotations

from typing import Sequence

from tidemark.collection.decimals import MAX_DIGITS
from tidemark.collection.plan import FieldPlan
from tidemark.collection.sql_plan import SQL_STRATEGIES
from tidemark.drivers.sql import BOOLEAN, INTEGER, NUMBER, TIMESTAMP
from tidemark.drivers.sql.json_edits import insert_nulls, replace_members
from tidemark.drivers.sql.model import (
    DOCUMENT_COLUMN,
    STAGED_DOCUMENT,
    Column,
    TableModel,
    scale_of_kind,
    staged_column,
)
from tidemark.drivers.sql.reduce import OLD, LeanInstant, ReduceSql, reduce_sources

STAGED = "s"  # the staging table's alias
#: members per JSON_REPLACE call (a comfortable bound: MariaDB takes many arguments)
PAIRS = 100
DOUBLE_MAX = "1.7976931348623157e308"
EXACT_DOUBLE = 2**53  # integers beyond it: compared by their digits, not as doubles


def literal(text: str) -> str:
    """A MariaDB string literal (backslashes and quotes escaped: they are escapes there)."""
    return "'" + text.replace("\\", "\\\\").replace("'", "''") + "'"


def path(name: str) -> str:
    return literal(f'$."{name}"')


def utc(text: str) -> str:
    """An RFC 3339 date-time's text as a naive UTC ``datetime(6)``: the local part less the
    offset (``Z``/``z`` is +00:00); a leap second as ``:59`` (as :func:`tidemark.drivers.mysql.bulk.to_utc`)."""
    zulu = f"RIGHT({text}, 1) IN ('Z', 'z')"
    second = f"SUBSTRING({text}, 18, 2)"
    leap = f"IF({second} = '60', INSERT({text}, 18, 2, '59'), {text})"
    local = (
        f"CAST(REPLACE(REPLACE(LEFT({leap}, CHAR_LENGTH({text}) - IF({zulu}, 1, 6)), 'T', ' '), 't', ' ') "
        "AS DATETIME(6))"
    )
    minutes = (
        f"IF({zulu}, 0, IF(SUBSTRING({text}, -6, 1) = '-', -1, 1) * "
        f"(CAST(SUBSTRING({text}, -5, 2) AS SIGNED) * 60 + CAST(SUBSTRING({text}, -2, 2) AS SIGNED)))"
    )
    return f"({local} - INTERVAL {minutes} MINUTE)"


def _members_not_in(old: str, new: str) -> str:
    """The members of ``old`` whose names ``new`` does not have, as ``"name": value`` texts
    joined by commas (NULL if none): names from ``JSON_KEYS`` (decoded, compared as bytes),
    values from ``JSON_TABLE(old, '$.*')`` in the same order, each as its JSON text."""
    keys = "COLUMNS (i FOR ORDINALITY, k LONGTEXT PATH '$')"
    return (
        f"(SELECT GROUP_CONCAT(CONCAT(JSON_QUOTE(jk.k), ': ', jv.v) ORDER BY jk.i SEPARATOR ', ') "
        f"FROM JSON_TABLE(JSON_KEYS({old}), '$[*]' {keys}) jk "
        f"JOIN JSON_TABLE({old}, '$.*' COLUMNS (i FOR ORDINALITY, v JSON PATH '$')) jv ON jk.i = jv.i "
        f"WHERE CAST(jk.k AS BINARY) NOT IN (SELECT CAST(kn.k AS BINARY) FROM JSON_TABLE(JSON_KEYS({new}), '$[*]' {keys}) kn))"
    )


class MariaReduce(ReduceSql):
    staged_alias = STAGED

    def __init__(self, quote, table: str, model: TableModel):
        super().__init__(quote)
        self.table, self.model = table, model

    def overflow_query(self, model: TableModel, staging: str, f, col: Column, typed: bool, within=None) -> str:
        return overflow_query(self, model, staging, f, col, typed, within)

    def column(self, side: str, quoted: str) -> str:
        return f"{self.table}.{quoted}" if side == OLD else f"VALUES({quoted})"

    def document(self, alias: str) -> str:
        if alias == OLD:
            return f"{self.table}.{self.quote(DOCUMENT_COLUMN)}"
        if self.model.lean and self.staged_values:  # typed values staged: their remainder beside them
            return f"{STAGED}.{STAGED_DOCUMENT}"
        if self.model.lean:  # the staged remainder, as staged (a subquery cannot name VALUES())
            return reduce_sources(self, self.model, STAGED)[-1]
        return f"{STAGED}.{STAGED_DOCUMENT}"

    def staged_document(self, new_doc: str) -> str:
        if self.model.lean and not self.staged_values:  # the whole staged document, not its remainder again
            return f"{STAGED}.{STAGED_DOCUMENT}"
        return new_doc

    def remainder(self, doc: str, names) -> str:
        return f"NULLIF(JSON_REMOVE({doc}, {', '.join(path(n) for n in names)}), '{{}}')"

    def insert_head(self, table: str, target: str, source: str, staged: str) -> str:
        insert = f"INSERT INTO {table} ({target}) SELECT {source} FROM {staged} {STAGED}"
        if self.model.lean:  # every SET reads the stored row as it was (the full form reads back its document)
            return f"SET STATEMENT sql_mode = CONCAT(@@sql_mode, ',SIMULTANEOUS_ASSIGNMENT') FOR {insert}"
        return insert

    def on_conflict(self, keys: Sequence[str], sets: Sequence[tuple[str, str]]) -> str:
        if not sets:  # firstWriteWins at the root: keep the stored row
            return f"ON DUPLICATE KEY UPDATE {keys[0]} = {self.table}.{keys[0]}"
        if self.model.lean:  # each column from its own stored and staged values; the remainder last
            return "ON DUPLICATE KEY UPDATE " + ", ".join(f"{c} = {e}" for c, e in sets)
        # the document first (it reads the stored columns), then each column from it
        doc_col, doc = sets[-1]
        new_doc = f"{self.table}.{doc_col}"
        assigns = [f"{doc_col} = {doc}"] + [
            f"{self.quote(c.name)} = {self.typed(new_doc, c.name, c)}" for c in self.model.values
        ]
        return "ON DUPLICATE KEY UPDATE " + ", ".join(assigns)

    def add(self, old: str, new: str, f: FieldPlan) -> str:
        if f.scale is not None:  # an exact decimal: 15 significant digits at its places, else 1264
            return f"CAST({decimal(old, f.scale)} + {decimal(new, f.scale)} AS DECIMAL({MAX_DIGITS}, {f.scale}))"
        return f"({old} + {new})"

    def greatest(self, old: str, new: str, f) -> str:
        if f.type == "string":
            return f"IF(CAST({new} AS BINARY) > CAST({old} AS BINARY), {new}, {old})"
        return f"GREATEST({old}, {new})"

    def least(self, old: str, new: str, f) -> str:
        if f.type == "string":
            return f"IF(CAST({new} AS BINARY) < CAST({old} AS BINARY), {new}, {old})"
        return f"LEAST({old}, {new})"

    def precedes(self, a: str, b: str, f) -> str:
        if f.type == "string" and f.schema.get("format") != "date-time":
            return f"(CAST({a} AS BINARY) < CAST({b} AS BINARY))"
        if isinstance(a, LeanInstant) and isinstance(b, LeanInstant):
            # columns two seconds or more apart order as their texts do (a leap second's column
            # is its ``:59`` second: within a second of its place), else the texts
            apart = f"TIMESTAMPDIFF(MICROSECOND, {a.column}, {b.column})"
            return f"IF({apart} >= 2000000, TRUE, IF({apart} <= -2000000, FALSE, {super().precedes(a, b, f)}))"
        return super().precedes(a, b, f)

    def instant(self, text: str) -> tuple[str, str, str]:
        zulu = f"RIGHT({text}, 1) IN ('Z', 'z')"
        second = f"SUBSTRING({text}, 18, 2)"
        whole = f"CONCAT(LEFT({text}, 19), IF({zulu}, 'Z', RIGHT({text}, 6)))"  # without the fraction
        digits = f"CHAR_LENGTH({text}) - 20 - IF({zulu}, 1, 6)"
        fraction = f"IF(SUBSTRING({text}, 20, 1) = '.', TRIM(TRAILING '0' FROM SUBSTRING({text}, 21, {digits})), '')"
        return utc(whole), f"({second} = '60')", f"CAST({fraction} AS BINARY)"

    def canonical_instant(self, expr: str) -> str:
        fraction = f"TRIM(TRAILING '0' FROM LPAD(MICROSECOND({expr}), 6, '0'))"
        return (
            f"CONCAT(DATE_FORMAT({expr}, '%Y-%m-%dT%H:%i:%s'), "
            f"IF(MICROSECOND({expr}) = 0, '', CONCAT('.', {fraction})), 'Z')"
        )

    def to_timestamp(self, text: str) -> str:
        return utc(text)

    def differs(self, a: str, b: str) -> str:
        return f"(CAST({a} AS BINARY) <> CAST({b} AS BINARY))"

    def set_members(self, doc: str, members, nulls=()) -> str:
        out = f"COALESCE({doc}, '{{}}')"
        for name, e in members:  # one member a call: JSON_MERGE_PATCH drops only some of several nulls
            out = f"JSON_MERGE_PATCH({out}, JSON_OBJECT({literal(name)}, {e}))"
        return f"NULLIF({insert_nulls('JSON_INSERT', out, nulls, PAIRS, path)}, '{{}}')"

    def concat_arrays(self, old: str, new: str) -> str:
        return f"JSON_MERGE_PRESERVE({old}, {new})"

    def union_arrays(self, old: str, new: str, f: FieldPlan) -> str:
        # correlated JSON_TABLEs only (a derived table cannot name the row), the staged value
        # as the staging table holds it (a subquery cannot name VALUES())
        both = f"JSON_MERGE_PRESERVE({old}, {self._staged(new)})"
        columns = "COLUMNS (o FOR ORDINALITY, v JSON PATH '$', s LONGTEXT PATH '$', d DOUBLE PATH '$')"
        if f.type == "string":
            same = "CAST(p.s AS BINARY) = CAST(e.s AS BINARY)"
        elif f.type == "integer":  # 1.0 is the integer 1
            same = "CAST(p.s AS DECIMAL(65, 0)) = CAST(e.s AS DECIMAL(65, 0))"
        elif f.type == "number":  # by value; integers beyond 2^53 by their digits too
            big = "IF(JSON_TYPE({0}.v) = 'INTEGER' AND ABS({0}.d) >= " + str(EXACT_DOUBLE) + ", {0}.s, '')"
            same = f"p.d = e.d AND CAST({big.format('p')} AS BINARY) = CAST({big.format('e')} AS BINARY)"
        else:
            same = "p.s = e.s"
        earlier = f"SELECT 1 FROM JSON_TABLE({both}, '$[*]' {columns}) p WHERE p.o < e.o AND {same}"
        return (  # JSON_EXTRACT(text, '$'): a JSON value, which JSON_REPLACE sets as an array, not a string
            f"JSON_EXTRACT((SELECT CONCAT('[', GROUP_CONCAT(e.v ORDER BY e.o SEPARATOR ', '), ']') "
            f"FROM JSON_TABLE({both}, '$[*]' {columns}) e WHERE NOT EXISTS ({earlier})), '$')"
        )

    def _staged(self, value: str) -> str:
        """A staged value as a subquery may name it: each ``VALUES(col)`` in it (a column, or a
        member of one: an object's array) as the staging table's column."""
        for j, c in enumerate(self.model.columns):
            values = f"VALUES({self.quote(c.name)})"
            if values in value:
                if self.staged_values:
                    staged = f"{STAGED}.{staged_column(j)}"
                else:
                    staged = self.member(f"{STAGED}.{STAGED_DOCUMENT}", c.name)
                value = value.replace(values, staged)
        return value

    def merge_documents(self, old: str, new: str) -> str:
        return (
            f"IF(LOCATE('{{', {new}, 2) = 0 AND LOCATE('null', {new}) = 0, JSON_MERGE_PATCH({old}, {new}), "
            f"JSON_EXTRACT(CONCAT('{{', CONCAT_WS(', ', {_members_not_in(old, self._staged(new))}, "
            f"NULLIF(TRIM(SUBSTRING(TRIM({new}), 2, CHAR_LENGTH(TRIM({new})) - 2)), '')), '}}'), '$'))"
        )

    def member(self, doc: str, name: str) -> str:
        return f"JSON_EXTRACT({doc}, {path(name)})"

    def typed(self, doc: str, name: str, col: Column) -> str:
        v = f"JSON_VALUE({doc}, {path(name)})"
        if col.kind in (INTEGER, BOOLEAN):
            return f"CAST({v} AS SIGNED)"
        if col.kind == NUMBER:
            return f"CAST({v} AS DOUBLE)"
        if col.kind == TIMESTAMP:
            return utc(v)
        scale = scale_of_kind(col.kind)
        if scale is not None:  # an exact decimal: compared and summed as one
            return decimal(v, scale)
        return v

    def to_json(self, expr: str, col: Column) -> str:
        if col.kind == BOOLEAN:
            return f"(CASE {expr} WHEN 1 THEN JSON_EXTRACT('true', '$') WHEN 0 THEN JSON_EXTRACT('false', '$') END)"
        if scale_of_kind(col.kind) is not None:  # a JSON number, not the DECIMAL's text
            return f"CAST({expr} AS DOUBLE)"
        return expr

    def with_members(self, doc: str, members, nullable, present=()) -> str:
        return replace_members("JSON_REPLACE", doc, [*present, *members, *nullable], PAIRS, path)


def overflow_query(
    forms: MariaReduce, model: TableModel, staged: str, f, col: Column, typed: bool = False, within=None
) -> str:
    """The first staged key whose ``sum`` of ``f`` leaves its type, with both operands
    (``typed``: the staging table holds the view's columns, not the document; ``within``: the
    object ``f`` is a member of)."""
    quote = forms.quote
    match = " AND ".join(f"t.{quote(c.name)} = s.{staged_column(j)}" for j, c in enumerate(model.keys))
    keys = ", ".join(f"s.{staged_column(j)}" for j in range(len(model.keys)))
    names = [c.name for c in model.columns]
    if within is not None:  # a member of the object ``within``: its column (lean), else the document's member
        stored = f"JSON_EXTRACT(t.{quote(DOCUMENT_COLUMN)}, {path(within.name)})"
        staged_object = f"JSON_EXTRACT(s.{STAGED_DOCUMENT}, {path(within.name)})"
        if within.name in names:
            stored = f"COALESCE(t.{quote(within.name)}, {stored})"
            if typed:
                staged_object = f"s.{staged_column(names.index(within.name))}"
        inner = ".".join(f'"{m}"' for m in f.name[len(within.name) + 1 :].split("/"))  # a nested member's too
        old, new = (f"JSON_VALUE({obj}, {literal('$.' + inner)})" for obj in (stored, staged_object))
    else:
        old = f"t.{quote(col.name)}" if model.lean else f"JSON_VALUE(t.{quote(DOCUMENT_COLUMN)}, {path(f.name)})"
        if typed:
            new = f"s.{staged_column(names.index(col.name))}"
        else:
            new = f"JSON_VALUE(s.{STAGED_DOCUMENT}, {path(f.name)})"
    scale = scale_of_kind(col.kind) if f.scale is None else f.scale
    if scale is not None:  # an exact decimal: 15 significant digits at its places
        a, b = decimal(old, scale), decimal(new, scale)
        bad = f"ABS({a} + {b}) >= 1e{MAX_DIGITS - scale}"
    elif col.kind == INTEGER:
        a, b = f"CAST({old} AS DECIMAL(65, 0))", f"CAST({new} AS DECIMAL(65, 0))"
        bad = f"({a} + {b} > 9223372036854775807 OR {a} + {b} < -9223372036854775808)"
    else:
        a, b = f"CAST({old} AS DOUBLE)", f"CAST({new} AS DOUBLE)"
        bad = (
            f"(({a} > 0 AND {b} > 0 AND {a} > {DOUBLE_MAX} - {b}) OR "
            f"({a} < 0 AND {b} < 0 AND {a} < -{DOUBLE_MAX} - {b}))"
        )
    return f"SELECT {keys}, {old}, {new} FROM {staged} s JOIN {forms.table} t ON {match} WHERE {bad} LIMIT 1"


def decimal(value: str, scale: int) -> str:
    """An exact decimal's value (a column, or a document's member as text) as ``decimal``."""
    return f"CAST({value} AS DECIMAL(65, {scale}))"


#: the strategies MariaDB reduces itself (``Capabilities.endpoint_reduce``)
ENDPOINT_REDUCE = SQL_STRATEGIES  # not KEPT_ORDER: no temporary functions (MariaDB 10.11)

__all__ = ["MariaReduce", "overflow_query", "ENDPOINT_REDUCE"]
