"""The Spark side of a compiled plan: parsing, JSON text and aggregation.

A :class:`~tidemark.collection.plan.CompiledPlan` (:func:`tidemark.collection.plan.compile_collection`
says which schemas compile) is parsed with ``from_json`` (:func:`parse_schema`,
:data:`JSON_OPTIONS`), validated natively (:mod:`tidemark.spark.suspects`) and aggregated
per key in one ``groupBy().agg()`` (:func:`aggregations`).  Each property's aggregate is its
strategy's ``spark`` entry in :data:`tidemark.collection.strategies.STRATEGIES`, given the
pyspark helpers of :class:`SparkOps`:

* ``lastWriteWins`` / ``firstWriteWins``: ``max_by`` / ``min_by`` of the source order (of
  scalars, or of raw JSON text for objects and arrays; of a nullable scalar, of a struct
  holding it, over the documents that write it, ``null`` or not); a root with ``reduce.order``: of
  :func:`event_order`, then the source order; a property with its own ``order``: of the
  order property's value, then the source order (:func:`_by_event_time`);
* ``sum``: ``try_sum`` for integers; an ordered fold for numbers, so replays are
  bit-identical;
* ``minimize`` / ``maximize`` without a key: ``min`` / ``max``; of a ``format: date-time``
  string, ``max_by`` of the text over :func:`~tidemark.spark.datetimes.instant_order`;
* ``append`` of arrays of scalars: ordered ``collect_list`` + ``flatten``;
* ``merge`` of maps (``additionalProperties`` of a scalar type): ``map_zip_with`` over the
  ordered values; of an object of declared members (``object``): each member's own
  strategy's aggregate, the object present where any document holds it.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any, Callable, cast

from tidemark.collection.formats import is_date_time_field
from tidemark.collection.plan import CompiledPlan, checked_members
from tidemark.collection.reduce import ORDER, TIDEMARK
from tidemark.collection.strategies import STRATEGIES, UNSURE, SparkAggregate
from tidemark.protocol.messages import REMAINDER
from tidemark.spark.datetimes import instant_order, order_of_instant

#: a valid date-time's text that its instant gives back (UTC, ``Z``, no leap second, at most six
#: fraction digits without trailing zeros: :func:`tidemark.drivers.common.datetimes.keeps_text`)
CANONICAL_DATE_TIME = r"^[0-9]{4}-[0-9]{2}-[0-9]{2}T[0-9]{2}:[0-9]{2}:[0-5][0-9](\.[0-9]{0,5}[1-9])?Z$"


def json_name(name: str) -> str:
    """A property name as a JSON string."""
    return json.dumps(name, ensure_ascii=False)


def spark_type(t: str):
    from pyspark.sql import types as T

    return {"string": T.StringType(), "integer": T.LongType(), "number": T.DoubleType(), "boolean": T.BooleanType()}[t]


def parse_schema(plan: CompiledPlan, corrupt: bool = True):
    from pyspark.sql import types as T

    out = []
    for f in plan.fields:
        if f.kind == "scalar":
            column_type = spark_type(f.type)
        elif f.kind == "append":
            column_type = T.ArrayType(spark_type(f.type))
        elif f.kind == "map":
            column_type = T.MapType(T.StringType(), spark_type(f.type))
        elif f.kind == "object" and (f.members or checked_members(f)):
            column_type = _members_type(f)
        else:
            column_type = T.StringType()
        out.append(T.StructField(f.name, column_type))
    if corrupt:
        out.append(T.StructField("_corrupt", T.StringType()))
    return T.StructType(out)


def _members_type(f):
    """The struct ``from_json`` reads an object of members into: each member's type (an array
    member's array, a merged object member's own struct), then the carried members the
    combine checks on the parsed value."""
    from pyspark.sql import types as T

    def member_type(part):
        if part.kind == "append":
            return T.ArrayType(spark_type(part.type))
        return _members_type(part) if part.kind == "object" else spark_type(part.type)

    return T.StructType(
        [T.StructField(part.member, member_type(part)) for part in f.members]
        + [  # carried as written, checked on the parsed value
            T.StructField(part.member, T.DoubleType() if part.type == "n" else T.StringType())
            for part in checked_members(f)
        ]
    )


# Spark's JSON reader accepts single-quoted strings and names unless told not to; the
# other lenient parser features (comments, leading zeros, unquoted names, ...) are off
# by default.
JSON_OPTIONS = {
    "columnNameOfCorruptRecord": "_corrupt",
    "allowNonNumericNumbers": "false",
    "allowSingleQuotes": "false",
    "mode": "PERMISSIVE",
}
# Where the JVM proof decides every question about the text (a document it does not prove
# plain is a suspect), a corrupt-record column is not needed; without one, ``from_json``
# returns the parsed row as it is instead of copying it field by field into a new one.
JSON_OPTIONS_NO_CORRUPT = {k: v for k, v in JSON_OPTIONS.items() if k != "columnNameOfCorruptRecord"}

# Jackson writes control characters as upper-case \\u00XX, Python's json as lower-case.
_UPPER_ESCAPES = [f"\\u00{c:02X}" for c in (0x0B, 0x0E, 0x0F, 0x1A, 0x1B, 0x1C, 0x1D, 0x1E, 0x1F)]


def string_json(col):
    """The JSON text of a string column, byte-identical to ``json.dumps(s, ensure_ascii=False)``."""
    from pyspark.sql import functions as F

    arr = F.to_json(F.array(col))
    text = F.substring(arr, F.lit(2), F.length(arr) - 2)
    fixed = text
    for esc in _UPPER_ESCAPES:
        fixed = F.replace(fixed, F.lit(esc), F.lit(esc.lower()))
    return F.when(F.instr(text, "\\u00") > 0, fixed).otherwise(text)


def scalar_json(col, t: str):
    from pyspark.sql import functions as F

    if t == "string":
        return string_json(col)
    if t == "boolean":
        return F.when(col, F.lit("true")).otherwise(F.lit("false"))
    return col.cast("string")


def key_json_expr(cols, types):
    """Native ``keys.key_json`` of typed key columns (null if a component is missing)."""
    from pyspark.sql import functions as F

    parts = [scalar_json(c, t) for c, t in zip(cols, types)]
    body = parts[0] if len(parts) == 1 else F.concat_ws(",", *parts)
    present = F.lit(True)
    for c in cols:
        present = present & c.isNotNull()
    return F.when(present, F.concat(F.lit("["), body, F.lit("]")))


def _sorted_values(c, ord_col, orderable: bool = True):
    """Present values of ``c`` in source order (an array of structs ``(o, v)``).

    ``sort_array``, not ``array_sort``: both sort by the natural order of the struct (``o``
    is unique, so ``v`` is never compared), but ``array_sort`` evaluates its comparator as an
    interpreted lambda that builds a new struct ordering, expression objects and all, for
    every comparison; ``sort_array`` builds it once.  Measured on the combine benchmark: the
    whole query took 1.6 s less CPU (of 12.9 s).  Values that cannot be ordered (maps) are
    sorted by position: ``(o, i)`` pairs, then picked by ``i``.
    """
    from pyspark.sql import functions as F

    collected = F.collect_list(F.when(c.isNotNull(), F.struct(ord_col.alias("o"), c.alias("v"))))
    if orderable:
        return F.sort_array(collected)
    order = F.sort_array(F.transform(collected, lambda x, i: F.struct(x["o"].alias("o"), i.alias("i"))))
    return F.transform(order, lambda y: F.get(collected, y["i"]))


@dataclass(frozen=True)
class SparkOps:
    """What a strategy's Spark aggregation (``Strategy.spark``) is given: pyspark's
    ``functions`` module, the source-order column, and the helpers it builds on."""

    F: Any  # pyspark.sql.functions
    order: Any  # the source order of a row (``(_file, _block, _row)``), computed once per row
    collected: Callable[[Any], Any]  # a column masked to the rows that take part, for aggregates that collect values
    # {date-time property: its instant's (seconds, fraction) columns}, computed once per row
    # before the aggregation (:func:`tidemark.spark.datetimes.instant_parts`); without an
    # entry the instant is computed where it is ordered
    instants: Any = None

    def sorted_values(self, c, orderable: bool = True):
        return _sorted_values(c, self.order, orderable)

    def instant_order(self, c, maximize: bool, name: str = ""):
        """The order of the date-time ``c`` (the property ``name``) by its instant."""
        staged = (self.instants or {}).get(name)
        return order_of_instant(staged[0], staged[1], maximize) if staged else instant_order(c, maximize)

    @staticmethod
    def spark_type(t: str):
        return spark_type(t)


def _by_event_time(plan: CompiledPlan, f, c, by, ops: SparkOps) -> SparkAggregate:
    """A property ordered by another one (``reduce: {strategy: lastWriteWins, order: /ts}``):
    ``max_by`` (``min_by`` for firstWriteWins) of its present values over the order
    property's value in the same document (date-times by instant), then the source order --
    the value of the latest (earliest) event, a tie going to the later (earlier) document."""
    from pyspark.sql import functions as F

    pick = F.max_by if f.strategy == "lastWriteWins" else F.min_by
    order_field = next(o for o in plan.fields if o.name == f.order)
    value = ops.instant_order(by, True, order_field.name) if is_date_time_field(order_field) else by
    return SparkAggregate(pick(c, F.when(c.isNotNull(), F.struct(value.alias("e"), ops.order.alias("o")))))


def _kept_order(plan: CompiledPlan, f, values, by, ops: SparkOps, aggs: list, v: str, order_kept: list):
    """A property ordered by another one that some documents lack (``FieldPlan.kept_order``):
    the value of the latest (earliest) document holding it -- by its own order value, a
    document without one first, then the source order -- and, in ``order_kept``, that order
    value where it is not the combined document's own (by instant: ``null`` where that document
    had none), as the Python fold keeps it (:data:`tidemark.collection.reduce.TIDEMARK`).
    Appends its aggregates to ``aggs``; returns (value, present)."""
    from pyspark.sql import functions as F

    pick, extreme = (F.max_by, F.max) if f.strategy == "lastWriteWins" else (F.min_by, F.min)
    order_field = next(o for o in plan.fields if o.name == f.order)
    rank = ops.instant_order(by, True, order_field.name) if is_date_time_field(order_field) else by
    held = by.isNotNull()
    key = F.when(values.isNotNull(), F.struct(held.alias("a"), rank.alias("e"), ops.order.alias("o")))
    aggs.append(pick(F.struct(values.alias("v"), by.alias("t"), held.alias("a"), rank.alias("e")), key).alias(v))
    aggs.append(extreme(F.when(ops.order.isNotNull() & held, rank)).alias(f"{v}_own"))
    won, own = F.col(v), F.col(f"{v}_own")
    same = won["a"] & own.isNotNull() & (won["e"] == own)
    neither = ~won["a"] & own.isNull()
    listed = F.to_json(F.array(won["t"]))  # the value as JSON, inside [ ]
    text = F.when(won["a"], F.substring(listed, F.lit(2), F.length(listed) - 2)).otherwise(F.lit("null"))
    present = won.isNotNull()
    order_kept.append(F.when(present & ~same & ~neither, F.concat(F.lit(json_name(f.name) + ":"), text)))
    return won["v"], present


def event_order(plan: CompiledPlan, c, ord_col, instants=None):
    """The order of a root's ``reduce.order`` (property column ``c``), then the source order: a
    document without the property first (as :func:`tidemark.collection.order.compare_key`
    orders a missing value), date-times by instant (:func:`instant_order`)."""
    from pyspark.sql import functions as F

    f = next(f for f in plan.fields if f.name == plan.order)
    staged = (instants or {}).get(f.name)
    value = c
    if is_date_time_field(f):
        value = order_of_instant(staged[0], staged[1], True) if staged else instant_order(c, True)
    return F.struct(c.isNotNull().alias("a"), value.alias("e"), ord_col.alias("o"))


def _riders(plan: CompiledPlan, key_cols) -> dict[str, str]:
    """Properties last written by a date-time that is maximized (``status`` ordered by
    ``/event_time``, both required: what the plan compiles): the event that wins the date-time
    is the one whose value they keep -- the same (instant, source order), ties to the later
    document -- so one ``max_by`` picks the winner's row with their values in it.  ``{rider:
    the date-time's name}``."""
    fields = {f.name: f for f in plan.fields}
    out = {}
    for f in plan.fields:
        o = fields.get(f.order) if f.order else None
        if (
            o is not None
            and not f.kept_order
            and f.strategy == "lastWriteWins"
            and o.strategy == "maximize"
            and is_date_time_field(o)
            and not (key_cols and (f.name in key_cols or o.name in key_cols))
        ):
            out[f.name] = o.name
    return out


