"""Load keys/s and Store docs/s of one PostgreSQL shard session.

    python bench/bench_postgres_driver.py [N] [URL]

N documents (default 100k) are Stored and committed into a fresh schema, then Loaded
back in chunks of the driver's ``max_load_keys``, then Stored again as updates of
existing keys.  Reports the rates per shard (one session, one connection).
"""

from __future__ import annotations

import os
import sys
import time
import uuid

import psycopg

from tidemark.drivers.postgres import PostgresDriver
from tidemark.protocol.messages import (
    Acknowledge, Apply, BindingSpec, Field, Flush, Load, Open, Range, StartCommit, Store,
)


def main() -> None:
    n = int(sys.argv[1]) if len(sys.argv) > 1 else 100_000
    url = sys.argv[2] if len(sys.argv) > 2 else os.environ.get(
        "TIDEMARK_TEST_POSTGRES_URL", "postgresql://postgres@127.0.0.1:5432/test")
    schema = f"tm_bench_{uuid.uuid4().hex[:8]}"
    b = BindingSpec({"table": "customers"}, "orders", ("/customer",), (
        Field("customer", "/customer", "string", is_key=True),
        Field("amount", "/amount", "integer"), Field("city", "/city", "string"),
        Field("score", "/score", "number"), Field("vip", "/vip", "boolean")))
    driver = PostgresDriver({"url": url, "schema": schema})
    chunk = driver.capabilities.max_store_docs
    try:
        driver.apply(Apply("bench", driver.config, (b,)))
        keys = [(f"customer-{i:08d}",) for i in range(n)]
        docs = [{"customer": k[0], "amount": i, "city": "Oslo", "score": i / 3, "vip": i % 7 == 0,
                 "items": ["a", "b"], "flags": {"big": False}} for i, k in enumerate(keys)]

        def store_all(t, exists: bool, batch: int) -> float:
            t0 = time.perf_counter()
            for s in range(0, n, chunk):
                ks, ds = keys[s:s + chunk], docs[s:s + chunk]
                t.store(Store(0, tuple(ks), tuple((d["amount"], d["city"], d["score"], d["vip"]) for d in ds),
                              tuple(ds), (exists,) * len(ks), (False,) * len(ks)))
            t.start_commit(StartCommit({"checkpoint_id": "bench", "batch_id": batch, "materialization": "bench"}))
            return time.perf_counter() - t0

        t, _ = driver.open(Open("bench", "v", Range(), bindings=(b,)))
        t.acknowledge(Acknowledge())
        t.flush(Flush())
        insert = store_all(t, False, 0)

        t.acknowledge(Acknowledge())
        t0 = time.perf_counter()
        found = 0
        lchunk = driver.capabilities.max_load_keys
        for s in range(0, n, lchunk):
            for resp in t.load(Load(0, tuple(keys[s:s + lchunk]))):
                found += len(resp.keys)
        late, _ = t.flush(Flush())
        found += sum(len(r.keys) for r in late)
        load = time.perf_counter() - t0
        assert found == n, found
        update = store_all(t, True, 1)
        t.close()
        print(f"{n} keys, one shard session:")
        print(f"  Store (insert) + commit: {n / insert:>10,.0f} docs/s  ({insert:.2f}s)")
        print(f"  Load:                    {n / load:>10,.0f} keys/s  ({load:.2f}s)")
        print(f"  Store (upsert) + commit: {n / update:>10,.0f} docs/s  ({update:.2f}s)")
        with psycopg.connect(url, autocommit=True) as con:
            t0 = time.perf_counter()
            con.execute("CREATE TEMP TABLE raw (customer text, amount bigint, city text, score float8, vip bool, d jsonb)")
            with con.cursor() as cur, cur.copy("COPY raw FROM STDIN") as cp:
                import json
                for d in docs:
                    cp.write_row((d["customer"], d["amount"], d["city"], d["score"], d["vip"], json.dumps(d)))
            raw = time.perf_counter() - t0
        print(f"  raw COPY (reference):    {n / raw:>10,.0f} rows/s  ({raw:.2f}s)")
    finally:
        with psycopg.connect(url, autocommit=True) as con:
            con.execute(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE')
        driver.close()


if __name__ == "__main__":
    main()
