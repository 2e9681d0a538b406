"""tidemark into PostgreSQL vs what users write by hand, on the same stream.

    python bench/bench_postgres_e2e.py [--docs 1000000] [--keys 100000] [--batches 5]
                                       [--shards 2] [--url URL] [--skip a,b,...] [--growing]

The stream: ``--docs`` order documents over ``--keys`` customers in ``--batches`` files
(one file per micro-batch).  Per customer the view holds ``amount`` and ``orders``
(sum), ``largest`` (maximize), ``city`` (last write wins) and ``ts`` (maximize).

(a) tidemark: ``run_spec`` of a spec with a ``postgres`` endpoint (exactly-once).
(b) by hand: ``foreachBatch`` that aggregates each batch in Spark (``groupBy/agg``, the
    same meaning) and upserts with psycopg ``executemany`` (at-least-once: a crash
    between the upsert and Spark's commit adds a batch twice).
(c) the endpoint's limit: raw ``COPY`` of exactly the rows each batch must write (the
    keys the batch touched, with their full documents), each batch into a fresh table
    with the same primary key; the COPY text is built before the clock starts.
(d) the endpoint part of (a): the same Loads, Stores and commits the shards send,
    replayed through one driver session in this process (messages built before the
    clock starts); its Load rate is the per-shard Load throughput.
(e) per-batch overhead: tidemark on tiny batches (10 documents per batch), and one
    driver transaction of one document.

(s) the Spark part of (b) alone: read, aggregate, collect into Python; no writes.
(n) read and aggregate only: (b)'s aggregate into Spark's ``noop`` sink, nothing leaves
    the JVM -- the floor under any design that reads and combines each batch in Spark.

Spark runs ``local[--shards]``; one SparkSession is started (and warmed) before any
timing.  (a), (b), (s) and (n) run in ``--rounds`` rounds of (b), (s), (n), (a) on the same
stream (fresh tables and checkpoints each round): the first round warms the JIT for all of
them (whichever ran first used to pay it alone), and the ratios use the last round.  Every run
writes a schema of its own, dropped at the end.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import random
import shutil
import subprocess
import sys
import tempfile
import time
import uuid

import psycopg

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from bench_postgres_driver import backend_cpu, own_cpu

SCHEMA = {
    "type": "object",
    "required": ["customer", "amount", "orders", "largest", "city", "ts"],
    "reduce": {"strategy": "merge"},
    "properties": {
        "customer": {"type": "string"},
        "amount": {"type": "integer", "reduce": {"strategy": "sum"}},
        "orders": {"type": "integer", "reduce": {"strategy": "sum"}},
        "largest": {"type": "integer", "reduce": {"strategy": "maximize"}},
        "city": {"type": "string"},
        "ts": {"type": "integer", "reduce": {"strategy": "maximize"}},
    },
}
CITIES = ["Lisbon", "Oslo", "Quito", "Hanoi", "Accra", "Lima"]
ENDPOINT_EXTRA: dict = {}  # endpoint settings from the command line (e.g. --fillfactor)
SPARK_SCHEMA = "customer STRING, amount BIGINT, orders BIGINT, largest BIGINT, city STRING, ts BIGINT"


# ------------------------------------------------------------------------- data


def write_stream(
    directory: str, docs: int, keys: int, batches: int, seed: int = 7, prefix: str = "orders", growing: bool = False
):
    """One JSON-lines file per batch; returns the documents of each batch.

    Keys are drawn from all ``keys`` in every batch, or with ``growing`` from a window that
    moves up: batch b draws from [b * step, (b + 2) * step) with step = keys / (batches + 1),
    so about half of its keys are above every key stored before (new customers) and half
    revisit the previous batch's."""
    draw = random.Random(seed)
    os.makedirs(directory, exist_ok=True)
    per = docs // batches
    step = keys // (batches + 1)
    out, ts = [], 0
    for b in range(batches):
        batch = []
        path = os.path.join(directory, f"{prefix}-{b:04d}.json")
        lo, span = (b * step, 2 * step) if growing else (0, keys)
        with open(path, "w") as f:
            for _ in range(per):
                amount = draw.randrange(1, 1000)
                d = {
                    "customer": f"c{lo + draw.randrange(span):07d}",
                    "amount": amount,
                    "orders": 1,
                    "largest": amount,
                    "city": draw.choice(CITIES),
                    "ts": ts,
                }
                ts += 1
                batch.append(d)
                f.write(json.dumps(d, separators=(",", ":")) + "\n")
        stamp = 1_700_000_000 + b * 10
        os.utime(path, (stamp, stamp))
        out.append(batch)
    return out


