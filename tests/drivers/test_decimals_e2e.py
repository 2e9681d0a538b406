"""Exact decimals end to end: ``multipleOf: 0.01`` sums of cents over many batches and shards
equal the exact decimal sums, in NUMERIC/DECIMAL columns and in the stored documents."""

from __future__ import annotations

import json
import os
import random
from decimal import Decimal
from types import SimpleNamespace

import psycopg
import pytest
import yaml

from tests.support.helpers import write_input
from tests.support.mysql_support import mysql_db, mysql_url, sql
from tidemark.collection.collection import Collection
from tidemark.drivers.mysql import MySqlDriver
from tidemark.drivers.postgres import PostgresDriver
from tidemark.spec import CollectionSpec

pytestmark = [pytest.mark.spark]

SCHEMA = {
    "type": "object",
    "required": ["customer", "total"],
    "reduce": {"strategy": "merge"},
    "properties": {
        "customer": {"type": "string"},
        "total": {"type": "number", "multipleOf": 0.01, "reduce": {"strategy": "sum"}},
        "largest": {"type": "number", "multipleOf": 0.01, "reduce": {"strategy": "maximize"}},
        "orders": {"type": "integer", "reduce": {"strategy": "sum"}},
    },
}


def totals_binding():
    coll = Collection(CollectionSpec("payments", ("/customer",), SCHEMA))
    return coll.binding_spec(SimpleNamespace(resource={"table": "totals"}, delta_updates=False))


def payments(data, files: int = 3, per_file: int = 400, customers: int = 30) -> dict:
    """Write the files; return customer -> (exact total, largest, orders)."""
    draw = random.Random(17)
    os.makedirs(data, exist_ok=True)
    want: dict = {}
    for f in range(files):
        lines = []
        for _ in range(per_file):
            c, cents = f"c{draw.randrange(customers):03d}", draw.randrange(1, 500_000) / 100
            lines.append(json.dumps({"customer": c, "total": cents, "largest": cents, "orders": 1}))
            t, m, n = want.get(c, (Decimal(0), Decimal(0), 0))
            want[c] = (t + Decimal(repr(cents)), max(m, Decimal(repr(cents))), n + 1)
        write_input(data, f, lines)
    return want


def spec(tmp_path, data, endpoint) -> str:
    path = os.path.join(tmp_path, "spec.yaml")
    with open(path, "w") as f:
        yaml.safe_dump(
            {
                "collections": {
                    "payments": {
                        "key": ["/customer"],
                        "schema": SCHEMA,
                        "source": {"format": "json", "path": str(data), "options": {"maxFilesPerTrigger": 1}},
                    }
                },
                "materializations": {
                    "view": {
                        "endpoint": endpoint,
                        "shards": 2,
                        "bindings": [{"source": "payments", "resource": {"table": "totals"}}],
                    }
                },
                "checkpoint": str(tmp_path / "chk"),
            },
            f,
        )
    return path


@pytest.mark.postgres
def test_sums_of_cents_are_exact_in_postgresql_numeric_columns(spark, tmp_path, postgres_url, pg_schema):
    from tidemark.spark.runner import run_spec

    want = payments(tmp_path / "data")
    run_spec(spec(tmp_path, tmp_path / "data", {"postgres": {"url": postgres_url, "schema": pg_schema}}), spark=spark)
    with psycopg.connect(postgres_url) as con:
        types = dict(
            con.execute(
                "SELECT a.attname, format_type(a.atttypid, a.atttypmod) FROM pg_attribute a "
                "WHERE a.attrelid = %s::regclass AND a.attnum > 0",
                (f'"{pg_schema}".totals',),
            ).fetchall()
        )
        rows = con.execute(
            f'SELECT customer, total, largest, orders, flow_document FROM "{pg_schema}".totals'
        ).fetchall()
    assert (types["total"], types["largest"], types["orders"]) == ("numeric(38,2)", "numeric(38,2)", "bigint")
    got = {c: (t, m, n) for c, t, m, n, _ in rows}
    assert got == want
    # PostgreSQL sums the cents itself, in lean rows: the row is the document (nothing outside its columns)
    assert all(rest is None for *_, rest in rows)
    driver = PostgresDriver({"url": postgres_url, "schema": pg_schema})
    try:
        docs = driver.dump("view", totals_binding())
    finally:
        driver.close()
    assert {k[0]: Decimal(repr(d["total"])) for k, d in docs.items()} == {c: w[0] for c, w in want.items()}
    assert any(len(str(w[0]).split(".")[-1]) == 2 for w in want.values())
    assert not any("99999999" in repr(d["total"]) or "00000001" in repr(d["total"]) for d in docs.values())


