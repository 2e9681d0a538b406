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
Step 2.   Shard sessions (one executor task per shard; for a batch after a small one, one
          thread per shard in the driver, :mod:`tidemark.spark.small`): see
          :mod:`tidemark.runtime.shard`.
Step 3–5. ``Coordinator.commit``: merge the shards' driver-checkpoint updates, append batch
          N to the recovery log, coordinator Acknowledge; Spark writes ``commits/N``.

:meth:`Materializer.start_up` (``Coordinator.start_up``) runs before the first batch.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from dataclasses import replace
from typing import Callable, Optional, Sequence

from tidemark.drivers.base import capabilities_of
from tidemark.drivers.registry import load_driver
from tidemark.errors import RecoveryError, from_task_failure, is_transient
from tidemark.faults import fault_point
from tidemark.options import RuntimeOptions
from tidemark.protocol.messages import KEY_SPACE_MAX, Range
from tidemark.runtime.coordinator import Coordinator, even_layout
from tidemark.runtime.reduce_path import reduce_paths
from tidemark.runtime.shard import ShardTask, merge_updates
from tidemark.runtime.spec_changes import reductions_of
from tidemark.runtime.view_identity import source_location
from tidemark.spark.paths import BatchOutcome, BatchReport, PathContext, run_batch
from tidemark.spark.small import driver_keys
from tidemark.spark.stopping import stop_interruption

log = logging.getLogger("tidemark")


class _Gate:
    """Where a process stops on request (``tidemark run`` on Ctrl-C): between batches.
    :meth:`close_and_wait` lets the batches in progress finish and holds every later one
    before it starts (Spark has planned it; it runs again next time, like after a crash)."""

    def __init__(self):
        self._cond = threading.Condition()
        self._busy = 0
        self._closed = False
        self._refusing = False

    def enter(self) -> None:
        with self._cond:
            if self._refusing:  # (tidemark.materialize on Ctrl-C) the batch fails, uncommitted
                raise Interrupted(
                    "stopped on request (Ctrl-C, or a rebuild's cut-over) before this batch; it runs next time"
                )
            self._cond.wait_for(lambda: not self._closed)
            self._busy += 1

    def leave(self) -> None:
        with self._cond:
            self._busy -= 1
            self._cond.notify_all()

    def refuse_and_wait(self, timeout: Optional[float] = None) -> bool:
        """Like :meth:`close_and_wait`, but a later batch fails at once instead of waiting (its
        query can then stop: a batch held in the gate would hold ``query.stop()``)."""
        with self._cond:
            self._refusing = True
            return self._cond.wait_for(lambda: self._busy == 0, timeout)

    def reopen(self) -> None:
        """Let batches run again (a process that goes on after its runs were stopped)."""
        with self._cond:
            self._refusing = False
            self._closed = False
            self._cond.notify_all()

    def close_and_wait(self, timeout: Optional[float] = None) -> bool:
        """Close the gate; True once no batch is in progress (False at ``timeout``)."""
        with self._cond:
            self._closed = True
            return self._cond.wait_for(lambda: self._busy == 0, timeout)

    def pause(self, seconds: float) -> bool:
        """Wait ``seconds`` inside a batch (a retry's backoff); False at once when a stop is
        requested meanwhile (the batch then ends uncommitted, and runs again next time)."""
        with self._cond:
            return not self._cond.wait_for(lambda: self._closed or self._refusing, seconds)


class Interrupted(RuntimeError):
    """A batch not started because the process stops on request."""


GATE = _Gate()

#: the batches being processed now: materialization -> (batch id, time.monotonic() at its start)
#: (``tidemark run`` says which run long)
IN_PROGRESS: dict[str, tuple[int, float]] = {}


