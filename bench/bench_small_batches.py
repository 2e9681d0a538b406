"""Many small batches into PostgreSQL: tidemark against the hand-written job, side by side.

    python bench/bench_small_batches.py [--docs 1000000] [--batches 40] [--keys 100000]
                                        [--shards 2] [--rounds 2] [--tiny 20] [--plot PNG] [--before]
                                        [--crossover 500,2000,5000,10000,20000] [--skip h,n,t,l]

The stream: ``--docs`` order documents over ``--keys`` customers, one JSON-lines file per
micro-batch (``--batches`` files, ``maxFilesPerTrigger: 1``).  Nine fields, reduced per
customer: ``amount``, ``orders`` (sum), ``largest`` (maximize), ``smallest`` (minimize),
``city`` (last write wins), ``first_city`` (first write wins), ``ts`` (maximize) and
``items`` (append), keyed by ``customer``.

(h) by hand: ``foreachBatch`` that aggregates the batch in Spark (``groupBy().agg()``, the
    same meaning: ``max_by``/``min_by`` by ``ts`` for the write-wins fields, the items
    ordered by ``ts``) and upserts with psycopg ``executemany`` (``ON CONFLICT DO UPDATE``,
    at-least-once).
(t) tidemark: ``run_spec`` of a spec with a ``postgres`` endpoint, exactly once; PostgreSQL
    reduces each batch into the view itself (no Load: docs/reductions.md, "Reduced in the endpoint").
(l) the same with ``options: {endpoint_reduce: false}``: Load, reduce in Python, Store whole
    documents (the path before).
(n) Spark's own share: (h)'s aggregate into Spark's ``noop`` sink (nothing leaves the JVM).
(b) with ``--before``: tidemark with its checked plan for every batch (a statistics job, a
    cache, then the shard job: the runtime before the one-job plan).

They run in ``--rounds`` rounds of (h), (n), (t) in one JVM (fresh tables and checkpoints
each round); the first round warms the JIT, the ratio uses the last.  Both views are compared
with an answer computed here in Python.  Per batch, each run's phases come from its own
timers and from Spark's progress reports (``durationMs``): Spark's own per-batch work
(``triggerExecution`` minus ``addBatch``) is shown as ``spark``.

``--tiny N``: the per-batch overhead on N batches of 10 documents, tidemark (its shard
sessions in the driver, the default after a small batch, and on Spark) against (n) on the
same files (medians of ``triggerExecution``).  ``--crossover 500,5000,...``: tidemark's
batch at each size with its shard sessions in the driver and on Spark (where
``small_batch_keys``' default comes from).  ``--plot`` draws the per-batch phases of
the last round (needs matplotlib).
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import statistics
import sys
import tempfile
import time
import uuid

import psycopg

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from bench_postgres_e2e import machine
from cpu import CpuMeter, jvm_pid

SCHEMA = {
    "type": "object",
    "required": ["customer", "amount", "orders", "largest", "smallest", "city", "first_city", "ts", "items"],
    "reduce": {"strategy": "merge"},
    "properties": {
        "customer": {"type": "string"},
        "amount": {"type": "integer", "reduce": {"strategy": "sum"}},
        "orders": {"type": "integer", "reduce": {"strategy": "sum"}},
        "largest": {"type": "integer", "reduce": {"strategy": "maximize"}},
        "smallest": {"type": "integer", "reduce": {"strategy": "minimize"}},
        "city": {"type": "string", "reduce": {"strategy": "lastWriteWins"}},
        "first_city": {"type": "string", "reduce": {"strategy": "firstWriteWins"}},
        "ts": {"type": "integer", "reduce": {"strategy": "maximize"}},
        "items": {"type": "array", "items": {"type": "string"}, "reduce": {"strategy": "append"}},
    },
}
SPARK_SCHEMA = (
    "customer STRING, amount BIGINT, orders BIGINT, largest BIGINT, smallest BIGINT, city STRING, "
    "first_city STRING, ts BIGINT, items ARRAY<STRING>"
)
CITIES = ["Lisbon", "Oslo", "Quito", "Hanoi", "Accra", "Lima"]
SKUS = [f"sku-{i:03d}" for i in range(50)]
SCALARS = ("amount", "orders", "largest", "smallest", "city", "first_city", "ts")


# ------------------------------------------------------------------------- data


def write_stream(directory: str, docs: int, keys: int, batches: int, seed: int = 11) -> dict:
    """One file per batch; returns the final view (the answer), computed as the docs are made."""
    draw = random.Random(seed)
    os.makedirs(directory, exist_ok=True)
    per = docs // batches
    view: dict = {}
    ts = 0
    for b in range(batches):
        path = os.path.join(directory, f"orders-{b:05d}.json")
        lines = []
        for _ in range(per):
            amount = draw.randrange(1, 1000)
            city = draw.choice(CITIES)
            d = {
                "customer": f"c{draw.randrange(keys):07d}",
                "amount": amount,
                "orders": 1,
                "largest": amount,
                "smallest": amount,
                "city": city,
                "first_city": city,
                "ts": ts,
                "items": [draw.choice(SKUS)],
            }
            ts += 1
            lines.append(json.dumps(d, separators=(",", ":")))
            cur = view.get(d["customer"])
            if cur is None:
                view[d["customer"]] = dict(d, items=list(d["items"]))
            else:
                cur["amount"] += amount
                cur["orders"] += 1
                cur["largest"] = max(cur["largest"], amount)
                cur["smallest"] = min(cur["smallest"], amount)
                cur["city"] = city
                cur["ts"] = max(cur["ts"], d["ts"])
                cur["items"].extend(d["items"])
        with open(path, "w") as f:
            f.write("\n".join(lines) + "\n")
        stamp = 1_700_000_000 + b * 10
        os.utime(path, (stamp, stamp))
    return view


# ------------------------------------------------------------------------ runs


def spark_own(progress: list) -> dict[int, dict]:
    """Per batch id: Spark's durations (ms → s) from the query's progress reports."""
    out = {}
    for p in progress:
        d = p["durationMs"]
        if "addBatch" not in d:
            continue
        out[int(p["batchId"])] = {"trigger": d["triggerExecution"] / 1000, "add": d["addBatch"] / 1000}
    return out


def hand_aggregate(df):
    """The hand-written job's aggregate of a batch: Spark's own functions, the same meaning
    as the view (write-wins by ``ts``, the items ordered by ``ts``)."""
    from pyspark.sql import functions as F

    return df.groupBy("customer").agg(
        F.sum("amount"),
        F.sum("orders"),
        F.max("largest"),
        F.min("smallest"),
        F.max_by("city", "ts"),
        F.min_by("first_city", "ts"),
        F.max("ts"),
        F.to_json(F.flatten(F.transform(F.array_sort(F.collect_list(F.struct("ts", "items"))), lambda s: s["items"]))),
    )


def run_by_hand(spark, data, url, schema, checkpoint, write: bool = True) -> tuple[float, list[dict]]:
    """What users write: foreachBatch, groupBy/agg, executemany upserts (``write=False``:
    the aggregate into the ``noop`` sink instead, Spark's own share)."""

    if write:
        with psycopg.connect(url, autocommit=True) as con:
            con.execute(f'CREATE SCHEMA IF NOT EXISTS "{schema}"')
            con.execute(
                f'CREATE TABLE "{schema}".customers (customer text PRIMARY KEY, amount bigint, orders bigint, '
                "largest bigint, smallest bigint, city text, first_city text, ts bigint, items jsonb)"
            )
    upsert = (
        f'INSERT INTO "{schema}".customers AS t (customer, amount, orders, largest, smallest, city, first_city, '
        "ts, items) VALUES (%s, %s, %s, %s, %s, %s, %s, %s, %s::jsonb) ON CONFLICT (customer) DO UPDATE SET "
        "amount = t.amount + EXCLUDED.amount, orders = t.orders + EXCLUDED.orders, "
        "largest = GREATEST(t.largest, EXCLUDED.largest), smallest = LEAST(t.smallest, EXCLUDED.smallest), "
        "city = EXCLUDED.city, ts = GREATEST(t.ts, EXCLUDED.ts), items = t.items || EXCLUDED.items"
    )
    phases: dict[int, dict] = {}

    def batch(df, batch_id):
        t0 = time.perf_counter()
        agg = hand_aggregate(df)
        if not write:
            agg.write.format("noop").mode("overwrite").save()
            phases[batch_id] = {"aggregate": time.perf_counter() - t0}
            return
        rows = [tuple(r) for r in agg.collect()]
        t1 = time.perf_counter()
        with psycopg.connect(url) as con, con.cursor() as cur:
            for s in range(0, len(rows), 10_000):
                cur.executemany(upsert, rows[s : s + 10_000])
        phases[batch_id] = {"aggregate + collect": t1 - t0, "upsert": time.perf_counter() - t1}

    t0 = time.perf_counter()
    q = (
        spark.readStream.schema(SPARK_SCHEMA)
        .option("maxFilesPerTrigger", 1)
        .json(data)
        .writeStream.foreachBatch(batch)
        .option("checkpointLocation", checkpoint)
        .trigger(availableNow=True)
        .start()
    )
    q.awaitTermination()
    wall = time.perf_counter() - t0
    return wall, _per_batch(phases, spark_own(q.recentProgress))


def run_tidemark(
    spark, data, url, schema, shards, checkpoint, endpoint_reduce: bool = True, endpoint=None, options=None
) -> tuple[float, list[dict]]:
    """tidemark's run of the stream, into PostgreSQL's ``schema`` (or ``endpoint``: a spec's
    endpoint mapping), with ``options`` over ``endpoint_reduce``."""
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
                "endpoint": endpoint or {"postgres": {"url": url, "schema": schema}},
                "shards": shards,
                "bindings": [{"source": "orders", "resource": {"table": "customers"}}],
                "options": {"endpoint_reduce": endpoint_reduce, **(options or {})},
            }
        },
        "checkpoint": checkpoint,
    }
    path = os.path.join(os.path.dirname(checkpoint), f"spec-{uuid.uuid4().hex[:6]}.yaml")
    with open(path, "w") as f:
        yaml.safe_dump(spec, f)
    phases: dict[int, dict] = {}

    def on_batch(r):
        t = r.timings
        shard = {k[6:]: v for k, v in t.items() if k.startswith("shard.")}
        # the combine's and the shard stage's wall time, split by the slowest shard's protocol
        # phases; the rest of it is Spark's (the combine, scheduling, the transfer into Python)
        spark_and_shards = t.get("combine", 0) + t.get("shards", 0)
        rest = max(
            0.0, spark_and_shards - sum(shard.get(k, 0) for k in ("open", "acknowledge", "load", "store", "commit"))
        )
        phases[r.batch_id] = {
            "plan": t.get("plan", 0),
            "shard tasks": rest,
            "open": shard.get("open", 0),
            "load": shard.get("load", 0) + shard.get("acknowledge", 0),
            "store": shard.get("store", 0),
            "commit": shard.get("commit", 0),
            "recovery log": t.get("recovery_log", 0),
        }

    t0 = time.perf_counter()
    runs = run_spec(path, spark=spark, on_batch=on_batch)
    wall = time.perf_counter() - t0
    return wall, _per_batch(phases, spark_own(runs[0].query.recentProgress))


