"""End-to-end latency at a low steady rate: a file renamed into the source folder -> its row
visible in PostgreSQL.  tidemark (``tidemark run``, default settings) against a hand-written
``foreachBatch`` upsert of the same files, each a process of its own, one after the other.

    python bench/bench_latency.py [--samples 60] [--every 1.0]

Each job is started, fed one file of one document (a new key) every ``--every`` seconds once
its first batch has committed, and PostgreSQL is polled (every 5 ms) for the key; the
latency is from the rename to the first poll that sees the row.  Prints p50, p90, p99 and
max of each, and tidemark's per-batch phases of the small batches.  Run on a quiet machine.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import textwrap
import time
import uuid

PG = os.environ.get("TIDEMARK_TEST_POSTGRES_URL", "postgresql://postgres@127.0.0.1:5432/test")
SCHEMA = {
    "type": "object",
    "required": ["customer", "amount"],
    "reduce": {"strategy": "merge"},
    "properties": {
        "customer": {"type": "string"},
        "amount": {"type": "integer", "reduce": {"strategy": "sum"}},
        "city": {"type": "string"},
    },
}

PEER = textwrap.dedent(
    """
    import sys, psycopg
    from pyspark.sql import SparkSession, functions as F
    folder, url, schema = sys.argv[1:4]
    spark = (SparkSession.builder.master("local[2]").config("spark.ui.enabled", "false")
             .config("spark.sql.shuffle.partitions", "4").getOrCreate())
    with psycopg.connect(url, autocommit=True) as con:
        con.execute(f'CREATE SCHEMA IF NOT EXISTS "{schema}"')
        con.execute(f'CREATE TABLE "{schema}".customers (customer text PRIMARY KEY, amount bigint, city text)')
    docs = spark.readStream.text(folder).select(F.from_json("value", "customer string, amount long, city string").alias("d"))

    def upsert(df, batch_id):
        agg = df.groupBy("d.customer").agg(F.sum("d.amount").alias("amount"), F.last("d.city").alias("city"))
        def part(rows):
            rows = [(r.customer, r.amount, r.city) for r in rows]
            if rows:
                with psycopg.connect(url) as con:
                    con.cursor().executemany(
                        f'INSERT INTO "{schema}".customers VALUES (%s, %s, %s) ON CONFLICT (customer) DO UPDATE '
                        "SET amount = customers.amount + EXCLUDED.amount, city = EXCLUDED.city", rows)
        agg.foreachPartition(part)

    docs.writeStream.foreachBatch(upsert).option("checkpointLocation", sys.argv[4]).start().awaitTermination()
    """
)


def write_doc(folder: str, i: int, key: str) -> float:
    tmp = os.path.join(folder, f".f-{i:05d}.json")
    with open(tmp, "w") as f:
        f.write(json.dumps({"customer": key, "amount": i, "city": "Oslo"}) + "\n")
    t = time.monotonic()
    os.replace(tmp, os.path.join(folder, f"f-{i:05d}.json"))
    return t


def measure(name: str, argv: list, folder: str, schema: str, samples: int, every: float) -> list[float]:
    import psycopg

    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    out: list[float] = []
    try:
        with psycopg.connect(PG, autocommit=True) as con:

            def seen(key: str) -> bool:
                try:
                    q = f'SELECT 1 FROM "{schema}".customers WHERE customer = %s'
                    return con.execute(q, (key,)).fetchone() is not None
                except psycopg.errors.UndefinedTable:
                    return False

            def wait(key: str, t0: float, limit: float = 120.0) -> float:
                while not seen(key):
                    if time.monotonic() - t0 > limit:
                        raise RuntimeError(f"{name}: {key} not visible after {limit} s")
                    time.sleep(0.005)
                return time.monotonic() - t0

            start = write_doc(folder, 0, "warm-0")
            print(f"{name}: first row after {wait('warm-0', start):.1f} s (start-up)", flush=True)
            for i in range(1, samples + 1):
                key = f"{name}-{i}"
                t0 = write_doc(folder, i, key)
                out.append(wait(key, t0))
                time.sleep(max(0.0, every - out[-1]))
    finally:
        proc.terminate()
        try:
            proc.wait(30)
        except subprocess.TimeoutExpired:
            proc.kill()
    return out


def pct(xs: list[float], p: float) -> float:
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(round(p / 100 * (len(xs) - 1))))]


def main() -> None:
    import psycopg
    import yaml

    ap = argparse.ArgumentParser()
    ap.add_argument("--samples", type=int, default=60)
    ap.add_argument("--every", type=float, default=1.0)
    args = ap.parse_args()
    tmp = tempfile.mkdtemp(prefix="tidemark-bench-latency-")
    results = {}
    schemas = []
    for name in ("tidemark", "peer"):
        folder = os.path.join(tmp, name, "data")
        os.makedirs(folder)
        schema = f"bench_latency_{name}_{uuid.uuid4().hex[:6]}"
        schemas.append(schema)
        if name == "tidemark":
            spec = {
                "collections": {"orders": {"key": ["/customer"], "schema": SCHEMA, "source": {"path": folder}}},
                "materializations": {
                    "view": {
                        "endpoint": {"postgres": {"url": PG, "schema": schema}},
                        "bindings": [{"source": "orders", "resource": {"table": "customers"}}],
                    }
                },
                "checkpoint": os.path.join(tmp, name, "checkpoints"),
            }
            path = os.path.join(tmp, name, "spec.yaml")
            with open(path, "w") as f:
                yaml.safe_dump(spec, f)
            argv = [sys.executable, "-m", "tidemark", "run", path, "--no-spark-ui", "--master", "local[2]"]
        else:
            argv = [sys.executable, "-c", PEER, folder, PG, schema, os.path.join(tmp, name, "chk")]
        results[name] = measure(name, argv, folder, schema, args.samples, args.every)
    for name, xs in results.items():
        print(
            f"{name:9}: p50 {pct(xs, 50) * 1000:5.0f} ms, p90 {pct(xs, 90) * 1000:5.0f} ms, "
            f"p99 {pct(xs, 99) * 1000:5.0f} ms, max {max(xs) * 1000:5.0f} ms, mean {statistics.mean(xs) * 1000:5.0f} ms "
            f"({len(xs)} files, one every {args.every:g} s)"
        )
    with psycopg.connect(PG, autocommit=True) as con:
        for schema in schemas:
            con.execute(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE')


if __name__ == "__main__":
    main()
