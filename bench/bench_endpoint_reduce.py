"""One shard session's endpoint work per batch, reduced in the endpoint against Load + Python.

    python bench/bench_endpoint_reduce.py [--endpoints sqlite,postgres,mysql] [--keys 100000]
                                          [--batch 25000] [--batches 8] [--rounds 2]

The stream of ``bench_small_batches.py`` (nine fields, ``--keys`` customers), already combined
per key as the runtime hands it to a shard: ``--batches`` batches of ``--batch`` documents,
each combined to one document per key (~``--batch`` × (1 − e^(−batch/keys)) keys).  One
shard session per batch, on the driver alone (no Spark: this is the part the endpoint
owns), two ways on fresh tables:

(s) reduced in the endpoint: Store the combined documents' JSON texts, then StartCommit runs
    the reducing statement (``docs/reductions.md``, "Reduced in the endpoint");
(l) Load + Python: Load the batch's keys, reduce each loaded document with the combined one in
    Python (the runtime's fold), Store the documents and their column values, StartCommit.

Per batch the phases are timed (median over the batches of the last round); the two views are
compared with each other and with the fold computed here.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
import uuid
from types import SimpleNamespace

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from bench_postgres_e2e import machine
from bench_small_batches import SCHEMA, write_stream

from tidemark.collection.collection import Collection
from tidemark.protocol.messages import (
    Acknowledge,
    Apply,
    Flush,
    Load,
    Open,
    Range,
    StartCommit,
    Store,
    StoreTexts,
)
from tidemark.runtime.reduce_path import reduce_paths
from tidemark.spec import CollectionSpec

MAT = "bench"


def batches(directory: str, coll: Collection) -> list[dict]:
    """Each file's documents combined per key, as the runtime hands them to a shard."""
    out = []
    for name in sorted(os.listdir(directory)):
        combined: dict = {}
        with open(os.path.join(directory, name)) as f:
            for line in f:
                d = json.loads(line)
                k = d["customer"]
                combined[k] = coll.reduce(combined[k], d) if k in combined else d
        out.append(combined)
    return out


def make_driver(endpoint: str, work: str):
    if endpoint == "sqlite":
        from tidemark.drivers.sqlite import SQLiteDriver

        return SQLiteDriver({"path": os.path.join(work, f"{uuid.uuid4().hex}.db")}), None
    if endpoint == "mysql":
        from tidemark.drivers.mysql import MySqlDriver

        url = os.environ.get("TIDEMARK_MYSQL_URL", "mysql://root@127.0.0.1:3306/test")
        db = f"bench_{uuid.uuid4().hex[:10]}"
        return MySqlDriver({"url": url, "schema": db}), ("mysql", url, db)
    from tidemark.drivers.postgres import PostgresDriver

    url = os.environ.get("TIDEMARK_TEST_POSTGRES_URL", "postgresql://postgres@127.0.0.1:5432/test")
    schema = f"bench_{uuid.uuid4().hex[:10]}"
    return PostgresDriver({"url": url, "schema": schema}), ("postgres", url, schema)


def binding(driver, coll: Collection, reduced: bool):
    spec = coll.binding_spec(SimpleNamespace(resource={"table": "customers"}, delta_updates=False))
    (b,), [line] = reduce_paths([spec], [coll], driver.capabilities())
    assert b.endpoint_reduce, line
    import dataclasses

    return b if reduced else dataclasses.replace(b, endpoint_reduce=False)


