"""Small batches: the shard sessions in the driver.

On a batch of a few hundred documents, most of the shard stage's time is Spark's: a second
shuffle (to route rows to shards) and one Python task per shard, about 0.25 s together
against a few milliseconds of endpoint work.  When a batch's settled combine says it combines
to at most :func:`driver_keys` keys (``small_batch_keys``, or ``reduced_batch_keys`` when the
endpoint reduces every binding: :class:`tidemark.options.RuntimeOptions`), :func:`run_small`
collects its combined rows into the driver instead (the one-job combine's, or the checked
plan's cached ones) and runs each shard's session there, one thread per shard, on the same
rows in the same order (each shard's keys, sorted, then its end row), through the same
protocol code: what is committed, and how a crash anywhere in it recovers, are the same as
on Spark's executors.
"""

from __future__ import annotations

import os
from concurrent.futures import ThreadPoolExecutor
from typing import Sequence

from tidemark.errors import RecoveryError
from tidemark.faults import armed, fault_point
from tidemark.protocol.messages import Range
from tidemark.runtime.shard import ShardResult, ShardTask, TypedRows, TypedShard, open_shard, run_opened
from tidemark.spark.stage import END_BINDING, Declined, shard_rows

#: shard sessions run at once in the driver (each holds an endpoint connection) when they
#: Load and reduce in Python (one interpreter lock: more threads only wait for it)
MAX_THREADS = 8
#: ... and when the endpoint reduces every binding (each session mostly waits for its
#: endpoint's statement): every shard at once, up to this many
MAX_REDUCED_THREADS = 64


def driver_keys(options, bindings: Sequence) -> int:
    """The most keys a batch may combine to and run its shard sessions in the driver:
    ``options.reduced_batch_keys`` when the endpoint reduces every binding (no Load, no
    reduce in Python: a few microseconds of Python per key), else
    ``options.small_batch_keys`` -- which at 0 keeps every batch on Spark's executors."""
    if options.small_batch_keys and bindings and all(b.endpoint_reduce and not b.delta_updates for b in bindings):
        return options.reduced_batch_keys
    return options.small_batch_keys


def run_small(combined, task: ShardTask) -> list[ShardResult] | Declined:
    """The shards' results of the batch whose combined rows are ``combined`` (a DataFrame
    of ``binding, key_json, key_hash, doc, _documents, _needs_checks``), run in the driver; else
    why not (a row that needs the combine's checks) -- then nothing was staged, and the
    sessions' Opens, made while Spark finished the batch's combine, are closed unused (the
    next Open fences them)."""
    with ThreadPoolExecutor(max_workers=threads(task), thread_name_prefix="tidemark-shard") as pool:
        # the sessions Open while Spark combines the batch (the Open needs no row)
        opening = [pool.submit(open_shard, task, i) for i in range(len(task.ranges))]
        started = False
        try:
            table = combined.toArrow()
            if any(table.column("_needs_checks").to_pylist()):
                return Declined.NEEDS_CHECKS
            futures = _run_opened(pool, opening, task, table)
            started = True
        finally:
            if not started:
                _discard(opening)
        errors = [f.exception() for f in futures]
    first = next((e for e in errors if e is not None), None)
    if first is not None:
        raise first
    return [f.result() for f in futures]


def _run_opened(pool, opening: list, task: ShardTask, table) -> list:
    """Each shard's session on its rows of ``table``, once its Open is done (futures)."""
    typed = any(c == "row" or c.startswith("row_") for c in table.column_names)  # the documents as typed values
    keys = [b.key for b in task.bindings]
    per_shard: list = split_typed(task.ranges, table, keys) if typed else split(task.ranges, table)
    host = os.uname().nodename

    def one(index: int) -> ShardResult:
        shard = opening[index].result()
        counted = [0]
        mine = per_shard[index]
        if isinstance(mine, TypedShard):
            if armed("mid_stream"):
                try:
                    fault_point("mid_stream")
                except BaseException:
                    shard.discard()
                    raise
            counted[0] = mine.documents
            result = run_opened(task, index, shard, mine)
        else:
            result = run_opened(task, index, shard, shard_rows(index, iter(mine), counted))
        result.input_documents = counted[0]
        result.executor = f"{host}:driver"
        return result

    return [pool.submit(one, i) for i in range(len(task.ranges))]


def _discard(opening: list) -> None:
    """Close the sessions opened for a batch that runs elsewhere (or failed)."""
    for f in opening:
        try:
            f.result().discard()
        except Exception:  # noqa: BLE001 - the Open's own error: nothing to close
            pass


def threads(task: ShardTask) -> int:
    """Shard sessions run at once in the driver: every shard when the endpoint reduces every
    binding (:data:`MAX_REDUCED_THREADS` at most), else :data:`MAX_THREADS` at most."""
    reduced = all(b.endpoint_reduce and not b.delta_updates for b in task.bindings)
    return max(1, min(len(task.ranges), MAX_REDUCED_THREADS if reduced else MAX_THREADS))


