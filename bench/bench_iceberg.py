"""Many batches into an Iceberg table: tidemark beside a plain pyiceberg append of the same documents.

    python bench/bench_iceberg.py [--docs 200000] [--batches 8] [--keys 100000] [--shards 2] [--rounds 2]

The stream is bench_small_batches.py's: ``--docs`` order documents over ``--keys`` customers,
one JSON-lines file per micro-batch (``--batches`` files, ``maxFilesPerTrigger: 1``), nine
fields reduced per customer (sum, maximize, minimize, last/first write wins, append).  Both
runs write into one SQL catalog on a SQLite file, the warehouse a local folder.

(t) tidemark: ``run_spec`` of a spec with an ``iceberg`` endpoint, exactly once: per batch the
    shards Load the batch's existing keys from the table, reduce, and stage Parquet; the
    coordinator applies the batch in ONE overwrite snapshot (the data files holding a changed
    key rewritten without it, the new rows added).  The view is checked against the answer
    computed here while the files are written.  The table is lean (a column per property,
    ``flow_document`` only what no column holds).
(f) the same, with ``document: full``: the whole document as JSON in ``flow_document``
    (the form of every table before the lean one).  Each check line gives the table's live
    data bytes, to compare the forms.
(p) plain pyiceberg, the floor: per batch, the file's documents parsed (typed columns + the
    JSON document, as tidemark's table holds them) and ``table.append``-ed as they are: no
    reduction, no upsert, no deduplication, no exactly-once.  The table ends with every
    document, not the view.

They run in ``--rounds`` rounds in one JVM (fresh tables and checkpoints each round); the first
round warms the JIT, the ratio uses the last.  Per batch, tidemark's time is split into plan
(Spark's read and combine), shards (Load + Store, the slowest shard), apply (the coordinator's
Iceberg commit, timed around ``IcebergDriver.coordinator_acknowledge``) and the rest (the
recovery log, Spark's own work between batches).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import sys
import tempfile
import time

import pyarrow as pa

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from bench_postgres_e2e import machine
from bench_small_batches import SCALARS, SCHEMA, stream_line, write_stream

NAMESPACE = "views"


def catalog_config(work: str) -> dict:
    return {"uri": f"sqlite:///{os.path.join(work, 'catalog.db')}", "warehouse": os.path.join(work, "warehouse")}


def open_catalog(work: str):
    from pyiceberg.catalog.sql import SqlCatalog

    return SqlCatalog("tidemark", **catalog_config(work))


# ------------------------------------------------------------------ (t) tidemark


APPLY: dict[int, float] = {}  # batch id -> seconds in the coordinator's apply (this round)


def time_the_apply() -> None:
    """Wrap ``IcebergDriver.coordinator_acknowledge`` (it runs in this process, the Spark driver)."""
    from tidemark.drivers.iceberg import IcebergDriver

    inner = IcebergDriver.coordinator_acknowledge

    def timed(self, materialization, state, runtime_checkpoint, bindings):
        t0 = time.perf_counter()
        try:
            return inner(self, materialization, state, runtime_checkpoint, bindings)
        finally:
            b = int(runtime_checkpoint["batch_id"])
            APPLY[b] = APPLY.get(b, 0.0) + time.perf_counter() - t0

    IcebergDriver.coordinator_acknowledge = timed


def run_tidemark(spark, data: str, work: str, table: str, shards: int, document: str) -> tuple[float, list[dict]]:
    """``run_spec`` into ``views.<table>`` (``document``: the table's form, lean or full);
    (wall seconds, per-batch phases)."""
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
                "endpoint": {"iceberg": {"catalog": catalog_config(work), "namespace": NAMESPACE}},
                "shards": shards,
                "bindings": [{"source": "orders", "resource": {"table": table, "document": document}}],
            }
        },
        "checkpoint": os.path.join(work, f"checkpoints-{table}"),
    }
    path = os.path.join(work, f"spec-{table}.yaml")
    with open(path, "w") as f:
        yaml.safe_dump(spec, f)
    reports = []
    APPLY.clear()
    t0 = time.perf_counter()
    run_spec(path, spark=spark, on_batch=reports.append)
    wall = time.perf_counter() - t0
    rows = []
    for r in reports:
        t = r.timings
        apply = APPLY.get(r.batch_id, 0.0)
        row = {"plan": t.get("plan", 0.0), "shards": t.get("shards", 0.0), "apply": apply}
        row["other"] = max(0.0, r.wall - sum(row.values()))
        rows.append(row | {"_wall": r.wall, "_docs": r.documents, "_loaded": r.loaded})
    return wall, rows


def check_view(work: str, table: str, answer: dict) -> str:
    """The tidemark table read with pyiceberg (not tidemark) against the answer."""
    t = open_catalog(work).load_table((NAMESPACE, table))
    rows = t.scan().to_arrow()
    kinds = json.loads(t.properties.get("tidemark.leanColumns") or "{}")
    view = {}
    for row in rows.to_pylist():  # a lean row: its columns, then flow_document's members over them
        doc = {} if kinds else None
        for k, v in row.items() if kinds else ():
            if v is not None and k != "flow_document":
                doc[k] = json.loads(v) if kinds.get(k) == "json" else v
        rest = json.loads(row["flow_document"]) if row["flow_document"] is not None else {}
        view[row["customer"]] = rest if doc is None else {**doc, **rest}
    same = rows.num_rows == len(view) and view == answer
    files = t.inspect.files()
    size = sum(files.column("file_size_in_bytes").to_pylist())
    return (
        f"view {'==' if same else '!='} answer ({len(view):,} keys); {len(t.snapshots())} snapshots, "
        f"{files.num_rows} data files, {size / 2**20:.1f} MiB live"
    )


# ------------------------------------------------------------------ (p) plain append


def plain_schema():
    from pyiceberg.schema import Schema
    from pyiceberg.types import LongType, NestedField, StringType

    fields = [NestedField(1, "customer", StringType(), required=True)]
    for i, name in enumerate(SCALARS, start=2):
        fields.append(NestedField(i, name, StringType() if "city" in name else LongType()))
    fields.append(NestedField(len(fields) + 1, "items", StringType()))
    fields.append(NestedField(len(fields) + 1, "flow_document", StringType(), required=True))
    return Schema(*fields)


def arrow_of(lines: list[str], schema: pa.Schema) -> pa.Table:
    """One batch's documents as the table's rows: typed columns, arrays as JSON text, the document."""
    docs = [json.loads(line) for line in lines]
    cols = {"customer": [d["customer"] for d in docs]}
    for name in SCALARS:
        cols[name] = [d.get(name) for d in docs]
    cols["items"] = [json.dumps(d.get("items"), separators=(",", ":")) for d in docs]
    cols["flow_document"] = lines
    return pa.Table.from_pydict(cols, schema=schema)


def run_plain(data: str, work: str, table: str) -> tuple[float, list[dict], str]:
    """Per input file (a batch): parse, ``table.append``; (seconds, per-batch phases, a check)."""
    catalog = open_catalog(work)
    catalog.create_namespace_if_not_exists("plain")
    t = catalog.create_table(("plain", table), schema=plain_schema())
    schema = t.schema().as_arrow()
    rows = []
    total = 0
    t0 = time.perf_counter()
    for name in sorted(os.listdir(data)):
        if not name.endswith(".json"):
            continue
        ta = time.perf_counter()
        with open(os.path.join(data, name)) as f:
            lines = [line.rstrip("\n") for line in f if line.strip()]
        batch = arrow_of(lines, schema)
        tb = time.perf_counter()
        t.append(batch)
        tc = time.perf_counter()
        total += batch.num_rows
        rows.append({"parse": tb - ta, "append": tc - tb, "_wall": tc - ta, "_docs": batch.num_rows})
    seconds = time.perf_counter() - t0
    t = catalog.load_table(("plain", table))
    n = t.scan(selected_fields=("customer",)).to_arrow().num_rows
    check = (
        f"{n:,} rows {'==' if n == total else '!='} {total:,} documents; {len(t.snapshots())} snapshots, "
        f"{t.inspect.files().num_rows} data files"
    )
    return seconds, rows, check


# ------------------------------------------------------------------ report


def median_batch(rows: list[dict], skip_first: int = 1) -> dict:
    body = rows[skip_first:] or rows
    return {k: statistics.median(r[k] for r in body) for k in body[0]}


def fmt(d: dict) -> str:
    return "  ".join(f"{k}={v * 1000:.0f}" for k, v in d.items() if not k.startswith("_")) + " (ms)"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--docs", type=int, default=200_000, help="documents in the stream (default 200,000)")
    ap.add_argument("--batches", type=int, default=8, help="batches (one input file each; default 8)")
    ap.add_argument("--keys", type=int, default=100_000, help="customers (default 100,000)")
    ap.add_argument("--shards", type=int, default=2, help="tidemark shards and Spark's local[N] (default 2)")
    ap.add_argument(
        "--rounds", type=int, default=2, help="rounds of (t), (p); the ratio uses the last (default 2: one warm-up)"
    )
    ap.add_argument("--skip", default="", help="comma-separated: t (lean table), f (full documents), p")
    ap.add_argument("--keep", action="store_true", help="keep the work directory (its path is printed)")
    args = ap.parse_args()
    skip = set(filter(None, args.skip.split(",")))
    print(machine())
    print(stream_line(args))
    work = tempfile.mkdtemp(prefix="tm-bench-iceberg-")
    data = os.path.join(work, "data")
    answer = write_stream(data, args.docs, args.keys, args.batches)
    spark = None
    if not {"t", "f"} <= skip:
        from tidemark.spark.session import local_session

        time_the_apply()
        spark = local_session("tidemark-bench", master=f"local[{args.shards}]", shuffle_partitions=args.shards)
        from pyspark.sql import functions as F

        spark.range(1000).groupBy((F.col("id") % 3).alias("k")).count().collect()
    last: dict = {}
    try:
        for rnd in range(1, args.rounds + 1):
            print(
                f"\nround {rnd} of {args.rounds}"
                + (" (the ratio uses this one)" if rnd == args.rounds else " (warm-up)")
            )
            for run, form in (("t", "lean"), ("f", "full")):
                if run in skip:
                    continue
                wall, rows = run_tidemark(spark, data, work, f"customers_{form}_{rnd}", args.shards, form)
                last[run] = wall
                inside = sum(r["_wall"] for r in rows)
                print(
                    f"({run}) tidemark → Iceberg, {form} rows, exactly once: {wall:7.2f}s ({args.docs / wall:,.0f} "
                    f"docs/s; {inside:.2f}s in batches)"
                )
                print(
                    f"    median batch: {fmt(median_batch(rows))}, whole batch "
                    f"{median_batch(rows)['_wall']:.3f}s; keys loaded back: {sum(r['_loaded'] for r in rows):,}"
                )
                print("    apply per batch (s): " + " ".join(f"{r['apply']:.2f}" for r in rows))
                print("    " + check_view(work, f"customers_{form}_{rnd}", answer))
            if "p" not in skip:
                seconds, rows, check = run_plain(data, work, f"orders_{rnd}")
                last["p"] = seconds
                print(
                    f"(p) plain pyiceberg append, every document (no reduce, no upsert, not exactly once): "
                    f"{seconds:7.2f}s ({args.docs / seconds:,.0f} docs/s)"
                )
                print(f"    median batch: {fmt(median_batch(rows))}, whole batch {median_batch(rows)['_wall']:.3f}s")
                print(f"    {check}")
            if "t" in last and "p" in last:
                print(f"    (t)/(p) = {last['t'] / last['p']:.2f}× (tidemark's time over the plain append's)")
            if "t" in last and "f" in last:
                print(f"    (f)/(t) = {last['f'] / last['t']:.2f}× (the lean table's speed over the full one's)")
    finally:
        if spark is not None:
            spark.stop()
        if args.keep:
            print(f"work directory: {work}")
        else:
            shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
