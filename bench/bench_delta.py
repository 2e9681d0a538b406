"""Documents/s into a Delta table through tidemark, vs a plain ``write_deltalake`` append.

    python bench/bench_delta.py [N] [--shards K] [--e2e [--files F] [--compare-sqlite]] [--skip-driver]

Driver level (unless ``--skip-driver``): N documents in K shard sessions, one batch of inserts into a fresh
table (once a lean table, once ``document: full``, with the live data bytes of each), then one batch updating every key (Load + reduce-free Store), each committed the
way the runtime does it: StartCommit (staged Parquet), then the coordinator's MERGE with
an app transaction.  ``--e2e`` also runs a spec (as ``tidemark run --available-now``) on local Spark
over N JSON documents in F files (one batch per file, every key twice) into a Delta
endpoint, and prints where the batches spent their time; ``--compare-sqlite`` repeats
that run into the SQLite endpoint.

The reference is ``write_deltalake(mode="append")`` of the same final rows (typed
columns + the JSON document): what a job that needs neither exactly-once nor
upserts would pay.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import shutil
import sys
import tempfile
import time

import pyarrow as pa
from deltalake import DeltaTable, write_deltalake

from tidemark.drivers.delta import DeltaDriver
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
from tidemark.runtime.merge_patch import apply_update

BINDING = BindingSpec(
    {"table": "customers"},
    "orders",
    ("/customer",),
    (
        Field("customer", "/customer", "string", is_key=True, nullable=False),
        Field("amount", "/amount", "integer"),
        Field("city", "/city", "string"),
        Field("score", "/score", "number"),
        Field("vip", "/vip", "boolean"),
        Field("items", "/items", "array"),
    ),
)


def docs_for(n: int, version: int) -> list[dict]:
    return [
        {
            "customer": f"customer-{i:08d}",
            "amount": i + version,
            "city": "Oslo",
            "score": i / 3,
            "vip": i % 7 == 0,
            "items": ["a", "b"][: 1 + version],
        }
        for i in range(n)
    ]


def values(d: dict) -> tuple:
    return (d["amount"], d["city"], d["score"], d["vip"], d["items"])


def final_rows(docs: list[dict]) -> pa.Table:
    return pa.table(
        {
            "customer": [d["customer"] for d in docs],
            "amount": [d["amount"] for d in docs],
            "city": [d["city"] for d in docs],
            "score": [d["score"] for d in docs],
            "vip": [d["vip"] for d in docs],
            "items": [json.dumps(d["items"]) for d in docs],
            "flow_document": [json.dumps(d, separators=(",", ":")) for d in docs],
        }
    )


def driver_level(n: int, shards: int, root: str, document: str = "lean") -> dict:
    """Both batches into a fresh table of the ``document`` form; per batch (total, shards,
    MERGE) seconds, and ``"bytes"``: the live data files' size after the second."""
    binding = dataclasses.replace(BINDING, resource={"table": f"customers_{document}", "document": document})
    driver = DeltaDriver({"path": os.path.join(root, "lake")})
    driver.apply(Apply("bench", driver.config, (binding,)))
    ranges = Range.split(shards)
    chunk = driver.capabilities().max_store_docs
    state = None
    out = {}
    for batch in (0, 1):
        docs = docs_for(n, batch)
        # the runtime routes keys by hash; here: an even split of the sorted keys
        per = [docs[i * n // shards : (i + 1) * n // shards] for i in range(shards)]
        t0 = time.perf_counter()
        loaded = 0
        started = []
        for key_range, part in zip(ranges, per):
            t, _ = driver.open(Open("bench", "v", key_range, state=state, bindings=(binding,)))
            t.acknowledge(Acknowledge(state=state))
            keys = [(d["customer"],) for d in part]
            for s in range(0, len(keys), driver.capabilities().max_load_keys):
                for r in t.load(Load(0, tuple(keys[s : s + driver.capabilities().max_load_keys]))):
                    loaded += len(r.keys)
            late, _ = t.flush(Flush())
            loaded += sum(len(r.keys) for r in late)
            for s in range(0, len(part), chunk):
                ds = part[s : s + chunk]
                t.store(
                    Store(
                        0,
                        tuple(keys[s : s + chunk]),
                        tuple(values(d) for d in ds),
                        tuple(ds),
                        (batch > 0,) * len(ds),
                        (False,) * len(ds),
                    )
                )
            started.append(
                t.start_commit(StartCommit({"checkpoint_id": "bench", "batch_id": batch, "materialization": "bench"}))
            )
            t.close()
        t_staged = time.perf_counter()
        for s in started:
            state = apply_update(state, s.state)
        driver.coordinator_acknowledge("bench", state, {"checkpoint_id": "bench", "batch_id": batch}, (binding,))
        t1 = time.perf_counter()
        assert loaded == (n if batch else 0), loaded
        out[batch] = (t1 - t0, t_staged - t0, t1 - t_staged)
    t0 = time.perf_counter()
    view = driver.dump("bench", binding)
    out["dump"] = time.perf_counter() - t0
    assert len(view) == n and view[("customer-00000001",)] == docs_for(n, 1)[1]
    dt = DeltaTable(driver.model(binding).name)
    out["bytes"] = sum(pa.table(dt.get_add_actions(flatten=True)).column("size_bytes").to_pylist())
    return out


def reference(n: int, root: str) -> float:
    table = final_rows(docs_for(n, 1))
    t0 = time.perf_counter()
    write_deltalake(os.path.join(root, "plain"), table, mode="append")
    dt = time.perf_counter() - t0
    assert DeltaTable(os.path.join(root, "plain")).count() == n if hasattr(DeltaTable, "count") else True
    return dt


def e2e(n: int, files: int, shards: int, root: str, endpoint: str = "delta"):
    import yaml

    from tidemark.spark.runner import run_spec

    root = os.path.join(root, endpoint)
    data = os.path.join(root, "data")
    os.makedirs(data)
    spark_checkpoints = os.path.join(root, "checkpoints")
    per = n // files
    for f in range(files):
        with open(os.path.join(data, f"orders-{f:04d}.json"), "w") as out:
            for i in range(per):
                k = (f * per + i) % max(1, n // 2)  # every key twice: half inserts, half updates
                out.write(
                    json.dumps(
                        {
                            "customer": f"c{k:08d}",
                            "amount": i,
                            "city": "Oslo",
                            "score": i / 3,
                            "vip": i % 7 == 0,
                            "items": ["a"],
                        }
                    )
                    + "\n"
                )
        os.utime(os.path.join(data, f"orders-{f:04d}.json"), (1_700_000_000 + f, 1_700_000_000 + f))
    schema = {
        "type": "object",
        "required": ["customer"],
        "reduce": {"strategy": "merge"},
        "properties": {
            "customer": {"type": "string"},
            "amount": {"type": "integer", "reduce": {"strategy": "sum"}},
            "city": {"type": "string"},
            "score": {"type": "number"},
            "vip": {"type": "boolean"},
            "items": {"type": "array", "reduce": {"strategy": "append"}},
        },
    }
    spec = {
        "collections": {
            "orders": {
                "key": ["/customer"],
                "schema": schema,
                "source": {"format": "json", "path": data, "options": {"maxFilesPerTrigger": 1}},
            }
        },
        "materializations": {
            "view": {
                "endpoint": {endpoint: {"path": os.path.join(root, "e2e")}},
                "shards": shards,
                "bindings": [{"source": "orders", "resource": {"table": "customers"}}],
            }
        },
        "checkpoint": spark_checkpoints,
    }
    path = os.path.join(root, "spec.yaml")
    with open(path, "w") as f:
        yaml.safe_dump(spec, f)
    reports = []
    t0 = time.perf_counter()
    run_spec(path, spark=None, on_batch=reports.append)
    wall = time.perf_counter() - t0
    batches = sum(r.wall for r in reports)
    if endpoint == "delta":
        keys = DeltaTable(os.path.join(root, "e2e", "customers")).to_pyarrow_table().num_rows
    else:
        import sqlite3

        with sqlite3.connect(os.path.join(root, "e2e")) as con:
            keys = con.execute("SELECT count(*) FROM customers").fetchone()[0]
    phases: dict[str, float] = {}
    for r in reports:
        for k, v in r.timings.items():
            phases[k] = phases.get(k, 0.0) + v
    return batches, wall, keys, sum(r.documents for r in reports), phases


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("n", nargs="?", type=int, default=200_000)
    ap.add_argument("--shards", type=int, default=4)
    ap.add_argument("--e2e", action="store_true")
    ap.add_argument("--files", type=int, default=4)
    ap.add_argument("--skip-driver", action="store_true", help="only the --e2e run")
    ap.add_argument("--compare-sqlite", action="store_true", help="with --e2e: the same run into SQLite")
    args = ap.parse_args()
    root = tempfile.mkdtemp(prefix="tm-bench-delta-")
    try:
        n = args.n
        if not args.skip_driver:
            print(f"{n:,} documents, {args.shards} shard sessions (sequential, one process), {os.cpu_count()} cores")
            for document in ("lean", "full"):
                res = driver_level(n, args.shards, root, document)
                print(
                    f"  a {document} table: {res['bytes'] / 2**20:.1f} MiB of live data files; dump {res['dump']:.2f}s"
                )
                for batch, label in ((0, "insert"), (1, "update (Load + Store)")):
                    total, stage, merge = res[batch]
                    print(
                        f"    tidemark {label:22}: {n / total:>10,.0f} docs/s  "
                        f"({total:.2f}s = shards {stage:.2f}s + MERGE {merge:.2f}s)"
                    )
            ref = reference(n, root)
            print(f"  plain write_deltalake append: {n / ref:>10,.0f} rows/s  ({ref:.2f}s)")
        if args.e2e:  # warm the JVM and the Python workers up, so that the first measured run is not penalized
            e2e(2000, 1, args.shards, os.path.join(root, "warm-up"), "delta")
        for endpoint in (["delta"] + (["sqlite"] if args.compare_sqlite else [])) if args.e2e else []:
            batches, wall, rows, documents, phases = e2e(n, args.files, args.shards, root, endpoint)
            print(
                f"  tidemark run -> {endpoint} (Spark local, {args.files} batches, {documents:,} docs -> {rows:,} keys): "
                f"{documents / batches:>10,.0f} docs/s in batches ({batches:.2f}s; {wall:.2f}s with JVM start)"
            )
            print(
                "    seconds per phase, summed over batches (shard.*: the slowest shard):",
                ", ".join(f"{k} {v:.2f}" for k, v in sorted(phases.items())),
            )
    finally:
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
