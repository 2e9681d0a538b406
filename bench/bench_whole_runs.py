"""Whole runs against the strongest hand-written peer, each job a process of its own.

    python bench/bench_whole_runs.py [--shape simple|events] [--docs 1000000] [--batches 40]
                                     [--keys 100000] [--shards 2] [--runs 2] [--only p,t] [--extras 0.01]
                                     [--nested 0.3 [--deep]]

(p) the peer a user writes when they care about speed: ``foreachBatch``, the batch
    aggregated with Spark's own functions (``groupBy().agg()``), then ``foreachPartition``:
    every partition upserts its rows over a connection of its own (psycopg ``executemany``,
    ``INSERT … ON CONFLICT DO UPDATE``), in parallel; typed columns; at-least-once.
(t) ``tidemark run`` of the same stream with its defaults, exactly once.

Each job runs in a fresh process (a new JVM), timed from the process's start to its exit: a
user's whole run, Spark's start, tidemark's checks and Apply included.  Each child also
reports when its first batch committed and its batches' durations (Spark's
``triggerExecution``), so the steady state (the batches after the first quarter) is shown
beside the whole run.  Both jobs use tidemark's local session settings (``local_session``:
the same shuffle partitions and file split size), so the peer gains what tidemark's session
sets.  Both views are compared with an answer computed here, in Python.

Shapes (one JSON-lines file per batch, ``maxFilesPerTrigger: 1``):

* ``simple``: ``bench_small_batches.py``'s order stream (sums, min/max, write-wins, append).
* ``events``: an order event stream as such streams look: ``event_time`` (RFC 3339 with
  ``Z`` / ``+05:30`` / ``-04:00`` offsets and microseconds, events up to 2 h early or late)
  maximized, ``first_seen`` minimized, ``status`` last written by ``event_time``, ``amount``
  an exact decimal summed, ``n`` a count, ``tags`` a union of string arrays (absent in 40 %),
  ``note`` an optional string (last written), ``address`` an object merged, its ``city`` /
  ``zip`` last written (present in 20 %).  ``--nested F``: a fraction ``F`` of the events also
  carry a ``customer`` object merged member by member: an ``email`` (``format: email``), a
  nullable ``phone``, an ``address`` of declared members picked whole, a ``paid_at``
  date-time, ``spent`` an exact decimal summed (the peer's fixed read schema leaves it out;
  tidemark's view is checked against the answer with it); with ``--deep`` the customer also
  holds ``segments`` (a union of strings) and ``stats`` (an object merged in it: ``orders``
  summed, ``best`` maximized).
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import random
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from decimal import Decimal

import psycopg

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, ".."))
sys.path.insert(0, HERE)
from bench_postgres_e2e import machine
from bench_small_batches import SCALARS, SCHEMA, SPARK_SCHEMA, answer_rows, hand_aggregate, write_stream

URL = os.environ.get("TIDEMARK_TEST_POSTGRES_URL", "postgresql://postgres@127.0.0.1:5432/test")

EVENTS_SCHEMA = {
    "type": "object",
    "required": ["order_id", "event_time", "first_seen", "status", "amount", "n"],
    "reduce": {"strategy": "merge"},
    "properties": {
        "order_id": {"type": "string"},
        "event_time": {"type": "string", "format": "date-time", "reduce": {"strategy": "maximize"}},
        "first_seen": {"type": "string", "format": "date-time", "reduce": {"strategy": "minimize"}},
        "status": {"type": "string", "reduce": {"strategy": "lastWriteWins", "order": "/event_time"}},
        "amount": {"type": "number", "multipleOf": 0.01, "reduce": {"strategy": "sum"}},
        "n": {"type": "integer", "reduce": {"strategy": "sum"}},
        "tags": {"type": "array", "items": {"type": "string"}, "reduce": {"strategy": "union"}},
        "note": {"type": "string"},
        "address": {
            "type": "object",
            "reduce": {"strategy": "merge"},
            "properties": {"city": {"type": "string"}, "zip": {"type": "string"}},
        },
    },
}
#: EVENTS_SCHEMA with a nested customer (``--nested``)
NESTED_SCHEMA = {
    **EVENTS_SCHEMA,
    "properties": {
        **EVENTS_SCHEMA["properties"],
        "customer": {
            "type": "object",
            "reduce": {"strategy": "merge"},
            "properties": {
                "id": {"type": "string"},
                "email": {"type": "string", "format": "email"},
                "phone": {"type": ["string", "null"]},
                "address": {"type": "object", "properties": {"city": {"type": "string"}, "zip": {"type": "string"}}},
                "paid_at": {"type": "string", "format": "date-time"},
                "spent": {"type": "number", "multipleOf": 0.01, "reduce": {"strategy": "sum"}},
            },
        },
    },
}
#: NESTED_SCHEMA whose customer also holds a union and a merged object (``--deep``)
DEEP_SCHEMA = {
    **NESTED_SCHEMA,
    "properties": {
        **NESTED_SCHEMA["properties"],
        "customer": {
            **NESTED_SCHEMA["properties"]["customer"],
            "properties": {
                **NESTED_SCHEMA["properties"]["customer"]["properties"],
                "segments": {"type": "array", "items": {"type": "string"}, "reduce": {"strategy": "union"}},
                "stats": {
                    "type": "object",
                    "reduce": {"strategy": "merge"},
                    "properties": {
                        "orders": {"type": "integer", "reduce": {"strategy": "sum"}},
                        "best": {"type": "number", "reduce": {"strategy": "maximize"}},
                    },
                },
            },
        },
    },
}
SEGMENTS = ("new", "returning", "vip", "b2b", "churn-risk")
#: EVENTS_SCHEMA where some events lack a status (``--lacking``): last written by event time
#: among the events that hold one (the view keeps the time its status came from)
LACKING_SCHEMA = {**EVENTS_SCHEMA, "required": [r for r in EVENTS_SCHEMA["required"] if r != "status"]}
EVENTS_SPARK_SCHEMA = (
    "order_id STRING, event_time STRING, first_seen STRING, status STRING, amount DECIMAL(18,2), n BIGINT, "
    "tags ARRAY<STRING>, note STRING, address STRUCT<city: STRING, zip: STRING>"
)
STATUSES = ["created", "paid", "packed", "shipped", "delivered", "returned"]
TAGS = [f"tag-{i:02d}" for i in range(30)]
CITIES = ["Lisbon", "Oslo", "Quito", "Hanoi", "Accra", "Lima"]
OFFSETS = [dt.timezone.utc, dt.timezone(dt.timedelta(hours=5, minutes=30)), dt.timezone(dt.timedelta(hours=-4))]


# ------------------------------------------------------------------------- data


def rfc3339(t: dt.datetime) -> str:
    text = t.isoformat(timespec="microseconds")
    return text[:-6] + "Z" if text.endswith("+00:00") else text


def write_events(
    directory: str,
    docs: int,
    keys: int,
    batches: int,
    seed: int = 17,
    extras: float = 0.0,
    nested: float = 0.0,
    lacking: float = 0.0,
    deep: bool = False,
) -> dict:
    """One file per batch of order events; returns the answer: per order, the instants, the
    status of the latest event (the later document on a tie), the exact sum, the count, the
    set of tags (None: never present), the last note, city and zip (None: never present).
    ``extras``: the fraction of events that carry a property the schema does not declare
    (``channel``: a field a producer added; the answer does not read it); ``lacking``: the
    fraction of events without a status (the status is then the latest event's that holds one)."""
    draw = random.Random(seed)
    os.makedirs(directory, exist_ok=True)
    per = docs // batches
    base = dt.datetime(2026, 11, 1, tzinfo=dt.timezone.utc)
    view: dict = {}
    for b in range(batches):
        lines = []
        for i in range(per):
            seq = b * per + i
            instant = base + dt.timedelta(
                seconds=seq * 0.5 + draw.uniform(-7200, 7200), microseconds=draw.randrange(10**6)
            )
            text = rfc3339(instant.astimezone(draw.choice(OFFSETS)))
            d: dict = {
                "order_id": f"o{draw.randrange(keys):07d}",
                "event_time": text,
                "first_seen": text,
                "status": draw.choice(STATUSES),
                "amount": round(draw.randrange(1, 100_000) / 100, 2),
                "n": 1,
            }
            if draw.random() < 0.6:
                d["tags"] = draw.sample(TAGS, draw.randrange(1, 4))
            if draw.random() < 0.3:
                d["note"] = f"note {seq}"
            if draw.random() < 0.2:
                d["address"] = {"city": draw.choice(CITIES), "zip": f"{draw.randrange(10000, 99999)}"}
            if lacking and draw.random() < lacking:
                del d["status"]
            if extras and draw.random() < extras:
                d["channel"] = draw.choice(("web", "app", "store"))
            if nested and draw.random() < nested:
                customer: dict = {"id": f"c{draw.randrange(1000)}", "spent": round(draw.randrange(1, 10_000) / 100, 2)}
                if draw.random() < 0.5:
                    customer["email"] = f"u{draw.randrange(1000)}@example.org"
                if draw.random() < 0.5:
                    customer["phone"] = draw.choice([None, "+351 21 000 0000", "+47 22 00 00 00"])
                if draw.random() < 0.3:
                    customer["address"] = {"city": draw.choice(CITIES), "zip": f"{draw.randrange(10000, 99999)}"}
                if draw.random() < 0.5:
                    customer["paid_at"] = text
                if deep and draw.random() < 0.6:
                    customer["segments"] = draw.sample(SEGMENTS, draw.randrange(1, 3))
                if deep and draw.random() < 0.7:
                    customer["stats"] = {"orders": 1, "best": d["amount"]}
                d["customer"] = customer
            lines.append(json.dumps(d, separators=(",", ":")))
            cur = view.get(d["order_id"])
            amount = Decimal(repr(d["amount"]))
            if cur is None:
                cur = view[d["order_id"]] = {
                    "event_time": instant,
                    "first_seen": instant,
                    "status": d.get("status"),
                    "status_at": instant if "status" in d else None,
                    "amount": Decimal(0),
                    "n": 0,
                    "tags": None,
                    "note": None,
                    "city": None,
                    "zip": None,
                    "customer": None,
                }
            elif "status" in d and (cur["status_at"] is None or instant >= cur["status_at"]):
                cur["status"], cur["status_at"] = d["status"], instant
            cur["event_time"] = max(cur["event_time"], instant)
            cur["first_seen"] = min(cur["first_seen"], instant)
            cur["amount"] += amount
            cur["n"] += 1
            if "tags" in d:
                cur["tags"] = (cur["tags"] or set()) | set(d["tags"])
            if "note" in d:
                cur["note"] = d["note"]
            if "address" in d:
                cur["city"], cur["zip"] = d["address"]["city"], d["address"]["zip"]
            if "customer" in d:  # merged: each member last written, spent summed exactly
                before = cur["customer"] or {}
                customer = {**before, **d["customer"]}
                customer["spent"] = before.get("spent", Decimal(0)) + Decimal(repr(d["customer"]["spent"]))
                if "segments" in before and "segments" in d["customer"]:  # each once, first seen first
                    customer["segments"] = list(dict.fromkeys(before["segments"] + d["customer"]["segments"]))
                if "stats" in before and "stats" in d["customer"]:  # merged: orders summed, the best kept
                    old, new = before["stats"], d["customer"]["stats"]
                    customer["stats"] = {"orders": old["orders"] + new["orders"], "best": max(old["best"], new["best"])}
                cur["customer"] = customer
        path = os.path.join(directory, f"events-{b:05d}.json")
        with open(path, "w") as f:
            f.write("\n".join(lines) + "\n")
        stamp = 1_700_000_000 + b * 10
        os.utime(path, (stamp, stamp))
    return view


# --------------------------------------------------------------------- the jobs

SIMPLE_TABLE = (
    "customer text PRIMARY KEY, amount bigint, orders bigint, largest bigint, smallest bigint, city text, "
    "first_city text, ts bigint, items jsonb"
)
SIMPLE_UPSERT = (
    "INSERT INTO {t} AS t (customer, amount, orders, largest, smallest, city, first_city, ts, items) "
    "VALUES (%s, %s, %s, %s, %s, %s, %s, %s, %s::jsonb) ON CONFLICT (customer) DO UPDATE SET "
    "amount = t.amount + EXCLUDED.amount, orders = t.orders + EXCLUDED.orders, "
    "largest = GREATEST(t.largest, EXCLUDED.largest), smallest = LEAST(t.smallest, EXCLUDED.smallest), "
    "city = EXCLUDED.city, ts = GREATEST(t.ts, EXCLUDED.ts), items = t.items || EXCLUDED.items"
)
EVENTS_TABLE = (
    "order_id text PRIMARY KEY, event_time timestamptz, first_seen timestamptz, status text, amount numeric(18,2), "
    "n bigint, tags text[], note text, city text, zip text"
)
#: the peer where some events lack a status: the time of each row's status beside it
LACKING_TABLE = EVENTS_TABLE + ", status_at timestamptz"
EVENTS_UPSERT = (
    "INSERT INTO {t} AS t (order_id, event_time, first_seen, status, amount, n, tags, note, city, zip) "
    "VALUES (%s, %s, %s, %s, %s, %s, %s, %s, %s, %s) ON CONFLICT (order_id) DO UPDATE SET "
    "status = CASE WHEN EXCLUDED.event_time >= t.event_time THEN EXCLUDED.status ELSE t.status END, "
    "event_time = GREATEST(t.event_time, EXCLUDED.event_time), first_seen = LEAST(t.first_seen, EXCLUDED.first_seen), "
    "amount = t.amount + EXCLUDED.amount, n = t.n + EXCLUDED.n, "
    "tags = CASE WHEN t.tags IS NULL THEN EXCLUDED.tags WHEN EXCLUDED.tags IS NULL THEN t.tags "
    "ELSE ARRAY(SELECT DISTINCT unnest(t.tags || EXCLUDED.tags) ORDER BY 1) END, "
    "note = COALESCE(EXCLUDED.note, t.note), city = COALESCE(EXCLUDED.city, t.city), zip = COALESCE(EXCLUDED.zip, t.zip)"
)
LACKING_UPSERT = (
    EVENTS_UPSERT.replace("zip) VALUES (", "zip, status_at) VALUES (")
    .replace("%s, %s) ON CONFLICT", "%s, %s, %s) ON CONFLICT")
    .replace(
        "status = CASE WHEN EXCLUDED.event_time >= t.event_time THEN EXCLUDED.status ELSE t.status END",
        "status = CASE WHEN EXCLUDED.status IS NOT NULL AND (t.status_at IS NULL OR EXCLUDED.status_at >= t.status_at) "
        "THEN EXCLUDED.status ELSE t.status END, status_at = GREATEST(t.status_at, EXCLUDED.status_at)",
    )
)


def peer_aggregate(df, shape: str, lacking: bool = False):
    from pyspark.sql import functions as F

    if shape == "simple":
        return hand_aggregate(df)
    # the position in the batch (one file per batch): what "last written" means for the optional fields
    pos = F.monotonically_increasing_id()
    ev = df.withColumn("_ts", F.to_timestamp("event_time")).withColumn("_pos", pos)

    def last(c):
        return F.max_by(c, F.when(c.isNotNull(), F.col("_pos")))

    return ev.groupBy("order_id").agg(
        F.max("_ts"),
        F.min("_ts"),
        F.max_by(
            "status",
            F.when(F.col("status").isNotNull(), F.struct("_ts", "_pos")) if lacking else F.struct("_ts", "_pos"),
        ),
        F.sum("amount"),
        F.sum("n"),
        F.array_distinct(F.flatten(F.collect_list("tags"))),
        last(F.col("note")),
        last(F.col("address.city")),
        last(F.col("address.zip")),
        *([F.max(F.when(F.col("status").isNotNull(), F.col("_ts")))] if lacking else []),
    )


def child_peer(args) -> dict:
    from tidemark.spark.session import local_session

    spark = local_session("bench-peer", master=f"local[{args.shards}]")
    table = f'"{args.schema}".view'
    with psycopg.connect(URL, autocommit=True) as con:
        con.execute(f'CREATE SCHEMA IF NOT EXISTS "{args.schema}"')
        columns = SIMPLE_TABLE if args.shape == "simple" else LACKING_TABLE if args.lacking else EVENTS_TABLE
        con.execute(f"CREATE TABLE {table} ({columns})")
    upsert = (SIMPLE_UPSERT if args.shape == "simple" else LACKING_UPSERT if args.lacking else EVENTS_UPSERT).format(
        t=table
    )
    url = URL

    def upsert_partition(rows):
        rows = [tuple(r) for r in rows]
        if not rows:
            return
        with psycopg.connect(url) as con, con.cursor() as cur:
            for s in range(0, len(rows), 10_000):
                cur.executemany(upsert, rows[s : s + 10_000])

    commits: list[float] = []

    def batch(df, batch_id):
        peer_aggregate(df, args.shape, args.lacking > 0).foreachPartition(upsert_partition)
        commits.append(time.time())

    schema = SPARK_SCHEMA if args.shape == "simple" else EVENTS_SPARK_SCHEMA
    q = (
        spark.readStream.schema(schema)
        .option("maxFilesPerTrigger", 1)
        .json(args.data)
        .writeStream.foreachBatch(batch)
        .option("checkpointLocation", args.checkpoint)
        .trigger(availableNow=True)
        .start()
    )
    q.awaitTermination()
    return {"first_commit": commits[0] if commits else None, "batches": triggers(q.recentProgress)}


def child_tidemark(args) -> dict:
    import yaml

    from tidemark.spark.runner import run_spec
    from tidemark.spark.session import local_session

    spec = {
        "collections": {
            "orders": {
                "key": ["/customer"] if args.shape == "simple" else ["/order_id"],
                "schema": schema_of(args.shape, args.nested, args.lacking, args.deep),
                "source": {"format": "json", "path": args.data, "options": {"maxFilesPerTrigger": 1}},
            }
        },
        "materializations": {
            "view": {
                "endpoint": {"postgres": {"url": URL, "schema": args.schema}},
                "shards": args.shards,
                "bindings": [{"source": "orders", "resource": {"table": "view"}}],
            }
        },
        "checkpoint": args.checkpoint,
    }
    path = os.path.join(os.path.dirname(args.checkpoint), f"spec-{uuid.uuid4().hex[:6]}.yaml")
    with open(path, "w") as f:
        yaml.safe_dump(spec, f)
    spark = local_session("bench-tidemark", master=f"local[{args.shards}]")
    commits: list[float] = []
    paths: list[str] = []
    phases: list[dict] = []

    def on_batch(r):
        commits.append(time.time())
        paths.append(f"loaded={r.loaded}")
        phases.append(dict(r.timings))

    runs = run_spec(path, spark=spark, on_batch=on_batch)
    body = phases[len(phases) // 4 :] or phases
    names = sorted({k for p in body for k in p})
    return {
        "first_commit": commits[0] if commits else None,
        "batches": triggers(runs[0].query.recentProgress),
        "loaded": paths[-1] if paths else "",
        # tidemark's own timers, median of the steady batches: the floor part by part
        "phases": {k: round(statistics.median(p.get(k, 0.0) for p in body), 3) for k in names},
    }


def schema_of(shape: str, nested: float, lacking: float, deep: bool = False) -> dict:
    if shape == "simple":
        return SCHEMA
    if nested:
        return DEEP_SCHEMA if deep else NESTED_SCHEMA
    return LACKING_SCHEMA if lacking else EVENTS_SCHEMA


def triggers(progress) -> list[float]:
    out = []
    for p in progress:
        p = p if isinstance(p, dict) else json.loads(p.json)
        d = p.get("durationMs") or {}
        if "addBatch" in d:
            out.append(d["triggerExecution"] / 1000)
    return out


# ---------------------------------------------------------------------- the views


def peer_view(schema: str, shape: str) -> dict:
    with psycopg.connect(URL) as con:
        if shape == "simple":
            cols = ", ".join(SCALARS)
            return {r[0]: (*r[1:8], r[8]) for r in con.execute(f'SELECT customer, {cols}, items FROM "{schema}".view')}
        rows = con.execute(
            f'SELECT order_id, event_time, first_seen, status, amount, n, tags, note, city, zip FROM "{schema}".view'
        )
        # a batch without tags aggregates to [] (the peer cannot tell it from none): no tags
        return {r[0]: (r[1], r[2], r[3], r[4], r[5], set(r[6]) if r[6] else None, *r[7:]) for r in rows}


def tidemark_view(schema: str, shape: str, nested: bool = False, lacking: float = 0.0, deep: bool = False) -> dict:
    """The view's documents as tidemark's own reader gives them back (any form)."""
    from types import SimpleNamespace

    from tidemark.collection.collection import Collection
    from tidemark.drivers.registry import load_driver
    from tidemark.spec import CollectionSpec

    schema_json = schema_of(shape, nested, lacking, deep)
    key = ("/customer",) if shape == "simple" else ("/order_id",)
    coll = Collection(CollectionSpec("orders", key, schema_json))
    b = coll.binding_spec(SimpleNamespace(resource={"table": "view"}, delta_updates=False))
    with load_driver("postgres", {"url": URL, "schema": schema}) as d:
        docs = d.dump("view", b)
    out = {}
    for doc in docs.values():
        if shape == "simple":
            out[doc["customer"]] = (*(doc[c] for c in SCALARS), doc["items"])
        else:
            addr = doc.get("address") or {}
            out[doc["order_id"]] = (
                dt.datetime.fromisoformat(doc["event_time"].replace("Z", "+00:00")),
                dt.datetime.fromisoformat(doc["first_seen"].replace("Z", "+00:00")),
                doc.get("status"),
                Decimal(repr(doc["amount"])) if isinstance(doc["amount"], float) else Decimal(doc["amount"]),
                doc["n"],
                set(doc["tags"]) if "tags" in doc else None,
                doc.get("note"),
                addr.get("city"),
                addr.get("zip"),
            ) + ((_customer(doc.get("customer")),) if nested else ())
    return out


def _customer(customer):
    """A view's customer with its exact sum as a Decimal (None: never present)."""
    if customer is None:
        return None
    spent = customer["spent"]
    return {**customer, "spent": Decimal(repr(spent)) if isinstance(spent, float) else Decimal(spent)}


def answer(view: dict, shape: str, nested: bool = False) -> dict:
    if shape == "simple":
        return answer_rows(view)
    if nested:  # tidemark's view holds the customer too
        return {k: (*row, view[k]["customer"]) for k, row in answer(view, shape).items()}
    return {
        k: (
            v["event_time"],
            v["first_seen"],
            v["status"],
            v["amount"],
            v["n"],
            v["tags"],
            v["note"],
            v["city"],
            v["zip"],
        )
        for k, v in view.items()
    }


def differences(got: dict, want: dict) -> str:
    if got == want:
        return "exact"
    bad = [k for k in want if got.get(k) != want[k]] + [k for k in got if k not in want]
    k = bad[0]
    return f"{len(bad)} keys differ, e.g. {k}: {got.get(k)} != {want.get(k)}"


def table_bytes(schema: str) -> int:
    with psycopg.connect(URL, autocommit=True) as con:
        con.execute(f'VACUUM "{schema}".view')
        return con.execute(f"SELECT pg_total_relation_size('\"{schema}\".view')").fetchone()[0]


# ---------------------------------------------------------------------- the runs


def run_child(job: str, args, data: str, work: str) -> tuple[float, dict, str]:
    schema = f"tm_whole_{job}_{uuid.uuid4().hex[:6]}"
    checkpoint = os.path.join(work, f"chk-{schema}")
    cmd = [
        sys.executable,
        os.path.abspath(__file__),
        "--child",
        job,
        "--shape",
        args.shape,
        "--shards",
        str(args.shards),
        "--nested",
        str(args.nested),
        "--lacking",
        str(args.lacking),
        *(["--deep"] if args.deep else []),
        "--data",
        data,
        "--schema",
        schema,
        "--checkpoint",
        checkpoint,
    ]
    t0 = time.time()
    done = subprocess.run(cmd, capture_output=True, text=True)
    wall = time.time() - t0
    if done.returncode != 0:
        raise SystemExit(f"({job}) failed:\n{done.stderr[-3000:]}")
    report = json.loads(done.stdout.strip().splitlines()[-1])
    report["start"] = t0
    return wall, report, schema


def steady(batches: list[float]) -> float:
    body = batches[len(batches) // 4 :] or batches
    return statistics.median(body)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--shape", choices=("simple", "events"), default="events")
    ap.add_argument("--docs", type=int, default=1_000_000)
    ap.add_argument("--batches", type=int, default=40)
    ap.add_argument("--keys", type=int, default=100_000)
    ap.add_argument("--shards", type=int, default=2)
    ap.add_argument("--runs", type=int, default=2)
    ap.add_argument("--extras", type=float, default=0.0, help="events: the fraction with an undeclared property")
    ap.add_argument("--nested", type=float, default=0.0, help="events: the fraction with a nested customer")
    ap.add_argument("--lacking", type=float, default=0.0, help="events: the fraction without a status")
    ap.add_argument("--deep", action="store_true", help="--nested: the customer also holds a union and a merged object")
    ap.add_argument("--only", default="p,t")
    ap.add_argument("--child", choices=("p", "t"))
    ap.add_argument("--data")
    ap.add_argument("--schema")
    ap.add_argument("--checkpoint")
    args = ap.parse_args()
    if args.child:
        report = (child_peer if args.child == "p" else child_tidemark)(args)
        print(json.dumps(report))
        return

    print(machine())
    work = tempfile.mkdtemp(prefix="tm-whole-")
    data = os.path.join(work, "data")
    if args.shape == "simple":
        written = write_stream(data, args.docs, args.keys, args.batches)
    else:
        written = write_events(
            data,
            args.docs,
            args.keys,
            args.batches,
            extras=args.extras,
            nested=args.nested,
            lacking=args.lacking,
            deep=args.deep,
        )
    want = answer(written, args.shape)
    want_tidemark = answer(written, args.shape, nested=args.nested > 0)
    print(
        f"\nshape {args.shape}: {args.docs:,} documents over {args.keys:,} keys in {args.batches} batches of "
        f"{args.docs // args.batches:,}, {args.shards} shard(s), Spark local[{args.shards}]; each job a process"
    )
    jobs = [j for j in ("p", "t") if j in args.only.split(",")]
    results: dict[str, list] = {j: [] for j in jobs}
    schemas = []
    try:
        for rnd in range(args.runs):
            for job in jobs if rnd % 2 == 0 else reversed(jobs):  # alternate who goes first
                wall, report, schema = run_child(job, args, data, work)
                schemas.append(schema)
                if job == "p":
                    view, expected = peer_view(schema, args.shape), want
                else:
                    view, expected = (
                        tidemark_view(schema, args.shape, args.nested > 0, args.lacking, args.deep),
                        want_tidemark,
                    )
                first = report["first_commit"] - report["start"] if report["first_commit"] else float("nan")
                size = table_bytes(schema)
                results[job].append((wall, steady(report["batches"]), first, size))
                print(
                    f"run {rnd + 1} ({job}): whole {wall:.1f} s, first commit {first:.1f} s after start, "
                    f"steady batch {steady(report['batches']):.3f} s, table {size / 2**20:.1f} MiB, "
                    f"{report.get('loaded', '')} view {differences(view, expected)}",
                    flush=True,
                )
                if report.get("phases"):
                    print(
                        "    steady batch by phase (s): " + "  ".join(f"{k}={v}" for k, v in report["phases"].items())
                    )
    finally:
        with psycopg.connect(URL, autocommit=True) as con:
            for s in schemas:
                con.execute(f'DROP SCHEMA IF EXISTS "{s}" CASCADE')
        shutil.rmtree(work, ignore_errors=True)
    if set(jobs) == {"p", "t"}:
        p, t = results["p"], results["t"]
        whole = [a[0] / b[0] for a, b in zip(p, t)]
        per = [a[1] / b[1] for a, b in zip(p, t)]
        size = t[-1][3] / p[-1][3]
        print(
            "\nratio (peer / tidemark; > 1: tidemark faster): whole runs "
            + ", ".join(f"{r:.2f}x" for r in whole)
            + "; steady batch "
            + ", ".join(f"{r:.2f}x" for r in per)
            + f"; tidemark's table {size:.2f}x the peer's bytes"
        )


if __name__ == "__main__":
    main()