def reduce_into(cur, d):
    if cur is None:
        return dict(d)
    return {
        "customer": d["customer"],
        "amount": cur["amount"] + d["amount"],
        "orders": cur["orders"] + d["orders"],
        "largest": max(cur["largest"], d["largest"]),
        "city": d["city"],
        "ts": max(cur["ts"], d["ts"]),
    }


def plan_batches(batches):
    """Per batch: (keys it Loads that exist, the rows it must write); and the final view."""
    view: dict = {}
    plans = []
    for batch in batches:
        combined: dict = {}
        for d in batch:
            combined[d["customer"]] = reduce_into(combined.get(d["customer"]), d)
        rows, existed = [], []
        for k in sorted(combined):
            prior = view.get(k)
            existed.append(prior is not None)
            view[k] = reduce_into(prior, combined[k]) if prior is not None else combined[k]
            rows.append(view[k])
        plans.append((sorted(combined), existed, rows))
    return plans, view


# ------------------------------------------------------------------------ runs


def run_tidemark(spark, data, url, schema, shards, checkpoint) -> tuple[float, list]:
    import yaml

    from tidemark.spark.runner import run_spec

    spec = {
        "collections": {
            "orders": {
                "key": ["/customer"],
                "schema": SCHEMA,
                "source": {"format": "json", "path": data, "options": {"maxFilesPerTrigger": 1}},
            }
        },
        "materializations": {
            "view": {
                "endpoint": {"postgres": {"url": url, "schema": schema, **ENDPOINT_EXTRA}},
                "shards": shards,
                "bindings": [{"source": "orders", "resource": {"table": "customers"}}],
            }
        },
        "checkpoint": checkpoint,
    }
    path = os.path.join(os.path.dirname(checkpoint), f"spec-{uuid.uuid4().hex[:6]}.yaml")
    with open(path, "w") as f:
        yaml.safe_dump(spec, f)
    reports: list = []
    t0 = time.perf_counter()
    run_spec(path, spark=spark, on_batch=reports.append)
    return time.perf_counter() - t0, reports


def run_by_hand(spark, data, url, schema, checkpoint, write_rows: bool = True, collect: bool = True) -> float:
    """What users write today: foreachBatch, groupBy/agg, executemany upserts.

    ``write_rows=False`` runs only its Spark part: read, aggregate and collect the rows into
    Python ((s)).  With ``collect=False`` as well, the aggregate goes to Spark's ``noop``
    sink and nothing leaves the JVM ((n)): the floor under any design that reads and
    combines each batch in Spark."""
    from pyspark.sql import functions as F

    with psycopg.connect(url, autocommit=True) as con:
        con.execute(f'CREATE SCHEMA IF NOT EXISTS "{schema}"')
        con.execute(
            f'CREATE TABLE "{schema}".customers (customer text PRIMARY KEY, amount bigint, orders bigint, '
            "largest bigint, city text, ts bigint)"
        )
    upsert = (
        f'INSERT INTO "{schema}".customers AS t (customer, amount, orders, largest, city, ts) '
        "VALUES (%s, %s, %s, %s, %s, %s) ON CONFLICT (customer) DO UPDATE SET "
        "amount = t.amount + EXCLUDED.amount, orders = t.orders + EXCLUDED.orders, "
        "largest = GREATEST(t.largest, EXCLUDED.largest), city = EXCLUDED.city, ts = GREATEST(t.ts, EXCLUDED.ts)"
    )

    def write(df, _batch_id):
        agg = df.groupBy("customer").agg(
            F.sum("amount"), F.sum("orders"), F.max("largest"), F.max_by("city", "ts"), F.max("ts")
        )
        if not collect:
            agg.write.format("noop").mode("overwrite").save()
            return
        rows = [tuple(r) for r in agg.collect()]
        if not write_rows:
            return
        with psycopg.connect(url) as con, con.cursor() as cur:
            for s in range(0, len(rows), 10_000):
                cur.executemany(upsert, rows[s : s + 10_000])

    t0 = time.perf_counter()
    q = (
        spark.readStream.schema(SPARK_SCHEMA)
        .option("maxFilesPerTrigger", 1)
        .json(data)
        .writeStream.foreachBatch(write)
        .option("checkpointLocation", checkpoint)
        .trigger(availableNow=True)
        .start()
    )
    q.awaitTermination()
    return time.perf_counter() - t0