@pytest.mark.slow  # the same path as PostgreSQL's (MariaDB sums the cents itself); the column type: tests/collection/test_decimals.py
def test_sums_of_cents_are_exact_in_mysql_decimal_columns(spark, tmp_path, mysql_url, mysql_db):
    from tidemark.spark.runner import run_spec

    want = payments(tmp_path / "data", files=2)
    run_spec(spec(tmp_path, tmp_path / "data", {"mysql": {"url": mysql_url, "schema": mysql_db}}), spark=spark)
    types = dict(
        sql(
            mysql_url,
            "SELECT column_name, column_type FROM information_schema.columns "
            "WHERE table_schema = %s AND table_name = 'totals'",
            (mysql_db,),
        )
    )
    assert (types["total"], types["largest"]) == ("decimal(38,2)", "decimal(38,2)")
    rows = sql(mysql_url, f"SELECT customer, total, largest, orders, flow_document FROM `{mysql_db}`.totals")
    assert {c: (t, m, n) for c, t, m, n, _ in rows} == want
    assert all(rest is None for *_, rest in rows)  # lean rows: the row is the document
    driver = MySqlDriver({"url": mysql_url, "schema": mysql_db})
    try:
        docs = driver.dump("view", totals_binding())
    finally:
        driver.close()
    assert {k[0]: Decimal(repr(d["total"])) for k, d in docs.items()} == {c: w[0] for c, w in want.items()}


def ICEBERG(tmp_path):
    from tests.support.iceberg_support import config

    return config(tmp_path, "sqlite")


def lake_rows(endpoint: str, tmp_path) -> tuple[dict, list]:
    """(column types, rows (customer, total, largest, orders, document)) of the lake table."""
    import duckdb

    if endpoint == "delta":
        import deltalake

        from tests.support.delta_support import live_files

        location = str(tmp_path / "lake" / "totals")
        dt = deltalake.DeltaTable(location)
        types = {f.name: str(f.type.type) for f in dt.schema().fields}
        files = live_files(location)
    else:
        from tidemark.drivers.iceberg import IcebergDriver

        d = IcebergDriver(ICEBERG(tmp_path))
        try:
            table = d.catalog.load_table(("views", "totals"))
            types = {f.name: str(f.field_type) for f in table.schema().fields}
            files = [f.removeprefix("file://") for f in table.inspect.files().column("file_path").to_pylist()]
        finally:
            d.close()
    con = duckdb.connect()
    try:
        rows = con.execute(
            "SELECT customer, total, largest, orders, flow_document FROM read_parquet(?, union_by_name = true)", [files]
        ).fetchall()
    finally:
        con.close()
    return types, rows


@pytest.mark.parametrize(
    "endpoint",
    [
        pytest.param("delta", marks=pytest.mark.slow),
        "iceberg",
    ],  # the same columns model; each driver: test_lake_decimals
)
def test_sums_of_cents_are_exact_in_lake_decimal_columns(spark, tmp_path, endpoint):
    from tidemark.spark.runner import run_spec

    want = payments(tmp_path / "data", files=2)
    config = {"delta": {"path": str(tmp_path / "lake")}} if endpoint == "delta" else {"iceberg": ICEBERG(tmp_path)}
    run_spec(spec(tmp_path, tmp_path / "data", config), spark=spark)
    types, rows = lake_rows(endpoint, tmp_path)
    decimal = "decimal(38,2)" if endpoint == "delta" else "decimal(38, 2)"
    assert (types["total"], types["largest"]) == (decimal, decimal)
    assert {c: (t, m, n) for c, t, m, n, _ in rows} == want
    assert all(isinstance(t, Decimal) for _, t, *_ in rows)
    # a lean table: the columns hold every member, flow_document nothing (or no inexact cents)
    assert not any(doc is not None and ("99999999" in doc or "00000001" in doc) for *_, doc in rows)
