"""A batch's ways through Spark, chosen once per batch by :func:`run_batch` from the batch
itself, each a function of what it reads (a :class:`PathContext`) that returns a
:class:`BatchOutcome`, or why it did not take the batch (a
:class:`~tidemark.spark.stage.Declined`: nothing staged, nothing committed):

* the unchecked combine (:mod:`tidemark.spark.one_job`; every binding's schema compiles),
  settled first -- its shuffle's map side (read, parse, prove, aggregate within each input
  split) run once, which tells at least how many keys the batch combines to -- then
  :func:`driver_path` when that is at most ``driver_keys`` (the rows collected to the driver,
  whose threads run the shard sessions: :mod:`tidemark.spark.small`), else
  :func:`one_job_path` (the rest of the combine, routing and the shard sessions in one Spark
  job);
* :func:`checked_path`: the combine with its checks (a statistics job, suspects checked in
  Python, invalid documents located and quarantined), continued from the settled combine
  when there is one, then the shards.  It always answers.

A row that needs the checks (a suspect document, undeclared properties, a reduction error) can
change any key's document, fail the batch, or add quarantine rows (located by file and line: a
window over the batch) to shard 0's transaction: no shard may commit before all know the batch
is clean.  In one Spark job the only barrier is the data: such rows go to every shard, first,
and every shard stops before it opens a session (:mod:`tidemark.spark.route`); the checked
path then decides before any session.  No part of a batch runs twice: the documents are read
and aggregated once (the checked combine reads the settled aggregate again, and only the
documents of the keys it must check again), and each shard's session runs once.
"""

from __future__ import annotations

import logging
import time
from contextlib import contextmanager
from dataclasses import dataclass, field, replace
from enum import Enum
from typing import Any, Iterator, Optional

from tidemark.errors import SpecError
from tidemark.options import process_options
from tidemark.protocol.messages import Range
from tidemark.runtime.shard import ShardResult, ShardTask
from tidemark.spark.stage import Declined

log = logging.getLogger("tidemark")


class BatchPath(str, Enum):
    """How a batch ran, decided once per batch (the report and the log's counts keep its text)."""

    ONE_JOB = "one job"  # read, combine and shards in one Spark job
    DRIVER = "driver"  # the same combine, the shard sessions in the driver (a small batch)
    DRIVER_TYPED = "driver (typed rows)"  # ... handed typed values instead of JSON texts
    CHECKED = "checked"  # the combine with its checks, then the shard job
    CHECKED_IN_DRIVER = "checked in driver"  # ... the shard sessions in the driver

    def __str__(self) -> str:
        return self.value


@dataclass
class BatchReport:
    """What one batch did (``Materializer.reports``, the ``on_batch`` callback)."""

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
    path: str = ""  # a BatchPath (equal to its text: the recovery log and the reports keep the text)
    timings: dict = field(default_factory=dict)
    wall: float = 0.0


@dataclass(frozen=True)
class PathContext:
    """What a batch's paths read of its materialization (one per :class:`~tidemark.spark.processor.Materializer`)."""

    collections: tuple  # tidemark.collection.Collection per binding
    on_invalid: str  # "fail" or "quarantine"
    max_quarantine: int
    driver_keys: int  # the most keys a batch may combine to and run its shard sessions in the driver
    typed_rows: bool = False  # the driver's sessions get StoreRows (decided at start-up)
    typed_remainder: bool = False  # ... with each row's remainder (undeclared properties among it)
    plans: dict = field(default_factory=dict)  # OneJobPlan per (Spark session, source columns, layout)


@dataclass(frozen=True)
class BatchOutcome:
    """How a batch ran: every shard's result, its path, the documents read and the invalid ones set aside."""

    results: list[ShardResult]
    path: BatchPath
    documents: int
    invalid: int = 0


@contextmanager
def _timed(timings: dict, part: str) -> Iterator[None]:
    t = time.perf_counter()
    yield
    timings[part] = timings.get(part, 0.0) + time.perf_counter() - t


def run_batch(ctx: PathContext, df, task: ShardTask, timings: dict) -> BatchOutcome:
    """The batch's outcome, on the one path its data picks: where every binding's schema
    compiles, the combine settled once (:meth:`~tidemark.spark.one_job.OneJobPlan.combine`),
    then the shard sessions in the driver when it combines to at most
    :attr:`PathContext.driver_keys` keys, else on Spark's executors; the checked combine
    continues from the settled one when a row needs the checks.  Else the checked path."""
    with _timed(timings, "plan"):
        plan = one_job_plan(ctx, df, task.ranges)
    if plan is None:
        return checked_path(ctx, df, task, timings)
    spark = df.sparkSession
    with _timed(timings, "combine"):
        settled = plan.combine(df)
    in_driver = bool(ctx.driver_keys) and settled.bound <= ctx.driver_keys
    with _timed(timings, "plan"):
        rows = plan.finish(settled, spark, routed=not in_driver)
    outcome = driver_path(rows, task, timings) if in_driver else one_job_path(rows, task, timings)
    if isinstance(outcome, BatchOutcome):
        return outcome
    log.info(
        "materialization %r batch %d: %s; combining with checks", task.materialization, task.batch_id, outcome.value
    )
    return checked_path(ctx, df, task, timings, aggregated=plan.aggregated(settled, spark))


