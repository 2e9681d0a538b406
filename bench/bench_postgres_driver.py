"""Load keys/s and Store docs/s of one PostgreSQL shard session.

    python bench/bench_postgres_driver.py [N] [URL]

N documents (default 100k) are Stored and committed into a fresh schema, then Loaded
back in chunks of the driver's ``max_load_keys``, then Stored again as updates of
existing keys.  Reports the rates per shard (one session, one connection).
"""

from __future__ import annotations

import os
import resource
import sys
import time
import uuid

import psycopg

from tidemark.drivers.postgres import PostgresDriver
from tidemark.protocol.messages import (
    Acknowledge,
    Apply,
    BindingSpec,
    Field,
    Flush,
    Load,
    Open,
    Range,
    StartCommit,
    Store,
)


def backend_cpu(pid: int) -> float:
    """CPU seconds of a local PostgreSQL backend (0 when it is not on this machine)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            parts = f.read().rsplit(")", 1)[1].split()
        return (int(parts[11]) + int(parts[12])) / os.sysconf("SC_CLK_TCK")
    except OSError:
        return 0.0


def own_cpu() -> float:
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime


class Clock:
    """Wall and CPU (client + backend) time of a block."""

    def __init__(self, backend_pid: int):
        self.pid = backend_pid

    def __enter__(self):
        self.w, self.c, self.b = time.perf_counter(), own_cpu(), backend_cpu(self.pid)
        return self

    def __exit__(self, *exc):
        self.wall = time.perf_counter() - self.w
        self.client = own_cpu() - self.c
        self.server = backend_cpu(self.pid) - self.b
        self.cpu = self.client + self.server


def main() -> None:
    n = int(sys.argv[1]) if len(sys.argv) > 1 else 100_000
    url = (
        sys.argv[2]
        if len(sys.argv) > 2
        else os.environ.get("TIDEMARK_TEST_POSTGRES_URL", "postgresql://postgres@127.0.0.1:5432/test")
    )
    schema = f"tm_bench_{uuid.uuid4().hex[:8]}"
    b = BindingSpec(
        {"table": "customers"},
        "orders",
        ("/customer",),
        (
            Field("customer", "/customer", "string", is_key=True),
            Field("amount", "/amount", "integer"),
            Field("city", "/city", "string"),
            Field("score", "/score", "number"),
            Field("vip", "/vip", "boolean"),
        ),
    )
    driver = PostgresDriver({"url": url, "schema": schema})
    chunk = driver.capabilities().max_store_docs
    try:
        driver.apply(Apply("bench", driver.config, (b,)))
        keys = [(f"customer-{i:08d}",) for i in range(n)]
        docs = [
            {
                "customer": k[0],
                "amount": i,
                "city": "Oslo",
                "score": i / 3,
                "vip": i % 7 == 0,
                "items": ["a", "b"],
                "flags": {"big": False},
            }
            for i, k in enumerate(keys)
        ]

        t, _ = driver.open(Open("bench", "v", Range(), bindings=(b,)))
        clock = Clock(t.con.info.backend_pid)

        def store_all(exists: bool, batch: int) -> Clock:
            with clock:
                for s in range(0, n, chunk):
                    ks, ds = keys[s : s + chunk], docs[s : s + chunk]
                    t.store(
                        Store(
                            0,
                            tuple(ks),
                            tuple((d["amount"], d["city"], d["score"], d["vip"]) for d in ds),
                            tuple(ds),
                            (exists,) * len(ks),
                            (False,) * len(ks),
                        )
                    )
                t.start_commit(StartCommit({"checkpoint_id": "bench", "batch_id": batch, "materialization": "bench"}))
            return clock

        def line(what: str, c: Clock, unit: str) -> None:
            print(
                f"  {what:<24} {n / c.wall:>10,.0f} {unit}/s wall ({c.wall:.2f}s)   {n / c.cpu:>10,.0f} {unit}/s CPU "
                f"(client {c.client:.2f}s + server {c.server:.2f}s)"
            )

        print(f"{n} keys, one shard session (load average {open('/proc/loadavg').read().split()[0]}):")
        t.acknowledge(Acknowledge())
        t.flush(Flush())
        line("Store (insert) + commit", store_all(False, 0), "docs")

        t.acknowledge(Acknowledge())
        found = 0
        lchunk = driver.capabilities().max_load_keys
        with clock:
            for s in range(0, n, lchunk):
                for resp in t.load(Load(0, tuple(keys[s : s + lchunk]))):
                    found += len(resp.keys)
            late, _ = t.flush(Flush())
            found += sum(len(r.keys) for r in late)
        assert found == n, found
        line("Load", clock, "keys")
        line("Store (upsert) + commit", store_all(True, 1), "docs")
        t.close()
        with psycopg.connect(url, autocommit=True) as con:
            import json

            payload = "".join(
                f"{d['customer']}\t{d['amount']}\t{d['city']}\t{d['score']!r}\t{'t' if d['vip'] else 'f'}\t"
                f"{json.dumps(d)}\n"
                for d in docs
            )
            con.execute(
                "CREATE TEMP TABLE raw (customer text PRIMARY KEY, amount bigint, city text, score float8, "
                "vip bool, d jsonb)"
            )
            with Clock(con.info.backend_pid) as raw:
                with con.cursor() as cur, cur.copy("COPY raw FROM STDIN") as cp:
                    cp.write(payload)
        line("raw COPY (reference)", raw, "rows")
    finally:
        with psycopg.connect(url, autocommit=True) as con:
            con.execute(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE')
        driver.close()


if __name__ == "__main__":
    main()
