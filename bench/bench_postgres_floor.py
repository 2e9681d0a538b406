"""The server-side floor under the endpoint goal (d) <= 2 x (c): what PostgreSQL itself
needs to rewrite keys that already exist, with no tidemark code in the loop.

    python bench/bench_postgres_floor.py [--rows 100000] [--touched 86000] [--rounds 5]
                                         [--fillfactor 70] [--url URL]

A keyed table of ``--rows`` documents (the shape of ``bench_postgres_e2e.py``'s view:
``customer text PRIMARY KEY``, four numbers, a city, ``flow_document jsonb``) is built
fresh and vacuumed before every measured operation.  ``--touched`` of its keys then get new
documents, as in a steady-state batch of the end-to-end bench (86 % of the keys).  The
COPY rows are built before any clock starts; each operation ends with a ``COMMIT``.

  copy-fresh    raw COPY of the touched rows into a fresh keyed table: (c), the goal's unit
  load          COPY the touched keys into a temp table, join, fetch the documents (Load)
  staged-update COPY the rows into a temp staging table, ``UPDATE ... FROM`` it (the commit)
  delete-copy   ``DELETE ... WHERE key = ANY(keys)``, then COPY the rows into the table
                (the alternative to an update: no staging, but no HOT update either)
  copy-existing COPY the touched rows into the table after deleting them (delete-copy's
                second half on its own): appending to a big keyed table, not an empty one

  sql-reduce    COPY the touched rows (as a batch's combined partial documents) into a temp
                table, then one ``INSERT ... ON CONFLICT DO UPDATE`` that reduces them into
                the stored row in SQL (sum, sum, maximize, last-write-wins ×2) and rebuilds
                ``flow_document`` from the reduced columns over the stored one (``||``):
                no Load, no document through the client — the next design's server floor

Rounds are interleaved; medians are printed, and each operation's ratio to copy-fresh.
Load + staged-update is the least a Load-then-update endpoint asks of the server, before
any client-side work (JSON, COPY formatting, the shard's reduce).
"""

from __future__ import annotations

import argparse
import json
import os
import random
import statistics
import time
import uuid

import psycopg

COLUMNS = ("customer", "amount", "orders", "largest", "city", "ts")
TABLE = (
    "(customer text PRIMARY KEY, amount bigint, orders bigint, largest bigint, city text, ts bigint, "
    "flow_document jsonb NOT NULL)"
)


def documents(rows: int, touched: int, seed: int = 1) -> tuple[list[tuple], list[tuple]]:
    rnd = random.Random(seed)

    def doc(i: int, v: int) -> tuple:
        d = {
            "customer": f"c{i:07d}",
            "amount": v * 3,
            "orders": v,
            "largest": v * 2,
            "city": rnd.choice(["Berlin", "Paris", "Rome", "Oslo"]),
            "ts": 1_700_000_000 + v,
        }
        return tuple(d[c] for c in COLUMNS) + (json.dumps(d, separators=(",", ":")),)

    base = [doc(i, 1) for i in range(rows)]
    return base, [doc(i, 5) for i in rnd.sample(range(rows), touched)]


