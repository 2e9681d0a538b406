"""Routing a batch's combined rows to its shards, and the shard stage on Spark.

The rows of every binding go, in one Spark job, to one partition per shard, sorted by
(binding, key), after any *odd* rows (rows that need the checked combine: every shard gets
them and commits nothing) and before one *end row* per shard (its input is complete).
:func:`run_stage` runs the shard sessions over those partitions, rows in Arrow batches.

:class:`OneJobPlan` builds the unchecked combine plus routing of a batch from JVM column
sequences prepared once per query, and later batches of a query reuse the first batch's
analyzed plan with their own source swapped in (``jvm/PlanRebind.java``): a batch's plan
costs a few py4j calls and no analysis.
"""

from __future__ import annotations

import itertools
import logging
import time
from typing import Optional, Sequence

from tidemark.errors import RecoveryError
from tidemark.faults import armed, fault_point
from tidemark.options import process_options
from tidemark.protocol.messages import KEY_SPACE_MAX, Range
from tidemark.runtime.shard import ShardResult, ShardTask, run_shard

log = logging.getLogger("tidemark")


def route(spark, parts: list, ranges: tuple[Range, ...]):
    """The combined rows of each binding (DataFrames of ``binding, key_json, key_hash, doc,
    _n, _odd``) routed to their shards: partition i holds shard i's rows sorted by
    (binding, key_json), after every odd row (binding :data:`ODD_BINDING`) and before its
    end row."""
    from tidemark.spark import internals

    if internals.supported(spark):
        return internals.wrap(_route_j(spark, [internals.jdf(p) for p in parts], ranges), spark)
    r = _routing_columns(spark, ranges)
    df = parts[0]
    for p in parts[1:]:
        df = df.unionByName(p)
    return (
        df.select(*r["first"])
        .unionByName(r["ends"])
        .select(*r["with_p"])
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


def _route_j(spark, jparts: list, ranges: tuple[Range, ...]):
    """:func:`route` on the JVM Datasets ``jparts``: seven py4j calls, whatever the layout."""
    r = _routing(spark, ranges)
    jdf = union_j(jparts)
    return (
        jdf.select(r["first"])
        .unionByName(r["ends"])
        .select(r["with_p"])
        .repartition(len(ranges), r["by"])
        .sortWithinPartitions(r["sort"])
        .select(r["final"])
    )


def union_j(jparts: list):
    """The JVM Datasets ``jparts`` (the bindings' combined rows) as one."""
    jdf = jparts[0]
    for p in jparts[1:]:
        jdf = jdf.unionByName(p)
    return jdf


def _routing_columns(spark, ranges: tuple[Range, ...]) -> dict:
    """The routing's columns (lists of Columns or names) and its end rows (a DataFrame)."""
    from pyspark.sql import functions as F

    n = len(ranges)
    # Partition by shard in the JVM: ``repartition(n, _p)`` puts a row in partition
    # ``pmod(murmur3(_p), n)``, so ``_p`` is a value that hashes to the row's shard.
    # Rows reach Python only in the shard tasks, sorted by (binding, key_json).
    shards_col = F.explode(
        F.when(F.col("_odd"), F.sequence(F.lit(0), F.lit(n - 1))).otherwise(
            F.array(_shard_expr(F.col("key_hash"), ranges))
        )
    ).alias("shard")
    binding_col = F.when(F.col("_odd"), F.lit(ODD_BINDING)).otherwise(F.col("binding")).alias("binding")
    cols = ["shard", "binding", "key_json", "doc", "_n"]
    # One end row per shard, sorted last: a shard task whose input stream was cut off
    # (the JVM died while feeding it, and PySpark's reader takes EOF for the end of the
    # partition) must not commit what it got as if it were the whole batch.
    ends = spark.range(n).select(
        F.col("id").cast("int").alias("shard"),
        F.lit(END_BINDING).alias("binding"),
        F.lit("").alias("key_json"),
        F.lit(None).cast("string").alias("doc"),
        F.lit(0).cast("long").alias("_n"),
    )
    return {
        "first": [shards_col, binding_col, "key_json", "doc", "_n"],
        "ends": ends,
        "with_p": [*cols, _partition_expr(F.col("shard"), n).alias("_p")],
        "by": ["_p"],
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


class OneJobPlan:
    """The unchecked combine of a batch (the compiled combine without its checks: ``_odd``
    marks a row that needs them) and its routing, from JVM objects built once per query: a
    batch's plan is a dozen py4j calls
    (a select or groupBy with its columns as one prebuilt ``Seq``), where building the same
    DataFrame from Column objects was about a thousand (0.2 s on a 25k-document batch).
    ``ok`` is False when some binding's schema does not compile (the checked plan then)."""

    def __init__(self, spark, columns: tuple, collections: tuple, ranges: tuple[Range, ...], typed: bool = False):
        from pyspark.sql import functions as F

        from tidemark.collection.plan import compile_collection
        from tidemark.spark import internals, jvm
        from tidemark.spark.combine import _compiled_columns, source_columns

        self.ranges = ranges
        self.bindings = []
        self.ok = True
        self.templates: dict = {}  # routed? -> (analyzed plan, its source leaf) of the first such batch
        self.rebindable = False
        self.rebound = 0  # batches planned from the template
        # the unrouted rows carry the document as typed values (``row``, for Store.rows):
        # one binding whose root merges, the driver staging typed values
        self.typed = typed and len(collections) == 1
        multi = len(collections) > 1
        jseq = internals.jseq
        self.prep = jseq(spark, source_columns(columns) + ([F.col("_binding")] if multi else []))
        available = None
        for i, coll in enumerate(collections):
            plan = compile_collection(coll)
            if plan is None:
                self.ok = False
                return
            if available is None:
                available = jvm.available(spark)
                # one source leaf in the plan; TIDEMARK_PLAN_REBIND=0 (benchmarks): build every batch
                self.rebindable = available and len(collections) == 1 and process_options().plan_rebind
            jvm_spec = jvm.spec(plan) if available else None
            cols = _compiled_columns(spark, plan, jvm_spec)
            odd = F.col("_s") | (F.col("_nx") > F.lit(0)) | F.col("_error").isNotNull()
            self.typed = self.typed and plan.root_strategy == "merge"
            typed = _compiled_columns(spark, plan, jvm_spec, typed=True).out if self.typed else None
            self.bindings.append(
                {
                    "filter": internals.jcol(F.col("_binding") == F.lit(i)) if multi else None,
                    "pre": jseq(spark, cols.pre) if cols.pre else None,
                    "stage": jseq(spark, cols.stage),
                    "grouping": jseq(spark, cols.grouping),
                    "agg0": internals.jcol(cols.aggs[0]),
                    "aggs": jseq(spark, cols.aggs[1:]),
                    "out": jseq(spark, cols.out),
                    "final": jseq(
                        spark, [F.lit(i).alias("binding"), "key_json", "key_hash", "doc", "_n", odd.alias("_odd")]
                    ),
                    "out_typed": jseq(spark, typed) if typed else None,
                    "final_typed": jseq(
                        spark,
                        [
                            F.lit(i).alias("binding"),
                            "key_json",
                            "key_hash",
                            F.lit(None).cast("string").alias("doc"),
                            "_n",
                            odd.alias("_odd"),
                            F.col("doc").alias("row"),
                        ],
                    )
                    if typed
                    else None,
                }
            )

    def apply(self, df, routed: bool = True):
        """The batch ``df`` planned: see :func:`route` (``routed=False``: the bindings'
        combined rows, ``binding, key_json, key_hash, doc, _n, _odd``, unrouted).  From the
        second batch on, the first batch's analyzed plan with this batch's source in it
        (``PlanRebind.java``), where the session has tidemark's jar: no analysis, three
        py4j calls."""
        from tidemark.spark import internals

        spark = df.sparkSession
        leaf = internals.analyzed(internals.jdf(df))
        template = self.templates.get(routed)
        if template is not None:
            plan = self._rebind(spark, template, leaf)
            if plan is not None:
                self.rebound += 1
                return internals.of_plan(spark, plan)
        jdf = internals.jdf(df).select(self.prep)
        parts = []
        for b in self.bindings:
            j = jdf.filter(b["filter"]) if b["filter"] is not None else jdf
            if b["pre"] is not None:
                j = j.select(b["pre"])
            j = j.select(b["stage"]).groupBy(b["grouping"]).agg(b["agg0"], b["aggs"])
            if not routed and self.typed:  # the document as typed values: no JSON text made
                parts.append(j.select(b["out_typed"]).select(b["final_typed"]))
            else:
                parts.append(j.select(b["out"]).select(b["final"]))
        planned = _route_j(spark, parts, self.ranges) if routed else union_j(parts)
        if self.rebindable and routed not in self.templates:
            self.templates[routed] = (internals.analyzed(planned), leaf)
        return internals.wrap(planned, spark)

    def _rebind(self, spark, template, leaf):
        from py4j.protocol import Py4JError

        from tidemark.spark import internals

        try:
            plan = internals.rebind(spark, template, leaf)
        except Py4JError as exc:  # the class is not in this session after all: build every batch
            log.info("plans are built for every batch (%s)", str(exc).splitlines()[0][:200])
            plan = None
        if plan is None:  # another kind of source leaf: build this batch, and keep building
            self.templates, self.rebindable = {}, False
        return plan


def run_stage(planned, task: ShardTask) -> list[ShardResult]:
    """Run the shard sessions over ``planned``: one task per shard, rows in Arrow batches."""
    import pickle

    rows = planned.mapInArrow(_stage(task), "result binary").collect()
    return [pickle.loads(r[0]) for r in rows]


def _stage(task: ShardTask):
    def stage(batches):
        import pickle

        import pyarrow as pa
        from pyspark import TaskContext

        from tidemark.errors import TidemarkError, mark_for_driver

        index = TaskContext.get().partitionId()
        counted = [0]
        try:
            rows = _shard_rows(index, _arrow_tuples(batches), counted)
            t = time.perf_counter()
            first = next(rows, None)  # the partition's sort is done when its first row arrives
            wait = time.perf_counter() - t
            if first is not None and first[0][1] == ODD_BINDING:
                for _ in rows:  # read to the end (checks the end row)
                    pass
                result = ShardResult(index, task.ranges[index], skipped=False, aborted=True)
            else:
                result = run_shard(task, index, itertools.chain(() if first is None else (first,), rows))
                result.input_documents = counted[0]
        except TidemarkError as exc:
            raise mark_for_driver(exc) from exc
        result.timings["wait"] = wait
        yield pa.RecordBatch.from_arrays([pa.array([pickle.dumps(result)], pa.binary())], names=["result"])

    return stage


def _arrow_tuples(batches):
    """(shard, binding, key_json, doc, n) of each row of Arrow record batches."""
    for rb in batches:
        yield from zip(*(rb.column(i).to_pylist() for i in range(5)))


_MASK32 = 0xFFFFFFFF


def _murmur3_int(value: int, seed: int = 42) -> int:
    """Spark's ``Murmur3_x86_32.hashInt`` (what ``hash(int_col)`` and ``repartition`` use)."""

    def rotl(x: int, r: int) -> int:
        return ((x << r) | (x >> (32 - r))) & _MASK32

    k1 = (value * 0xCC9E2D51) & _MASK32
    k1 = rotl(k1, 15)
    k1 = (k1 * 0x1B873593) & _MASK32
    h1 = (seed ^ k1) & _MASK32
    h1 = rotl(h1, 13)
    h1 = (h1 * 5 + 0xE6546B64) & _MASK32
    h1 ^= 4
    h1 ^= h1 >> 16
    h1 = (h1 * 0x85EBCA6B) & _MASK32
    h1 ^= h1 >> 13
    h1 = (h1 * 0xC2B2AE35) & _MASK32
    h1 ^= h1 >> 16
    return h1 - (1 << 32) if h1 & 0x80000000 else h1


_PARTITION_VALUES: dict[int, list[int]] = {}


def _partition_values(n: int) -> list[int]:
    """For each partition i < n, an int v with ``pmod(murmur3(v), n) == i``."""
    values = _PARTITION_VALUES.get(n)
    if values is None:
        found: dict[int, int] = {}
        v = 0
        while len(found) < n:
            found.setdefault(_murmur3_int(v) % n, v)  # Python % is pmod
            v += 1
        values = [found[i] for i in range(n)]
        _PARTITION_VALUES[n] = values
    return values


END_BINDING = 2**31 - 1  # the binding of each shard's end row (sorts after every real binding)
ODD_BINDING = -1  # the binding of rows that need the combine's checks (sorts before every real binding)


def _shard_rows(index: int, rows, counted: Optional[list] = None):
    """Rows ``(shard, binding, key_json, doc, n)`` of partition ``index`` as
    ``((shard, binding, key_json), doc)``, adding each row's ``n`` (documents combined) to
    ``counted[0]``.  Every row must belong to shard ``index`` (a misrouted row would be
    written by the wrong shard), and the partition must end with its end row: without it
    the input was cut off, and the error stops the shard before it commits."""
    ended = False
    point = armed("mid_stream")
    total = 0
    for shard, binding, key_json, doc, n in rows:
        if point:
            fault_point("mid_stream")
        if ended:
            raise RecoveryError(f"partition {index} received a row after its end row (key {key_json})")
        if shard != index:
            raise RecoveryError(f"partition {index} received a row of shard {shard} (key {key_json})")
        if binding == END_BINDING:
            ended = True
            continue
        total += n or 0
        yield (shard, binding, key_json), doc
    if not ended:
        raise RecoveryError(
            f"shard {index}: its input ended before the end row (the stream from Spark was cut off); "
            "nothing of this session is committed"
        )
    if counted is not None:
        counted[0] = total


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
    expr = None
    for i, r in enumerate(ranges):
        cond = (hash_col >= F.lit(r.key_begin)) & (hash_col <= F.lit(r.key_end))
        expr = F.when(cond, F.lit(i)) if expr is None else expr.when(cond, F.lit(i))
    return expr.otherwise(F.lit(-1))


def _partition_expr(shard_col, n: int):
    """A value that ``repartition(n, value)`` sends to partition ``shard_col``: an element
    of a literal array (shard -1 goes to partition 0, where ``_shard_rows`` refuses it)."""
    from pyspark.sql import functions as F

    values = _partition_values(n)
    if n == 1:
        return F.lit(values[0])
    table = F.array(*[F.lit(v) for v in values])
    return F.when(
        (shard_col >= F.lit(1)) & (shard_col < F.lit(n)), F.element_at(table, shard_col + F.lit(1))
    ).otherwise(F.lit(values[0]))