def _per_batch(phases: dict, own: dict) -> list[dict]:
    out = []
    for b in sorted(phases):
        row = dict(phases[b])
        if b in own:
            row["spark"] = max(0.0, own[b]["trigger"] - own[b]["add"])
            row["_trigger"] = own[b]["trigger"]
            row["_add"] = own[b]["add"]
        out.append(row)
    return out


def check_views(url, schema_h, schema_t, view) -> str:
    want = answer_rows(view)
    cols = ", ".join(SCALARS)
    out = []
    with psycopg.connect(url) as con:
        if schema_h:
            h = {
                r[0]: (*r[1:8], r[8])
                for r in con.execute(f'SELECT customer, {cols}, items FROM "{schema_h}".customers')
            }
            out.append(f"(h) {'==' if h == want else '!='} answer")
        if schema_t:
            t = {
                r[0]: (*r[1:8], r[8])
                for r in con.execute(
                    f"""SELECT customer, {cols}, COALESCE(items, flow_document->'items') FROM "{schema_t}".customers"""
                )
            }
            out.append(f"(t) {'==' if t == want else '!='} answer")
    return ", ".join(out)


def table_bytes(url: str, schema: str) -> int:
    """The view table's size on disk (heap, indexes, TOAST), after a VACUUM."""
    with psycopg.connect(url, autocommit=True) as con:
        con.execute(f'VACUUM "{schema}".customers')
        return con.execute(f"SELECT pg_total_relation_size('\"{schema}\".customers')").fetchone()[0]


