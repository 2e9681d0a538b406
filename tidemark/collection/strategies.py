"""The reduction strategies: one table, each strategy's three implementations side by side.

==============  ==============================================================================
lastWriteWins   take the right-hand value (the default)
firstWriteWins  keep the left-hand value
sum             add two numbers; integers beyond int64 and non-finite numbers are errors
minimize        keep the smaller (by ``key`` pointers if given); ties without a key take the
maximize        right side, ties with a key deep-merge both sides; on a ``format: date-time``
                location, date-times compare as the instants they name
append          concatenate arrays (a ``null`` left side stays ``null``)
merge           deep merge of objects; arrays by index, or by ``key`` as a sorted merge
set             ``{add, intersect, remove}`` terms as arrays (sorted by ``key``) or objects
==============  ==============================================================================

Each :class:`Strategy` in :data:`STRATEGIES` holds

``fold``
    the Python fold: ``fold(reducer, app, ann, lhs, rhs, ptr)`` reduces ``rhs`` (the later
    value) into ``lhs`` at one schema location (``app``: the schemas that apply there, ``ann``
    their annotation); :class:`tidemark.collection.reduce.Reducer` dispatches on this table.
``fast``
    the fast fold of one top-level property of a compiled schema
    (:mod:`tidemark.collection.fast`, used where the runtime reduces loaded documents and by
    the ``mapInArrow`` fallback through :meth:`Collection.reduce`): ``fast(field)`` returns
    ``op(lhs, rhs)`` with exactly the Python fold's results and errors, or ``None`` for "the
    right side wins"; a strategy without one (``fast=None``) makes the schema take the generic
    fold.
``spark``
    the Spark aggregation of one compiled property (:func:`tidemark.spark.compile.aggregations`):
    ``spark(S, field, c)`` with ``S`` the Spark helpers (``S.F`` is ``pyspark.sql.functions``;
    see :class:`tidemark.spark.compile.SparkOps`), ``c`` the property's column, returning a
    :class:`SparkAggregate`.  No pyspark is imported here: everything Spark comes in ``S``.
    ``spark_kinds`` / ``spark_types`` say which property shapes it aggregates
    (:mod:`tidemark.collection.plan`).
``sql``
    the SQL form of one compiled top-level property, for endpoints that reduce a batch's
    combined documents into the stored ones themselves (:func:`tidemark.collection.sql_plan.sql_reduction`):
    ``sql(Q, field, old, new)`` with ``Q`` the endpoint's SQL helpers (see
    :class:`tidemark.drivers.sql.reduce.ReduceSql`), ``old`` / ``new`` SQL expressions of the
    stored and the batch's value (NULL where the document has none); it returns the reduced
    value's expression (NULL where neither side has one), or ``None`` where this property's
    shape has no SQL form.  No SQL dialect is named here: everything SQL comes in ``Q``.
    The forms are in :mod:`tidemark.collection.sql_forms`.

plus what the spec checks (``keyed``, ``ordered``, ``location_types``).

Event-time order (``reduce: {strategy: lastWriteWins, order: /updated_at}``): where a
strategy keeps one side because it is the later (or earlier) one, ``order`` names a JSON
pointer inside the location's value whose values decide that, instead of the source order
(:func:`event_order`): ``lastWriteWins`` keeps the side with the greater value there,
``firstWriteWins`` the smaller; a side without one orders first; equal values fall back to
the source order.  Keyed ``minimize`` / ``maximize`` take it as the key's last part.  The
winner carries its own order value, so the reduction stays associative, and the result does
not depend on the order the documents arrived in (up to ties).  Errors are
:class:`~tidemark.errors.ReductionError` naming the JSON pointer and the strategy.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Callable, Optional

from tidemark.collection.decimals import MAX_DIGITS, exact_sum, scale_in
from tidemark.collection.formats import instant, is_date_time_field
from tidemark.collection.order import MISSING, compare, compare_date_time, compare_key, is_date_time_location, is_number
from tidemark.collection.sql_forms import sql_append, sql_first, sql_last, sql_merge, sql_minmax, sql_sum, sql_union
from tidemark.collection.validate import pointer_of
from tidemark.errors import ReductionError

INT64_MIN = -(2**63)
INT64_MAX = 2**63 - 1

SUM_BEYOND_INT64 = "overflowed: the result is beyond a 64-bit integer"
SUM_NOT_FINITE = "overflowed: the result is not a finite number"
#: a compiled aggregate's error that only the Python fold can decide (it may be one, or not):
#: the batch takes the Python fold (:mod:`tidemark.spark.combine`)
UNSURE = "unsure: "

_PLAIN = frozenset((int, float))  # numbers that Python compares as JSON does (not bool)


@dataclass(frozen=True)
class SparkAggregate:
    """A strategy's Spark aggregation of one property."""

    column: Any  # the aggregate column
    count: Any = None  # where the aggregate of no values is not null: the count of values present
    error: Optional[Callable[[Any, Any], Any]] = None  # (present, result) -> the error's text, or null