UNDECLARED = "_undeclared"  # the aggregate of a key's undeclared properties and members: [{o: order, t: text}]


def undeclared_merged(collected):
    """A key's undeclared properties and members (null where none): each name's value from the
    last document (in source order) that held it, as a map of the scan's names to value texts
    (:func:`tidemark.spark.suspects.undeclared_members`).  ``collected``: ``[{o: order, t: text}]``."""
    from pyspark.sql import functions as F

    def later(acc, entry):
        members = F.str_to_map(entry["t"], F.lit("\u0001"), F.lit("\u0000"))
        kept = F.map_filter(acc, lambda name, _value: ~F.map_contains_key(members, name))
        return F.map_concat(kept, members)

    merged = F.aggregate(F.array_sort(collected), F.create_map().cast("map<string,string>"), later)
    return F.when(F.size(collected) > F.lit(0), merged)


def undeclared_text(merged, prefix: str):
    """The JSON members' text (``"name":value,…``) of the entries of ``merged`` whose names start
    with ``prefix`` (:func:`tidemark.spark.jvm.undeclared_prefix`); null where there are none."""
    from pyspark.sql import functions as F

    drop = 0 if prefix == '"' else len(prefix)
    mine = F.map_filter(merged, lambda name, _value: name.startswith(prefix))

    def member(entry):
        name = F.substring(entry["key"], drop + 1, 1 << 30) if drop else entry["key"]
        return F.concat(name, F.lit(":"), entry["value"])

    return F.nullif(F.array_join(F.transform(F.map_entries(mine), member), ","), F.lit(""))