def copy_text(v) -> str:
    if isinstance(v, str):
        return v.replace("\\", "\\\\").replace("\t", "\\t").replace("\n", "\\n")
    return str(v)


def run_raw_copy(url, schema, plans) -> tuple[float, float]:
    """COPY exactly the rows each batch must write, into a fresh keyed table per batch."""
    cols = ("customer", "amount", "orders", "largest", "city", "ts")
    payloads = [
        "".join(
            "\t".join([*(copy_text(r[c]) for c in cols), json.dumps(r, separators=(",", ":")).replace("\\", "\\\\")])
            + "\n"
            for r in rows
        )
        for _keys, _existed, rows in plans
    ]
    total = 0.0
    with psycopg.connect(url) as con:
        con.execute(f'CREATE SCHEMA IF NOT EXISTS "{schema}"')
        con.commit()
        pid, c0, b0 = con.info.backend_pid, own_cpu(), backend_cpu(con.info.backend_pid)
        for b, payload in enumerate(payloads):
            t0 = time.perf_counter()
            con.execute(
                f'CREATE TABLE "{schema}".raw_{b} (customer text PRIMARY KEY, amount bigint, orders bigint, '
                "largest bigint, city text, ts bigint, flow_document jsonb NOT NULL)"
            )
            with con.cursor() as cur, cur.copy(f'COPY "{schema}".raw_{b} FROM STDIN') as cp:
                cp.write(payload)
            con.commit()
            total += time.perf_counter() - t0
        cpu = own_cpu() - c0 + backend_cpu(pid) - b0
    return total, cpu


def binding_spec():
    from tidemark.protocol.messages import BindingSpec, Field

    return BindingSpec(
        {"table": "customers"},
        "orders",
        ("/customer",),
        (
            Field("customer", "/customer", "string", is_key=True, nullable=False),
            Field("amount", "/amount", "integer"),
            Field("city", "/city", "string"),
            Field("largest", "/largest", "integer"),
            Field("orders", "/orders", "integer"),
            Field("ts", "/ts", "integer"),
        ),
    )