@dataclass(frozen=True)
class Strategy:
    name: str
    fold: Callable[..., Any]
    fast: Optional[Callable[[Any], Optional[Callable[[Any, Any], Any]]]] = None
    spark: Optional[Callable[..., SparkAggregate]] = None
    spark_kinds: frozenset = frozenset()
    spark_types: Optional[frozenset] = None  # JSON types of the property (None: any)
    group_value: bool = False  # equal values reduce to that value (a key property needs no aggregate)
    keyed: bool = False  # takes ``reduce.key``
    ordered: str = ""  # takes ``reduce.order``: "" no, "any" on its own, "keyed" with a ``key``
    location_types: Optional[frozenset] = None  # the JSON types its location may have (besides null)
    expects: str = ""  # those types, as an error names them
    sql: Optional[Callable[..., Optional[str]]] = None  # the SQL form (see the module docstring)

    def compiles(self, kind: str, type_: str) -> bool:
        """True if the Spark aggregation takes a property of this kind and type."""
        return (
            self.spark is not None
            and kind in self.spark_kinds
            and (self.spark_types is None or type_ in self.spark_types)
        )


def short(v: Any) -> str:
    """A value as an error shows it (at most 80 characters of JSON)."""
    import json

    text = json.dumps(v, separators=(",", ":"), ensure_ascii=False, default=str)
    return text if len(text) <= 80 else text[:77] + "..."


def reduction_error(ptr: str, strategy: str, what: str, lhs: Any = MISSING, rhs: Any = MISSING) -> ReductionError:
    where = ptr or "/"
    text = f"{where}: '{strategy}' {what}"
    if lhs is not MISSING:
        text += f" (left {short(lhs)}, right {short(rhs)})"
    return ReductionError(text)


# ----------------------------------------------------------------------------- lastWriteWins, firstWriteWins


def event_order(r, app, ann, lhs, rhs, ptr: str = "") -> int:
    """``reduce.order``: compare the values at the ``order`` pointer inside ``lhs`` and ``rhs``
    (a side without one orders first; date-times as instants), 0 for a tie (or no ``order``).
    On a top-level property that is not an object (``ptr``), the pointer is read in the two
    documents the property comes from (``r.roots``), or where a reduced document keeps the
    property's own order value (:func:`tidemark.collection.reduce.property_time`), there."""
    if not ann.order:
        return 0
    key = (ann.order,)
    roots = getattr(r, "roots", None)
    if roots is not None and not isinstance(rhs, dict):
        lroot, rroot = r.timed_roots(ptr, ann.order)
        return compare_key(key, lroot, rroot, r.key_orders(r.index.applicable([r.index.root], rroot), key, rroot))
    return compare_key(key, lhs, rhs, r.key_orders(app, key, rhs))


def _last(r, app, ann, lhs, rhs, ptr):
    if ann.order and event_order(r, app, ann, lhs, rhs, ptr) > 0:
        return lhs  # the left side is the later event
    return rhs


def _first(r, app, ann, lhs, rhs, ptr):
    if ann.order and event_order(r, app, ann, lhs, rhs, ptr) > 0:
        return rhs  # the right side is the earlier event
    return lhs


def _keep_left(lhs: Any, rhs: Any) -> Any:
    return lhs


def _spark_pick(last: bool):
    """``max_by`` / ``min_by`` of the source order, over the values present."""

    def aggregate(S, f, c) -> SparkAggregate:
        pick = S.F.max_by if last else S.F.min_by
        return SparkAggregate(pick(c, S.F.when(c.isNotNull(), S.order)))

    return aggregate


# ----------------------------------------------------------------------------- sum


def add_numbers(lhs: Any, rhs: Any, ptr: str) -> Any:
    """``sum`` of two values: numbers, within int64 for integers, finite for the others."""
    if not (is_number(lhs) and is_number(rhs)):
        raise reduction_error(ptr, "sum", "expects numbers", lhs, rhs)
    out = lhs + rhs
    if isinstance(out, int):
        if not INT64_MIN <= out <= INT64_MAX:
            raise reduction_error(ptr, "sum", SUM_BEYOND_INT64, lhs, rhs)
    elif not math.isfinite(out):
        raise reduction_error(ptr, "sum", SUM_NOT_FINITE, lhs, rhs)
    return out