def summary(rows: list[dict], skip_first: int = 1) -> dict:
    """Median of each phase over the batches after the first ``skip_first``."""
    body = rows[skip_first:] or rows
    keys = [k for k in body[0] if not k.startswith("_")]
    return {k: statistics.median(r.get(k, 0) for r in body) for k in keys} | {
        "_trigger": statistics.median(r.get("_trigger", 0) for r in body)
    }


def stream_line(args) -> str:
    """The stream a run measures, from its ``--docs``, ``--keys``, ``--batches`` and ``--shards``."""
    return (
        f"\nstream: {args.docs:,} documents over {args.keys:,} keys in {args.batches} batches of "
        f"{args.docs // args.batches:,}, {args.shards} shard(s), Spark local[{args.shards}]"
    )


def answer_rows(view: dict) -> dict:
    """customer -> (the seven scalars, items) of the answer, as the views are read."""
    return {k: (*(d[c] for c in SCALARS), d["items"]) for k, d in view.items()}


def outside(wall: float, rows: list[dict]) -> str:
    """The wall time split into the batches (Spark's triggers) and the rest (starting and
    stopping the query, and for tidemark its checks, Open and Apply before the first batch)."""
    batches = sum(r.get("_trigger", 0) for r in rows)
    first = rows[0].get("_trigger", 0) if rows else 0
    return (
        f"batches {batches:.2f}s, outside the batches {wall - batches:.2f}s; "
        f"the first batch {first:.2f}s: {fmt(rows[0]) if rows else '-'}"
    )


