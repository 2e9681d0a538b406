"""The per-batch transaction on Spark: plan → shard sessions → commit.

:class:`Materializer` is the ``foreachBatch`` function of one materialization.
Spark writes ``offsets/N`` before batch N and ``commits/N`` after it returns; a crash in
between re-runs batch N with the same id and input.  :meth:`Materializer.process`:

Step 0. Recognise a re-run: if the recovery log already holds batch N, only re-run the
        coordinator Acknowledge of N (idempotent) and return.
Step 1. Plan (distributed): validate, key, combine per key, assign each key to the shard
        whose range holds its 32-bit hash, partition by shard, sort by key.  The layout
        a batch starts with is recorded (``intent``) so a re-run uses the same one.
Step 2. Shard sessions (one executor task per shard): see :mod:`tidemark.runtime.shard`.
Step 3. Commit (Spark driver): merge the shards' driver-checkpoint updates, append batch
        N to the recovery log atomically.
Step 4. Coordinator Acknowledge for drivers that apply after commit.
Step 5. Return: Spark writes ``commits/N``.

:meth:`Materializer.start_up` runs before the first batch: Validate + Apply against the
endpoint, then re-run the Acknowledge of the last committed batch.
"""

from __future__ import annotations

import logging
import os
import time
from dataclasses import dataclass, field
from typing import Callable, Optional, Sequence

from tidemark.drivers.base import CommitPattern
from tidemark.drivers.registry import load_driver
from tidemark.errors import RecoveryError, SpecError
from tidemark.faults import armed, fault_point
from tidemark.protocol.messages import KEY_SPACE_MAX, Apply, Range, Validate
from tidemark.runtime.recovery_log import LogEntry, RecoveryLog
from tidemark.runtime.shard import ShardResult, ShardTask, merge_updates, run_shard

log = logging.getLogger("tidemark")

UNSAFE_AT_LEAST_ONCE = ("sum", "append", "merge", "set")


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


@dataclass(frozen=True)
class RuntimeOptions:
    """Runtime knobs, parsed once (Spark options are strings)."""

    memory_budget_bytes: int = 64 << 20
    max_loaded_in_memory: int = 200_000
    max_quarantine: int = 100_000

    @staticmethod
    def from_env() -> "RuntimeOptions":
        return RuntimeOptions(
            memory_budget_bytes=int(os.environ.get("TIDEMARK_SHARD_MEMORY_BYTES", 64 << 20)),
            max_loaded_in_memory=int(os.environ.get("TIDEMARK_SHARD_MAX_LOADED", 200_000)),
        )