def _sum(r, app, ann, lhs, rhs, ptr):
    scale = scale_in(app)
    if scale is None:
        return add_numbers(lhs, rhs, ptr)
    return add_exact(lhs, rhs, scale, ptr)


def add_exact(lhs: Any, rhs: Any, scale: int, ptr: str) -> Any:
    """``sum`` of two exact decimals of ``scale`` places (multipleOf 10^-s): collection.decimals."""
    if not (is_number(lhs) and is_number(rhs)):
        raise reduction_error(ptr, "sum", "expects numbers", lhs, rhs)
    out = exact_sum(lhs, rhs, scale)
    if out is None:
        raise reduction_error(ptr, "sum", decimal_overflow(scale), lhs, rhs)
    return out


def decimal_overflow(scale: int) -> str:
    """Why a sum of exact decimals is refused (every path says it so)."""
    return f"of exact decimals (multipleOf {10.0**-scale:g}) would need more than the {MAX_DIGITS} significant digits kept exact"


def _fast_sum(f):
    """Two integers whose sum fits 64 bits are added here; anything else (floats, overflow,
    wrong types) goes to :func:`add_numbers` for its result or error.  An exact decimal:
    :func:`add_exact`."""
    ptr = pointer_of((f.name,))
    if f.scale is not None:
        return lambda lhs, rhs: add_exact(lhs, rhs, f.scale, ptr)

    def add(lhs: Any, rhs: Any) -> Any:
        if lhs.__class__ is int and rhs.__class__ is int:
            out = lhs + rhs
            if INT64_MIN <= out <= INT64_MAX:
                return out
        return add_numbers(lhs, rhs, ptr)

    return add


def _spark_sum(S, f, c) -> SparkAggregate:
    """Integers: ``try_sum`` (null on overflow); numbers: an ordered fold of the values in
    source order, so that replays are bit-identical."""
    F = S.F
    if f.type == "integer":
        return SparkAggregate(
            F.try_sum(c),
            F.count(c),
            lambda present, v: F.when(present & v.isNull(), F.lit(f"/{f.name}: 'sum' {SUM_BEYOND_INT64}")),
        )
    c = S.collected(c)
    if f.scale is not None:
        # An exact decimal: a sum of decimals, exact; add_exact's stepwise rounding gives the
        # double nearest to it while no partial sum reaches 10^(15-s), which holds where the
        # sum of the values' sizes stays below that.  Where it does not, the Python fold
        # decides (an error, or a sum whose partials stayed below): UNSURE.
        # Summed as whole units of 10^-s in a long: below the limit a value times 10^s lies
        # within 0.25 of the integer its text spells (|units| < 10^15 < 2^53), so ``rint`` gives
        # that integer, and the one division of the exact sum gives the double nearest to it.
        # (Summing decimal(38, s) values took a BigDecimal per row and per aggregate.)
        limit = 10 ** (MAX_DIGITS - f.scale)
        unit = float(10**f.scale)
        small = F.when(F.abs(c) < F.lit(float(limit)), c)
        units = F.rint(small * F.lit(unit)).cast("long")
        exact = F.try_sum(units)
        size = F.try_sum(F.abs(units))
        big = F.count(F.when(F.abs(c) >= F.lit(float(limit)), F.lit(1)))
        return SparkAggregate(
            F.when((big == 0) & (size < F.lit(10**MAX_DIGITS)), exact.cast("double") / F.lit(unit)),
            F.count(c),
            lambda present, v: F.when(
                present & v.isNull(), F.lit(f"{UNSURE}/{f.name}: 'sum' {decimal_overflow(f.scale)}")
            ),
        )
    return SparkAggregate(
        F.aggregate(S.sorted_values(c), F.lit(0.0), lambda acc, x: acc + x["v"]),
        F.count(c),
        lambda present, v: F.when(
            present & (F.isnan(v) | (F.abs(v) == F.lit(float("inf")))), F.lit(f"/{f.name}: 'sum' {SUM_NOT_FINITE}")
        ),
    )


# ----------------------------------------------------------------------------- minimize, maximize


