"""The Python API keeps a ``TimestampType`` column's microseconds: ``…26.002161Z`` reaches the
view as ``…26.002161Z`` (Spark's default JSON format would cut it to ``…26.002Z``), in the
document and in the endpoint's date-time column of a lean row: SQLite's fixed-width UTC text,
PostgreSQL's timestamptz, MySQL's datetime(6) (Delta's and Iceberg's timestamps:
tests/drivers/lake/test_lake_date_times.py)."""

from __future__ import annotations

import datetime as dt
import json
import sqlite3

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from tests.support.helpers import table_documents
from tests.support.mysql_support import connect, mysql_db, mysql_url, sql

pytestmark = pytest.mark.spark

SCHEMA = {
    "type": "object",
    "required": ["id"],
    "reduce": {"strategy": "merge"},
    "properties": {
        "id": {"type": "string"},
        "at": {"type": "string", "format": "date-time", "reduce": {"strategy": "maximize"}},
        "first": {"type": "string", "format": "date-time", "reduce": {"strategy": "minimize"}},
    },
}
UTC = dt.timezone.utc
TIMES = [
    dt.datetime(2026, 11, 28, 12, 0, 26, 2161, tzinfo=UTC),
    dt.datetime(2026, 11, 28, 12, 0, 26, 2162, tzinfo=UTC),  # one microsecond later
    dt.datetime(2026, 11, 28, 12, 0, 26, 1, tzinfo=UTC),
]
LATEST, EARLIEST = "2026-11-28T12:00:26.002162Z", "2026-11-28T12:00:26.000001Z"


def run(spark, tmp_path, endpoint):
    import tidemark

    data = tmp_path / "data"
    data.mkdir()
    t = pa.timestamp("us", tz="UTC")
    pq.write_table(
        pa.table({"id": ["a"] * 3, "at": pa.array(TIMES, t), "first": pa.array(TIMES, t)}), data / "1.parquet"
    )
    stream = spark.readStream.schema("id string, at timestamp, first timestamp").parquet(str(data))
    tidemark.materialize(
        stream,
        collection={"key": ["/id"], "schema": SCHEMA},
        endpoint=endpoint,
        resource={"table": "times"},
        checkpoint=str(tmp_path / "chk"),
        spark=spark,
        available_now=True,
    ).await_termination()


def check(doc, at_column):
    assert (doc["at"], doc["first"]) == (LATEST, EARLIEST)
    if isinstance(at_column, str):
        at_column = dt.datetime.fromisoformat(at_column.replace("Z", "+00:00"))
    if at_column.tzinfo is None:  # MySQL's datetime(6): UTC
        at_column = at_column.replace(tzinfo=UTC)
    assert at_column == TIMES[1]


def test_sqlite(spark, tmp_path):
    run(spark, tmp_path, {"sqlite": {"path": str(tmp_path / "v.db")}})
    with sqlite3.connect(tmp_path / "v.db") as con:
        ((at,),) = con.execute('SELECT "at" FROM times').fetchall()
        (doc,) = table_documents(con.execute("SELECT * FROM times"), "id").values()
    assert at == LATEST  # fixed-width UTC text: six digits of fraction, as the document spells it here
    check(doc, at)


@pytest.mark.postgres
def test_postgres(spark, tmp_path, postgres_url, pg_schema):
    import psycopg

    run(spark, tmp_path, {"postgres": {"url": postgres_url, "schema": pg_schema}})
    with psycopg.connect(postgres_url) as con:
        ((at, text),) = con.execute(f'SELECT "at", "at"::text FROM "{pg_schema}".times').fetchall()
        (doc,) = table_documents(con.execute(f'SELECT * FROM "{pg_schema}".times'), "id").values()
    assert text.endswith(".002162+00")  # timestamptz keeps microseconds
    check(doc, at)


@pytest.mark.slow  # the same JSON text as above; MySQL's datetime(6) column
def test_mysql(spark, tmp_path, mysql_url, mysql_db):
    run(spark, tmp_path, {"mysql": {"url": mysql_url, "schema": mysql_db}})
    ((at,),) = sql(mysql_url, f"SELECT `at` FROM `{mysql_db}`.times")
    con = connect(mysql_url)
    try:
        with con.cursor() as cur:
            cur.execute(f"SELECT * FROM `{mysql_db}`.times")
            (doc,) = table_documents(cur, "id").values()
    finally:
        con.close()
    check(doc, at)