def phases_of(wall: float, rows: list[dict], indent: str = "    ") -> str:
    """A run's median batch by phase, and its wall time in and outside the batches."""
    return (
        f"{indent}median batch: {fmt(summary(rows))}, whole batch {summary(rows)['_trigger']:.3f}s\n"
        f"{indent}{outside(wall, rows)}"
    )


def fmt(d: dict) -> str:
    return "  ".join(f"{k}={v * 1000:.0f}" for k, v in d.items() if not k.startswith("_")) + " (ms)"


def plot(path: str, h: list[dict], t: list[dict], title: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(2, 1, figsize=(10, 7), sharex=True, sharey=True)
    for ax, rows, name in (
        (axes[0], h, "hand-written: foreachBatch + groupBy + executemany"),
        (axes[1], t, "tidemark → PostgreSQL (exactly once)"),
    ):
        keys = [k for k in rows[0] if not k.startswith("_")]
        keys = ["spark"] + [k for k in keys if k != "spark"]
        bottom = [0.0] * len(rows)
        xs = list(range(len(rows)))
        for k in keys:
            vals = [r.get(k, 0) for r in rows]
            ax.bar(xs, vals, bottom=bottom, label=k, width=0.8)
            bottom = [a + b for a, b in zip(bottom, vals)]
        ax.set_title(f"{name}: {sum(bottom):.1f} s")
        ax.set_ylabel("seconds per batch")
        ax.legend(loc="upper right", fontsize=8, ncol=4)
    axes[1].set_xlabel("batch")
    fig.suptitle(title)
    fig.tight_layout()
    fig.savefig(path, dpi=110)


def tiny_overhead(spark, work, url, shards, batches: int, rounds: int = 2) -> dict:
    """Median ``triggerExecution`` per tiny batch (after the first two) of (n), of tidemark
    with its shard sessions in the driver (the default after a small batch) and of tidemark
    with them on Spark (``small_batch_keys: 0``), the last of ``rounds`` rounds."""
    data = os.path.join(work, "tiny")
    write_stream(data, batches * 10, 500, batches, seed=3)
    med = lambda rows: statistics.median(r["_trigger"] for r in rows[2:] or rows)
    out = {}
    for rnd in range(rounds):
        _, n = run_by_hand(spark, data, url, None, os.path.join(work, f"tiny-n{rnd}"), write=False)
        out["n"] = med(n)
        for name, keys in (("driver", None), ("spark", "0")):
            out[name] = med(_tidemark_with(spark, data, url, shards, os.path.join(work, f"tiny-{name}{rnd}"), keys))
    return out


def crossover(spark, work, url, shards, sizes: list[int], batches: int = 10) -> list[tuple[int, float, float]]:
    """Per batch size (documents, each a key of its own): tidemark's median batch with its
    shard sessions in the driver and on Spark, second of two rounds."""
    out = []
    for size in sizes:
        data = os.path.join(work, f"cross-{size}")
        write_stream(data, batches * size, batches * size, batches, seed=5)
        med = lambda rows: statistics.median(r["_trigger"] for r in rows[2:] or rows)
        for rnd in range(2):
            d = med(_tidemark_with(spark, data, url, shards, os.path.join(work, f"cross-d{size}-{rnd}"), "1000000000"))
            s = med(_tidemark_with(spark, data, url, shards, os.path.join(work, f"cross-s{size}-{rnd}"), "0"))
        out.append((size, d, s))
    return out


def _tidemark_with(spark, data, url, shards, checkpoint, small_batch_keys) -> list[dict]:
    """tidemark's per-batch rows with ``TIDEMARK_SMALL_BATCH_KEYS`` set (None: the default)."""
    schema = f"tm_bench_tiny_{uuid.uuid4().hex[:6]}"
    old = os.environ.pop("TIDEMARK_SMALL_BATCH_KEYS", None)
    if small_batch_keys is not None:
        os.environ["TIDEMARK_SMALL_BATCH_KEYS"] = small_batch_keys
    try:
        _, rows = run_tidemark(spark, data, url, schema, shards, checkpoint)
        return rows
    finally:
        os.environ.pop("TIDEMARK_SMALL_BATCH_KEYS", None)
        if old is not None:
            os.environ["TIDEMARK_SMALL_BATCH_KEYS"] = old
        with psycopg.connect(url, autocommit=True) as con:
            con.execute(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE')


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--docs", type=int, default=1_000_000)
    ap.add_argument("--batches", type=int, default=40)
    ap.add_argument("--keys", type=int, default=100_000)
    ap.add_argument("--shards", type=int, default=2)
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--tiny", type=int, default=20, help="tiny batches for the overhead measure (0: skip)")
    ap.add_argument("--skip", default="", help="comma-separated: h,n,t,l")
    ap.add_argument(
        "--crossover",
        default="",
        help="comma-separated batch sizes: shard sessions in the driver "
        "against on Spark at each (e.g. 500,2000,5000,10000,20000)",
    )
    ap.add_argument(
        "--before",
        action="store_true",
        help="also (b): tidemark with the checked plan for every batch (TIDEMARK_ONE_JOB=0)",
    )
    ap.add_argument("--plot", default="", help="draw the last round's per-batch phases into this PNG")
    ap.add_argument(
        "--url", default=os.environ.get("TIDEMARK_TEST_POSTGRES_URL", "postgresql://postgres@127.0.0.1:5432/test")
    )
    args = ap.parse_args()
    skip = set(filter(None, args.skip.split(",")))
    print(machine())
    print(stream_line(args))
    work = tempfile.mkdtemp(prefix="tm-small-")
    data = os.path.join(work, "data")
    main_runs = not {"h", "n", "t"} <= skip or args.before
    view = write_stream(data, args.docs, args.keys, args.batches) if main_runs else {}
    from tidemark.spark.session import local_session

    spark = local_session("tidemark-bench", master=f"local[{args.shards}]", shuffle_partitions=args.shards)
    from pyspark.sql import functions as F

    spark.range(1000).groupBy((F.col("id") % 3).alias("k")).count().collect()
    jvm = jvm_pid(spark)
    dropped = []
    last: dict = {}
    try:
        for rnd in range(1, args.rounds + 1):
            print(
                f"\nround {rnd} of {args.rounds}"
                + (" (the ratio uses this one)" if rnd == args.rounds else " (warm-up)")
            )
            tag = uuid.uuid4().hex[:6]
            sh, st = f"tm_small_h_{tag}", f"tm_small_t_{tag}"
            dropped += [sh, st]
            run = os.path.join(work, f"round-{rnd}")
            os.makedirs(run)
            if "h" not in skip:
                meter = CpuMeter(jvm)
                wall, rows = run_by_hand(spark, data, args.url, sh, os.path.join(run, "chk-h"))
                last["h"] = (wall, rows)
                print(f"(h) foreachBatch + executemany: {wall:7.2f}s ({args.docs / wall:,.0f} docs/s)")
                print(phases_of(wall, rows))
                print("    " + meter.line(wall))
            if "n" not in skip:
                meter = CpuMeter(jvm)
                wall, rows = run_by_hand(spark, data, args.url, None, os.path.join(run, "chk-n"), write=False)
                last["n"] = (wall, rows)
                print(f"(n) read and aggregate only (noop sink): {wall:7.2f}s")
                print(phases_of(wall, rows))
                print("    " + meter.line(wall))
            if "t" not in skip:
                meter = CpuMeter(jvm)
                wall, rows = run_tidemark(spark, data, args.url, st, args.shards, os.path.join(run, "chk-t"))
                last["t"] = (wall, rows)
                print(f"(t) tidemark → PostgreSQL:      {wall:7.2f}s ({args.docs / wall:,.0f} docs/s)")
                print(phases_of(wall, rows))
                print("    " + meter.line(wall))
            if "l" not in skip:
                sl = f"tm_small_l_{tag}"
                dropped.append(sl)
                meter = CpuMeter(jvm)
                wall, rows = run_tidemark(
                    spark, data, args.url, sl, args.shards, os.path.join(run, "chk-l"), endpoint_reduce=False
                )
                last["l"] = (wall, rows)
                print(f"(l) tidemark, Load + reduce in Python (endpoint_reduce: false): {wall:7.2f}s")
                print(phases_of(wall, rows))
                print("    " + meter.line(wall))
                print("    views: " + check_views(args.url, None, sl, view).replace("(t)", "(l)"))
            if args.before:
                sb = f"tm_small_b_{tag}"
                dropped.append(sb)
                os.environ["TIDEMARK_ONE_JOB"] = "0"
                try:
                    wall, rows = run_tidemark(spark, data, args.url, sb, args.shards, os.path.join(run, "chk-b"))
                finally:
                    del os.environ["TIDEMARK_ONE_JOB"]
                last["b"] = (wall, rows)
                print(f"(b) tidemark, checked plan every batch (the runtime before the one-job plan): {wall:7.2f}s")
                print(phases_of(wall, rows))
                print("    views: " + check_views(args.url, None, sb, view).replace("(t)", "(b)"))
            if not main_runs:
                break
            print(
                "    views: "
                + check_views(args.url, sh if "h" not in skip else None, st if "t" not in skip else None, view)
            )
            if "h" in last and "t" in last:
                print(
                    f"    (h)/(t) = {last['h'][0] / last['t'][0]:.2f}× (tidemark's speed over the hand-written job's)"
                )
                hb, tb = table_bytes(args.url, sh), table_bytes(args.url, st)
                print(f"    table on disk: (h) {hb / 2**20:.1f} MiB, (t) {tb / 2**20:.1f} MiB ({tb / hb:.2f}×)")
        if args.plot and "h" in last and "t" in last:
            plot(
                args.plot,
                last["h"][1],
                last["t"][1],
                f"{args.docs:,} documents in {args.batches} batches, {args.keys:,} keys, {args.shards} shards",
            )
            print(f"plot: {args.plot}")
        if args.tiny:
            t = tiny_overhead(spark, work, args.url, args.shards, args.tiny)
            print(
                f"\ntiny batches (10 documents, {args.tiny} batches), median per batch: Spark's own (n) "
                f"{t['n'] * 1000:.0f} ms; tidemark, shards in the driver {t['driver'] * 1000:.0f} ms "
                f"(overhead {1000 * (t['driver'] - t['n']):.0f} ms), shards on Spark {t['spark'] * 1000:.0f} ms "
                f"(overhead {1000 * (t['spark'] - t['n']):.0f} ms)"
            )
        if args.crossover:
            print("\nbatch size: tidemark's median batch with its shard sessions in the driver / on Spark")
            for size, d, s in crossover(
                spark, work, args.url, args.shards, [int(x) for x in args.crossover.split(",")]
            ):
                print(
                    f"  {size:>7,} documents (as many keys): driver {d * 1000:.0f} ms, Spark {s * 1000:.0f} ms "
                    f"({s / d:.2f}×)"
                )
    finally:
        with psycopg.connect(args.url, autocommit=True) as con:
            for s in dropped:
                con.execute(f'DROP SCHEMA IF EXISTS "{s}" CASCADE')
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
