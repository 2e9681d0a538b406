"""The per-batch transaction on Spark: plan → shard sessions → commit.

:class:`Materializer` is the ``foreachBatch`` function of one materialization: the Spark
adapter around :class:`tidemark.runtime.coordinator.Coordinator`, which owns the commit path
(its steps are numbered there).  Spark writes ``offsets/N`` before batch N and ``commits/N``
after it returns; a crash in between re-runs batch N with the same id and input.
:meth:`Materializer.process`:

Step 0–1. ``Coordinator.begin``: a re-run with the same identity is only acknowledged;
          else the batch's layout (its intent) and runtime checkpoint.
Step 1.   Plan (distributed): validate, key, combine per key, assign each key to the shard
          whose range holds its 32-bit hash, partition by shard, sort by key.
Step 2.   Shard sessions (one executor task per shard): see :mod:`tidemark.runtime.shard`.
Step 3–5. ``Coordinator.commit``: merge the shards' driver-checkpoint updates, append batch
          N to the recovery log, coordinator Acknowledge; Spark writes ``commits/N``.

:meth:`Materializer.start_up` (``Coordinator.start_up``) runs before the first batch.
"""

from __future__ import annotations

import logging
import threading
import time
from dataclasses import dataclass, field
from typing import Callable, Optional, Sequence

from tidemark.drivers.registry import load_driver
from tidemark.errors import RecoveryError, SpecError, from_task_failure
from tidemark.faults import armed, fault_point
from tidemark.options import RuntimeOptions
from tidemark.protocol.messages import KEY_SPACE_MAX, Range
from tidemark.runtime.coordinator import Coordinator, even_layout
from tidemark.runtime.shard import ShardResult, ShardTask, merge_updates, run_shard
from tidemark.runtime.spec_changes import reductions_of

log = logging.getLogger("tidemark")


@dataclass
class BatchReport:
    materialization: str
    batch_id: int
    phase: str = "done"
    skipped: bool = False
    replayed_shards: int = 0
    documents: int = 0
    keys: int = 0
    stored: int = 0
    loaded: int = 0
    deleted: int = 0
    invalid: int = 0
    shards: int = 0
    spilled: bool = False
    timings: dict = field(default_factory=dict)
    wall: float = 0.0


class _Gate:
    """Where a process stops on request (``tidemark run`` on Ctrl-C): between batches.
    :meth:`close_and_wait` lets the batches in progress finish and holds every later one
    before it starts (Spark has planned it; it runs again next time, like after a crash)."""

    def __init__(self):
        self._cond = threading.Condition()
        self._busy = 0
        self._closed = False

    def enter(self) -> None:
        with self._cond:
            self._cond.wait_for(lambda: not self._closed)
            self._busy += 1

    def leave(self) -> None:
        with self._cond:
            self._busy -= 1
            self._cond.notify_all()

    def close_and_wait(self, timeout: Optional[float] = None) -> bool:
        """Close the gate; True once no batch is in progress (False at ``timeout``)."""
        with self._cond:
            self._closed = True
            return self._cond.wait_for(lambda: self._busy == 0, timeout)


GATE = _Gate()