def run(endpoint: str, reduced: bool, work: str, data: list[dict], coll: Collection) -> tuple[list[dict], dict]:
    driver, pg = make_driver(endpoint, work)
    b = binding(driver, coll, reduced)
    driver.apply(Apply(MAT, "v1", (b,)))
    chunk = driver.capabilities().max_store_docs
    phases: list[dict] = []
    try:
        for n, combined in enumerate(data):
            # the runtime hands a reduced binding's documents over as JSON texts (Spark wrote
            # them) and the others' as Python objects: neither is made in the timed part
            text = {k: json.dumps(d, separators=(",", ":")) for k, d in combined.items()} if reduced else None
            t0 = time.perf_counter()
            t, _ = driver.open(Open(MAT, "v1", Range(), bindings=(b,)))
            t.acknowledge(Acknowledge())
            t1 = time.perf_counter()
            keys = sorted(combined)
            if reduced:
                t2 = t1
                for i in range(0, len(keys), chunk):
                    part = keys[i : i + chunk]
                    texts = tuple(text[k] for k in part)
                    t.store(StoreTexts(0, tuple((k,) for k in part), texts))
            else:
                stored: dict = {}
                for i in range(0, len(keys), chunk):
                    for loaded in t.load(Load(0, tuple((k,) for k in keys[i : i + chunk]))):
                        stored.update(zip((k[0] for k in loaded.keys), loaded.docs))
                t.flush(Flush())
                t2 = time.perf_counter()
                for i in range(0, len(keys), chunk):
                    part = keys[i : i + chunk]
                    docs = [coll.reduce(stored[k], combined[k]) if k in stored else combined[k] for k in part]
                    m = len(part)
                    t.store(
                        Store(
                            0,
                            tuple((k,) for k in part),
                            tuple(coll.values(d) for d in docs),
                            tuple(docs),
                            tuple(k in stored for k in part),
                            (False,) * m,
                        )
                    )
            if reduced:
                t.flush(Flush())
            t3 = time.perf_counter()
            t.start_commit(StartCommit({"batch_id": n}))
            t4 = time.perf_counter()
            t.close()
            phases.append({"open": t1 - t0, "load": t2 - t1, "store": t3 - t2, "commit": t4 - t3, "total": t4 - t0})
        view = {k[0]: d for k, d in driver.dump(MAT, b).items()}
    finally:
        driver.close()
        if pg is not None and pg[0] == "postgres":
            import psycopg

            with psycopg.connect(pg[1], autocommit=True) as con:
                con.execute(f'DROP SCHEMA IF EXISTS "{pg[2]}" CASCADE')
        elif pg is not None:
            sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
            from tests.support.mysql_support import drop_database

            drop_database(pg[1], pg[2])
    return phases, view


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--endpoints", default="sqlite,postgres,mysql")
    ap.add_argument("--keys", type=int, default=100_000)
    ap.add_argument("--batch", type=int, default=25_000)
    ap.add_argument("--batches", type=int, default=8)
    ap.add_argument("--rounds", type=int, default=2)
    args = ap.parse_args()
    print(machine())
    coll = Collection(CollectionSpec("orders", ("/customer",), SCHEMA))
    with tempfile.TemporaryDirectory() as work:
        answer = write_stream(os.path.join(work, "data"), args.batch * args.batches, args.keys, args.batches)
        data = batches(os.path.join(work, "data"), coll)
        sizes = [len(c) for c in data]
        print(f"{args.batches} batches of {args.batch} documents, {statistics.median(sizes):.0f} keys each (median)")
        for endpoint in args.endpoints.split(","):
            for r in range(args.rounds):
                res = {}
                for reduced in (True, False):
                    phases, view = run(endpoint, reduced, work, data, coll)
                    assert view == answer, f"{endpoint}: the view differs from the answer"
                    res[reduced] = phases
                if r < args.rounds - 1:
                    continue
                print(f"\n{endpoint}, round {r + 1} of {args.rounds}: medians per batch, ms")
                print("| path | total | open | load | (reduce in Python +) store | commit | whole run |")
                print("|---|---:|---:|---:|---:|---:|---:|")
                for reduced, name in ((True, "(s) reduced in the endpoint"), (False, "(l) Load + Python")):
                    p = res[reduced]
                    med = {k: statistics.median(x[k] for x in p) * 1000 for k in p[0]}
                    whole = sum(x["total"] for x in p)
                    print(
                        f"| {name} | {med['total']:,.0f} | {med['open']:,.0f} | {med['load']:,.0f} | "
                        f"{med['store']:,.0f} | {med['commit']:,.0f} | {whole:.2f} s |"
                    )
                s = sum(x["total"] for x in res[True])
                lp = sum(x["total"] for x in res[False])
                print(f"speed of (s) against (l): {lp / s:.2f}x")


if __name__ == "__main__":
    main()
