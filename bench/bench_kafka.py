"""The ``kafka`` endpoint per shard: docs/s into a topic (Store + commit, with the local state),
against a bare transactional producer sending the same records; Load keys/s; Open; and the
rebuild of a lost local state.

    python bench/bench_kafka.py [DOCS] [BATCH] [--bootstrap HOST:PORT]

Without ``--bootstrap`` a private noida-db broker is started (the tests' broker). One shard
session per batch, one range; documents of ~100 bytes. Run it on a quiet machine.
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile
import time
import uuid

import orjson

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from tidemark.drivers.kafka import KafkaDriver
from tidemark.protocol.messages import (
    Acknowledge,
    Apply,
    BindingSpec,
    Flush,
    Load,
    Open,
    Range,
    StartCommit,
    Store,
)


def doc(i: int, batch: int) -> dict:
    return {"id": f"key-{i:09d}", "n": batch, "payload": "x" * 64}


def store_msg(docs):
    n = len(docs)
    return Store(0, tuple((d["id"],) for d in docs), tuple(() for _ in docs), tuple(docs), (False,) * n, (False,) * n)


def run(bootstrap: str, n: int, batch_size: int, root: str) -> None:
    tag = uuid.uuid4().hex[:6]
    binding = BindingSpec({"topic": f"bench-{tag}", "partitions": 3}, "docs", ("/id",), ())
    driver = KafkaDriver(
        {
            "bootstrap_servers": bootstrap,
            "state": os.path.join(root, "state"),
            "progress_topic": f"bench-progress-{tag}",
        }
    )
    driver.apply(Apply("bench", "v1", (binding,)))
    opens, commits = [], []
    t0 = time.perf_counter()
    for b, lo in enumerate(range(0, n, batch_size)):
        t = time.perf_counter()
        txn, _ = driver.open(Open("bench", "v1", Range(), bindings=(binding,)))
        opens.append(time.perf_counter() - t)
        txn.acknowledge(Acknowledge())
        hi = min(n, lo + batch_size)
        for i in range(lo, hi, 10_000):
            txn.store(store_msg([doc(j, b) for j in range(i, min(hi, i + 10_000))]))
        t = time.perf_counter()
        txn.start_commit(StartCommit({"checkpoint_id": "bench", "batch_id": b, "materialization": "bench"}))
        commits.append(time.perf_counter() - t)
        txn.close()
    dt = time.perf_counter() - t0
    print(
        f"tidemark kafka: {n / dt:,.0f} docs/s ({n} docs in {len(opens)} batches, {dt:.2f}s; "
        f"Open median {sorted(opens)[len(opens) // 2] * 1000:.0f} ms, commit median "
        f"{sorted(commits)[len(commits) // 2] * 1000:.0f} ms)"
    )

    from confluent_kafka import Producer

    raw_topic = f"bench-raw-{tag}"
    from tidemark.drivers.kafka.topics import TopicSpec, ensure_topics

    ensure_topics({"bootstrap.servers": bootstrap}, [TopicSpec(raw_topic, 3)])
    t0 = time.perf_counter()
    for b, lo in enumerate(range(0, n, batch_size)):
        p = Producer(
            {
                "bootstrap.servers": bootstrap,
                "transactional.id": f"raw-{tag}",
                "enable.idempotence": True,
                "retry.backoff.ms": 10,
                "reconnect.backoff.ms": 5,
                "topic.metadata.refresh.fast.interval.ms": 10,
            }
        )
        p.init_transactions(30)
        p.begin_transaction()
        for j in range(lo, min(n, lo + batch_size)):
            d = doc(j, b)
            while True:
                try:
                    p.produce(raw_topic, key=orjson.dumps([d["id"]]), value=orjson.dumps(d))
                    break
                except BufferError:
                    p.poll(0.05)
        p.commit_transaction(30)
    dt_raw = time.perf_counter() - t0
    print(
        f"bare transactional producer: {n / dt_raw:,.0f} docs/s ({dt_raw:.2f}s); tidemark takes "
        f"{dt / dt_raw:.2f}x its time"
    )

    txn, _ = driver.open(Open("bench", "v1", Range(), bindings=(binding,)))
    txn.acknowledge(Acknowledge())
    t0 = time.perf_counter()
    found = 0
    for lo in range(0, n, 10_000):
        found += sum(
            len(r.keys) for r in txn.load(Load(0, tuple((f"key-{i:09d}",) for i in range(lo, min(n, lo + 10_000)))))
        )
    found += sum(len(r.keys) for r in txn.flush(Flush())[0])
    dt = time.perf_counter() - t0
    txn.close()
    print(f"load from the local state: {n / dt:,.0f} keys/s ({found} found)")

    shutil.rmtree(os.path.join(root, "state"))
    t0 = time.perf_counter()
    txn, _ = driver.open(Open("bench", "v1", Range(), bindings=(binding,)))
    dt = time.perf_counter() - t0
    txn.close()
    print(f"rebuild of a lost local state at Open: {dt:.2f}s for {n} keys ({n / dt:,.0f} keys/s)")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("docs", nargs="?", type=int, default=200_000)
    ap.add_argument("batch", nargs="?", type=int, default=25_000)
    ap.add_argument("--bootstrap")
    args = ap.parse_args()
    root = tempfile.mkdtemp(prefix="bench-kafka-")
    broker = None
    try:
        bootstrap = args.bootstrap
        if not bootstrap:
            from pathlib import Path

            from tests.support.kafka_broker import NoidaKafka, noida_binary

            broker = NoidaKafka(noida_binary(), Path(root) / "broker")
            broker.start()
            bootstrap = broker.bootstrap
        run(bootstrap, args.docs, args.batch, root)
    finally:
        if broker is not None:
            broker.stop()
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
