"""``tidemark verify``: a view recomputed from its committed input (no Spark) equals what the
endpoint holds; a hand UPDATE, a hand DELETE and an inserted row are each found, in
PostgreSQL, MariaDB, SQLite, Delta and Iceberg views."""

from __future__ import annotations

import json
import sqlite3
import subprocess
import sys

import pytest

from tests.support.helpers import orders_spec, postgres_spec, write_orders
from tests.support.mysql_support import mysql_db, mysql_spec, mysql_url, sql
from tidemark.runtime.verify import last_verified, verify
from tidemark.spark.runner import run_spec
from tidemark.spec import load_spec

pytestmark = [pytest.mark.spark]

ENDPOINTS = ["sqlite", *(pytest.param(k, marks=pytest.mark.slow) for k in ("postgres", "mysql", "delta", "iceberg"))]


def make_spec(kind, tmp_path, data, postgres_url, pg_schema, mysql_url, mysql_db):
    if kind == "sqlite":
        return orders_spec(tmp_path, data_dir=data, db_path=tmp_path / "v.db", shards=2)
    if kind == "postgres":
        return postgres_spec(tmp_path, data_dir=data, url=postgres_url, schema=pg_schema, shards=2)
    if kind == "mysql":
        return mysql_spec(tmp_path, data_dir=data, url=mysql_url, schema=mysql_db, shards=2)
    if kind == "delta":
        from tests.support.delta_specs import delta_spec

        return delta_spec(tmp_path, data_dir=data, lake=tmp_path / "lake", shards=2)
    from tests.support.iceberg_specs import iceberg_spec

    return iceberg_spec(tmp_path, data_dir=data, shards=2)


def hand_edits(kind, spec_path, tmp_path, postgres_url, pg_schema, mysql_url, mysql_db):
    """A person's UPDATE of c0001's amount, DELETE of c0002 and a copy of c0003 as "zz"."""
    statements = [
        "UPDATE {t} SET amount = amount + 1 WHERE customer = 'c0001'",
        "DELETE FROM {t} WHERE customer = 'c0002'",
    ]
    if kind == "sqlite":
        con = sqlite3.connect(tmp_path / "v.db")
        for s in statements:
            con.execute(s.format(t='"customers"'))
        con.execute("CREATE TEMP TABLE copy AS SELECT * FROM customers WHERE customer = 'c0003'")
        con.execute("UPDATE copy SET customer = 'zz'")
        con.execute("INSERT INTO customers SELECT * FROM copy")
        con.commit()
        con.close()
    elif kind == "postgres":
        import psycopg

        with psycopg.connect(postgres_url, autocommit=True) as con:
            t = f'"{pg_schema}"."customers"'
            for s in statements:
                con.execute(s.format(t=t))
            con.execute(f"CREATE TEMP TABLE copy AS SELECT * FROM {t} WHERE customer = 'c0003'")
            con.execute("UPDATE copy SET customer = 'zz'")
            con.execute(f"INSERT INTO {t} SELECT * FROM copy")
    elif kind == "mysql":
        from tests.support.mysql_support import connect

        con = connect(mysql_url, mysql_db)
        with con.cursor() as cur:
            for s in statements:
                cur.execute(s.format(t="`customers`"))
            cur.execute("CREATE TEMPORARY TABLE copy AS SELECT * FROM `customers` WHERE customer = 'c0003'")
            cur.execute("UPDATE copy SET customer = 'zz'")
            cur.execute("INSERT INTO `customers` SELECT * FROM copy")
        con.close()
    elif kind == "delta":
        import pyarrow.compute as pc
        from deltalake import DeltaTable, write_deltalake

        path = str(tmp_path / "lake" / "customers")
        table = DeltaTable(path)
        table.update(predicate="customer = 'c0001'", updates={"amount": "amount + 1"})
        table.delete("customer = 'c0002'")
        rows = DeltaTable(path).to_pyarrow_table()
        row = rows.filter(pc.equal(rows["customer"], "c0003"))
        write_deltalake(
            path, row.set_column(row.schema.get_field_index("customer"), "customer", [["zz"]]), mode="append"
        )
    else:
        import pyarrow as pa
        import pyarrow.compute as pc
        from pyiceberg.expressions import EqualTo

        from tests.support.iceberg_specs import open_catalog, sqlite_catalog

        table = open_catalog(sqlite_catalog(tmp_path)).load_table(("views", "customers"))
        rows = table.scan().to_arrow()
        one = rows.filter(pc.equal(rows["customer"], "c0001"))
        amount = one.schema.field("amount")
        one = one.set_column(one.schema.get_field_index("amount"), amount, pc.add(one["amount"], 1).cast(amount.type))
        table.overwrite(one, overwrite_filter=EqualTo("customer", "c0001"))
        table.delete(delete_filter=EqualTo("customer", "c0002"))
        row = rows.filter(pc.equal(rows["customer"], "c0003"))
        customer = row.schema.field("customer")
        table.append(row.set_column(row.schema.get_field_index("customer"), customer, pa.array(["zz"], customer.type)))


