""" "Last status by event time" beside sums, end to end: flat order events arrive out of
order across files and batches; each key's view holds the status of its latest event (by
instant, whatever the offsets) and the sum of its amounts, compared with an answer computed
here -- through a spec into SQLite and through the Python API into PostgreSQL."""

from __future__ import annotations

import datetime as dt
import json
import random
import sqlite3

import pytest
import yaml

from tests.support.helpers import sqlite_view, table_documents, write_input

pytestmark = pytest.mark.spark

SCHEMA = {
    "type": "object",
    "required": ["order", "ts", "status"],
    "reduce": {"strategy": "merge"},
    "properties": {
        "order": {"type": "string"},
        "ts": {"type": "string", "format": "date-time", "reduce": {"strategy": "maximize"}},
        "status": {"type": "string", "reduce": {"strategy": "lastWriteWins", "order": "/ts"}},
        "amount": {"type": "integer", "reduce": {"strategy": "sum"}},
    },
}
OFFSETS = ["Z", "+02:00", "-05:00"]


def events(data, files=4, per_file=40, orders=12) -> dict:
    """Write the files; return order -> (status of the latest event, sum of amounts)."""
    data.mkdir(exist_ok=True)
    draw = random.Random(71)
    base = dt.datetime(2026, 11, 28, tzinfo=dt.timezone.utc)
    latest: dict = {}
    sums: dict = {}
    n = 0
    for f in range(files):
        lines = []
        for _ in range(per_file):
            n += 1
            key = f"o{draw.randrange(orders):02d}"
            at = base + dt.timedelta(seconds=draw.randrange(100_000), microseconds=n)  # distinct instants
            off = draw.choice(OFFSETS)
            shift = {"Z": 0, "+02:00": 2, "-05:00": -5}[off]
            local = (at + dt.timedelta(hours=shift)).replace(tzinfo=None).isoformat(timespec="microseconds")
            status, amount = f"s{n}", draw.randrange(1, 100)
            lines.append(json.dumps({"order": key, "ts": local + off, "status": status, "amount": amount}))
            if key not in latest or at > latest[key][0]:
                latest[key] = (at, status)
            sums[key] = sums.get(key, 0) + amount
        write_input(data, f, lines)
    return {k: (latest[k][1], sums[k]) for k in latest}


def test_through_a_spec_into_sqlite(spark, tmp_path):
    from tidemark.spark.runner import run_spec

    want = events(tmp_path / "data")
    spec = tmp_path / "spec.yaml"
    spec.write_text(
        yaml.safe_dump(
            {
                "collections": {
                    "orders": {
                        "key": ["/order"],
                        "schema": SCHEMA,
                        "source": {"path": "data", "options": {"maxFilesPerTrigger": 1}},
                    }
                },
                "materializations": {
                    "v": {
                        "endpoint": {"sqlite": {"path": "v.db"}},
                        "shards": 2,
                        "bindings": [{"source": "orders", "resource": {"table": "orders"}}],
                    }
                },
            }
        )
    )
    run_spec(str(spec), spark=spark)
    got = sqlite_view(tmp_path / "v.db", "orders", "order")
    assert {k: (d["status"], d["amount"]) for k, d in got.items()} == want


@pytest.mark.postgres
def test_through_the_python_api_into_postgresql(spark, tmp_path, postgres_url, pg_schema):
    import psycopg

    import tidemark

    want = events(tmp_path / "data", files=3)
    tidemark.materialize(
        spark.readStream.option("maxFilesPerTrigger", 1).text(str(tmp_path / "data")),
        collection={"key": ["/order"], "schema": SCHEMA},
        endpoint={"postgres": {"url": postgres_url, "schema": pg_schema}},
        resource={"table": "orders"},
        checkpoint=str(tmp_path / "chk"),
        shards=2,
        spark=spark,
        available_now=True,
    ).await_termination()
    with psycopg.connect(postgres_url) as con:
        rows = con.execute(f'SELECT "order", status, amount FROM "{pg_schema}".orders').fetchall()
        docs = table_documents(con.execute(f'SELECT * FROM "{pg_schema}".orders'), "order")
    assert {k: (s, a) for k, s, a in rows} == want
    assert all((docs[k]["status"], docs[k]["amount"]) == (s, a) for k, s, a in rows)