def spliced(json_object, members):
    """The JSON object text ``json_object`` with ``members`` (``"name":value,…``, or null) added."""
    from pyspark.sql import functions as F

    inner = F.nullif(F.substring(json_object, 2, F.length(json_object) - 2), F.lit(""))
    return F.when(members.isNull(), json_object).otherwise(
        F.concat(F.lit("{"), F.concat_ws(",", inner, members), F.lit("}"))
    )


def _object_members(f, values, v: str, n: str, ops: SparkOps, aggs: list, errors: list):
    """An object of members (``values``: its parsed struct), each aggregated by its own strategy
    (a merged object member's members so too, within it): (where a document held the object,
    the struct of the members present).  The aggregates go into ``aggs`` as ``{v}_{j}``,
    their counts as ``{n}_{j}``, the object's count as ``n``."""
    F = ops.F
    members = []
    for j, part in enumerate(f.members):
        if part.kind == "object":
            member_present, member = _object_members(
                part, values[part.member], f"{v}_{j}", f"{n}_{j}", ops, aggs, errors
            )
            members.append(F.when(member_present, member).alias(part.member))
            continue
        agg = cast(Callable[..., SparkAggregate], STRATEGIES[part.strategy].spark)(ops, part, values[part.member])
        aggs.append(agg.column.alias(f"{v}_{j}"))
        member_present = F.col(f"{v}_{j}").isNotNull()
        if agg.count is not None:
            aggs.append(agg.count.alias(f"{n}_{j}"))
            member_present = F.col(f"{n}_{j}") > 0
        if agg.error is not None:
            errors.append(agg.error(member_present, F.col(f"{v}_{j}")))
        members.append(F.when(member_present, F.col(f"{v}_{j}")).alias(part.member))
    aggs.append(F.count(values).alias(n))
    # (an object of carried members only is read as its text: present where not null)
    return F.col(n) > 0, (F.struct(*members) if members else F.lit(None))


