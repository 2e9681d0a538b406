"""tidemark's commit path in a plain Python process, without Spark: for the fault-point matrices.

    python -m tests.support.plain SPEC

runs the spec's (only) materialization over its source folder the way ``tidemark run
--available-now`` with ``maxFilesPerTrigger: 1`` does, through the same runtime code — the
coordinator (start-up, ``begin``, the recovery log, Acknowledge), :func:`run_shard` per
shard (one thread each, as the Spark driver runs a small batch's sessions), the driver — and
with Spark's own part written here: ``spark/metadata`` once, ``spark/offsets/N`` before
batch N (a re-run after a kill reads the same file, so the batch keeps its identity),
``spark/commits/N`` after it. Documents are parsed, validated and combined per key in Python
(:class:`~tidemark.collection.collection.Collection`), source order kept.

An endpoint's fault points fire here as they do in a Spark executor (``TIDEMARK_FAULTS``), so
a SIGKILL at one costs a Python start-up instead of a JVM's: ``run_plain_until_done`` is
:func:`tests.support.harness.run_until_done` for this runner.  What Spark adds (executors,
task retries, speculation, the one-job plan) is covered by the Spark chaos tests.
"""

from __future__ import annotations

import json
import os
import sys
import uuid
import zlib
from concurrent.futures import ThreadPoolExecutor

from tidemark.collection.collection import collection_from_spec
from tidemark.collection.keys import compact_json
from tidemark.collection.keys import key_json as to_key_json
from tidemark.errors import DocumentError
from tidemark.faults import fault_point
from tidemark.protocol.messages import Range
from tidemark.runtime.coordinator import Coordinator
from tidemark.runtime.reduce_path import reduce_paths
from tidemark.runtime.shard import ShardTask, _run_shard, merge_updates
from tidemark.runtime.spec_changes import reductions_of
from tidemark.runtime.view_identity import source_location
from tidemark.spark.small import rows_table, split
from tidemark.spark.stage import shard_rows
from tidemark.spec import TidemarkSpec, load_spec


def _write(path: str, text: str) -> None:
    os.makedirs(os.path.dirname(path), exist_ok=True)
    tmp = f"{path}.{uuid.uuid4().hex[:6]}.tmp"
    with open(tmp, "w") as f:
        f.write(text)
    os.replace(tmp, path)


def run(spec_path, name=None) -> int:
    """Run the spec's only materialization (or ``name``); ``spec_path`` may be a parsed spec."""
    spec = spec_path if isinstance(spec_path, TidemarkSpec) else load_spec(spec_path)
    if name is None:
        [mat] = spec.materializations.values()
    else:
        mat = spec.materializations[name]
    colls = [collection_from_spec(spec, b.source) for b in mat.bindings]
    from tidemark.drivers.base import capabilities_of
    from tidemark.drivers.registry import load_driver

    driver = load_driver(mat.driver_name, mat.driver_config)
    options = mat.options.with_env()
    bindings, _ = reduce_paths(
        tuple(c.binding_spec(b) for c, b in zip(colls, mat.bindings)),
        colls,
        capabilities_of(driver),
        options.endpoint_reduce,
    )
    location = spec.checkpoint_location(mat.name)
    sources = [spec.collections[b.source].source for b in mat.bindings]
    coordinator = Coordinator(
        materialization=mat.name,
        driver=driver,
        driver_name=mat.driver_name,
        driver_config=mat.driver_config,
        bindings=bindings,
        version=mat.version(spec),
        checkpoint_location=location,
        shards=mat.shards,
        strategies=[c.strategies() for c in colls],
        on_invalid=mat.on_invalid,
        reductions=[reductions_of(c.name, c.schema) for c in colls],
        sources=[source_location(s, spec.base_dir) for s in sources],
        auto=mat.auto_shards,
    )
    coordinator.start_up()
    try:
        return _batches(coordinator, spec, mat, colls, bindings, sources, location, driver)
    finally:
        if coordinator.lease is not None:
            coordinator.lease.release()  # (a run in a test's own process: the next one may be another)


