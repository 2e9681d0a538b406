"""A Kafka topic as a collection's source, end to end with Spark: committed records only (aborted
transactions skipped), tombstones as deletions, incremental runs, the per-batch cap, and the
Python API's ``spark.readStream.format("tidemark_kafka")``."""

from __future__ import annotations

import pytest

from tests.support.helpers import assert_verified, normalize, postgres_view, reduce_orders, sqlite_view
from tests.support.kafka_broker import confluent_kafka_or_skip, kafka_bootstrap, kafka_broker
from tests.support.log_sources import caps_available_now, create_topic, kafka_source_spec, produce_orders
from tidemark.spark.runner import run_spec

confluent_kafka_or_skip()


def test_a_topic_into_sqlite_holds_the_committed_records_once(spark, tmp_path, kafka_bootstrap):
    create_topic(kafka_bootstrap, "e2e-orders", partitions=3)
    docs = produce_orders(
        kafka_bootstrap,
        "e2e-orders",
        transactions=8,
        per_transaction=40,
        customers=25,
        seed=11,
        abort_every=4,
        deletes=0.03,
        tombstones=0.03,
    )
    db = tmp_path / "view.db"
    spec = kafka_source_spec(
        tmp_path, bootstrap=kafka_bootstrap, topic="e2e-orders", endpoint={"sqlite": {"path": str(db)}}, shards=2
    )
    reports: list = []
    run_spec(spec, spark=spark, on_batch=reports.append)
    assert normalize(sqlite_view(db, json_columns=("items", "flags"))) == reduce_orders(docs)

    more = produce_orders(
        kafka_bootstrap, "e2e-orders", transactions=3, per_transaction=40, customers=25, seed=12, abort_every=2
    )
    run_spec(spec, spark=spark, on_batch=reports.append)
    assert normalize(sqlite_view(db, json_columns=("items", "flags"))) == reduce_orders(docs + more)
    run_spec(spec, spark=spark, on_batch=reports.append)  # nothing new: no batch
    assert len(reports) == 2
    assert_verified(spec)  # read again from the topic, from where the view began

    # status: the records waiting per partition, past what the view committed
    from tidemark.status import status_of_spec
    from tidemark.status_render import render

    (view,) = status_of_spec(spec)
    assert view.input.kind == "log" and view.input.offsets_waiting == 0 and view.behind is False
    assert {p["part"] for p in view.input.lag} == {"e2e-orders/0", "e2e-orders/1", "e2e-orders/2"}
    produce_orders(kafka_bootstrap, "e2e-orders", transactions=1, per_transaction=30, customers=25, seed=18)
    (view,) = status_of_spec(spec)
    assert view.input.offsets_waiting == 30 + 3  # the records and a commit marker in each partition they reached
    assert view.behind is True
    shown = "\n".join(render(view, width=120))
    assert "33 record(s) waiting" in shown and "e2e-orders/0:" in shown


@pytest.mark.slow  # (after the default run; the NATS source's cap runs in it)
def test_the_per_batch_cap_splits_a_backlog_into_batches(spark, tmp_path, kafka_bootstrap, pg_schema, postgres_url):
    create_topic(kafka_bootstrap, "e2e-capped", partitions=2)
    docs = produce_orders(kafka_bootstrap, "e2e-capped", transactions=5, per_transaction=40, customers=30, seed=13)
    spec = kafka_source_spec(
        tmp_path,
        bootstrap=kafka_bootstrap,
        topic="e2e-capped",
        endpoint={"postgres": {"url": postgres_url, "schema": pg_schema}},
        max_records_per_batch=60,
    )
    reports: list = []
    run_spec(spec, spark=spark, on_batch=reports.append)
    if caps_available_now():
        assert len(reports) >= 4  # 205 offsets (records and commit markers), at most 60 a batch
    else:  # PySpark 4.0/4.1: Trigger.AvailableNow reads what is there in one batch (docs/sources/kafka.md)
        assert len(reports) == 1
    assert normalize(postgres_view(postgres_url, pg_schema)) == reduce_orders(docs)


@pytest.mark.slow  # (after the default run)
def test_the_python_api_reads_a_topic_by_name(spark, tmp_path, kafka_bootstrap):
    import tidemark
    from tests.support.helpers import ORDERS_SCHEMA
    from tidemark.spark.logsource import register

    create_topic(kafka_bootstrap, "e2e-api", partitions=2)
    docs = produce_orders(kafka_bootstrap, "e2e-api", transactions=2, per_transaction=30, customers=10, seed=14)
    register(spark)
    df = (
        spark.readStream.format("tidemark_kafka")
        .option("bootstrap_servers", kafka_bootstrap)
        .option("topic", "e2e-api")
        .load()
    )
    db = tmp_path / "api.db"
    run = tidemark.materialize(
        df,
        collection={"key": ["/customer"], "schema": ORDERS_SCHEMA},
        endpoint={"sqlite": {"path": str(db)}},
        resource={"table": "customers"},
        checkpoint=str(tmp_path / "chk"),
        available_now=True,
    )
    run.awaitTermination()
    assert normalize(sqlite_view(db, json_columns=("items", "flags"))) == reduce_orders(docs)


@pytest.mark.slow  # (after the default run)
def test_a_view_that_starts_at_the_latest_offsets_reads_only_what_comes_after(spark, tmp_path, kafka_bootstrap):
    create_topic(kafka_bootstrap, "e2e-latest", partitions=1)
    produce_orders(kafka_bootstrap, "e2e-latest", transactions=1, per_transaction=20, customers=5, seed=15)
    db = tmp_path / "latest.db"
    spec = kafka_source_spec(
        tmp_path,
        bootstrap=kafka_bootstrap,
        topic="e2e-latest",
        endpoint={"sqlite": {"path": str(db)}},
        starting_offsets="latest",
    )
    run_spec(spec, spark=spark)  # the first run starts at the end: nothing to read
    later = produce_orders(kafka_bootstrap, "e2e-latest", transactions=1, per_transaction=20, customers=5, seed=16)
    run_spec(spec, spark=spark)
    assert normalize(sqlite_view(db, json_columns=("items", "flags"))) == reduce_orders(later)


def test_a_deleted_topic_fails_the_run_with_one_line_naming_it(spark, tmp_path, kafka_bootstrap):
    from confluent_kafka.admin import AdminClient

    from tidemark.errors import SourceGone

    create_topic(kafka_bootstrap, "e2e-deleted", partitions=2)
    produce_orders(kafka_bootstrap, "e2e-deleted", transactions=1, per_transaction=10, customers=5, seed=17)
    db = tmp_path / "deleted.db"
    spec = kafka_source_spec(
        tmp_path, bootstrap=kafka_bootstrap, topic="e2e-deleted", endpoint={"sqlite": {"path": str(db)}}
    )
    run_spec(spec, spark=spark)
    before = sqlite_view(db, json_columns=("items", "flags"))
    admin = AdminClient({"bootstrap.servers": kafka_bootstrap})
    for fut in admin.delete_topics(["e2e-deleted"]).values():
        fut.result(30)
    with pytest.raises(SourceGone, match=r"^kafka source e2e-deleted: e2e-deleted/0 no longer exists") as failed:
        run_spec(spec, spark=spark)
    assert "\n" not in str(failed.value)
    assert sqlite_view(db, json_columns=("items", "flags")) == before
