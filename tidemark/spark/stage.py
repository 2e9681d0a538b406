"""The shard stage on Spark: one task per shard over the routed partitions
(:mod:`tidemark.spark.route`), rows in Arrow batches, each task a shard session
(:func:`tidemark.runtime.shard.run_shard`) that returns its result to the driver."""

from __future__ import annotations

import itertools
import time
from enum import Enum
from typing import Optional

from tidemark.errors import RecoveryError
from tidemark.faults import armed, fault_point
from tidemark.runtime.shard import ShardResult, ShardTask, run_shard

END_BINDING = 2**31 - 1  # the binding of each shard's end row (sorts after every real binding)
ODD_BINDING = -1  # the binding of rows that need the combine's checks (sorts before every real binding)


class Declined(Enum):
    """Why a path did not take a batch: nothing of it was staged or committed (the checked path takes it)."""

    NEEDS_CHECKS = "a row needs the combine's checks"


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
            rows = shard_rows(index, _arrow_tuples(batches), counted)
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


def shard_rows(index: int, rows, counted: Optional[list] = None):
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
