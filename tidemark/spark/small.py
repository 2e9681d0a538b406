"""Small batches: the shard sessions in the driver.

On a batch of a few hundred documents, most of the shard stage's time is Spark's: a second
shuffle (to route rows to shards) and one Python task per shard, about 0.25 s together
against a few milliseconds of endpoint work.  When the batch before combined to at most
``small_batch_keys`` keys (:class:`tidemark.options.RuntimeOptions`), :func:`run_small`
collects this batch's combined rows into the driver instead (the one-job combine's, or the
checked plan's cached ones) -- at most that many: a bigger batch is left to the Spark
stage -- and runs each shard's session there, one thread per shard, on the same rows in
the same order (each shard's keys, sorted, then its end row), through the same protocol
code: what is committed, and how a crash anywhere in it recovers, are the same as on
Spark's executors.
"""

from __future__ import annotations

import bisect
import os
from concurrent.futures import ThreadPoolExecutor
from typing import Optional, Sequence

from tidemark.errors import RecoveryError
from tidemark.protocol.messages import Range
from tidemark.runtime.shard import ShardResult, ShardTask, _run_shard
from tidemark.spark.route import END_BINDING, _shard_rows

#: shard sessions run at once in the driver (each holds an endpoint connection)
MAX_THREADS = 8

ODD = "odd"  # run_small's answer when a row needs the checked combine


def run_small(combined, task: ShardTask, cap: int):
    """The shards' results of the batch whose combined rows are ``combined`` (a DataFrame
    of ``binding, key_json, key_hash, doc, _n, _odd``), run in the driver; None when it
    has more than ``cap`` rows (nothing was opened: run it on Spark), :data:`ODD` when a
    row needs the combine's checks (nothing was opened: the checked plan)."""
    table = combined.limit(cap + 1).toArrow()
    if table.num_rows > cap:
        return None
    if any(table.column("_odd").to_pylist()):
        return ODD
    per_shard = split(
        task.ranges, *(table.column(c).to_pylist() for c in ("binding", "key_json", "key_hash", "doc", "_n"))
    )
    host = os.uname().nodename

    def one(index: int) -> ShardResult:
        counted = [0]
        result = _run_shard(task, index, _shard_rows(index, iter(per_shard[index]), counted))
        result.input_documents = counted[0]
        result.executor = f"{host}:driver"
        return result

    with ThreadPoolExecutor(
        max_workers=min(len(task.ranges), MAX_THREADS), thread_name_prefix="tidemark-shard"
    ) as pool:
        futures = [pool.submit(one, i) for i in range(len(task.ranges))]
        errors = [f.exception() for f in futures]
    first = next((e for e in errors if e is not None), None)
    if first is not None:
        raise first
    return [f.result() for f in futures]


def split(ranges: Sequence[Range], bindings, keys, hashes, docs, ns) -> list[list[tuple]]:
    """Rows ``(shard, binding, key_json, doc, n)`` per shard, as the Spark stage feeds them:
    sorted by (binding, key_json) (Python orders strings by code point, as Spark orders
    UTF-8 bytes), then the shard's end row.  A key hash outside every range is an error."""
    order = sorted(range(len(ranges)), key=lambda i: ranges[i].key_begin)
    begins = [ranges[i].key_begin for i in order]
    out: list[list[tuple]] = [[] for _ in ranges]
    for binding, key_json, key_hash, doc, n in zip(bindings, keys, hashes, docs, ns):
        at = bisect.bisect_right(begins, key_hash) - 1
        i = order[at] if at >= 0 else -1
        if i < 0 or key_hash > ranges[i].key_end:
            raise RecoveryError(
                f"key {key_json} hashes to {key_hash}, outside every range of the layout "
                f"{[r.name for r in ranges]}; nothing of this batch is committed"
            )
        out[i].append((i, binding, key_json, doc, n))
    for i, rows in enumerate(out):
        rows.sort(key=lambda r: (r[1], r[2]))
        rows.append((i, END_BINDING, "", None, 0))
    return out


def previous_keys(last) -> Optional[int]:
    """Keys the last committed batch combined to (None: no batch yet, or not recorded)."""
    keys = (last.counts or {}).get("keys") if last is not None else None
    return keys if isinstance(keys, int) else None
