"""A NATS JetStream stream as a collection's source, end to end with Spark: every message
once, incremental runs, the per-batch cap; and SIGKILLs while a publisher writes (chaos_full)."""

from __future__ import annotations

import random
import threading

import pytest

from tests.support.harness import run_until_done
from tests.support.helpers import assert_verified, normalize, postgres_view, reduce_orders, sqlite_view
from tests.support.log_sources import caps_available_now, nats_source_spec, publish_orders
from tests.support.nats_server import nats_server, nats_url
from tidemark.spark.runner import run_spec

pytest.importorskip("nats", reason="pip install -e '.[test,nats]'")


def test_a_stream_into_sqlite_holds_every_message_once(spark, tmp_path, nats_url):
    docs = publish_orders(nats_url, "ORDERS_E2E", messages=300, customers=25, seed=41, deletes=0.03)
    db = tmp_path / "view.db"
    spec = nats_source_spec(
        tmp_path,
        url=nats_url,
        stream="ORDERS_E2E",
        endpoint={"sqlite": {"path": str(db)}},
        shards=2,
        max_records_per_batch=120,
    )
    reports: list = []
    run_spec(spec, spark=spark, on_batch=reports.append)
    assert len(reports) == (3 if caps_available_now() else 1)  # 300 sequences, 120 a batch (PySpark 4.2+)
    assert normalize(sqlite_view(db, json_columns=("items", "flags"))) == reduce_orders(docs)
    more = publish_orders(nats_url, "ORDERS_E2E", messages=50, customers=25, seed=42)
    run_spec(spec, spark=spark, on_batch=reports.append)
    assert normalize(sqlite_view(db, json_columns=("items", "flags"))) == reduce_orders(docs + more)
    assert_verified(spec)


@pytest.mark.chaos_full
@pytest.mark.parametrize("endpoint", ["sqlite", "postgres"])
def test_kills_while_a_publisher_writes_leave_every_message_once(tmp_path, nats_url, endpoint, postgres_url, pg_schema):
    stream, published = f"ORDERS_KILL_{endpoint.upper()}", []

    def publisher():
        for r in range(10):
            published.extend(publish_orders(nats_url, stream, messages=60, customers=40, seed=50 + r))

    publish_orders(nats_url, stream, messages=0, customers=1, seed=0)  # the stream exists before the run
    thread = threading.Thread(target=publisher, daemon=True)
    thread.start()
    db = tmp_path / "view.db"
    config = (
        {"sqlite": {"path": str(db)}}
        if endpoint == "sqlite"
        else {"postgres": {"url": postgres_url, "schema": pg_schema}}
    )
    spec = nats_source_spec(tmp_path, url=nats_url, stream=stream, endpoint=config, shards=2, max_records_per_batch=100)
    draw = random.Random(81)
    outcome = run_until_done(spec, kill_after=lambda a: draw.uniform(4.0, 9.0) if a < 3 else None)
    thread.join(120)
    assert outcome.kills >= 1, outcome
    assert run_until_done(spec).kills == 0
    view = (
        sqlite_view(db, json_columns=("items", "flags"))
        if endpoint == "sqlite"
        else postgres_view(postgres_url, pg_schema)
    )
    assert normalize(view) == reduce_orders(published)
    assert_verified(spec)