def split_typed(ranges: Sequence[Range], table, keys: Sequence[Sequence[str]] = ()) -> list[TypedShard]:
    """Per shard, its rows of the typed combine (``binding, key_json, key_hash, _documents``
    and the documents' typed values: ``row`` of one binding, ``row_<i>`` per binding of
    several) sorted by (binding, key), as :class:`~tidemark.runtime.shard.TypedShard`: per
    binding the Arrow table of the documents' properties, sliced, never made into Python
    rows.  The keys come from the row's columns where the binding's key (``keys``: its JSON
    pointers per binding) names top-level properties of it (a key's value is the same there
    as in ``key_json``), else from ``key_json``."""
    import numpy as np

    ordered, counts = _by_shard(ranges, table)
    single = "row" in table.column_names
    out = []
    start = 0
    for count in counts:
        part = ordered.slice(start, count)
        start += count
        bindings = np.asarray(part.column("binding").to_numpy(zero_copy_only=False))
        parts = []
        first = 0
        for value, n in zip(*np.unique(bindings, return_counts=True)):  # sorted by binding: contiguous
            rows_of = part.slice(first, int(n))
            first += int(n)
            binding = int(value)
            key = keys[binding] if binding < len(keys) else ()
            column = rows_of.column("row" if single else f"row_{binding}").combine_chunks()
            parts.append(
                TypedRows(
                    binding,
                    _typed_keys(rows_of, column, key),
                    pa_table(column),
                    int(pc_sum(rows_of.column("_documents"))),
                )
            )
        out.append(TypedShard(parts))
    return out


def _typed_keys(part, rows, key: Sequence[str]) -> list:
    """The keys of one binding's typed rows: from their columns, or parsed from ``key_json``."""
    from tidemark.collection.schema import pointer_tokens
    from tidemark.jsontext import loads

    tokens = [pointer_tokens(p) for p in key]
    names = [t[0] for t in tokens if len(t) == 1]
    fields = {f.name for f in rows.type}
    if key and len(names) == len(key) and fields.issuperset(names):
        return list(zip(*(rows.field(n).to_pylist() for n in names)))
    return [tuple(loads(k)) for k in part.column("key_json").to_pylist()]


def pa_table(struct):
    """A struct column's fields as a table."""
    import pyarrow as pa

    return pa.Table.from_arrays(struct.flatten(), names=[f.name for f in struct.type])


def pc_sum(column) -> int:
    import pyarrow.compute as pc

    return pc.sum(column).as_py() or 0


def _by_shard(ranges: Sequence[Range], table):
    """The table sorted by (shard, binding, key_json), and each shard's row count."""
    import numpy as np
    import pyarrow as pa

    order = sorted(range(len(ranges)), key=lambda i: ranges[i].key_begin)
    begins = np.array([ranges[i].key_begin for i in order], dtype=np.int64)
    ends = np.array([ranges[i].key_end for i in order], dtype=np.int64)
    hashes = np.asarray(table.column("key_hash").to_numpy(), dtype=np.int64)
    at = np.searchsorted(begins, hashes, side="right") - 1
    outside = (at < 0) | (hashes > ends[np.maximum(at, 0)])
    if outside.any():
        j = int(np.argmax(outside))
        raise RecoveryError(
            f"key {table.column('key_json')[j].as_py()} hashes to {int(hashes[j])}, outside every range of "
            f"the layout {[r.name for r in ranges]}; nothing of this batch is committed"
        )
    shard = np.array(order, dtype=np.int64)[at]
    ordered = table.append_column("_shard", pa.array(shard)).sort_by(
        [("_shard", "ascending"), ("binding", "ascending"), ("key_json", "ascending")]
    )
    return ordered, np.bincount(shard, minlength=len(ranges)).tolist()


def split(ranges: Sequence[Range], table) -> list[list[tuple]]:
    """Rows ``(shard, binding, key_json, doc, n)`` per shard of an Arrow table of combined
    rows (columns ``binding, key_json, key_hash, doc, _documents``), as the Spark stage feeds them:
    sorted by (binding, key_json) (Arrow orders strings by their UTF-8 bytes, as Spark
    does), then the shard's end row.  Routing and sorting are Arrow's and numpy's (no
    Python per row before a shard's own rows are made).  A key hash outside every range
    is an error."""
    ordered, counts = _by_shard(ranges, table)
    out: list[list[tuple]] = []
    start = 0
    for i, count in enumerate(counts):
        part = ordered.slice(start, count)
        start += count
        columns = (part.column(c).to_pylist() for c in ("binding", "key_json", "doc", "_documents"))
        rows = [(i, *row) for row in zip(*columns)]
        rows.append((i, END_BINDING, "", None, 0))
        out.append(rows)
    return out


def rows_table(bindings, keys, hashes, docs, ns):
    """An Arrow table of combined rows, as :func:`split` reads them (for callers without Spark)."""
    import pyarrow as pa

    return pa.table(
        {
            "binding": pa.array(bindings, pa.int32()),
            "key_json": pa.array(keys, pa.string()),
            "key_hash": pa.array(hashes, pa.int64()),
            "doc": pa.array(docs, pa.string()),
            "_documents": pa.array(ns, pa.int64()),
        }
    )