def copy_rows(con: psycopg.Connection, sql: str, rows: list[tuple]) -> None:
    with con.cursor() as cur, cur.copy(sql) as cp:
        for r in rows:
            cp.write_row(r)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rows", type=int, default=100_000)
    ap.add_argument("--touched", type=int, default=86_000)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--fillfactor", type=int, default=70, help="the keyed table's fillfactor (tidemark's default)")
    ap.add_argument(
        "--url", default=os.environ.get("TIDEMARK_TEST_POSTGRES_URL", "postgresql://postgres@127.0.0.1:5432/test")
    )
    args = ap.parse_args()
    schema = f"tm_floor_{uuid.uuid4().hex[:6]}"
    t = f'"{schema}".t'
    base, touched = documents(args.rows, args.touched)
    keys = [r[0] for r in touched]
    con = psycopg.connect(args.url)

    def fresh() -> None:
        con.execute(f"DROP TABLE IF EXISTS {t}")
        con.execute(f"CREATE TABLE {t} {TABLE} WITH (fillfactor = {args.fillfactor})")
        copy_rows(con, f"COPY {t} FROM STDIN", base)
        con.commit()
        con.autocommit = True
        con.execute(f"VACUUM ANALYZE {t}")
        con.autocommit = False

    def timed(fn) -> float:
        t0 = time.perf_counter()
        fn()
        con.commit()
        return time.perf_counter() - t0

    def copy_fresh() -> float:
        con.execute(f'DROP TABLE IF EXISTS "{schema}".raw')
        con.execute(f'CREATE TABLE "{schema}".raw {TABLE}')
        con.commit()
        return timed(lambda: copy_rows(con, f'COPY "{schema}".raw FROM STDIN', touched))

    def load() -> float:
        fresh()
        con.execute("TRUNCATE lk")
        con.commit()

        def go():
            copy_rows(con, "COPY lk FROM STDIN", [(i, k) for i, k in enumerate(keys)])
            got = con.execute(f"SELECT l.i, t.flow_document::text FROM lk l JOIN {t} t ON t.customer = l.k").fetchall()
            assert len(got) == len(keys)

        return timed(go)

    def staged_update() -> float:
        fresh()
        con.execute("TRUNCATE st")
        con.commit()

        def go():
            copy_rows(con, "COPY st FROM STDIN", touched)
            n = con.execute(
                f"UPDATE {t} t SET amount = s.c1, orders = s.c2, largest = s.c3, city = s.c4, ts = s.c5, "
                "flow_document = s.d FROM st s WHERE t.customer = s.c0"
            ).rowcount
            assert n == len(touched)

        return timed(go)

    def sql_reduce() -> float:
        fresh()
        con.execute("TRUNCATE sr")
        con.commit()
        doc = (
            "jsonb_build_object('customer', {p}customer, 'amount', {a}, 'orders', {o}, 'largest', {g}, "
            "'city', EXCLUDED.city, 'ts', EXCLUDED.ts)"
        )
        a, o, g = "t.amount + EXCLUDED.amount", "t.orders + EXCLUDED.orders", "GREATEST(t.largest, EXCLUDED.largest)"

        def go():
            copy_rows(con, "COPY sr FROM STDIN", [r[:6] for r in touched])
            n = con.execute(
                f"INSERT INTO {t} AS t (customer, amount, orders, largest, city, ts, flow_document) "
                "SELECT c0, c1, c2, c3, c4, c5, jsonb_build_object('customer', c0, 'amount', c1, 'orders', c2, "
                "'largest', c3, 'city', c4, 'ts', c5) FROM sr "
                f"ON CONFLICT (customer) DO UPDATE SET amount = {a}, orders = {o}, largest = {g}, "
                "city = EXCLUDED.city, ts = EXCLUDED.ts, "
                f"flow_document = t.flow_document || {doc.format(p='t.', a=a, o=o, g=g)}"
            ).rowcount
            assert n == len(touched)

        return timed(go)

    def delete_copy() -> tuple[float, float]:
        fresh()
        t0 = time.perf_counter()
        n = con.execute(f"DELETE FROM {t} WHERE customer = ANY(%s)", (keys,)).rowcount
        assert n == len(touched)
        t1 = time.perf_counter()
        copy_rows(con, f"COPY {t} FROM STDIN", touched)
        con.commit()
        t2 = time.perf_counter()
        return t2 - t0, t2 - t1

    try:
        con.execute(f'CREATE SCHEMA "{schema}"')
        con.execute("CREATE TEMP TABLE lk (i integer, k text)")
        con.execute("CREATE TEMP TABLE st (c0 text, c1 bigint, c2 bigint, c3 bigint, c4 text, c5 bigint, d jsonb)")
        con.execute("CREATE TEMP TABLE sr (c0 text, c1 bigint, c2 bigint, c3 bigint, c4 text, c5 bigint)")
        con.commit()
        print(con.execute("SELECT version()").fetchone()[0])
        print(f"{args.rows:,} rows, {args.touched:,} touched, fillfactor {args.fillfactor}, {args.rounds} rounds")
        out: dict[str, list[float]] = {
            k: [] for k in ("copy-fresh", "load", "staged-update", "delete-copy", "copy-existing", "sql-reduce")
        }
        for _ in range(args.rounds):
            out["copy-fresh"].append(copy_fresh())
            out["load"].append(load())
            out["staged-update"].append(staged_update())
            both, second = delete_copy()
            out["delete-copy"].append(both)
            out["copy-existing"].append(second)
            out["sql-reduce"].append(sql_reduce())
        unit = statistics.median(out["copy-fresh"])
        for k, v in out.items():
            m = statistics.median(v)
            print(f"{k:14s} median {m:.3f}s  = {m / unit:.2f} x copy-fresh   (runs: {' '.join(f'{x:.3f}' for x in v)})")
        floor = statistics.median(out["load"]) + statistics.median(out["staged-update"])
        print(f"load + staged-update: {floor:.3f}s = {floor / unit:.2f} x copy-fresh (the goal allows 2)")
        reduce_ = statistics.median(out["sql-reduce"])
        print(f"sql-reduce against load + staged-update: {reduce_ / floor:.2f}")
    finally:
        con.rollback()
        con.autocommit = True
        con.execute(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE')
        con.close()


if __name__ == "__main__":
    main()