@pytest.mark.postgres
def test_epoch_times_reduce_in_the_postgresql_statement(spark, tmp_path, postgres_url, pg_schema):
    """An order property that is not a date-time (epoch microseconds here) reduces in the
    endpoint's statement (no Loads) and in Spark's compiled combine."""
    data = tmp_path / "data"
    want = events(data, files=3)
    for f in sorted(data.iterdir()):  # the same events with epoch microseconds for /ts
        lines = []
        for line in f.read_text().splitlines():
            d = json.loads(line)
            at = dt.datetime.fromisoformat(d["ts"]) - dt.datetime(1970, 1, 1, tzinfo=dt.timezone.utc)
            d["ts"] = at // dt.timedelta(microseconds=1)
            lines.append(json.dumps(d))
        f.write_text("\n".join(lines) + "\n")
    schema = {
        **SCHEMA,
        "properties": {**SCHEMA["properties"], "ts": {"type": "integer", "reduce": {"strategy": "maximize"}}},
    }
    assert reduced_in_postgres(spark, tmp_path, schema, postgres_url, pg_schema) == want


@pytest.mark.postgres
def test_a_status_some_events_lack_reduces_in_the_postgresql_statement(spark, tmp_path, postgres_url, pg_schema):
    """``status`` left out of some events (and ``ts`` out of others): no Loads (Spark's compiled
    combine, then the statement keeps the time each status came from), and each order's status
    is that of its latest event holding one, by instant."""
    data = tmp_path / "data"
    events(data, files=3, per_file=60)
    draw = random.Random(5)
    latest: dict = {}  # order -> (instant, status) of its latest event holding a status
    sums: dict = {}
    for f in sorted(data.iterdir()):
        lines = []
        for line in f.read_text().splitlines():
            d = json.loads(line)
            roll = draw.random()
            if roll < 0.4:
                del d["status"]
            elif roll < 0.5:
                del d["ts"]
            if "status" in d:
                at = dt.datetime.fromisoformat(d["ts"]) if "ts" in d else None  # an event without ts orders first
                if d["order"] not in latest or (
                    at is not None and (latest[d["order"]][0] is None or at > latest[d["order"]][0])
                ):
                    latest[d["order"]] = (at, d["status"])
            sums[d["order"]] = sums.get(d["order"], 0) + d["amount"]
            lines.append(json.dumps(d))
        f.write_text("\n".join(lines) + "\n")
    schema = {**SCHEMA, "required": ["order", "amount"]}
    want = {k: (latest[k][1] if k in latest else None, sums[k]) for k in sums}
    assert reduced_in_postgres(spark, tmp_path, schema, postgres_url, pg_schema) == want


def reduced_in_postgres(spark, tmp_path, schema, postgres_url, pg_schema) -> dict:
    """The events in ``tmp_path / "data"`` materialized into PostgreSQL, which reduces them in its
    statement (asserted: no Loads): order -> (status, amount)."""
    import psycopg

    import tidemark
    from tidemark.collection.collection import Collection
    from tidemark.drivers.postgres import PostgresDriver
    from tidemark.runtime.reduce_path import reduce_paths
    from tidemark.spec import CollectionSpec

    coll = Collection(CollectionSpec("orders", ("/order",), schema))
    b = coll.binding_spec(type("R", (), {"resource": {"table": "orders"}, "delta_updates": False})())
    driver = PostgresDriver({"url": postgres_url, "schema": pg_schema})
    (planned,), [line] = reduce_paths([b], [coll], driver.capabilities())
    assert planned.endpoint_reduce, line
    tidemark.materialize(
        spark.readStream.option("maxFilesPerTrigger", 1).text(str(tmp_path / "data")),
        collection={"key": ["/order"], "schema": schema},
        endpoint={"postgres": {"url": postgres_url, "schema": pg_schema}},
        resource={"table": "orders"},
        checkpoint=str(tmp_path / "chk"),
        shards=2,
        spark=spark,
        available_now=True,
    ).await_termination()
    with psycopg.connect(postgres_url) as con:
        rows = con.execute(f'SELECT "order", status, amount FROM "{pg_schema}".orders').fetchall()
    return {k: (s, a) for k, s, a in rows}