class Materializer:
    """The ``foreachBatch`` function of one materialization."""

    def __init__(
        self,
        spec,
        materialization,
        collections: Sequence,
        checkpoint_location: str,
        *,
        on_batch: Optional[Callable[[BatchReport], None]] = None,
        options: RuntimeOptions | None = None,
    ):
        self.spec = spec
        self.mat = materialization
        self.collections = tuple(collections)
        self.bindings = tuple(c.binding_spec(b) for c, b in zip(self.collections, materialization.bindings))
        self.driver_name = materialization.driver_name
        self.driver_config = materialization.driver_config
        self.version = materialization.version(spec)
        self.checkpoint_location = checkpoint_location
        self.driver = load_driver(self.driver_name, self.driver_config)
        self.coordinator = Coordinator(
            materialization=materialization.name, driver=self.driver, driver_name=self.driver_name,
            driver_config=self.driver_config, bindings=self.bindings, version=self.version,
            checkpoint_location=checkpoint_location, shards=materialization.shards,
            strategies=[c.strategies() for c in self.collections], on_invalid=materialization.on_invalid,
            reductions=[reductions_of(c.name, c.schema) for c in self.collections],
            auto=materialization.auto_shards,
        )
        self.log = self.coordinator.log
        self.on_batch = on_batch
        # the spec's (or materialize()'s) options; environment variables override them
        self.options = (options or materialization.options).with_env()
        self.error: BaseException | None = None
        self.on_error: Optional[Callable[[BaseException], None]] = None  # e.g. metrics
        self.reports: list[BatchReport] = []

    def start_up(self) -> None:
        """Identity checks, Validate + Apply, re-acknowledge the last batch (see the coordinator)."""
        self.coordinator.start_up()

    # ------------------------------------------------------------------ batch
    def __call__(self, df, batch_id: int) -> None:
        GATE.enter()
        try:
            self.process(df, int(batch_id))
        except BaseException as exc:
            self.error = from_task_failure(exc) or exc
            if self.on_error is not None:
                self.on_error(self.error)
            raise
        finally:
            GATE.leave()

    def process(self, df, batch_id: int) -> BatchReport:
        t_start = time.perf_counter()
        report = BatchReport(self.mat.name, batch_id)

        # Step 0: a batch the recovery log already holds (same identity) is only acknowledged.
        start = self.coordinator.begin(batch_id)
        if start.replayed:
            report.skipped = True
            report.phase = "replayed"
            self._emit(report, t_start)
            return report
        last = start.last

        # Step 1: plan.
        t = time.perf_counter()
        layout = start.layout
        ranges = tuple(Range(b, e) for b, e in layout)
        planned, results_meta, cleanup = self._plan(df, ranges)
        report.documents = results_meta["documents"]
        report.invalid = len(results_meta["quarantine"])
        report.timings["plan"] = time.perf_counter() - t

        # Step 2: shard sessions.
        t = time.perf_counter()
        runtime_checkpoint = start.runtime_checkpoint
        task = ShardTask(
            materialization=self.mat.name,
            version=self.version,
            driver_name=self.driver_name,
            driver_config=self.driver_config,
            bindings=self.bindings,
            collections=self.collections,
            checkpoint_id=self.coordinator.checkpoint_id,
            batch_id=batch_id,
            ranges=ranges,
            driver_checkpoint=last.driver_checkpoint if last else None,
            runtime_checkpoint=runtime_checkpoint,
            memory_budget_bytes=self.options.memory_budget_bytes,
            max_loaded_in_memory=self.options.max_loaded_in_memory,
            quarantine=tuple(results_meta["quarantine"]),
            committed_batch=last.batch_id if last else -1,
            capabilities=self.coordinator.caps,
        )
        try:
            results: list[ShardResult] = planned.mapPartitionsWithIndex(
                lambda i, rows: [run_shard(task, i, rows)], preservesPartitioning=True
            ).collect()
        finally:
            cleanup()
        report.timings["shards"] = time.perf_counter() - t
        if sorted(r.shard for r in results) != list(range(len(ranges))):
            raise RecoveryError(f"batch {batch_id}: expected one result per shard, got {[r.shard for r in results]}")

        # Step 3–4: merge the driver checkpoint, commit to the recovery log, acknowledge.
        t = time.perf_counter()
        state = merge_updates(last.driver_checkpoint if last else None, results)
        counts = {
            "documents": report.documents,
            "keys": sum(r.documents for r in results),  # the auto shard policy reads it
            "stored": sum(r.stored for r in results),
            "loaded": sum(r.loaded for r in results),
            "deleted": sum(r.deleted for r in results),
            "invalid": report.invalid,
            "replayed_shards": sum(r.skipped for r in results),
            "executors": [r.executor for r in sorted(results, key=lambda r: r.shard)],
            # for `tidemark status` (read-only; not part of the batch's identity)
            "endpoint": self.driver_name,
            "seconds": round(time.perf_counter() - t_start, 3),
            "timings": {k: round(v, 3) for k, v in report.timings.items()},
            "committed_at": round(time.time(), 3),
        }
        counts["totals"] = _totals(last, counts)
        self.coordinator.commit(start, state, counts)
        report.timings["recovery_log"] = time.perf_counter() - t

        # Step 5: return; Spark writes commits/N.
        fault_point("before_spark_commit")
        report.shards = len(ranges)
        report.stored = counts["stored"]
        report.loaded = counts["loaded"]
        report.deleted = counts["deleted"]
        report.keys = sum(r.documents for r in results)
        report.replayed_shards = counts["replayed_shards"]
        report.spilled = any(r.spilled for r in results)
        for r in results:
            for k, v in r.timings.items():
                report.timings[f"shard.{k}"] = max(report.timings.get(f"shard.{k}", 0.0), v)
        self._emit(report, t_start)
        return report

    def _emit(self, report: BatchReport, t_start: float) -> None:
        report.wall = time.perf_counter() - t_start
        self.reports.append(report)
        if self.on_batch:
            self.on_batch(report)

    def _plan(self, df, ranges: tuple[Range, ...]):
        """Validate, combine per key, assign shards; an RDD of ((shard, binding, key_json), doc)."""
        from pyspark.sql import functions as F

        from tidemark.spark.combine import combine_batch
        from tidemark.spark.session import built_once

        if "_row" not in df.columns:
            df = df.withColumn("_row", F.monotonically_increasing_id())
        # Several bindings each read the batch: cache it once.  One binding reads it once
        # (the rare re-reads -- locating an invalid document -- re-read the same files).
        shared = len(self.collections) > 1
        if shared:
            df = df.persist()
        parts = []
        results = []
        quarantine: list[dict] = []
        documents = 0
        try:
            for i, coll in enumerate(self.collections):
                part = df.filter(F.col("_binding") == i) if len(self.collections) > 1 else df
                res = combine_batch(part, coll, on_invalid=self.mat.on_invalid)
                results.append(res)
                documents += int(res.documents)
                if res.invalid is not None:
                    rows = res.invalid.limit(self.options.max_quarantine + 1).collect()
                    if len(rows) > self.options.max_quarantine:
                        raise SpecError(
                            f"batch has more than {self.options.max_quarantine} invalid documents; refusing to quarantine them all"
                        )
                    quarantine.extend({**r.asDict(), "binding": i} for r in rows)
                parts.append(res.combined.select(F.lit(i).alias("binding"), "key_json", "key_hash", "doc"))
        except BaseException:
            if shared:
                df.unpersist()
            for r in results:
                r.unpersist()
            raise
        combined = parts[0]
        for p in parts[1:]:
            combined = combined.unionByName(p)
        n = len(ranges)
        # Partition by shard in the JVM: ``repartition(n, _p)`` puts a row in partition
        # ``pmod(murmur3(_p), n)``, so ``_p`` is a value that hashes to the row's shard.
        # Rows reach Python only in the shard tasks, sorted by (binding, key_json).
        # built once per layout: a few hundred py4j calls at many shards
        shard_col, part_col = built_once(df.sparkSession, ("shards", ranges), lambda: (
            _shard_expr(F.col("key_hash"), ranges).alias("shard"), _partition_expr(F.col("shard"), n)))
        # One end row per shard, sorted last: a shard task whose input stream was cut off
        # (the JVM died while feeding it, and PySpark's reader takes EOF for the end of the
        # partition) must not commit what it got as if it were the whole batch.
        ends = df.sparkSession.range(n).select(
            F.col("id").cast("int").alias("shard"), F.lit(END_BINDING).alias("binding"),
            F.lit("").alias("key_json"), F.lit(None).cast("string").alias("doc"))
        planned = (
            combined.select(shard_col, "binding", "key_json", "doc")
            .unionByName(ends)
            .withColumn("_p", part_col)
            .repartition(n, "_p")
            .sortWithinPartitions("binding", "key_json")
            .select("shard", "binding", "key_json", "doc")
            .rdd.mapPartitionsWithIndex(_shard_rows, preservesPartitioning=True)
        )
        if planned.getNumPartitions() != n:
            raise RecoveryError(f"planned {planned.getNumPartitions()} partitions for {n} shards")

        def cleanup():
            if shared:
                df.unpersist()
            for r in results:
                r.unpersist()

        return planned, {"documents": documents, "quarantine": quarantine}, cleanup


