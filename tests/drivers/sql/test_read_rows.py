"""``Driver.read_rows`` (what ``tidemark adopt`` reads) on PostgreSQL and MySQL, without Spark:
a table by name, a query, and the rows as documents of a collection."""

from __future__ import annotations

import decimal

import psycopg
import pytest

from tests.support.mysql_support import mysql_db, mysql_url, sql
from tidemark.collection.collection import Collection
from tidemark.drivers.mysql import MySqlDriver
from tidemark.drivers.postgres import PostgresDriver
from tidemark.runtime.adoption import read_documents
from tidemark.spec import parse_spec

SCHEMA = {
    "type": "object",
    "reduce": {"strategy": "merge"},
    "required": ["customer"],
    "properties": {
        "customer": {"type": "string"},
        "total": {"type": "number", "multipleOf": 0.01, "reduce": {"strategy": "sum"}},
        "vip": {"type": "boolean"},
        "tags": {"type": "array", "items": {"type": "string"}},
    },
}


def collection() -> Collection:
    spec = parse_spec(
        {"collections": {"c": {"key": ["/customer"], "schema": SCHEMA}}, "materializations": {}, "checkpoint": "chk"},
        file=None,
        base_dir=".",
    )
    return Collection(spec.collections["c"])


WANT = ['{"customer":"a","total":12.5,"vip":true,"tags":["x"]}', '{"customer":"b","total":0.07,"vip":false}']


@pytest.mark.postgres
def test_postgres_reads_a_table_and_a_query(postgres_url, pg_schema):
    with psycopg.connect(postgres_url, autocommit=True) as con:
        con.execute(f'CREATE SCHEMA "{pg_schema}"')
        con.execute(
            f'CREATE TABLE "{pg_schema}"."Old Totals" (customer text PRIMARY KEY, total numeric(12,2), '
            "vip boolean, tags jsonb)"
        )
        con.execute(
            f"INSERT INTO \"{pg_schema}\".\"Old Totals\" VALUES ('a', 12.50, true, '[\"x\"]'), ('b', 0.07, false, NULL)"
        )
    with PostgresDriver({"url": postgres_url, "schema": pg_schema}) as driver:
        rows = sorted(driver.read_rows("Old Totals"), key=lambda r: r["customer"])  # a bare name: the schema's
        assert rows[0]["total"] == decimal.Decimal("12.50")
        assert read_documents(rows, collection(), "Old Totals", "v") == WANT
        summed = driver.read_rows(
            f'SELECT customer, sum(total) AS total FROM "{pg_schema}"."Old Totals" GROUP BY customer ORDER BY customer'
        )
        assert [(r["customer"], r["total"]) for r in summed] == [
            ("a", decimal.Decimal("12.50")),
            ("b", decimal.Decimal("0.07")),
        ]
        assert driver.read_rows(f"{pg_schema}.Old Totals") == driver.read_rows("Old Totals")


def test_mysql_reads_a_table_and_a_query(mysql_url, mysql_db):
    sql(mysql_url, f"CREATE DATABASE `{mysql_db}`")
    sql(
        mysql_url,
        f"CREATE TABLE `{mysql_db}`.old_totals (customer varchar(10) PRIMARY KEY, total decimal(12,2), "
        "vip boolean, tags json)",
    )
    sql(
        mysql_url, f"INSERT INTO `{mysql_db}`.old_totals VALUES ('a', 12.50, true, '[\"x\"]'), ('b', 0.07, false, NULL)"
    )
    with MySqlDriver({"url": mysql_url, "schema": mysql_db}) as driver:
        rows = sorted(driver.read_rows("old_totals"), key=lambda r: r["customer"])
        assert read_documents(rows, collection(), "old_totals", "v") == WANT  # tinyint(1) -> boolean, JSON text parsed
        assert len(driver.read_rows(f"SELECT * FROM `{mysql_db}`.old_totals WHERE vip")) == 1