def one_job_plan(ctx: PathContext, df, ranges: tuple[Range, ...]):
    """The batch's :class:`~tidemark.spark.one_job.OneJobPlan` (built once per Spark session,
    source columns and layout), when every binding's schema compiles (None otherwise)."""
    from tidemark.spark import internals
    from tidemark.spark.one_job import OneJobPlan

    if not process_options().one_job:  # for benchmarks: the checked plan for every batch
        return None
    spark = df.sparkSession
    if not internals.supported(spark):  # the one-job plan is built on the JVM handles
        return None
    key = (internals.session_id(spark), tuple(df.columns), ranges)
    plan = ctx.plans.get(key)
    if plan is None:
        plan = ctx.plans[key] = OneJobPlan(spark, key[1], ctx.collections, ranges, ctx.typed_rows, ctx.typed_remainder)
    return plan if plan.ok else None


def driver_path(combined, task: ShardTask, timings: dict) -> BatchOutcome | Declined:
    """The settled combine's rows (unrouted) collected to the driver, whose threads run the shard sessions."""
    from tidemark.spark.small import run_small

    with _timed(timings, "shards"):
        results = run_small(combined, task)
    if isinstance(results, Declined):
        return results
    typed = any(c == "row" or c.startswith("row_") for c in combined.columns)
    return BatchOutcome(
        results, BatchPath.DRIVER_TYPED if typed else BatchPath.DRIVER, sum(r.input_documents for r in results)
    )


def one_job_path(planned, task: ShardTask, timings: dict) -> BatchOutcome | Declined:
    """The settled combine routed to the shards, whose sessions run on Spark's executors: rows
    that need the checks go to every shard, first, and every shard then stops before its Open."""
    from tidemark.spark.stage import run_stage

    with _timed(timings, "shards"):
        results = run_stage(planned, task)
    if any(r.aborted for r in results):
        return Declined.NEEDS_CHECKS
    return BatchOutcome(results, BatchPath.ONE_JOB, sum(r.input_documents for r in results))


def checked_path(
    ctx: PathContext, df, task: ShardTask, timings: dict, aggregated: Optional[list] = None
) -> BatchOutcome:
    """The combine with its checks (continued from ``aggregated``, each binding's settled
    aggregate, when the one-job combine ran), then the shards: in the driver when it combines
    to at most :attr:`PathContext.driver_keys` keys, else on Spark's executors (its rows are cached)."""
    from tidemark.spark.route import route, union
    from tidemark.spark.small import run_small
    from tidemark.spark.stage import run_stage

    with _timed(timings, "plan"):
        parts, documents, quarantine, cleanup = checked_combine(ctx, df, aggregated)
    task = replace(task, quarantine=tuple(quarantine))
    with _timed(timings, "shards"):
        try:
            rows = union(parts)
            if ctx.driver_keys and rows.count() <= ctx.driver_keys:
                results, path = run_small(rows, task), BatchPath.CHECKED_IN_DRIVER
            else:
                results, path = run_stage(route(df.sparkSession, parts, task.ranges), task), BatchPath.CHECKED
        finally:
            cleanup()
    assert isinstance(results, list)  # the checked rows need no checks
    return BatchOutcome(results, path, documents, len(quarantine))


def checked_combine(ctx: PathContext, df, aggregated: Optional[list] = None) -> tuple[list, int, list[dict], Any]:
    """Validate, combine per key (checked: a statistics job, the suspects checked in Python,
    invalid documents located; continued from ``aggregated``, each binding's settled aggregate,
    when given): each binding's combined rows (cached; see
    :func:`tidemark.spark.route.route`), the batch's documents, its invalid documents, and a
    cleanup for the cache."""
    from pyspark.sql import functions as F

    from tidemark.spark.combine import combine_batch

    if "_row" not in df.columns:
        df = df.withColumn("_row", F.monotonically_increasing_id())
    # Several bindings each read the batch: cache it once.  One binding reads it once
    # (the rare re-reads -- locating an invalid document -- re-read the same files).
    shared = len(ctx.collections) > 1
    if shared:
        df = df.persist()
    parts = []
    results: list = []
    quarantine: list[dict] = []
    documents = 0

    def cleanup() -> None:
        if shared:
            df.unpersist()
        for r in results:
            r.unpersist()

    try:
        for i, coll in enumerate(ctx.collections):
            part = df.filter(F.col("_binding") == i) if len(ctx.collections) > 1 else df
            res = combine_batch(
                part, coll, on_invalid=ctx.on_invalid, aggregated=None if aggregated is None else aggregated[i]
            )
            results.append(res)
            documents += int(res.documents)
            if res.invalid is not None:
                limit = ctx.max_quarantine
                rows = res.invalid.limit(limit + 1).collect()
                if len(rows) > limit:
                    raise SpecError(f"batch has more than {limit} invalid documents; refusing to quarantine them all")
                quarantine.extend({**r.asDict(), "binding": i} for r in rows)
            parts.append(
                res.combined.select(
                    F.lit(i).alias("binding"),
                    "key_json",
                    "key_hash",
                    "doc",
                    F.lit(0).cast("long").alias("_documents"),
                    F.lit(False).alias("_needs_checks"),
                )
            )
    except BaseException:
        cleanup()
        raise
    return parts, documents, quarantine, cleanup