def _totals(last, counts: dict) -> dict:
    """Running totals since the view's first batch (carried from entry to entry)."""
    prev = dict(((last.counts or {}).get("totals") or {}) if last else {})
    out = {"batches": prev.get("batches", 0) + 1}
    for k in ("documents", "stored", "deleted", "invalid"):
        out[k] = prev.get(k, 0) + int(counts.get(k) or 0)
    return out


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


def _shard_rows(index: int, rows):
    """Rows of partition ``index`` as ``((shard, binding, key_json), doc)``; every row must
    belong to shard ``index`` (a misrouted row would be written by the wrong shard), and the
    partition must end with its end row: without it the input was cut off, and the error
    stops the shard before it commits."""
    ended = False
    point = armed("mid_stream")
    for shard, binding, key_json, doc in rows:
        if point:
            fault_point("mid_stream")
        if ended:
            raise RecoveryError(f"partition {index} received a row after its end row (key {key_json})")
        if shard != index:
            raise RecoveryError(f"partition {index} received a row of shard {shard} (key {key_json})")
        if binding == END_BINDING:
            ended = True
            continue
        yield (shard, binding, key_json), doc
    if not ended:
        raise RecoveryError(f"shard {index}: its input ended before the end row (the stream from Spark was cut off); "
                            "nothing of this session is committed")


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
    return F.when((shard_col >= F.lit(1)) & (shard_col < F.lit(n)), F.element_at(table, shard_col + F.lit(1))) \
        .otherwise(F.lit(values[0]))


__all__ = ["Materializer", "BatchReport", "RuntimeOptions", "even_layout", "KEY_SPACE_MAX"]