def _minmax(r, app, ann, lhs, rhs, ptr):
    if ann.key:
        key = ann.key + (ann.order,) if ann.order else ann.key  # ``order``: the key's last part
        c = compare_key(key, lhs, rhs, r.key_orders(app, key, rhs))
    elif is_date_time_location(app):
        c = compare_date_time(lhs, rhs)
    else:
        c = compare(lhs, rhs)
    if ann.strategy == "maximize":
        c = -c
    if c < 0:
        return lhs
    if c > 0 or not ann.key:
        return rhs
    return r.merge(app, (), lhs, rhs, ptr, ann.strategy)


def _fast_minmax(maximize: bool):
    def make(f):
        if f.schema.get("format") == "date-time":
            return _pick_date_time(maximize)
        return _pick(maximize)

    return make


def _pick(maximize: bool):
    """Without a key: ties take the right side."""

    def pick(lhs: Any, rhs: Any) -> Any:
        lc, rc = lhs.__class__, rhs.__class__
        if (lc in _PLAIN and rc in _PLAIN) or (lc is str and rc is str):
            if maximize:
                return lhs if lhs > rhs else rhs
            return lhs if lhs < rhs else rhs
        c = compare(lhs, rhs)
        if maximize:
            c = -c
        return lhs if c < 0 else rhs

    return pick


def _pick_date_time(maximize: bool):
    """Of a ``format: date-time`` property: by instant (:func:`compare_date_time`); ties
    take the right side."""

    def pick(lhs: Any, rhs: Any) -> Any:
        il, ir = instant(lhs), instant(rhs)
        c = ((il > ir) - (il < ir)) if il is not None and ir is not None else compare_date_time(lhs, rhs)
        if maximize:
            c = -c
        return lhs if c < 0 else rhs

    return pick


def _spark_minmax(maximize: bool):
    """``min`` / ``max``; of a date-time, ``max_by`` of the text over (instant, source order)."""

    def aggregate(S, f, c) -> SparkAggregate:
        F = S.F
        if is_date_time_field(f):
            return SparkAggregate(
                F.max_by(c, F.when(c.isNotNull(), F.struct(S.instant_order(c, maximize, f.name), S.order)))
            )
        return SparkAggregate(F.max(c) if maximize else F.min(c))

    return aggregate


# ----------------------------------------------------------------------------- append


def append_arrays(lhs: Any, rhs: Any, ptr: str) -> Any:
    if isinstance(lhs, list) and isinstance(rhs, list):
        return lhs + rhs
    if lhs is None and isinstance(rhs, list):
        return None
    raise reduction_error(ptr, "append", "expects arrays", lhs, rhs)


def _array_fold(combine: Callable[[Any, Any, str], Any]):
    """The fold of a strategy that combines two arrays (``append``, ``union``)."""
    return lambda r, app, ann, lhs, rhs, ptr: combine(lhs, rhs, ptr)


def _array_fast(combine: Callable[[Any, Any, str], Any]):
    def make(f):
        ptr = pointer_of((f.name,))
        return lambda lhs, rhs: combine(lhs, rhs, ptr)

    return make


def _spark_arrays(distinct: bool):
    """The arrays in source order, flattened; ``distinct``: each value once (``array_distinct``
    keeps the first), one document's array as it is (as the fold leaves a lone document)."""

    def aggregate(S, f, column) -> SparkAggregate:
        functions = S.F
        collected = S.collected(column)
        if f.kind == "raw":  # appended as JSON texts (an array of objects, of any values): their items joined
            texts = functions.transform(S.sorted_values(collected), lambda x: x["v"])
            items = functions.filter(
                functions.transform(texts, lambda t: functions.substring(t, 2, functions.length(t) - 2)),
                lambda t: t != "",
            )
            joined = functions.concat(functions.lit("["), functions.array_join(items, ","), functions.lit("]"))
            return SparkAggregate(joined, functions.count(collected))
        values = functions.flatten(functions.transform(S.sorted_values(collected), lambda x: x["v"]))
        if distinct:
            present = functions.count(collected)
            values = functions.when(present > 1, functions.array_distinct(values)).otherwise(values)
        return SparkAggregate(values, functions.count(collected))

    return aggregate


# ----------------------------------------------------------------------------- union


def _item_key(v: Any) -> Any:
    """Equal JSON values, equal keys (1 and 1.0 are one number; true is not 1)."""
    import json

    if isinstance(v, bool):
        return ("b", v)
    if isinstance(v, (int, float)):
        return ("n", v)
    if isinstance(v, str):
        return ("s", v)
    return ("j", json.dumps(v, sort_keys=True, separators=(",", ":"), ensure_ascii=False))


