"""Routing a batch's combined rows to its shards: one partition per shard, sorted by
(binding, key), after any *odd* rows (rows that need the checked combine: every shard gets
them and commits nothing) and before one *end row* per shard (its input is complete).  The
shard stage that reads them is :mod:`tidemark.spark.stage`; the one-job plan that ends in
this routing is :mod:`tidemark.spark.one_job`.
"""

from __future__ import annotations

from typing import Any, Sequence

from tidemark.protocol.messages import KEY_SPACE_MAX, Range
from tidemark.spark.murmur3 import partition_values
from tidemark.spark.stage import END_BINDING, ODD_BINDING


def route(spark, parts: list, ranges: tuple[Range, ...]):
    """The combined rows of each binding (DataFrames of ``binding, key_json, key_hash, doc,
    _documents, _needs_checks``) routed to their shards: partition i holds shard i's rows sorted by
    (binding, key_json), after every odd row (binding :data:`ODD_BINDING`) and before its
    end row."""
    from tidemark.spark import internals

    if internals.supported(spark):
        return internals.wrap(route_j(spark, [internals.jdf(p) for p in parts], ranges), spark)
    r = _routing_columns(spark, ranges)
    df = parts[0]
    for p in parts[1:]:
        df = df.unionByName(p)
    return (
        df.select(*r["first"])
        .unionByName(r["ends"])
        .select(*r["with_partition"])
        .repartition(len(ranges), *r["by"])
        .sortWithinPartitions(*r["sort"])
        .select(*r["final"])
    )


def union(parts: list):
    """The bindings' combined rows (DataFrames) as one."""
    from tidemark.spark import internals

    spark = parts[0].sparkSession
    if internals.supported(spark):
        return internals.wrap(union_j([internals.jdf(p) for p in parts]), spark)
    df = parts[0]
    for p in parts[1:]:
        df = df.unionByName(p)
    return df


def route_j(spark, jparts: list, ranges: tuple[Range, ...]):
    """:func:`route` on the JVM Datasets ``jparts``: seven py4j calls, whatever the layout."""
    r = _routing(spark, ranges)
    jdf = union_j(jparts)
    return (
        jdf.select(r["first"])
        .unionByName(r["ends"])
        .select(r["with_partition"])
        .repartition(len(ranges), r["by"])
        .sortWithinPartitions(r["sort"])
        .select(r["final"])
    )


def union_j(jparts: list, missing: bool = False):
    """The JVM Datasets ``jparts`` (the bindings' combined rows) as one (``missing``: a
    column only some parts have is null in the others' rows: each binding's typed ``row_<i>``)."""
    jdf = jparts[0]
    for p in jparts[1:]:
        jdf = jdf.unionByName(p, missing) if missing else jdf.unionByName(p)
    return jdf


def _routing_columns(spark, ranges: tuple[Range, ...]) -> dict:
    """The routing's columns (lists of Columns or names) and its end rows (a DataFrame)."""
    from pyspark.sql import functions as F

    n = len(ranges)
    # Partition by shard in the JVM: ``repartition(n, _p)`` puts a row in partition
    # ``pmod(murmur3(_p), n)``, so ``_p`` is a value that hashes to the row's shard.
    # Rows reach Python only in the shard tasks, sorted by (binding, key_json).
    shards_col = F.explode(
        F.when(F.col("_needs_checks"), F.sequence(F.lit(0), F.lit(n - 1))).otherwise(
            F.array(_shard_expr(F.col("key_hash"), ranges))
        )
    ).alias("shard")
    binding_col = F.when(F.col("_needs_checks"), F.lit(ODD_BINDING)).otherwise(F.col("binding")).alias("binding")
    cols = ["shard", "binding", "key_json", "doc", "_documents"]
    # One end row per shard, sorted last: a shard task whose input stream was cut off
    # (the JVM died while feeding it, and PySpark's reader takes EOF for the end of the
    # partition) must not commit what it got as if it were the whole batch.
    ends = spark.range(n).select(
        F.col("id").cast("int").alias("shard"),
        F.lit(END_BINDING).alias("binding"),
        F.lit("").alias("key_json"),
        F.lit(None).cast("string").alias("doc"),
        F.lit(0).cast("long").alias("_documents"),
    )
    return {
        "first": [shards_col, binding_col, "key_json", "doc", "_documents"],
        "ends": ends,
        "with_partition": [*cols, _partition_expr(F.col("shard"), n).alias("_partition")],
        "by": ["_partition"],
        "sort": ["binding", "key_json"],
        "final": cols,
    }


def _routing(spark, ranges: tuple[Range, ...]) -> dict:
    """The routing's JVM objects, built once per Spark session and layout (a few hundred
    py4j calls at many shards)."""
    from tidemark.spark import internals
    from tidemark.spark.session import built_once

    def build():
        r = _routing_columns(spark, ranges)
        return {k: internals.jdf(v) if k == "ends" else internals.jseq(spark, v) for k, v in r.items()}

    # per session: the end rows are a Dataset of it
    return built_once(spark, ("route", ranges, internals.session_id(spark)), build)


def _shard_expr(hash_col, ranges: Sequence[Range]):
    """The index of the range holding ``hash_col`` (-1 for none).

    An even layout (``Range.split(n)``, what the runtime lays out) is arithmetic: the
    hash's multiple of the range size, divided by it (exact), capped at ``n - 1``.  Other
    layouts are a ``CASE`` over the ranges, whose generated code grows with their number
    (past about 130 ranges beyond the 8,000 bytes the JVM compiles)."""
    from pyspark.sql import functions as F

    n = len(ranges)
    if list(ranges) == Range.split(n):
        inside = (hash_col >= F.lit(0)) & (hash_col <= F.lit(KEY_SPACE_MAX))
        if n == 1:
            return F.when(inside, F.lit(0)).otherwise(F.lit(-1))
        size = F.lit((KEY_SPACE_MAX + 1) // n).cast("long")
        index = ((hash_col - hash_col % size) / size).cast("int")
        return F.when(inside, F.least(index, F.lit(n - 1))).otherwise(F.lit(-1))
    expr: Any = None  # a Column once the first range is in
    for i, r in enumerate(ranges):
        cond = (hash_col >= F.lit(r.key_begin)) & (hash_col <= F.lit(r.key_end))
        expr = F.when(cond, F.lit(i)) if expr is None else expr.when(cond, F.lit(i))
    return expr.otherwise(F.lit(-1))


def _partition_expr(shard_col, n: int):
    """A value that ``repartition(n, value)`` sends to partition ``shard_col``: an element
    of a literal array (shard -1 goes to partition 0, where :func:`~tidemark.spark.stage.shard_rows` refuses it)."""
    from pyspark.sql import functions as F

    values = partition_values(n)
    if n == 1:
        return F.lit(values[0])
    table = F.array(*[F.lit(v) for v in values])
    return F.when(
        (shard_col >= F.lit(1)) & (shard_col < F.lit(n)), F.element_at(table, shard_col + F.lit(1))
    ).otherwise(F.lit(values[0]))