class TransientRetries:
    """A batch that failed on a transient endpoint error (a lost connection, a terminated
    session, a server restart, a broker's leader change) runs again -- for up to ``seconds``
    from its first failure, with backoff (1, 2, 4, ... 30 s), a line per retry.  Each run is new
    sessions through the protocol: shards that committed the batch skip it at Open, the
    others commit it, fenced as always.  Start-up is not retried (it fails fast)."""

    MAX_DELAY = 30.0

    def __init__(self, materialization: str, batch_id: int, seconds: int):
        self.materialization, self.batch_id, self.seconds = materialization, batch_id, seconds
        self.attempt = 0
        self.deadline: Optional[float] = None

    def again(self, err: BaseException) -> bool:
        """Wait and return True to run the batch again; False to fail it."""
        if not is_transient(err) or self.seconds <= 0:
            return False
        now = time.monotonic()
        if self.deadline is None:
            self.deadline = now + self.seconds
        left = self.deadline - now
        if left <= 0:
            log.error(
                "materialization %s: batch %d: the endpoint stayed unavailable for %d s (%d runs of the batch); giving up",
                self.materialization,
                self.batch_id,
                self.seconds,
                self.attempt + 1,
            )
            return False
        self.attempt += 1
        delay = min(left, self.MAX_DELAY, 2.0 ** (self.attempt - 1))
        log.warning(
            "materialization %s: batch %d: %s; the batch runs again in %.0f s (run %d of the batch; %.0f s left of "
            "options.transient_retry_seconds)",
            self.materialization,
            self.batch_id,
            str(err).splitlines()[0] if str(err) else type(err).__name__,
            delay,
            self.attempt + 1,
            left,
        )
        return GATE.pause(delay)


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
        adoption=None,
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
        # the spec's (or materialize()'s) options; environment variables override them
        self.options = (options or materialization.options).with_env()
        # which bindings the endpoint reduces itself (no Loads): decided once, here
        self.bindings, self.reduce_paths = reduce_paths(
            self.bindings, self.collections, capabilities_of(self.driver), self.options.endpoint_reduce
        )
        self.coordinator = Coordinator(
            materialization=materialization.name,
            driver=self.driver,
            driver_name=self.driver_name,
            driver_config=self.driver_config,
            bindings=self.bindings,
            version=self.version,
            checkpoint_location=checkpoint_location,
            shards=materialization.shards,
            strategies=[c.strategies() for c in self.collections],
            on_invalid=materialization.on_invalid,
            reductions=[reductions_of(c.name, c.schema) for c in self.collections],
            sources=[
                source_location(spec.collections[b.source].source, spec.base_dir)
                if b.source in spec.collections
                else None
                for b in materialization.bindings
            ],
            auto=materialization.auto_shards,
            adopting=adoption is not None,
        )
        # tidemark adopt: batch 0 is the adopted documents, the input beyond ``since`` on top
        # (a :class:`tidemark.runtime.adoption.AdoptRecord`)
        self.adoption = adoption
        self.log = self.coordinator.log
        self.on_batch = on_batch
        self.error: BaseException | None = None
        self.on_error: Optional[Callable[[BaseException], None]] = None  # e.g. metrics
        self.reports: list[BatchReport] = []
        # what the batch's paths read (tidemark.spark.paths); typed_rows is decided at start_up
        keys = driver_keys(self.options, self.bindings)
        self.paths = PathContext(self.collections, materialization.on_invalid, self.options.max_quarantine, keys)
        self.one_job_plans = self.paths.plans  # OneJobPlan per (Spark session, source columns, layout)

    def start_up(self) -> None:
        """Identity checks, Validate + Apply, re-acknowledge the last batch (see the coordinator);
        then whether the shard sessions in the driver get typed values (``StoreRows``)."""
        self.coordinator.start_up()
        typed = all(self.driver.typed_rows(self.bindings))
        self.paths = replace(self.paths, typed_rows=typed, typed_remainder=typed and self.driver.typed_remainder())

    # ------------------------------------------------------------------ batch
    def __call__(self, df, batch_id: int) -> None:
        GATE.enter()
        IN_PROGRESS[self.mat.name] = (int(batch_id), time.monotonic())
        try:
            retries = TransientRetries(self.mat.name, int(batch_id), self.options.transient_retry_seconds)
            while True:
                try:
                    self.process(df, int(batch_id))
                    break
                except BaseException as exc:
                    err = from_task_failure(exc) or exc
                    if retries.again(err):
                        continue  # a new session per shard: committed shards skip, the others commit
                    raise
        except BaseException as exc:
            stopping = stop_interruption(exc)
            if stopping is not None:  # query.stop() during the batch: a short error Spark reads as its stop
                raise stopping from None
            self.error = from_task_failure(exc) or exc
            if self.on_error is not None:
                self.on_error(self.error)
            raise
        finally:
            IN_PROGRESS.pop(self.mat.name, None)
            GATE.leave()

    def process(self, df, batch_id: int) -> BatchReport:
        """Batch ``batch_id`` of the stream (``df``), once: the steps of the module's docstring."""
        t_start = time.perf_counter()
        # Step 0: a batch the recovery log already holds (same identity) is only acknowledged.
        start = self.coordinator.begin(batch_id)
        if start.replayed:
            return self._emit(BatchReport(self.mat.name, batch_id, "replayed", skipped=True), t_start)
        # Steps 1-2: plan and shard sessions, on the batch's one path (tidemark.spark.paths).
        task = self._task(start, batch_id)
        timings: dict = {}
        outcome = run_batch(self.paths, self._input(df, batch_id), task, timings)
        if sorted(shards := [r.shard for r in outcome.results]) != list(range(len(task.ranges))):
            raise RecoveryError(f"batch {batch_id}: expected one result per shard, got {shards}")
        # Steps 3-4: merge the driver checkpoint, commit to the recovery log, acknowledge.
        t = time.perf_counter()
        last = start.last
        state = merge_updates(last.driver_checkpoint if last else None, outcome.results)
        counts = batch_counts(outcome, last, self.driver_name, timings, time.perf_counter() - t_start)
        self.coordinator.commit(start, state, counts)
        timings["recovery_log"] = time.perf_counter() - t
        # Step 5: return; Spark writes commits/N.
        fault_point("before_spark_commit")
        return self._emit(batch_report(self.mat.name, batch_id, outcome, counts, timings), t_start)

    def _task(self, start, batch_id: int) -> ShardTask:
        """What each shard session of the batch needs (``start``: the coordinator's begin)."""
        last = start.last
        return ShardTask(
            materialization=self.mat.name,
            version=self.version,
            driver_name=self.driver_name,
            driver_config=self.driver_config,
            bindings=self.bindings,
            collections=self.collections,
            checkpoint_id=self.coordinator.checkpoint_id,
            batch_id=batch_id,
            ranges=tuple(Range(b, e) for b, e in start.layout),
            driver_checkpoint=last.driver_checkpoint if last else None,
            runtime_checkpoint=start.runtime_checkpoint,
            memory_budget_bytes=self.options.memory_budget_bytes,
            max_loaded_in_memory=self.options.max_loaded_in_memory,
            committed_batch=last.batch_id if last else -1,
            capabilities=self.coordinator.caps,
        )

    def _input(self, df, batch_id: int):
        """The batch's documents: batch 0 of an adopt with the adopted ones first."""
        if batch_id == 0 and self.adoption is not None:
            return self._adopted(df)
        return df.drop("_mtime") if "_mtime" in df.columns else df

    def _adopted(self, df):
        """Batch 0 of an adopt: the adopted documents first (``_file`` "" sorts before any
        source's), then the rows of files modified after the adopt's ``since``."""
        from pyspark.sql import functions as F

        from tidemark.runtime.adoption import folder

        spark = df.sparkSession
        out = df
        if "_mtime" in df.columns:  # a file source (other sources start where the DataFrame says)
            out = df.filter(F.col("_mtime").cast("double") > F.lit(float(self.adoption.since))).drop("_mtime")
        for b in self.adoption.bindings:
            rows = spark.read.text(os.path.join(folder(self.checkpoint_location), b.file)).select(
                F.col("value"),
                F.lit("").alias("_file"),
                F.lit(-1).cast("long").alias("_block"),
                F.lit(b.binding).alias("_binding"),
            )
            out = rows.unionByName(out)
        return out

    def _emit(self, report: BatchReport, t_start: float) -> BatchReport:
        report.wall = time.perf_counter() - t_start
        self.reports.append(report)
        if self.on_batch:
            self.on_batch(report)
        return report


