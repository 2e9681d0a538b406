"""A Kafka topic as the source against a folder of files holding the same documents, into
PostgreSQL: records per second, whole runs, side by side in one JVM.

    python bench/bench_log_source.py [--docs 400000] [--keys 100000] [--batches 8]
                                     [--partitions 4] [--rounds 2]

The documents are the orders stream of ``bench_small_batches.py`` (nine fields reduced per
customer).  The topic gets them keyed by customer over ``--partitions`` partitions (one
idempotent producer, no transactions); the folder gets them as ``--batches`` JSON-lines
files.  Both views read ``--batches`` batches (``max_records_per_batch`` = docs / batches;
``maxFilesPerTrigger: 1``) with the default settings otherwise, into two schemas of one
database, and are compared at the end.  A private noida-db broker (the test broker) is
started; nothing else may run on the machine.  Round 1 warms the JIT; the last is reported.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
import uuid

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

import yaml
from bench_small_batches import SCHEMA, write_stream

PG = os.environ.get("TIDEMARK_TEST_POSTGRES_URL", "postgresql://postgres@127.0.0.1:5432/test")


def start_broker(tmp: str) -> tuple[subprocess.Popen, str]:
    from confluent_kafka.admin import AdminClient

    from tests.support.helpers import free_port
    from tests.support.kafka_broker import noida_binary

    port = free_port()
    proc = subprocess.Popen(
        [noida_binary(), "start", "--data-dir", os.path.join(tmp, "noida"), "--only", "kafka"]
        + ["--kafka-port", str(port), "--host", "127.0.0.1"],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    bootstrap = f"127.0.0.1:{port}"
    deadline = time.monotonic() + 30
    while True:
        try:
            AdminClient({"bootstrap.servers": bootstrap}).list_topics(timeout=1)
            return proc, bootstrap
        except Exception:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.1)


def produce(bootstrap: str, topic: str, partitions: int, docs: list[dict]) -> float:
    from confluent_kafka import Producer
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient({"bootstrap.servers": bootstrap})
    for fut in admin.create_topics([NewTopic(topic, partitions, 1)]).values():
        fut.result(30)
    producer = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True, "linger.ms": 20})
    t = time.perf_counter()
    for doc in docs:
        while True:
            try:
                producer.produce(topic, key=json.dumps([doc["customer"]]), value=json.dumps(doc))
                break
            except BufferError:
                producer.poll(0.05)
    producer.flush(120)
    return time.perf_counter() - t


def spec_file(tmp: str, name: str, source: dict, schema: str) -> str:
    spec = {
        "collections": {"orders": {"key": ["/customer"], "schema": SCHEMA, "source": source}},
        "materializations": {
            "view": {
                "endpoint": {"postgres": {"url": PG, "schema": schema}},
                "shards": 2,
                "bindings": [{"source": "orders", "resource": {"table": "customers"}}],
            }
        },
        "checkpoint": os.path.join(tmp, name, "checkpoints"),
    }
    os.makedirs(os.path.join(tmp, name), exist_ok=True)
    path = os.path.join(tmp, name, "spec.yaml")
    with open(path, "w") as f:
        yaml.safe_dump(spec, f)
    return path


def table(schema: str) -> dict:
    import psycopg

    from tests.support.helpers import table_documents

    with psycopg.connect(PG) as con:
        return table_documents(con.execute(f'SELECT * FROM "{schema}"."customers"'), "customer")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--docs", type=int, default=400_000)
    ap.add_argument("--keys", type=int, default=100_000)
    ap.add_argument("--batches", type=int, default=8)
    ap.add_argument("--partitions", type=int, default=4)
    ap.add_argument("--rounds", type=int, default=2)
    args = ap.parse_args()
    import psycopg

    from tidemark.spark.runner import run_spec
    from tidemark.spark.session import local_session

    tmp = tempfile.mkdtemp(prefix="tidemark-bench-log-")
    proc, bootstrap = start_broker(tmp)
    try:
        folder = os.path.join(tmp, "files")
        write_stream(folder, args.docs, args.keys, args.batches)
        docs = []
        for name in sorted(os.listdir(folder)):
            with open(os.path.join(folder, name)) as f:
                docs += [json.loads(line) for line in f]
        per = len(docs) // args.batches
        topic = f"orders-{uuid.uuid4().hex[:6]}"
        took = produce(bootstrap, topic, args.partitions, docs)
        print(f"produced {len(docs)} documents to {topic} ({args.partitions} partitions) in {took:.1f} s")
        spark = local_session("bench-log-source")
        results: dict = {}
        for r in range(args.rounds):
            for kind in ("kafka", "files"):
                schema = f"bench_log_{kind}_{uuid.uuid4().hex[:6]}"
                source = (
                    {"kafka": {"bootstrap_servers": bootstrap, "topic": topic, "max_records_per_batch": per}}
                    if kind == "kafka"
                    else {"format": "json", "path": folder, "options": {"maxFilesPerTrigger": 1}}
                )
                spec = spec_file(tmp, f"{kind}-{r}", source, schema)
                reports: list = []
                t = time.perf_counter()
                run_spec(spec, spark=spark, on_batch=reports.append)
                wall = time.perf_counter() - t
                results[kind] = (wall, len(reports), schema)
                print(
                    f"round {r + 1} {kind:5}: {wall:6.1f} s, {len(reports)} batches, "
                    f"{len(docs) / wall:8.0f} documents/s"
                )
        kafka_view, files_view = table(results["kafka"][2]), table(results["files"][2])
        assert kafka_view == files_view, "the two views differ"
        ratio = results["files"][0] / results["kafka"][0]
        print(f"kafka/files throughput: {ratio:.2f}x (views equal, {len(kafka_view)} keys)")
        with psycopg.connect(PG, autocommit=True) as con:
            for r in con.execute("SELECT nspname FROM pg_namespace WHERE nspname LIKE 'bench_log_%'").fetchall():
                con.execute(f'DROP SCHEMA "{r[0]}" CASCADE')
        spark.stop()
    finally:
        proc.kill()


if __name__ == "__main__":
    main()
