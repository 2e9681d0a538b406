"""Which pyiceberg write is fastest for the Iceberg endpoint's coordinator apply?

    python bench/bench_iceberg_apply.py [--rows 1000000] [--changes 25000,125000] [--files 4]

A table of ROWS rows (typed columns + a JSON document, ``--files`` data files, random
string keys) in a SQLite catalog; each method applies one batch of CHANGES changed keys
(80% updates of existing keys, 10% new keys, 10% deletes) in ONE Iceberg transaction, each
on a fresh copy of the same table (``register_table`` of its metadata file):

* ``delete+append``  ``Transaction.delete(In(key, changed)) + Transaction.append(upserts)``
* ``overwrite``      ``Transaction.overwrite(upserts, overwrite_filter=In(key, changed))``
* ``upsert``         ``Transaction.delete(In(key, deleted)) + Transaction.upsert(upserts)``
* ``rewrite``        what the driver does (:func:`tidemark.drivers.iceberg.apply.replace_keys`):
  one overwrite snapshot that rewrites the data files holding a changed key without
  those rows and adds the upserts

Prints seconds per method and the snapshots each one added; every result is checked
against the others (same rows).
"""

from __future__ import annotations

import argparse
import json
import random
import shutil
import sys
import tempfile
import time

import pyarrow as pa
import pyarrow.compute as pc
from pyiceberg.catalog.sql import SqlCatalog
from pyiceberg.expressions import In
from pyiceberg.schema import Schema
from pyiceberg.types import BooleanType, DoubleType, LongType, NestedField, StringType

SCHEMA = Schema(
    NestedField(1, "customer", StringType(), required=True),
    NestedField(2, "amount", LongType()),
    NestedField(3, "city", StringType()),
    NestedField(4, "score", DoubleType()),
    NestedField(5, "vip", BooleanType()),
    NestedField(6, "flow_document", StringType(), required=True),
    identifier_field_ids=[1],
)


def rows(keys: list[str], seed: int) -> pa.Table:
    rnd = random.Random(seed)
    amount = [rnd.randrange(1000) for _ in keys]
    city = [rnd.choice(["Oslo", "Quito", "Lima", "Pune"]) for _ in keys]
    docs = [
        json.dumps(
            {"customer": k, "amount": a, "city": c, "score": a / 2, "vip": a > 500, "items": [a, a + 1]},
            separators=(",", ":"),
        )
        for k, a, c in zip(keys, amount, city)
    ]
    return pa.Table.from_arrays(
        [
            pa.array(keys, pa.string()),
            pa.array(amount, pa.int64()),
            pa.array(city, pa.string()),
            pa.array([a / 2 for a in amount], pa.float64()),
            pa.array([a > 500 for a in amount], pa.bool_()),
            pa.array(docs, pa.string()),
        ],
        schema=SCHEMA.as_arrow(),
    )


def method_delete_append(txn, upserts, changed, deleted, props):
    txn.delete(In("customer", changed), snapshot_properties=props)
    txn.append(upserts, snapshot_properties=props)


def method_overwrite(txn, upserts, changed, deleted, props):
    txn.overwrite(upserts, overwrite_filter=In("customer", changed), snapshot_properties=props)


def method_upsert(txn, upserts, changed, deleted, props):
    if deleted:
        txn.delete(In("customer", deleted), snapshot_properties=props)
    txn.upsert(upserts, join_cols=["customer"], snapshot_properties=props)


def method_rewrite(txn, upserts, changed, deleted, props):
    from tidemark.drivers.iceberg.apply import replace_keys

    replace_keys(txn, ["customer"], pa.table({"customer": pa.array(changed, pa.string())}), upserts, props)


METHODS = {
    "delete+append": method_delete_append,
    "overwrite": method_overwrite,
    "upsert": method_upsert,
    "rewrite": method_rewrite,
}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rows", type=int, default=1_000_000)
    ap.add_argument("--changes", default="25000,125000")
    ap.add_argument("--files", type=int, default=4)
    ap.add_argument("--methods", default=",".join(METHODS))
    args = ap.parse_args(argv)
    tmp = tempfile.mkdtemp(prefix="bench-iceberg-")
    try:
        catalog = SqlCatalog("bench", uri=f"sqlite:///{tmp}/catalog.db", warehouse=f"{tmp}/warehouse")
        catalog.create_namespace("bench")
        base = catalog.create_table(("bench", "base"), SCHEMA, properties={"commit.retry.num-retries": "0"})
        keys = [f"c{i:09d}" for i in range(args.rows)]
        random.Random(1).shuffle(keys)
        t0 = time.perf_counter()
        step = -(-args.rows // args.files)
        for i in range(0, args.rows, step):
            base.append(rows(keys[i : i + step], i))
        base = catalog.load_table(("bench", "base"))
        print(f"table of {args.rows} rows in {len(base.inspect.files())} files: {time.perf_counter() - t0:.1f} s")
        for n in (int(x) for x in args.changes.split(",")):
            rnd = random.Random(n)
            picked = rnd.sample(keys, int(n * 0.9))
            updated, deleted = picked[: int(n * 0.8)], picked[int(n * 0.8) :]
            new = [f"n{i:09d}" for i in range(n - len(picked))]
            upserts = rows(updated + new, n)
            changed = updated + new + deleted
            results = {}
            for name in args.methods.split(","):
                ident = ("bench", f"t_{name.replace('+', '_')}_{n}")
                table = catalog.register_table(ident, base.metadata_location)
                before = len(table.snapshots())
                t0 = time.perf_counter()
                with table.transaction() as txn:
                    METHODS[name](txn, upserts, changed, deleted, {"tidemark.batch": "1"})
                took = time.perf_counter() - t0
                table = catalog.load_table(ident)
                got = table.scan(selected_fields=("customer", "amount")).to_arrow()
                results[name] = got.sort_by("customer")
                print(
                    f"{n:>7} changed keys  {name:<14} {took:7.2f} s  +{len(table.snapshots()) - before} snapshot(s)"
                    f"  {got.num_rows} rows",
                    flush=True,
                )
            first = next(iter(results.values()))
            assert all(r.equals(first) for r in results.values()), "the methods disagree"
            want = args.rows + len(new) - len(deleted)
            assert first.num_rows == want and pc.count_distinct(first.column("customer")).as_py() == want
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