def _batches(coordinator, spec, mat, colls, bindings, sources, location, driver) -> int:
    sp = os.path.join(location, "spark")
    if not os.path.exists(os.path.join(sp, "metadata")):
        _write(os.path.join(sp, "metadata"), json.dumps({"id": str(uuid.uuid4())}) + "\n")
    # one file per batch, each binding's source in name order (maxFilesPerTrigger: 1)
    files = [sorted(os.path.join(s.path, n) for n in os.listdir(s.path) if n.endswith(".json")) for s in sources]
    batches = max(len(f) for f in files)
    for n in range(batches):
        if os.path.exists(os.path.join(sp, "commits", str(n))):
            continue
        inputs = [f[n] if n < len(f) else None for f in files]
        offsets = os.path.join(sp, "offsets", str(n))
        if not os.path.exists(offsets):
            _write(offsets, 'v1\n{"batchWatermarkMs":0}\n' + json.dumps({"files": inputs}) + "\n")
        batch(coordinator, spec, mat, colls, bindings, inputs, n)
        _write(os.path.join(sp, "commits", str(n)), "v1\n{}\n")
    driver.close()
    print(f"done: {batches} batch(es)")
    return 0


def batch(coordinator, spec, mat, colls, bindings, inputs, batch_id: int) -> None:
    start = coordinator.begin(batch_id)
    if start.replayed:
        return
    last = start.last
    ranges = tuple(Range(b, e) for b, e in start.layout)
    fault_point("plan")
    combined: dict[tuple[int, str], list] = {}  # (binding, key_json) -> [doc, n]
    for binding, (coll, path) in enumerate(zip(colls, inputs)):
        if path is None:
            continue
        with open(path, encoding="utf-8") as f:
            for i, line in enumerate(f):
                if not line.strip():
                    continue
                doc = coll.parse(line, f"{path}:{i + 1}")
                bad = coll.validate(doc)
                if bad:
                    raise DocumentError(f"{path}:{i + 1}: {bad[0]}")
                k = (binding, to_key_json(coll.extract_key(doc)))
                if k in combined:
                    combined[k][0] = coll.reduce(combined[k][0], doc)
                    combined[k][1] += 1
                else:
                    combined[k] = [doc, 1]
    keys = list(combined)
    texts = [k[1] for k in keys]
    per_shard = split(
        ranges,
        rows_table(
            [k[0] for k in keys],
            texts,
            [zlib.crc32(t.encode("utf-8")) for t in texts],
            [compact_json(combined[k][0]) for k in keys],
            [combined[k][1] for k in keys],
        ),
    )
    task = ShardTask(
        materialization=mat.name,
        version=mat.version(spec),
        driver_name=mat.driver_name,
        driver_config=mat.driver_config,
        bindings=bindings,
        collections=tuple(colls),
        checkpoint_id=coordinator.checkpoint_id,
        batch_id=batch_id,
        ranges=ranges,
        driver_checkpoint=last.driver_checkpoint if last else None,
        runtime_checkpoint=start.runtime_checkpoint,
        committed_batch=last.batch_id if last else -1,
        capabilities=coordinator.caps,
    )

    def one(i: int):
        return _run_shard(task, i, shard_rows(i, iter(per_shard[i]), [0]))

    with ThreadPoolExecutor(max_workers=len(ranges)) as pool:
        futures = [pool.submit(one, i) for i in range(len(ranges))]
        errors = [f.exception() for f in futures]
    if any(errors):
        raise next(e for e in errors if e is not None)
    results = [f.result() for f in futures]
    state = merge_updates(last.driver_checkpoint if last else None, results)
    counts = {
        "documents": sum(v[1] for v in combined.values()),
        "keys": len(keys),
        "stored": sum(r.stored for r in results),
        "loaded": sum(r.loaded for r in results),
        "deleted": sum(r.deleted for r in results),
        "invalid": 0,
        "replayed_shards": sum(r.skipped for r in results),
        "endpoint": mat.driver_name,
        "path": "plain",
    }
    coordinator.commit(start, state, counts)
    fault_point("before_spark_commit")


if __name__ == "__main__":
    sys.exit(run(sys.argv[1]))