def aggregations(
    plan: CompiledPlan,
    p,
    value,
    ord_col,
    valid=None,
    key_cols=None,
    mask_scalars=True,
    instants: Any = None,
    nulls: Any = None,
    undeclared: Any = None,
):
    """(agg columns, doc expression over the aggregated columns, error expression, typed doc
    expression or None).

    The typed doc is the document as a struct of its properties' typed values (objects and
    arrays as their JSON text) instead of its JSON text (``StoreRows``); None where the root
    is not merged (the document is picked whole).  Both forms read the same aggregates, so
    they are built together: building the expressions is thousands of py4j calls.

    ``valid`` (a boolean column) masks the rows that take part: the others aggregate as if
    absent, so one pass can aggregate and count suspects at once; with ``mask_scalars=False``
    only the aggregates that collect values (append, map, number sums) are masked, for a
    caller that keeps the other rows in groups of their own.  ``key_cols`` maps key
    property names to the grouping columns: a key property is equal in every document of
    a group, so its value is taken from the group (no aggregation needed).  ``ord_col``
    should be a column computed once per row (not an expression repeated per field), and
    ``instants`` the date-times' instants so computed (:attr:`SparkOps.instants`), and
    ``nulls`` the nullable properties' flags of a document that writes them ``null``
    (:func:`tidemark.spark.suspects.null_flags`: ``from_json`` reads that as absent), and
    ``undeclared`` the undeclared properties (and merged objects' members) of a document whose
    plan carries them (:func:`tidemark.spark.suspects.undeclared_members`): each is last
    written, per name.
    Each property's aggregate is its strategy's ``spark`` entry
    (:data:`tidemark.collection.strategies.STRATEGIES`).
    """
    from pyspark.sql import functions as F

    def mask(c):
        return c if valid is None else F.when(valid, c)

    if mask_scalars:
        ord_col = mask(ord_col)
    if plan.root_strategy != "merge":  # the whole document, by its event-time order, then its source order
        pick = F.max_by if plan.root_strategy == "lastWriteWins" else F.min_by
        if plan.order:
            ord_col = F.when(ord_col.isNotNull(), event_order(plan, p[plan.order], ord_col, instants))
        return [pick(mask(value), ord_col).alias("doc")], F.col("doc"), F.lit(None).cast("string"), None
    ops = SparkOps(F, ord_col, (lambda c: c) if mask_scalars else mask, instants)
    aggs, structured, raw, errors, fields = [], [], [], [], []
    written_null = []  # ``"p":null`` of each nullable property whose picked value is null
    order_kept: list = []  # ``"p":<order value>`` of each property whose order value is not the document's own
    riders = _riders(plan, key_cols)
    merged_undeclared = None
    kept: list = []  # a typed row's remainder: its members' texts (REMAINDER)
    if undeclared is not None:
        from tidemark.spark import jvm

        order_and_text = F.struct(ops.order.alias("o"), undeclared.alias("t"))
        aggs.append(F.collect_list(mask(F.when(undeclared.isNotNull(), order_and_text))).alias(UNDECLARED))
        merged_undeclared = undeclared_merged(F.col(UNDECLARED))
        if jvm.carries_undeclared(plan):
            raw.append(undeclared_text(merged_undeclared, jvm.undeclared_prefix(None)))
            kept.append(raw[-1])

    def written_null_of(f):  # where a document writes the nullable property ``f`` as ``null``
        return F.coalesce((nulls or {}).get(f.name, F.lit(False)), F.lit(False))

    for i, f in enumerate(plan.fields):
        strategy = STRATEGIES[f.strategy]
        v, n, z = f"v{i}", f"n{i}", f"z{i}"
        picked: Any = None  # a value read out of another aggregate's row (riders, winners)
        present = None  # min, max, max_by, min_by and the key: null exactly when no value is present
        if key_cols and f.name in key_cols and strategy.group_value:
            v = key_cols[f.name]  # equal in the whole group: the strategy gives the group's value
        elif f.nullable and f.strategy in ("lastWriteWins", "firstWriteWins"):
            # picked by the source order among the documents that hold it, null or not
            values = mask(p[f.name]) if mask_scalars else p[f.name]
            written = written_null_of(f)
            pick = F.max_by if f.strategy == "lastWriteWins" else F.min_by
            aggs.append(pick(F.struct(values.alias("v")), F.when(values.isNotNull() | written, ops.order)).alias(v))
            present, picked = F.col(v).isNotNull(), F.col(v)["v"]
            written_null.append(F.when(present & picked.isNull(), F.lit(json_name(f.name) + ":null")))
        elif f.nullable and f.strategy == "sum":  # the values summed; a null beside another write: the fold's error
            values = mask(p[f.name]) if mask_scalars else p[f.name]
            written = written_null_of(f)
            agg = cast(Callable[..., SparkAggregate], strategy.spark)(ops, f, values)
            assert agg.count is not None
            aggs += [
                agg.column.alias(v),
                agg.count.alias(n),
                F.count(F.when(ops.order.isNotNull() & written, 1)).alias(z),
            ]
            held_null = F.col(z) > 0
            present, picked = (F.col(n) > 0) | held_null, F.when(~held_null, F.col(v))
            if agg.error is not None:
                errors.append(agg.error(~held_null & (F.col(n) > 0), F.col(v)))
            # the Python fold names the operands: the key takes it (UNSURE), and fails there
            meets = held_null & (F.col(n) + F.col(z) > 1)
            errors.append(F.when(meets, F.lit(f"{UNSURE}/{f.name}: 'sum' expects numbers")))
            written_null.append(F.when(present & picked.isNull(), F.lit(json_name(f.name) + ":null")))
        elif f.nullable:  # maximized or minimized: null is the least value
            values = mask(p[f.name]) if mask_scalars else p[f.name]
            written = written_null_of(f)
            agg = cast(Callable[..., SparkAggregate], strategy.spark)(ops, f, values)
            aggs += [agg.column.alias(v), F.max(F.when(ops.order.isNotNull(), written)).alias(n)]
            some_null = F.coalesce(F.col(n), F.lit(False))
            present = F.col(v).isNotNull() | some_null
            picked = F.col(v) if f.strategy == "maximize" else F.when(~some_null, F.col(v))
            written_null.append(F.when(present & picked.isNull(), F.lit(json_name(f.name) + ":null")))
        elif f.kind == "object":  # each member by its own strategy; the object where any document holds it
            values = mask(p[f.name]) if mask_scalars else p[f.name]
            present, picked = _object_members(f, values, v, n, ops, aggs, errors)
        elif f.kept_order:  # ordered by a property some documents lack: the latest holder's, and its order value
            values = mask(p[f.name]) if mask_scalars else p[f.name]
            picked, present = _kept_order(plan, f, values, p[f.order], ops, aggs, v, order_kept)
        elif f.name in riders:  # ordered by a winner: that winner's document's value (see _riders)
            at = next(j for j, o in enumerate(plan.fields) if o.name == f.order)
            picked = F.col(f"v{at}")[f.name]
        elif f.name in riders.values():  # a winner: its document's value, and its riders'
            values = mask(p[f.name]) if mask_scalars else p[f.name]
            carried = [(mask(p[r]) if mask_scalars else p[r]).alias(r) for r, o in riders.items() if o == f.name]
            key = F.when(values.isNotNull(), F.struct(ops.instant_order(values, True, f.name), ops.order))
            aggs.append(F.max_by(F.struct(values.alias(f.name), *carried), key).alias(v))
            picked = F.col(v)[f.name]
        else:
            values = mask(p[f.name]) if mask_scalars else p[f.name]
            agg = (
                _by_event_time(plan, f, values, p[f.order], ops)
                if f.order
                else cast(Callable[..., SparkAggregate], strategy.spark)(ops, f, values)
            )
            if agg.count is not None:
                # the aggregate of no values is not null (0, [], {}) or null means an error: count
                aggs.append(agg.count.alias(n))
                present = F.col(n) > 0
            aggs.append(agg.column.alias(v))
            if agg.error is not None:
                errors.append(agg.error(F.col(v).isNotNull() if present is None else present, F.col(v)))
        value = F.col(v) if picked is None else picked
        if present is None:
            present = value.isNotNull()
        col = F.when(present, value)
        if is_date_time_field(f):  # a typed row's remainder keeps the text its instant does not give back
            kept.append(
                F.when(~col.rlike(CANONICAL_DATE_TIME), F.concat(F.lit(json_name(f.name) + ':"'), col, F.lit('"')))
            )
        # typed: each property's value as its column holds it (an array or a map as its JSON text)
        fields.append((col if f.kind in ("scalar", "raw") else F.to_json(col)).alias(f.name))
        if f.kind == "raw":  # already JSON text: spliced in as is
            raw.append(F.when(present, F.concat(F.lit(json_name(f.name) + ":"), value)))
        elif merged_undeclared is not None and jvm.gives_members(f):
            # its members carried as written (undeclared ones, nullable ones, objects and arrays)
            members_text = undeclared_text(merged_undeclared, jvm.undeclared_prefix(i))
            text = spliced(F.to_json(value) if f.members else F.lit("{}"), members_text)
            raw.append(F.when(present, F.concat(F.lit(json_name(f.name) + ":"), text)))
            fields[-1] = F.when(present, text).alias(f.name)  # a typed row holds the object's text
        else:
            structured.append(col.alias(f.name))
    if order_kept:  # {"_tidemark": {"order": {...}}} where a property's order value is not the document's own
        kept_values = F.concat_ws(",", *order_kept)
        written_null.append(
            F.when(kept_values != "", F.concat(F.lit(f'"{TIDEMARK}":{{"{ORDER}":{{'), kept_values, F.lit("}}")))
        )
    # One to_json for the typed fields (absent ones are null and left out), raw JSON spliced in.
    error = F.coalesce(*errors) if errors else F.lit(None).cast("string")
    kept += written_null
    if kept and all(f.name != REMAINDER for f in plan.fields):
        rest = F.concat(F.lit("{"), F.concat_ws(",", *kept), F.lit("}"))
        fields.append(F.nullif(rest, F.lit("{}")).alias(REMAINDER))
    typed_doc = F.struct(*fields)
    if structured and not raw and not written_null:  # one to_json is the whole document
        return aggs, F.to_json(F.struct(*structured)), error, typed_doc
    parts = list(raw) + written_null
    if structured:
        body = F.to_json(F.struct(*structured))
        parts.append(F.nullif(F.substring(body, F.lit(2), F.length(body) - 2), F.lit("")))
    doc = F.concat(F.lit("{"), F.concat_ws(",", *parts), F.lit("}")) if parts else F.lit("{}")
    return aggs, doc, error, typed_doc