@pytest.mark.parametrize("kind", ENDPOINTS)
def test_verify_finds_a_hand_update_delete_and_insert(
    spark,
    tmp_path,
    kind,
    postgres_url,
    pg_schema,
    mysql_url,
    mysql_db,
):
    data = tmp_path / "data"
    write_orders(data, files=3, per_file=120, customers=30, seed=5, deletes=0.03)
    spec_path = make_spec(kind, tmp_path, data, postgres_url, pg_schema, mysql_url, mysql_db)
    run_spec(spec_path, spark=spark)
    spec = load_spec(spec_path)
    result = verify(spec, "view")
    assert result.ok and result.batch == 2 and result.documents == 360, result
    assert last_verified(spec.checkpoint_location("view"))["ok"] is True

    hand_edits(kind, spec_path, tmp_path, postgres_url, pg_schema, mysql_url, mysql_db)
    result = verify(spec, "view")
    (b,) = result.bindings
    assert not result.ok
    assert b.counts == {"missing": 1, "extra": 1, "differ": 1, "invalid": 0}, b
    assert [k for k, _ in b.missing] == ['["c0002"]'] and [k for k, _ in b.extra] == ['["zz"]']
    ((key, diffs),) = b.differ
    assert key == '["c0001"]' and [p for p, _, _ in diffs] == ["/amount"]
    (_, want, held) = diffs[0]
    assert held == want + 1
    assert last_verified(spec.checkpoint_location("view"))["ok"] is False

    # a spot check of the changed key alone
    assert not verify(spec, "view", keys=["c0001"]).ok
    assert verify(spec, "view", keys=["c0004"]).ok


def test_the_command_prints_the_difference_and_exits_3(spark, tmp_path):
    data = tmp_path / "data"
    write_orders(data, files=2, per_file=60, customers=10, seed=6)
    spec_path = orders_spec(tmp_path, data_dir=data, db_path=tmp_path / "v.db")
    run_spec(spec_path, spark=spark)
    ok = subprocess.run([sys.executable, "-m", "tidemark", "verify", spec_path], capture_output=True, text=True)
    assert ok.returncode == 0, ok.stderr
    assert "customers: 10 key(s), all equal" in ok.stdout and ok.stdout.strip().endswith("equal")
    con = sqlite3.connect(tmp_path / "v.db")
    con.execute("UPDATE customers SET city = 'Nowhere' WHERE customer = 'c0001'")
    con.commit()
    con.close()
    bad = subprocess.run(
        [sys.executable, "-m", "tidemark", "verify", spec_path, "--json"], capture_output=True, text=True
    )
    assert bad.returncode == 3, bad.stderr
    out = json.loads(bad.stdout)
    assert out["ok"] is False and out["bindings"][0]["differ"][0][0] == '["c0001"]'
    status = subprocess.run([sys.executable, "-m", "tidemark", "status", spec_path], capture_output=True, text=True)
    assert "verified" in status.stdout and "differ" in status.stdout, status.stdout

    from tidemark.spark.rebuild import rebuild  # what docs/operations.md says to do: rebuild, the spec unchanged

    rebuild(spec_path, spark=spark, wait=0)
    assert verify(load_spec(spec_path), "view").ok