def run_driver_replay(url, schema, plans) -> dict:
    """The Loads, Stores and commits of (a), through one driver session, timed by phase."""
    from tidemark.drivers.postgres import PostgresDriver
    from tidemark.protocol.messages import Acknowledge, Apply, Flush, Load, Open, Range, StartCommit, Store

    b = binding_spec()
    names = [f.name for f in b.value_fields]
    driver = PostgresDriver({"url": url, "schema": schema, **ENDPOINT_EXTRA})
    caps = driver.capabilities
    driver.apply(Apply("replay", driver.config, (b,)))
    msgs = []
    for keys, existed, rows in plans:
        loads = [
            Load(
                0,
                tuple((k,) for k, e in zip(keys[s : s + caps.max_load_keys], existed[s : s + caps.max_load_keys]) if e),
            )
            for s in range(0, len(keys), caps.max_load_keys)
        ]
        stores = [
            Store(
                0,
                tuple((r["customer"],) for r in rows[s : s + caps.max_store_docs]),
                tuple(tuple(r[n] for n in names) for r in rows[s : s + caps.max_store_docs]),
                tuple(rows[s : s + caps.max_store_docs]),
                tuple(existed[s : s + caps.max_store_docs]),
                (False,) * len(rows[s : s + caps.max_store_docs]),
            )
            for s in range(0, len(rows), caps.max_store_docs)
        ]
        msgs.append(([m for m in loads if m.keys], stores))
    out = {"load": 0.0, "store": 0.0, "commit": 0.0, "loaded": 0, "stored": 0}
    t, _ = driver.open(Open("replay", "v", Range(), bindings=(b,)))
    pid = t.con.info.backend_pid
    c0, b0 = own_cpu(), backend_cpu(pid)
    t_all = time.perf_counter()
    for n, (loads, stores) in enumerate(msgs):
        t.acknowledge(Acknowledge())
        t0 = time.perf_counter()
        for m in loads:
            out["loaded"] += sum(len(r.keys) for r in t.load(m))
        late, _ = t.flush(Flush())
        out["loaded"] += sum(len(r.keys) for r in late)
        t1 = time.perf_counter()
        for m in stores:
            t.store(m)
            out["stored"] += len(m.keys)
        t2 = time.perf_counter()
        t.start_commit(StartCommit({"checkpoint_id": "replay", "batch_id": n, "materialization": "replay"}))
        t3 = time.perf_counter()
        out["load"] += t1 - t0
        out["store"] += t2 - t1
        out["commit"] += t3 - t2
    out["total"] = time.perf_counter() - t_all
    out["cpu"] = own_cpu() - c0 + backend_cpu(pid) - b0
    # one tiny transaction (1 document): the fixed cost of a shard's endpoint transaction
    tiny = []
    for n in range(len(msgs), len(msgs) + 20):
        t0 = time.perf_counter()
        t.acknowledge(Acknowledge())
        t.load(Load(0, (("c0000001",),)))
        t.flush(Flush())
        d = dict(plans[0][2][0], customer="c0000001")
        t.store(Store(0, (("c0000001",),), (tuple(d[x] for x in names),), (d,), (True,), (False,)))
        t.start_commit(StartCommit({"checkpoint_id": "replay", "batch_id": n, "materialization": "replay"}))
        tiny.append(time.perf_counter() - t0)
    t.close()
    t0 = time.perf_counter()
    t, _ = driver.open(Open("replay", "v", Range(), bindings=(b,)))
    out["open"] = time.perf_counter() - t0
    t.close()
    driver.close()
    tiny.sort()
    out["tiny_txn_median"] = tiny[len(tiny) // 2]
    return out


def check_views(url, schema_a, schema_b, view) -> str:
    with psycopg.connect(url) as con:
        a = {
            r[0]: r[1:]
            for r in con.execute(f'SELECT customer, amount, orders, largest, city, ts FROM "{schema_a}".customers')
        }
        b = (
            {
                r[0]: r[1:]
                for r in con.execute(f'SELECT customer, amount, orders, largest, city, ts FROM "{schema_b}".customers')
            }
            if schema_b
            else None
        )
    want = {k: (d["amount"], d["orders"], d["largest"], d["city"], d["ts"]) for k, d in view.items()}
    return f"(a) {'==' if a == want else '!='} oracle" + (
        "" if b is None else f", (b) {'==' if b == want else '!='} oracle"
    )


def machine() -> str:
    def sh(cmd):
        try:
            return subprocess.run(cmd, shell=True, capture_output=True, text=True, timeout=10).stdout.strip()
        except Exception:
            return "?"

    return "\n".join(
        [
            f"nproc: {sh('nproc')}",
            sh("lscpu | head -20"),
            sh("free -g | head -2"),
            f"python {platform.python_version()}",
            f"load average at start: {sh('cat /proc/loadavg')}",
        ]
    )


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--docs", type=int, default=1_000_000)
    ap.add_argument("--keys", type=int, default=100_000)
    ap.add_argument("--batches", type=int, default=5)
    ap.add_argument("--shards", type=int, default=2)
    ap.add_argument(
        "--url", default=os.environ.get("TIDEMARK_TEST_POSTGRES_URL", "postgresql://postgres@127.0.0.1:5432/test")
    )
    ap.add_argument(
        "--fillfactor",
        type=int,
        default=None,
        help="the view tables' fillfactor for (a) and (d) (default: the driver's)",
    )
    ap.add_argument(
        "--rounds",
        type=int,
        default=2,
        help="rounds of (b), (s), (n), (a) in one JVM; the ratios use the last (default 2: one warm-up)",
    )
    ap.add_argument(
        "--growing",
        action="store_true",
        help="keys grow: each batch's keys are half new (above all stored), half the previous batch's",
    )
    ap.add_argument(
        "--skip",
        default="",
        help="comma-separated: a,b,s,n,c,d,e (s: the Spark part of (b) alone; n: its read and aggregate only)",
    )
    args = ap.parse_args()
    if args.fillfactor is not None:
        ENDPOINT_EXTRA["fillfactor"] = args.fillfactor
    skip = set(filter(None, args.skip.split(",")))
    tag = uuid.uuid4().hex[:6]
    schemas = {k: f"tm_bench_{k}_{tag}" for k in "absncde"}
    work = tempfile.mkdtemp(prefix="tm-bench-")
    print(machine())
    with psycopg.connect(args.url) as con:
        print(con.execute("SELECT version()").fetchone()[0])
    print(
        f"\nstream: {args.docs:,} documents over {args.keys:,} keys in {args.batches} batches, "
        f"{args.shards} shard(s), Spark local[{args.shards}]"
    )
    data = os.path.join(work, "data")
    t0 = time.perf_counter()
    batches = write_stream(data, args.docs, args.keys, args.batches, growing=args.growing)
    print(f"keys: {'growing (a window moving up)' if args.growing else 'uniform over all keys'}")
    plans, view = plan_batches(batches)
    print(
        f"data + plan: {time.perf_counter() - t0:.1f}s; rows to write per batch: "
        f"{[len(p[2]) for p in plans]}, existing keys to load: {[sum(p[1]) for p in plans]}"
    )
    results: dict = {}
    try:
        spark = None
        if not {"a", "b", "s", "n", "e"} <= skip:
            from tidemark.spark.session import local_session

            spark = local_session("tidemark-bench", master=f"local[{args.shards}]", shuffle_partitions=args.shards)
            from pyspark.sql import functions as F

            spark.range(1000).groupBy((F.col("id") % 3).alias("k")).count().collect()  # warm up
        # (a), (b), (s) and (n) share one JVM: whichever runs first pays the JIT's warm-up of
        # the JSON reader, the aggregation and the shuffle for the others.  So they run in
        # rounds, (b), (s), (n), (a) in each, and the ratios use the last round.
        for rnd in range(1, (args.rounds if not {"a", "b", "s", "n"} <= skip else 0) + 1):
            last = rnd == args.rounds
            print(f"\nround {rnd} of {args.rounds}" + (" (the ratios use this one)" if last else " (warm-up)"))
            if rnd > 1:
                for k in "absn":
                    schemas[f"{k}{rnd - 1}"] = schemas[k]
                    schemas[k] = f"tm_bench_{k}_{tag}_{rnd}"
            run = os.path.join(work, f"round-{rnd}")
            os.makedirs(run, exist_ok=True)
            if "b" not in skip:
                wall = run_by_hand(spark, data, args.url, schemas["b"], os.path.join(run, "chk-b"))
                results["b"] = wall
                print(f"(b) foreachBatch + executemany:   {wall:8.2f}s  ({args.docs / wall:,.0f} docs/s)")
            if "s" not in skip:
                wall = run_by_hand(spark, data, args.url, schemas["s"], os.path.join(run, "chk-s"), write_rows=False)
                results["s"] = wall
                print(f"(s) the Spark part of (b) alone (read, aggregate, collect; no writes): {wall:.2f}s")
            if "n" not in skip:
                wall = run_by_hand(
                    spark, data, args.url, schemas["n"], os.path.join(run, "chk-n"), write_rows=False, collect=False
                )
                results["n"] = wall
                print(f"(n) read and aggregate only (Spark's noop sink; nothing leaves the JVM): {wall:.2f}s")
            if "a" not in skip:
                wall, reports = run_tidemark(
                    spark, data, args.url, schemas["a"], args.shards, os.path.join(run, "chk-a")
                )
                results["a"] = wall
                print(f"(a) tidemark → PostgreSQL:       {wall:8.2f}s  ({args.docs / wall:,.0f} docs/s)")
                for r in reports:
                    t = r.timings
                    print(
                        f"    batch {r.batch_id}: {r.wall:.2f}s plan={t.get('plan', 0):.2f} shards={t.get('shards', 0):.2f} "
                        f"[open={t.get('shard.open', 0):.2f} load={t.get('shard.load', 0):.2f} "
                        f"store={t.get('shard.store', 0):.2f} commit={t.get('shard.commit', 0):.2f}] "
                        f"log={t.get('recovery_log', 0):.2f} loaded={r.loaded} stored={r.stored}"
                    )
                print(
                    "    views: " + check_views(args.url, schemas["a"], schemas["b"] if "b" not in skip else None, view)
                )
        if "c" not in skip:
            results["c"], results["c_cpu"] = run_raw_copy(args.url, schemas["c"], plans)
            rows = sum(len(p[2]) for p in plans)
            print(
                f"(c) raw COPY of the rows to write: {results['c']:7.2f}s  ({rows / results['c']:,.0f} rows/s, {rows:,} rows); "
                f"CPU {results['c_cpu']:.2f}s (client + server)"
            )
        if "d" not in skip:
            d = run_driver_replay(args.url, schemas["d"], plans)
            results["d"] = d
            print(
                f"(d) endpoint part of (a), replayed: {d['total']:6.2f}s  load={d['load']:.2f}s store={d['store']:.2f}s "
                f"commit={d['commit']:.2f}s; CPU {d['cpu']:.2f}s (client + server)"
            )
            if d["load"]:
                print(f"    Load: {d['loaded'] / d['load']:,.0f} keys/s per shard ({d['loaded']:,} keys)")
            print(f"    Store+commit: {d['stored'] / (d['store'] + d['commit']):,.0f} docs/s per shard")
            print(
                f"    one-document transaction (ack, load, flush, store, commit): {d['tiny_txn_median'] * 1000:.1f} ms; "
                f"open: {d['open'] * 1000:.1f} ms"
            )
        if "e" not in skip:
            tiny = os.path.join(work, "tiny")
            write_stream(tiny, 100, 50, 10, seed=3)
            wall, reports = run_tidemark(spark, tiny, args.url, schemas["e"], args.shards, os.path.join(work, "chk-e"))
            walls = sorted(r.wall for r in reports)
            print(
                f"(e) tiny batches (10 docs): {wall / len(reports):.2f}s per batch over {len(reports)} batches "
                f"(median batch {walls[len(walls) // 2]:.2f}s)"
            )
            results["e"] = walls[len(walls) // 2]
        print("\nratios:")
        if "a" in results and "b" in results:
            print(f"  (a)/(b) wall = {results['a'] / results['b']:.2f}   (goal ≤ 0.5)")
        if "s" in results and "b" in results:
            print(f"  (s)/(b) wall = {results['s'] / results['b']:.2f}   (the Spark part's share of (b))")
        if "n" in results and "b" in results:
            print(f"  (n)/(b) wall = {results['n'] / results['b']:.2f}   (read and aggregate only)")
        if "d" in results and "c" in results:
            print(
                f"  (d)/(c) endpoint = {results['d']['total'] / results['c']:.2f} wall, "
                f"{results['d']['cpu'] / results['c_cpu']:.2f} CPU   (goal ≤ 2)"
            )
        print(f"  load average at end: {open('/proc/loadavg').read().strip()}")
        if spark is not None:
            spark.stop()
    finally:
        with psycopg.connect(args.url, autocommit=True) as con:
            for s in schemas.values():
                con.execute(f'DROP SCHEMA IF EXISTS "{s}" CASCADE')
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
