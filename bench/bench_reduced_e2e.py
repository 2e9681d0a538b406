"""Reduced in the endpoint, end to end, on each SQL endpoint: where the shard sessions run.

    python bench/bench_reduced_e2e.py [--endpoints sqlite,mysql,postgres] [--docs 1000000]
                                      [--batches 40] [--keys 100000] [--shards 2] [--rounds 2]

The stream of ``bench_small_batches.py`` (nine fields reduced per customer), into each
endpoint three ways, in one JVM:

(d) the endpoint reduces each batch, the shard sessions in the driver on the combined rows
    collected as Arrow (the default: ``reduced_batch_keys``, docs/reductions.md);
(e) the endpoint reduces each batch, the shard sessions on Spark's executors
    (``reduced_batch_keys: 0``: a second shuffle to the shards, Python tasks);
(l) Load + reduce in Python (``endpoint_reduce: false``);
(x) as (d), with the combined documents staged as JSON texts instead of typed values (the
    dialect's typed staging switched off in this process: the path before it had one).

Round 1 warms the JIT; the last round is printed.  Each view is compared with the answer
computed while the stream is written.  SQLite writes a file under a temporary directory;
MariaDB/MySQL reads ``TIDEMARK_MYSQL_URL`` (default ``mysql://root@127.0.0.1:3306/test``)
and PostgreSQL ``TIDEMARK_TEST_POSTGRES_URL``; each run works in a database or schema of its
own, dropped at the end.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sqlite3
import sys
import tempfile
import uuid

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from bench_postgres_e2e import machine
from bench_small_batches import SCALARS, answer_rows, phases_of, run_tidemark, stream_line, write_stream

PG_URL = os.environ.get("TIDEMARK_TEST_POSTGRES_URL", "postgresql://postgres@127.0.0.1:5432/test")
MYSQL_URL = os.environ.get("TIDEMARK_MYSQL_URL", "mysql://root@127.0.0.1:3306/test")
WAYS = {
    "d": ("reduced in the endpoint, sessions in the driver", True, {}),
    "e": ("reduced in the endpoint, sessions on the executors", True, {"reduced_batch_keys": 0}),
    "l": ("Load + reduce in Python", False, {}),
    "x": ("as (d), JSON texts staged (no typed values)", True, {}),
}


def dialect_of(name: str):
    """The endpoint's dialect class (whose ``typed_staging`` way (x) switches off)."""
    if name == "sqlite":
        from tidemark.drivers.sqlite.driver import SQLiteDialect

        return SQLiteDialect
    if name == "mysql":
        from tidemark.drivers.mysql.dialect import MySqlDialect

        return MySqlDialect
    from tidemark.drivers.postgres.dialect import PostgresDialect

    return PostgresDialect


def endpoint_for(name: str, work: str) -> tuple[dict, str]:
    """A spec's endpoint mapping for a fresh view, and where it is (a file, database or schema)."""
    tag = f"bench_{uuid.uuid4().hex[:10]}"
    if name == "sqlite":
        path = os.path.join(work, f"{tag}.db")
        return {"sqlite": {"path": path}}, path
    if name == "mysql":
        return {"mysql": {"url": MYSQL_URL, "schema": tag}}, tag
    return {"postgres": {"url": PG_URL, "schema": tag}}, tag


def read_view(name: str, where: str) -> dict:
    """customer -> (the seven scalars, items) as the endpoint holds them."""
    cols = ", ".join(SCALARS)
    if name == "sqlite":
        with sqlite3.connect(where) as con:
            rows = con.execute(  # a lean table's column, or a full one's document
                f"SELECT customer, {cols}, COALESCE(items, json_extract(flow_document, '$.items')) FROM customers"
            )
            return {r[0]: (*r[1:8], json.loads(r[8])) for r in rows}
    if name == "mysql":
        from tests.support.mysql_support import connect

        con = connect(MYSQL_URL, where)
        try:
            with con.cursor() as cur:
                cur.execute(
                    f"SELECT customer, {cols}, COALESCE(items, JSON_EXTRACT(flow_document, '$.items')) FROM customers"
                )
                return {r[0]: (*r[1:8], json.loads(r[8])) for r in cur.fetchall()}
        finally:
            con.close()
    import psycopg

    with psycopg.connect(PG_URL) as con:
        rows = con.execute(
            f"SELECT customer, {cols}, COALESCE(items, flow_document->'items') FROM \"{where}\".customers"
        )
        return {r[0]: (*r[1:8], r[8]) for r in rows}


def drop(name: str, where: str) -> None:
    if name == "mysql":
        from tests.support.mysql_support import drop_database

        drop_database(MYSQL_URL, where)
    elif name == "postgres":
        import psycopg

        with psycopg.connect(PG_URL, autocommit=True) as con:
            con.execute(f'DROP SCHEMA IF EXISTS "{where}" CASCADE')


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--endpoints", default="sqlite,mysql,postgres")
    ap.add_argument("--docs", type=int, default=1_000_000)
    ap.add_argument("--batches", type=int, default=40)
    ap.add_argument("--keys", type=int, default=100_000)
    ap.add_argument("--shards", type=int, default=2)
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--ways", default="delx", help="which of (d), (e), (l), (x) to run")
    args = ap.parse_args()
    print(machine())
    print(stream_line(args))
    work = tempfile.mkdtemp(prefix="tm-reduced-")
    data = os.path.join(work, "data")
    answer = write_stream(data, args.docs, args.keys, args.batches)
    want = answer_rows(answer)
    from tidemark.spark.session import local_session

    spark = local_session("tidemark-bench", master=f"local[{args.shards}]", shuffle_partitions=args.shards)
    made: list[tuple[str, str]] = []
    try:
        for name in args.endpoints.split(","):
            print(f"\n{name}")
            walls: dict = {}
            for rnd in range(1, args.rounds + 1):
                last = rnd == args.rounds
                for way, (what, reduce, options) in WAYS.items():
                    if way not in args.ways:
                        continue
                    endpoint, where = endpoint_for(name, work)
                    made.append((name, where))
                    run = os.path.join(work, f"{name}-{way}-{rnd}")
                    os.makedirs(run)
                    dialect, typed = dialect_of(name), dialect_of(name).typed_staging
                    dialect.typed_staging = typed and way != "x"
                    try:
                        wall, rows = run_tidemark(
                            spark,
                            data,
                            None,
                            None,
                            args.shards,
                            os.path.join(run, "chk"),
                            endpoint_reduce=reduce,
                            endpoint=endpoint,
                            options=options,
                        )
                    finally:
                        dialect.typed_staging = typed
                    exact = read_view(name, where) == want
                    if last:
                        walls[way] = wall
                        rate = f"{wall:6.2f}s ({args.docs / wall:,.0f} docs/s)"
                        print(f"  ({way}) {what}: {rate}, view {'==' if exact else '!='} answer")
                        print(phases_of(wall, rows, "      "))
                    elif not exact:
                        print(f"  ({way}) round {rnd}: view != answer")
            if "d" in walls:
                print(
                    "  speed: (d) "
                    + ", ".join(
                        f"{walls[w] / walls['d']:.2f}x {label}"
                        for w, label in (
                            ("l", "the Load path"),
                            ("e", "the sessions on the executors"),
                            ("x", "JSON texts"),
                        )
                        if w in walls
                    )
                )
    finally:
        spark.stop()
        for name, where in made:
            try:
                drop(name, where)
            except Exception as exc:
                print(f"could not drop {name} {where}: {exc}")
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
