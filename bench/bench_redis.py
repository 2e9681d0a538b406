"""The ``redis`` endpoint per shard: Store + commit docs/s in both modes, and Load keys/s.

    python bench/bench_redis.py [N] [BATCH]      # defaults: 100000 documents, commits of 10000

Redis at ``TIDEMARK_TEST_REDIS_URL`` (default ``redis://127.0.0.1:6379/0``); everything is
written under a namespace of its own (``tm_bench_<hex>:``) and deleted at the end.  For each
mode, N documents of about 100 bytes are Stored and committed in batches of BATCH (one shard
session, one range; exactly-once: one commit script per batch), then Loaded back in chunks
of ``max_load_keys``.  Prints one line per measurement.
"""

from __future__ import annotations

import os
import sys
import time
import uuid

import redis

from tidemark.drivers.redis.driver import RedisDriver
from tidemark.protocol.messages import Acknowledge, BindingSpec, Field, Flush, Load, Open, Range, StartCommit, Store

URL = os.environ.get("TIDEMARK_TEST_REDIS_URL", "redis://127.0.0.1:6379/0")
FIELDS = (Field("id", "/id", "string", is_key=True), Field("n", "/n", "integer"))


def doc(i: int, batch: int) -> dict:
    return {"id": f"key-{i:09d}", "n": batch, "payload": "x" * 64}


def store_msg(docs: list[dict]) -> Store:
    n = len(docs)
    return Store(
        0, tuple((d["id"],) for d in docs), tuple((d["n"],) for d in docs), tuple(docs), (False,) * n, (False,) * n
    )


def bench(mode: str, n: int, per_batch: int, ns: str) -> None:
    binding = BindingSpec({"prefix": f"{ns}{mode}:"}, "docs", ("/id",), FIELDS)
    driver = RedisDriver({"url": URL, "namespace": ns, "mode": mode})
    txn, _ = driver.open(Open("bench", "v1", Range(), bindings=(binding,)))
    t0 = time.perf_counter()
    batch = 0
    for lo in range(0, n, per_batch):
        txn.acknowledge(Acknowledge())
        txn.flush(Flush())
        for i in range(lo, min(n, lo + per_batch), 10_000):
            txn.store(store_msg([doc(j, batch) for j in range(i, min(n, lo + per_batch, i + 10_000))]))
        txn.start_commit(StartCommit({"checkpoint_id": "bench", "batch_id": batch, "materialization": "bench"}))
        batch += 1
    dt = time.perf_counter() - t0
    print(f"{mode}: store+commit {n / dt:,.0f} docs/s ({n} docs, {batch} commits of {per_batch}, {dt:.2f}s)")
    txn.acknowledge(Acknowledge())
    limit = driver.capabilities().max_load_keys
    t0 = time.perf_counter()
    found = 0
    for lo in range(0, n, limit):
        found += sum(
            len(r.keys) for r in txn.load(Load(0, tuple((f"key-{i:09d}",) for i in range(lo, min(n, lo + limit)))))
        )
    dt = time.perf_counter() - t0
    print(f"{mode}: load {n / dt:,.0f} keys/s ({found} found)")
    txn.close()
    driver.close()


def main() -> None:
    n = int(sys.argv[1]) if len(sys.argv) > 1 else 100_000
    per_batch = int(sys.argv[2]) if len(sys.argv) > 2 else 10_000
    ns = f"tm_bench_{uuid.uuid4().hex[:8]}:"
    try:
        for mode in ("exactly-once", "at-least-once"):
            bench(mode, n, per_batch, ns)
    finally:
        client = redis.Redis.from_url(URL)
        keys = list(client.scan_iter(match=ns + "*", count=10_000))
        for i in range(0, len(keys), 10_000):
            client.delete(*keys[i : i + 10_000])


if __name__ == "__main__":
    main()