def union_arrays(lhs: Any, rhs: Any, ptr: str) -> Any:
    """The values of both arrays, each once, in the order first seen (the left side's first)."""
    if isinstance(lhs, list) and isinstance(rhs, list):
        seen = {_item_key(v) for v in lhs}
        out = list(lhs) if len(seen) == len(lhs) else []
        if not out and lhs:  # the left side itself repeats a value: keep its first
            seen = set()
            for v in lhs:
                k = _item_key(v)
                if k not in seen:
                    seen.add(k)
                    out.append(v)
        for v in rhs:
            k = _item_key(v)
            if k not in seen:
                seen.add(k)
                out.append(v)
        return out
    if lhs is None and isinstance(rhs, list):
        return None  # as append: a null on the left stays null
    raise reduction_error(ptr, "union", "expects arrays", lhs, rhs)


# ----------------------------------------------------------------------------- merge


def _merge(r, app, ann, lhs, rhs, ptr):
    return r.merge(app, ann.key, lhs, rhs, ptr, "merge")


def _spark_merge(S, f, c) -> SparkAggregate:
    """A map (``additionalProperties`` of one scalar type): ``map_zip_with`` over the maps in
    source order, the later value winning."""
    F = S.F
    c = S.collected(c)
    empty = F.create_map().cast(f"map<string,{S.spark_type(f.type).simpleString()}>")
    return SparkAggregate(
        F.aggregate(
            S.sorted_values(c, orderable=False),
            empty,
            lambda acc, x: F.map_zip_with(acc, x["v"], lambda k, a, b: F.coalesce(b, a)),
        ),
        F.count(c),
    )


# ----------------------------------------------------------------------------- set


def _set(r, app, ann, lhs, rhs, ptr):
    return r.reduce_set(app, ann.key, lhs, rhs, ptr)


# ----------------------------------------------------------------------------- the table

_NUMBERS = frozenset(("number", "integer"))

STRATEGIES: dict[str, Strategy] = {
    s.name: s
    for s in (
        Strategy(
            "lastWriteWins",
            _last,
            lambda f: None,
            _spark_pick(True),
            frozenset(("scalar", "raw", "append")),  # an array of scalars picked whole, as parsed
            group_value=True,
            ordered="any",
            sql=sql_last,
        ),
        Strategy(
            "firstWriteWins",
            _first,
            lambda f: _keep_left,
            _spark_pick(False),
            frozenset(("scalar", "raw", "append")),  # an array of scalars picked whole, as parsed
            group_value=True,
            ordered="any",
            sql=sql_first,
        ),
        Strategy(
            "sum",
            _sum,
            _fast_sum,
            _spark_sum,
            frozenset(("scalar",)),
            _NUMBERS,
            location_types=_NUMBERS,
            expects="numbers",
            sql=sql_sum,
        ),
        Strategy(
            "minimize",
            _minmax,
            _fast_minmax(False),
            _spark_minmax(False),
            frozenset(("scalar",)),
            group_value=True,
            keyed=True,
            ordered="keyed",
            sql=sql_minmax(False),
        ),
        Strategy(
            "maximize",
            _minmax,
            _fast_minmax(True),
            _spark_minmax(True),
            frozenset(("scalar",)),
            group_value=True,
            keyed=True,
            ordered="keyed",
            sql=sql_minmax(True),
        ),
        Strategy(
            "append",
            _array_fold(append_arrays),
            _array_fast(append_arrays),
            _spark_arrays(distinct=False),
            frozenset(("append", "raw")),  # raw: an array of objects (or without items), as JSON texts
            location_types=frozenset(("array",)),
            expects="arrays",
            sql=sql_append,
        ),
        Strategy(
            "union",
            _array_fold(union_arrays),
            _array_fast(union_arrays),
            _spark_arrays(distinct=True),
            frozenset(("append",)),
            location_types=frozenset(("array",)),
            expects="arrays",
            sql=sql_union,
        ),
        Strategy(
            "merge",
            _merge,
            None,
            _spark_merge,
            frozenset(("map", "object")),
            keyed=True,
            location_types=frozenset(("object", "array")),
            expects="objects or arrays",
            sql=sql_merge,
        ),
        Strategy(
            "set",
            _set,
            keyed=True,
            location_types=frozenset(("object",)),
            expects="objects ({add, intersect, remove}; for an array of values, each kept once, use `union`)",
        ),
    )
}
