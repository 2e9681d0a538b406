"""The shard's own Python work, with an endpoint that costs nothing.

    python bench/bench_shard_python.py [--docs 1000000] [--keys 100000] [--batches 5]

The end-to-end bench's stream (``bench_postgres_e2e.write_stream``) is combined per batch
in plain Python, then each batch's rows go through :func:`tidemark.runtime.shard.run_shard`
as one shard, in this process, against a null driver: Load answers from a dict, Store
writes into it, the commit does nothing.  So the CPU time printed is what the runtime's
shard loop costs per document (key parsing, buffering, Load and Store messages, the
protocol checks, the reduction of loaded and combined documents, value extraction), with
no endpoint, no Spark and no transfer from the JVM.  A real endpoint's client side
(JSON, COPY rows) comes on top.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))
sys.path.insert(0, HERE)

from bench_postgres_e2e import SCHEMA, binding_spec, reduce_into, write_stream

import tidemark.runtime.shard as shard
from tidemark.collection.collection import Collection
from tidemark.drivers.base import Capabilities, CommitPattern
from tidemark.protocol.messages import Acknowledged, Flushed, Loaded, Opened, Range, StartedCommit
from tidemark.spec import CollectionSpec


class NullTransactor:
    def __init__(self, store: dict):
        self.docs = store

    def acknowledge(self, msg):
        return Acknowledged()

    def load(self, msg):
        got = [(k, self.docs[k]) for k in msg.keys if k in self.docs]
        return [Loaded(msg.binding, tuple(k for k, _ in got), tuple(d for _, d in got))] if got else []

    def flush(self, msg):
        return [], Flushed()

    def store(self, msg):
        for k, d in zip(msg.keys, msg.docs):
            self.docs[tuple(k)] = d

    def start_commit(self, msg):
        return StartedCommit()

    def close(self):
        pass


class NullDriver:
    def capabilities(self):
        return Capabilities(CommitPattern.STORE_AUTHORITATIVE)

    docs: dict = {}

    def __init__(self, config=None):
        pass

    def open(self, req):
        return NullTransactor(NullDriver.docs), Opened(None)

    def close(self):
        pass


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--docs", type=int, default=1_000_000)
    ap.add_argument("--keys", type=int, default=100_000)
    ap.add_argument("--batches", type=int, default=5)
    args = ap.parse_args()
    shard.load_driver = lambda name, config=None: NullDriver()
    coll = Collection(CollectionSpec("orders", ("/customer",), SCHEMA))
    binding = binding_spec()
    with tempfile.TemporaryDirectory() as tmp:
        batches = write_stream(os.path.join(tmp, "data"), args.docs, args.keys, args.batches)
    total_cpu = total_docs = 0
    for batch_id, batch in enumerate(batches):
        combined: dict = {}
        for d in batch:
            combined[d["customer"]] = reduce_into(combined.get(d["customer"]), d)
        rows = [((0, 0, json.dumps([k])), json.dumps(v, separators=(",", ":"))) for k, v in sorted(combined.items())]
        task = shard.ShardTask(
            materialization="bench",
            version="v",
            driver_name="null",
            driver_config={},
            bindings=(binding,),
            collections=(coll,),
            checkpoint_id="bench",
            batch_id=batch_id,
            ranges=(Range(),),
            driver_checkpoint=None,
            runtime_checkpoint={"checkpoint_id": "bench", "batch_id": batch_id, "materialization": "bench"},
        )
        c0 = time.process_time()
        result = shard.run_shard(task, 0, iter(rows))
        cpu = time.process_time() - c0
        total_cpu += cpu
        total_docs += len(rows)
        print(
            f"batch {batch_id}: {len(rows):,} documents, {result.loaded:,} loaded: CPU {cpu:.2f} s "
            f"({1e6 * cpu / len(rows):.1f} µs per document)"
        )
    print(f"all: {total_docs:,} documents, CPU {total_cpu:.2f} s ({1e6 * total_cpu / total_docs:.1f} µs per document)")


if __name__ == "__main__":
    main()
