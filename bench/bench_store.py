"""The ``store`` endpoint per shard: Store and Load docs/s, query latency, and
restart-to-first-commit for a small and a large view (issue #21: it must not grow with the view).

    python bench/bench_store.py [SMALL] [LARGE] [DIR]     # defaults: 10000 1000000 a temp dir

For each size N: N documents are Stored in batches of 100k and committed (one shard session,
one range), then Loaded back in chunks of ``max_load_keys``; then
``tidemark.open_view``-style queries: a ``get`` of one key (median of 200) and a full
``scan(ordered=False)``; then a new session (what a restarted task does: Open, which
fences, checks and reopens the store) commits one small batch, timed from Open.
Run it on a quiet machine; it prints one line per measurement.
"""

from __future__ import annotations

import os
import statistics
import sys
import tempfile
import time

from tidemark.drivers.store import StoreDriver
from tidemark.drivers.store.query import View
from tidemark.protocol.messages import (
    Acknowledge,
    Apply,
    BindingSpec,
    Field,
    Flush,
    Load,
    Open,
    Range,
    StartCommit,
    Store,
)

FIELDS = (Field("id", "/id", "string", is_key=True), Field("n", "/n", "integer"))
BINDING = BindingSpec({"name": "docs"}, "docs", ("/id",), FIELDS)
CHUNK = 100_000


def cp(batch: int) -> dict:
    return {"checkpoint_id": "bench", "batch_id": batch, "materialization": "bench"}


def doc(i: int, batch: int) -> dict:
    return {"id": f"key-{i:09d}", "n": batch, "payload": "x" * 64}


def session(driver: StoreDriver):
    txn, opened = driver.open(Open("bench", "v1", Range(), bindings=(BINDING,)))
    txn.acknowledge(Acknowledge())
    return txn, opened


def store_msg(docs: list[dict]) -> Store:
    n = len(docs)
    return Store(
        0, tuple((d["id"],) for d in docs), tuple((d["n"],) for d in docs), tuple(docs), (False,) * n, (False,) * n
    )


def bench(n: int, root: str) -> None:
    driver = StoreDriver({"path": os.path.join(root, f"n{n}")})
    driver.apply(Apply("bench", {}, (BINDING,), checkpoint_id="bench"))
    batch = 0
    t0 = time.perf_counter()
    for lo in range(0, n, CHUNK):
        txn, _ = session(driver)
        for i in range(lo, min(n, lo + CHUNK), 10_000):
            txn.store(store_msg([doc(j, batch) for j in range(i, min(n, lo + CHUNK, i + 10_000))]))
        txn.start_commit(StartCommit(cp(batch)))
        txn.close()
        batch += 1
    dt = time.perf_counter() - t0
    print(f"n={n}: store+commit {n / dt:,.0f} docs/s ({dt:.1f}s, {batch} commits)")

    txn, _ = session(driver)
    limit = driver.capabilities().max_load_keys
    t0 = time.perf_counter()
    found = 0
    for lo in range(0, n, limit):
        replies = list(txn.load(Load(0, tuple((f"key-{i:09d}",) for i in range(lo, min(n, lo + limit))))))
        found += sum(len(r.keys) for r in replies)
    found += sum(len(r.keys) for r in txn.flush(Flush())[0])
    dt = time.perf_counter() - t0
    txn.close()
    print(f"n={n}: load {n / dt:,.0f} keys/s ({found} found)")

    t0 = time.perf_counter()
    view = View(driver, "bench", BINDING)
    opened = time.perf_counter() - t0
    lat = []
    for k in range(200):
        t = time.perf_counter()
        view.get(f"key-{(k * 7919) % n:09d}")
        lat.append(time.perf_counter() - t)
    t = time.perf_counter()
    rows = sum(1 for _ in view.scan_raw(ordered=False))
    scan = time.perf_counter() - t
    view.close()
    print(
        f"n={n}: query open {opened * 1e3:.1f} ms, get median {statistics.median(lat) * 1e6:.0f} us, "
        f"p99 {sorted(lat)[197] * 1e6:.0f} us, full scan {rows / scan:,.0f} docs/s"
    )

    t0 = time.perf_counter()
    txn, opened_msg = session(driver)
    t_open = time.perf_counter() - t0
    txn.store(store_msg([doc(i, batch) for i in range(100)]))
    txn.start_commit(StartCommit(cp(batch)))
    txn.close()
    print(
        f"n={n}: restart-to-first-commit {(time.perf_counter() - t0) * 1e3:.0f} ms "
        f"(open {t_open * 1e3:.0f} ms; recovered batch {opened_msg.runtime_checkpoint['batch_id']})"
    )


def main(argv: list[str]) -> None:
    small = int(argv[1]) if len(argv) > 1 else 10_000
    large = int(argv[2]) if len(argv) > 2 else 1_000_000
    root = argv[3] if len(argv) > 3 else tempfile.mkdtemp(prefix="bench-store-")
    for n in (small, large):
        bench(n, root)


if __name__ == "__main__":
    main(sys.argv)
