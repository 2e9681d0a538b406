"""A batch's ways through Spark, one small object each, tried in order until one returns the
shards' results (:meth:`Materializer.process <tidemark.spark.processor.Materializer.process>`):

* :class:`DriverPath` (a batch after a small one): the one-job combine, unrouted, collected to
  the driver, whose threads run the shard sessions (:mod:`tidemark.spark.small`).  It gives
  way when the batch combines to too many keys (to the one job) or a row needs the
  combine's checks (to the checked path).
* :class:`OneJobPath`: read, combine, route and the shard sessions in one Spark job, when
  every binding's schema compiles; the shards commit nothing if a row needs the checks.
* :class:`CheckedPath`: the combine with its checks (a statistics job, suspects checked in
  Python, invalid documents located and quarantined), then the shard job -- or the driver's
  threads, for a batch after a small one.  It always answers.

Each path sets ``report.path`` (a :class:`BatchPath`) when it answers.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass, field, replace
from enum import Enum
from typing import Any, Protocol, Union

from tidemark.errors import SpecError
from tidemark.options import process_options
from tidemark.protocol.messages import Range
from tidemark.runtime.shard import ShardResult, ShardTask

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


class Planner(Protocol):
    """What the paths ask of the materialization (:class:`~tidemark.spark.processor.Materializer`)."""

    collections: tuple
    mat: Any
    options: Any
    one_job_plans: dict
    typed_rows: bool

    @property
    def driver_keys(self) -> int:
        """The most keys a batch may combine to and run its shard sessions in the driver."""
        raise NotImplementedError


class NeedsChecks:
    """A path's answer: a row needs the combine's checks (only the checked path may take it)."""


NEEDS_CHECKS = NeedsChecks()
Answer = Union[list[ShardResult], NeedsChecks, None]  # None: the next path takes the batch


def _timed(report: BatchReport, part: str, t: float) -> None:
    report.timings[part] = report.timings.get(part, 0.0) + time.perf_counter() - t


def one_job_plan(m: Planner, df, ranges: tuple[Range, ...], routed: bool = True):
    """The planned DataFrame of the batch without checks or cache, when every binding's
    schema compiles (None otherwise): rows that need the checks (``_needs_checks``) go to
    every shard, first, and make the shards commit nothing (``routed=False``: the combined
    rows, unrouted)."""
    from tidemark.spark import internals
    from tidemark.spark.one_job import OneJobPlan

    if not process_options().one_job:  # for benchmarks: the checked plan for every batch
        return None
    spark = df.sparkSession
    if not internals.supported(spark):  # the one-job plan is built on the JVM handles
        return None
    key = (internals.session_id(spark), tuple(df.columns), ranges)
    plan = m.one_job_plans.get(key)
    if plan is None:
        plan = m.one_job_plans[key] = OneJobPlan(spark, key[1], m.collections, ranges, m.typed_rows)
    return plan.apply(df, routed) if plan.ok else None


class DriverPath:
    """A batch after a small one: its shard sessions in the driver."""

    def __init__(self, m: Planner):
        self.m = m

    def run(self, df, ranges: tuple[Range, ...], task: ShardTask, report: BatchReport) -> Answer:
        from tidemark.spark.small import ODD, run_small

        t = time.perf_counter()
        combined = one_job_plan(self.m, df, ranges, routed=False)
        if combined is None:
            return None
        _timed(report, "plan", t)
        t = time.perf_counter()
        results = run_small(combined, task, self.m.driver_keys)
        _timed(report, "shards", t)
        if results is ODD:
            return NEEDS_CHECKS
        if results is not None:
            report.documents = sum(r.input_documents for r in results)
            report.path = (
                BatchPath.DRIVER_TYPED
                if any(c == "row" or c.startswith("row_") for c in combined.columns)
                else BatchPath.DRIVER
            )
        return results


class OneJobPath:
    """Read, combine, route and the shard sessions in one Spark job."""

    def __init__(self, m: Planner):
        self.m = m

    def run(self, df, ranges: tuple[Range, ...], task: ShardTask, report: BatchReport) -> Answer:
        from tidemark.spark.stage import run_stage

        t = time.perf_counter()
        planned = one_job_plan(self.m, df, ranges)
        if planned is None:
            return None
        _timed(report, "plan", t)
        t = time.perf_counter()
        results = run_stage(planned, task)
        _timed(report, "shards", t)
        if any(r.aborted for r in results):
            log.info(
                "materialization %r batch %d: some documents need checking; combining again with checks",
                task.materialization,
                task.batch_id,
            )
            return NEEDS_CHECKS
        report.documents = sum(r.input_documents for r in results)
        report.path = BatchPath.ONE_JOB
        return results


class CheckedPath:
    """The combine with its checks, then the shards (in the driver for a batch after a small one)."""

    def __init__(self, m: Planner, in_driver: bool):
        self.m = m
        self.in_driver = in_driver

    def run(self, df, ranges: tuple[Range, ...], task: ShardTask, report: BatchReport) -> Answer:
        from tidemark.spark.route import route, union
        from tidemark.spark.stage import run_stage

        t = time.perf_counter()
        parts, documents, quarantine, cleanup = self.combine(df)
        report.documents = documents
        report.invalid = len(quarantine)
        _timed(report, "plan", t)
        task = replace(task, quarantine=tuple(quarantine))
        t = time.perf_counter()
        report.path = BatchPath.CHECKED
        results = None
        try:
            if self.in_driver:  # its rows are cached
                from tidemark.spark.small import run_small

                results = run_small(union(parts), task, self.m.driver_keys)
                report.path = BatchPath.CHECKED if results is None else BatchPath.CHECKED_IN_DRIVER
            if results is None:
                results = run_stage(route(df.sparkSession, parts, ranges), task)
        finally:
            cleanup()
        _timed(report, "shards", t)
        return results

    def combine(self, df) -> tuple[list, int, list[dict], Any]:
        """Validate, combine per key (checked: a statistics job, the suspects checked in
        Python, invalid documents located): each binding's combined rows (cached; see
        :func:`tidemark.spark.route.route`), the batch's documents, its invalid documents,
        and a cleanup for the cache."""
        from pyspark.sql import functions as F

        from tidemark.spark.combine import combine_batch

        m = self.m
        if "_row" not in df.columns:
            df = df.withColumn("_row", F.monotonically_increasing_id())
        # Several bindings each read the batch: cache it once.  One binding reads it once
        # (the rare re-reads -- locating an invalid document -- re-read the same files).
        shared = len(m.collections) > 1
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
            for i, coll in enumerate(m.collections):
                part = df.filter(F.col("_binding") == i) if len(m.collections) > 1 else df
                res = combine_batch(part, coll, on_invalid=m.mat.on_invalid)
                results.append(res)
                documents += int(res.documents)
                if res.invalid is not None:
                    limit = m.options.max_quarantine
                    rows = res.invalid.limit(limit + 1).collect()
                    if len(rows) > limit:
                        raise SpecError(
                            f"batch has more than {limit} invalid documents; refusing to quarantine them all"
                        )
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


def run_batch(m: Planner, df, ranges: tuple[Range, ...], task: ShardTask, report: BatchReport, small: bool):
    """The shards' results of the first path that answers (``small``: the batch before
    combined to few keys)."""
    answer: Answer = DriverPath(m).run(df, ranges, task, report) if small else None
    if answer is None:
        answer = OneJobPath(m).run(df, ranges, task, report)
    if isinstance(answer, list):
        return answer
    return CheckedPath(m, in_driver=small).run(df, ranges, task, report)