def even_layout(shards: int) -> list[list[int]]:
    return [[r.key_begin, r.key_end] for r in Range.split(shards)]


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
        self.log = RecoveryLog(checkpoint_location, materialization.name)
        self.driver = load_driver(self.driver_name, self.driver_config)
        self.caps = type(self.driver).capabilities
        self.on_batch = on_batch
        self.options = options or RuntimeOptions.from_env()
        self.error: BaseException | None = None
        self.reports: list[BatchReport] = []

    # ------------------------------------------------------------------ startup
    def start_up(self) -> None:
        """Validate + Apply, warn about unsafe reductions, re-acknowledge the last batch."""
        self._warn_unsafe()
        validate = Validate(self.mat.name, self.driver_config, self.bindings)
        self.driver.validate(validate)
        applied = self.driver.apply(Apply(self.mat.name, self.driver_config, self.bindings, version=self.version))
        log.info("materialization %s: apply: %s", self.mat.name, applied.action_description)
        last = self.log.last()
        if last is not None:
            if last.version != self.version:
                log.warning(
                    "materialization %s: spec version changed since batch %s (%s -> %s)",
                    self.mat.name, last.batch_id, last.version, self.version,
                )
            self._coordinator_acknowledge(last)

    def _warn_unsafe(self) -> None:
        if self.caps.commit_pattern is not CommitPattern.AT_LEAST_ONCE:
            return
        for coll, binding in zip(self.collections, self.mat.bindings):
            text = repr(coll.schema)
            bad = [s for s in UNSAFE_AT_LEAST_ONCE if f"'{s}'" in text]
            if bad and not binding.delta_updates:
                log.warning(
                    "binding %s uses %s reductions, which an at-least-once endpoint (%s) may apply twice after a crash",
                    binding.resource, ", ".join(bad), self.driver_name,
                )

    def _coordinator_acknowledge(self, entry: LogEntry) -> None:
        if self.caps.commit_pattern is CommitPattern.IDEMPOTENT_APPLY_COORDINATOR:
            self.driver.coordinator_acknowledge(
                self.mat.name, entry.driver_checkpoint, entry.runtime_checkpoint, self.bindings
            )
            fault_point("after_apply")

    # ------------------------------------------------------------------ layout
    def layout_for(self, batch_id: int) -> list[list[int]]:
        """The layout of batch N: what it started with, else the configured shard count."""
        intent = self.log.intent(batch_id)
        if intent is not None:
            return intent
        layout = even_layout(self.mat.shards)
        self.log.write_intent(batch_id, layout)
        return layout

    # ------------------------------------------------------------------ batch
    def __call__(self, df, batch_id: int) -> None:
        try:
            self.process(df, int(batch_id))
        except BaseException as exc:
            self.error = exc
            raise

    def process(self, df, batch_id: int) -> BatchReport:
        t_start = time.perf_counter()
        report = BatchReport(self.mat.name, batch_id)

        # Step 0: a batch the recovery log already holds is only acknowledged.
        last = self.log.last()
        if last is not None and batch_id <= last.batch_id:
            if batch_id == last.batch_id:
                self._coordinator_acknowledge(last)
            report.skipped = True
            report.phase = "replayed"
            self._emit(report, t_start)
            return report

        # Step 1: plan.
        t = time.perf_counter()
        fault_point("plan")
        layout = self.layout_for(batch_id)
        ranges = tuple(Range(b, e) for b, e in layout)
        planned, results_meta, cleanup = self._plan(df, ranges)
        report.documents = results_meta["documents"]
        report.invalid = len(results_meta["quarantine"])
        report.timings["plan"] = time.perf_counter() - t

        # Step 2: shard sessions.
        t = time.perf_counter()
        runtime_checkpoint = {
            "checkpoint_id": self.log.checkpoint_id,
            "batch_id": batch_id,
            "materialization": self.mat.name,
            "version": self.version,
        }
        task = ShardTask(
            materialization=self.mat.name,
            version=self.version,
            driver_name=self.driver_name,
            driver_config=self.driver_config,
            bindings=self.bindings,
            collections=self.collections,
            checkpoint_id=self.log.checkpoint_id,
            batch_id=batch_id,
            ranges=ranges,
            driver_checkpoint=last.driver_checkpoint if last else None,
            runtime_checkpoint=runtime_checkpoint,
            memory_budget_bytes=self.options.memory_budget_bytes,
            max_loaded_in_memory=self.options.max_loaded_in_memory,
            quarantine=tuple(results_meta["quarantine"]),
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

        # Step 3: merge the driver checkpoint and commit to the recovery log.
        t = time.perf_counter()
        state = merge_updates(last.driver_checkpoint if last else None, results)
        counts = {
            "documents": report.documents,
            "stored": sum(r.stored for r in results),
            "loaded": sum(r.loaded for r in results),
            "deleted": sum(r.deleted for r in results),
            "invalid": report.invalid,
            "replayed_shards": sum(r.skipped for r in results),
            "executors": [r.executor for r in sorted(results, key=lambda r: r.shard)],
        }
        entry = LogEntry(batch_id, runtime_checkpoint, state, [list(x) for x in layout], self.version, counts)
        fault_point("before_recovery_log")
        self.log.append(entry)
        fault_point("after_recovery_log")
        report.timings["recovery_log"] = time.perf_counter() - t

        # Step 4: coordinator Acknowledge (idempotent apply after commit).
        t = time.perf_counter()
        self._coordinator_acknowledge(entry)
        report.timings["acknowledge"] = time.perf_counter() - t

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
