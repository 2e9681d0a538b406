"""``tidemark verify`` against building the view: the same 1M documents, whole runs.

    python bench/bench_verify.py [--docs 1000000] [--keys 100000] [--batches 40]

The orders stream of ``bench_small_batches.py`` into PostgreSQL (default settings, 2 shards):
the view is built with ``run_spec`` (a fresh JVM's start included), then verified (no Spark);
both times are printed, and their ratio.  Run on a quiet machine.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
import uuid

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

import yaml
from bench_small_batches import SCHEMA, write_stream

PG = os.environ.get("TIDEMARK_TEST_POSTGRES_URL", "postgresql://postgres@127.0.0.1:5432/test")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--docs", type=int, default=1_000_000)
    ap.add_argument("--keys", type=int, default=100_000)
    ap.add_argument("--batches", type=int, default=40)
    args = ap.parse_args()
    import psycopg

    from tidemark.runtime.verify import verify
    from tidemark.spark.runner import run_spec
    from tidemark.spark.session import local_session
    from tidemark.spec import load_spec

    tmp = tempfile.mkdtemp(prefix="tidemark-bench-verify-")
    folder = os.path.join(tmp, "data")
    write_stream(folder, args.docs, args.keys, args.batches)
    schema = f"bench_verify_{uuid.uuid4().hex[:6]}"
    spec = {
        "collections": {
            "orders": {
                "key": ["/customer"],
                "schema": SCHEMA,
                "source": {"format": "json", "path": folder, "options": {"maxFilesPerTrigger": 1}},
            }
        },
        "materializations": {
            "view": {
                "endpoint": {"postgres": {"url": PG, "schema": schema}},
                "shards": 2,
                "bindings": [{"source": "orders", "resource": {"table": "customers"}}],
            }
        },
        "checkpoint": os.path.join(tmp, "checkpoints"),
    }
    path = os.path.join(tmp, "spec.yaml")
    with open(path, "w") as f:
        yaml.safe_dump(spec, f)
    try:
        t = time.perf_counter()
        spark = local_session("bench-verify")
        run_spec(path, spark=spark)
        built = time.perf_counter() - t
        spark.stop()
        t = time.perf_counter()
        result = verify(load_spec(path), "view")
        took = time.perf_counter() - t
        assert result.ok, result
        print(
            f"{args.docs} documents, {args.keys} keys, {args.batches} batches: built in {built:.1f} s "
            f"(Spark's start included), verified in {took:.1f} s ({args.docs / took:,.0f} documents/s): "
            f"{took / built:.2f}x the build's time"
        )
    finally:
        with psycopg.connect(PG, autocommit=True) as con:
            con.execute(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE')


if __name__ == "__main__":
    main()
