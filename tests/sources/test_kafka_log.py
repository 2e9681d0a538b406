"""The Kafka log source without Spark (tidemark/sources/kafka.py, tidemark/sources/log.py),
against a real Kafka-protocol broker: what a range holds, that it reads the same records
again, the plan of a batch (caps, new partitions), and the refusals."""

from __future__ import annotations

import json

import pytest

from tests.support.kafka_broker import confluent_kafka_or_skip, kafka_bootstrap, kafka_broker
from tests.support.log_sources import create_topic, produce_orders
from tidemark.errors import SpecError
from tidemark.sources import log_settings
from tidemark.sources.kafka import KafkaLog
from tidemark.sources.log import Bounds, SourceGone, check_retained, initial, key_document, plan, ranges

confluent_kafka_or_skip()


def read_all(log, start, end):
    return [(p, r.offset, r.value) for p, s, e in ranges(start, end) for r in log.read(p, s, e)]


def test_a_range_holds_the_committed_records_and_reads_them_again(kafka_bootstrap):
    create_topic(kafka_bootstrap, "src-range", partitions=3)
    committed = produce_orders(
        kafka_bootstrap, "src-range", transactions=6, per_transaction=20, customers=15, seed=1, abort_every=3
    )
    log = KafkaLog({"bootstrap_servers": kafka_bootstrap, "topic": "src-range"})
    bounds = log.bounds()
    assert sorted(bounds) == ["src-range/0", "src-range/1", "src-range/2"]
    start = initial(bounds)
    end = plan(start, bounds)
    first = read_all(log, start, end)
    assert len(first) == len(committed) == 80  # two of six transactions aborted: none of their records
    assert sorted(json.loads(v)["customer"] for _, _, v in first) == sorted(d["customer"] for d in committed)
    assert read_all(log, start, end) == first  # a replay reads the same records
    # per key, offset order is write order
    by_key: dict = {}
    for part, _offset, v in first:
        by_key.setdefault(json.loads(v)["customer"], []).append(part)
    assert all(len(set(parts)) == 1 for parts in by_key.values())


def test_the_plan_caps_a_batch_and_shares_the_cap_out(kafka_bootstrap):
    create_topic(kafka_bootstrap, "src-cap", partitions=2)
    produce_orders(kafka_bootstrap, "src-cap", transactions=2, per_transaction=50, customers=30, seed=2)
    log = KafkaLog({"bootstrap_servers": kafka_bootstrap, "topic": "src-cap"})
    bounds = log.bounds()
    start, seen = initial(bounds), []
    while True:
        end = plan(start, bounds, cap=30)
        if end == start:
            break
        assert sum(end[p] - start[p] for p in end) <= 30
        seen += read_all(log, start, end)
        start = end
    assert len(seen) == 100 and len({(p, o) for p, o, _ in seen}) == 100  # each record once


def test_a_new_partition_is_read_from_its_beginning(kafka_bootstrap):
    from confluent_kafka.admin import AdminClient, NewPartitions

    create_topic(kafka_bootstrap, "src-grow", partitions=1)
    produce_orders(kafka_bootstrap, "src-grow", transactions=1, per_transaction=10, customers=5, seed=3)
    log = KafkaLog({"bootstrap_servers": kafka_bootstrap, "topic": "src-grow"})
    start = plan({}, log.bounds())
    admin = AdminClient({"bootstrap.servers": kafka_bootstrap})
    futures = admin.create_partitions([NewPartitions("src-grow", 3)])
    for fut in futures.values():
        fut.result(30)
    produce_orders(kafka_bootstrap, "src-grow", transactions=1, per_transaction=30, customers=20, seed=4)
    bounds = log.bounds()
    assert len(bounds) == 3
    end = plan(start, bounds)
    assert set(end) == {"src-grow/0", "src-grow/1", "src-grow/2"}
    assert len([r for p, s, e in ranges(start, end, bounds) for r in log.read(p, s, e)]) == 30


def test_a_start_the_log_no_longer_holds_is_refused_naming_the_part():
    bounds = {"orders/0": Bounds(120, 200)}
    with pytest.raises(SourceGone, match=r"orders/0 holds offsets 120\.\.199 but the view must read from offset 100"):
        check_retained("orders", "kafka", {"orders/0": 100}, bounds)
    with pytest.raises(SourceGone, match=r"orders/1 no longer exists \(the view read it up to offset 7\)"):
        check_retained("orders", "kafka", {"orders/0": 150, "orders/1": 7}, bounds)
    check_retained("orders", "kafka", {"orders/0": 120}, bounds)


def test_a_deleted_topic_fails_the_next_plan(kafka_bootstrap):
    from confluent_kafka.admin import AdminClient

    create_topic(kafka_bootstrap, "src-gone", partitions=1)
    produce_orders(kafka_bootstrap, "src-gone", transactions=1, per_transaction=5, customers=5, seed=5)
    log = KafkaLog({"bootstrap_servers": kafka_bootstrap, "topic": "src-gone"})
    start = plan({}, log.bounds())
    admin = AdminClient({"bootstrap.servers": kafka_bootstrap})
    for fut in admin.delete_topics(["src-gone"]).values():
        fut.result(30)
    with pytest.raises(SourceGone, match="src-gone/0 no longer exists"):
        check_retained(log.name, "kafka", start, log.bounds())


def test_a_tombstone_is_the_deletion_of_its_key():
    assert key_document(["/customer"], b'["c1"]', "t/0@3") == {"customer": "c1", "_meta": {"op": "d"}}
    assert key_document(["/a/b", "/n"], b'["x", 2]', "t/0@3") == {"a": {"b": "x"}, "n": 2, "_meta": {"op": "d"}}
    with pytest.raises(Exception, match=r"has 1 part\(s\), the collection's key 2"):
        key_document(["/a", "/b"], b'["x"]', "t/0@3")


def test_settings_are_checked_before_anything_connects():
    with pytest.raises(SpecError, match=r"kafka source: unknown setting\(s\) 'topik' \(did you mean 'topic'\?\)"):
        log_settings("kafka", {"bootstrap_servers": "h:1", "topik": "x"})
    with pytest.raises(SpecError, match="name the topic"):
        log_settings("kafka", {"bootstrap_servers": "h:1"})
    with pytest.raises(SpecError, match="isolation.level is set by tidemark"):
        log_settings("kafka", {"bootstrap_servers": "h:1", "topic": "t", "isolation.level": "read_uncommitted"})
    s = log_settings("kafka", {"bootstrap_servers": "h:1", "topics": '["a", "b"]', "sasl.password": "hunter2"})
    assert s["topics"] == ["a", "b"] and "hunter2" not in repr(KafkaLog(s))


def test_a_log_sources_identity_is_its_topics_or_stream():
    from tidemark.runtime.view_identity import source_location
    from tidemark.spec import SourceSpec

    topics = {"bootstrap_servers": "h:1", "topic": "a", "topics": ["b"]}
    assert source_location(SourceSpec(path=None, log="kafka", log_config=topics)) == "kafka:a,b"
    stream = {"url": "nats://h:4222", "stream": "ORDERS"}
    assert source_location(SourceSpec(path=None, log="nats", log_config=stream)) == "nats:ORDERS"