def batch_counts(outcome: BatchOutcome, last, endpoint: str, timings: dict, seconds: float) -> dict:
    """The batch's counts in the recovery log (``last``: its entry before)."""
    results = outcome.results
    counts = {
        "documents": outcome.documents,
        "keys": sum(r.keys for r in results),  # the auto shard policy reads it
        "stored": sum(r.stored for r in results),
        "loaded": sum(r.loaded for r in results),
        "deleted": sum(r.deleted for r in results),
        "invalid": outcome.invalid,
        "replayed_shards": sum(r.skipped for r in results),
        "executors": [r.executor for r in sorted(results, key=lambda r: r.shard)],
        # for `tidemark status` (read-only; not part of the batch's identity)
        "endpoint": endpoint,
        "path": str(outcome.path),
        "seconds": round(seconds, 3),
        "timings": {k: round(v, 3) for k, v in timings.items()},
        "committed_at": round(time.time(), 3),
    }
    counts["totals"] = _totals(last, counts)
    return counts


def batch_report(
    materialization: str, batch_id: int, outcome: BatchOutcome, counts: dict, timings: dict
) -> BatchReport:
    """What the batch did (:class:`BatchReport`), with each shard phase's longest time."""
    results = outcome.results
    for r in results:
        for k, v in r.timings.items():
            timings[f"shard.{k}"] = max(timings.get(f"shard.{k}", 0.0), v)
    return BatchReport(
        materialization,
        batch_id,
        documents=outcome.documents,
        invalid=outcome.invalid,
        path=outcome.path,
        shards=len(results),
        spilled=any(r.spilled for r in results),
        timings=timings,
        **{k: counts[k] for k in ("keys", "stored", "loaded", "deleted", "replayed_shards")},
    )


def _totals(last, counts: dict) -> dict:
    """Running totals since the view's first batch (carried from entry to entry)."""
    prev = dict(((last.counts or {}).get("totals") or {}) if last else {})
    out = {"batches": prev.get("batches", 0) + 1}
    for k in ("documents", "stored", "deleted", "invalid"):
        out[k] = prev.get(k, 0) + int(counts.get(k) or 0)
    return out


__all__ = ["Materializer", "BatchReport", "RuntimeOptions", "even_layout", "KEY_SPACE_MAX"]
