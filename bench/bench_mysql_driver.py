"""Store docs/s and Load keys/s of one MySQL/MariaDB shard session, per bulk method.

    flock /tmp/spark.lock python bench/bench_mysql_driver.py [N] [URL]

N documents (default 100k) are Stored and committed into a fresh database, Loaded back in
chunks of the driver's ``max_load_keys``, then Stored again as updates of existing keys —
once with ``bulk: infile`` (LOAD DATA LOCAL INFILE into the staging and key tables) and
once with ``bulk: insert`` (multi-row INSERT … ON DUPLICATE KEY UPDATE).  Load is also
measured with the keys in a multi-row ``IN`` list instead of a temp table (the
alternative the driver does not ship: ``InListLoads`` below).
"""

from __future__ import annotations

import os
import sys
import time
import uuid

import pymysql

from tidemark.drivers.common.columns import DOCUMENT_COLUMN
from tidemark.drivers.mysql import MySqlDriver
from tidemark.drivers.mysql.bulk import param
from tidemark.drivers.sql import SqlTransactor
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


class InListLoads(SqlTransactor):
    """Load by ``WHERE key IN (…)`` (one statement per chunk), keys matched back in Python."""

    def lookup(self, binding, model, keys):
        d = self.dialect
        convs = [param(c.kind) for c in model.keys]
        where = {}
        for i, key in enumerate(keys):
            where.setdefault(tuple(f(v) for f, v in zip(convs, key)), []).append(i)
        cols = ", ".join(d.quote(c.name) for c in model.keys)
        row = "(" + d.params(len(convs)) + ")"
        sql = (
            f"SELECT {cols}, {d.quote(DOCUMENT_COLUMN)} FROM {d.ident(model)} WHERE ({cols}) IN "
            f"({', '.join([row] * len(where))})"
        )
        params = [v for k in where for v in k]
        found = self.in_transaction(lambda: self.execute(sql, params).fetchall(), "load", write=False)
        n = len(convs)
        return sorted((i, r[n]) for r in found for i in where.get(tuple(r[:n]), ()))


def server_cpu() -> float:
    """CPU seconds of the local mariadbd/mysqld (0 when it is not on this machine)."""
    for pid in os.listdir("/proc"):
        if pid.isdigit():
            try:
                with open(f"/proc/{pid}/comm") as f:
                    if f.read().strip() not in ("mariadbd", "mysqld"):
                        continue
                with open(f"/proc/{pid}/stat") as f:
                    parts = f.read().rsplit(")", 1)[1].split()
                return (int(parts[11]) + int(parts[12])) / os.sysconf("SC_CLK_TCK")
            except OSError:
                continue
    return 0.0


def bench(url: str, n: int, bulk: str, transactor=None) -> dict:
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
    driver = MySqlDriver({"url": url, "schema": schema, "bulk": bulk})
    if transactor is not None:
        driver.transactor = transactor
    chunk = driver.capabilities().max_store_docs
    out = {}
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

        def timed(what, fn):
            w, c, s = time.perf_counter(), time.process_time(), server_cpu()
            fn()
            out[what] = (n / (time.perf_counter() - w), time.process_time() - c, server_cpu() - s)

        def store_all(exists: bool, batch: int) -> None:
            t.acknowledge(Acknowledge())
            t.flush(Flush())
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

        def load_all() -> None:
            t.acknowledge(Acknowledge())
            found, lchunk = 0, driver.capabilities().max_load_keys
            for s in range(0, n, lchunk):
                for resp in t.load(Load(0, tuple(keys[s : s + lchunk]))):
                    found += len(resp.keys)
            late, _ = t.flush(Flush())
            assert found + sum(len(r.keys) for r in late) == n

        timed("store (insert) + commit", lambda: store_all(False, 0))
        timed("load", load_all)
        timed("store (update) + commit", lambda: store_all(True, 1))
        t.close()
    finally:
        driver.close()
        con = pymysql.connect(
            host=driver.settings.host,
            port=driver.settings.port,
            user=driver.settings.user,
            password=driver.settings.password,
            autocommit=True,
        )
        con.cursor().execute(f"DROP DATABASE IF EXISTS `{schema}`")
        con.close()
    return out


def main() -> None:
    n = int(sys.argv[1]) if len(sys.argv) > 1 else 100_000
    url = sys.argv[2] if len(sys.argv) > 2 else os.environ.get("TIDEMARK_MYSQL_URL", "mysql://root@127.0.0.1:3306/test")
    print(f"{n} keys, one shard session (load average {open('/proc/loadavg').read().split()[0]}):")
    for label, bulk, transactor in (
        ("bulk: infile", "infile", None),
        ("bulk: insert", "insert", None),
        ("infile, Load by IN list", "infile", InListLoads),
    ):
        for what, (rate, client, server) in bench(url, n, bulk, transactor).items():
            unit = "keys" if what == "load" else "docs"
            print(
                f"  {label:<24} {what:<24} {rate:>9,.0f} {unit}/s   (CPU: client {client:.2f}s, server {server:.2f}s)"
            )


if __name__ == "__main__":
    main()
