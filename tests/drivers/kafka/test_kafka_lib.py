"""tidemark.drivers.kafka against a real Kafka-protocol broker (a private noida-db)."""

from __future__ import annotations

import os
import select
import signal
import subprocess
import sys
import time
import uuid

import pytest

from tests.support.kafka_broker import confluent_kafka_or_skip, kafka_bootstrap, kafka_broker, quiet_logger

ck = confluent_kafka_or_skip()

from tests.support.paths import REPO
from tidemark.drivers.kafka.ids import layout_ids
from tidemark.drivers.kafka.progress import ProgressRecord
from tidemark.drivers.kafka.reader import read_frontier, read_frontiers, tail
from tidemark.drivers.kafka.topics import TopicSpec, ensure_topics, progress_topic_spec
from tidemark.drivers.kafka.writer import RangeWriter, fence_and_abort
from tidemark.errors import DriverError, EndpointUnavailable, FencedOff, IncompatibleSchema
from tidemark.policy import RetryPolicy
from tidemark.protocol.messages import Range

pytestmark = pytest.mark.kafka

FAST = RetryPolicy(connect_timeout=5, lock_timeout=2)
WHOLE = Range()
LOW, HIGH = Range.split(2)


def cp(batch, checkpoint_id="q1", mat="view"):
    return {"checkpoint_id": checkpoint_id, "batch_id": batch, "materialization": mat}


@pytest.fixture
def config(kafka_bootstrap):
    return {"bootstrap.servers": kafka_bootstrap, "logger": quiet_logger()}


@pytest.fixture
def topics(config):
    """A fresh (data topic, progress topic) pair."""
    suffix = uuid.uuid4().hex[:8]
    data, progress = f"data-{suffix}", f"progress-{suffix}"
    assert ensure_topics(config, [TopicSpec(data, 3), progress_topic_spec(progress, 2)]) == {
        data: "created",
        progress: "created",
    }
    return data, progress


def commit(writer, topic, docs, record):
    writer.begin()
    for key, doc in docs:
        writer.send(topic, key, doc)
    writer.commit(record)


# ------------------------------------------------------------------------------------ topics


def test_ensure_topics_is_idempotent_and_reports_every_mismatch(config, topics):
    data, progress = topics
    assert ensure_topics(config, [TopicSpec(data, 3), progress_topic_spec(progress, 2)]) == {
        data: "exists",
        progress: "exists",
    }
    assert ensure_topics(config, [TopicSpec(data)]) == {data: "exists"}  # any partition count
    with pytest.raises(IncompatibleSchema) as exc:
        ensure_topics(config, [progress_topic_spec(data, 1)])
    text = str(exc.value)
    assert f"topic {data!r} has 3 partitions, tidemark needs 1" in text
    assert f"topic {data!r} has cleanup.policy=delete, tidemark needs cleanup.policy=compact" in text
    # a set-valued config compares as a set
    both = f"both-{uuid.uuid4().hex[:8]}"
    ensure_topics(config, [TopicSpec(both, 1, {"cleanup.policy": "compact,delete"})])
    assert ensure_topics(config, [TopicSpec(both, 1, {"cleanup.policy": "delete,compact"})]) == {both: "exists"}


def test_an_unreachable_broker_is_transient_and_its_password_is_not_shown():
    from tests.support.helpers import free_port

    config = {
        "bootstrap.servers": f"127.0.0.1:{free_port()}",
        "security.protocol": "SASL_PLAINTEXT",
        "sasl.mechanism": "PLAIN",
        "sasl.username": "app",
        "sasl.password": "hunter2-secret",
        "logger": quiet_logger(),
    }
    with pytest.raises(EndpointUnavailable) as exc:
        ensure_topics(config, [TopicSpec("x")], policy=RetryPolicy(connect_timeout=1))
    assert "hunter2-secret" not in str(exc.value) and "creating" in str(exc.value)
    with pytest.raises(EndpointUnavailable):
        read_frontier(config, "progress", "view", WHOLE, policy=RetryPolicy(connect_timeout=1))


def test_a_missing_topic_is_reported_by_name_and_not_created(config):
    from confluent_kafka.admin import AdminClient

    missing = f"missing-{uuid.uuid4().hex[:8]}"
    with pytest.raises(DriverError, match=f"'{missing}'"):
        list(tail(config, missing, policy=FAST))
    with pytest.raises(DriverError, match=f"progress topic '{missing}' does not exist"):
        RangeWriter.open(config, "view", WHOLE, progress_topic=missing, policy=FAST)
    assert missing not in AdminClient(config).list_topics(timeout=5).topics


# ------------------------------------------------------------------------- writer, frontier


def test_frontier_is_the_last_committed_progress_record_of_the_range(config, topics):
    data, progress = topics
    assert read_frontier(config, progress, "view", LOW) is None
    low = RangeWriter.open(config, "view", LOW, progress_topic=progress)
    high = RangeWriter.open(config, "view", HIGH, progress_topic=progress)
    other = RangeWriter.open(config, "other", LOW, progress_topic=progress)
    r1 = ProgressRecord.first("view", LOW, cp(0), {"docs": 1}, transactional_id=low.transactional_id)
    commit(low, data, [(("a",), {"k": "a", "n": 1})], r1)
    r2 = r1.next(cp(1), {"docs": 1})
    commit(low, data, [(("a",), {"k": "a", "n": 2})], r2)
    h1 = ProgressRecord.first("view", HIGH, cp(1), {"docs": 1})
    commit(high, data, [(("z",), {"k": "z"})], h1)
    commit(other, data, [], ProgressRecord.first("other", LOW, cp(9, mat="other")))
    # an aborted batch does not move the frontier
    low.begin()
    low.send(data, ("a",), {"k": "a", "n": 99})
    low.abort()
    assert read_frontier(config, progress, "view", LOW) == r2
    assert read_frontiers(config, progress, "view") == {LOW: r2, HIGH: h1}
    assert read_frontier(config, progress, "view", WHOLE) is None  # exact range only
    assert list(tail(config, data)) == [(("a",), {"k": "a", "n": 2}), (("z",), {"k": "z"})]
    with pytest.raises(DriverError, match="given to the writer"):
        low.begin()
        low.commit(h1)
    low.abort()
    for w in (low, high, other):
        w.close()


def test_tail_is_last_per_key_in_key_order_without_deleted_or_aborted(config, topics):
    data, progress = topics
    w = RangeWriter.open(config, "view", WHOLE, progress_topic=progress)
    keys = [(f"c{i:03d}", i) for i in range(40)]
    rec = ProgressRecord.first("view", WHOLE, cp(0))
    commit(w, data, [(k, {"v": 1}) for k in reversed(keys)], rec)
    rec = rec.next(cp(1))
    commit(w, data, [(keys[0], {"v": 2}), (keys[1], None), (keys[2], None)], rec)  # update, two deletes
    w.begin()
    w.send(data, keys[3], None)  # aborted delete
    w.send(data, ("zzz", 0), {"v": "aborted"})
    w.abort()
    got = list(tail(config, data))
    assert [k for k, _ in got] == sorted(keys[:1] + keys[3:])
    assert got[0] == (keys[0], {"v": 2})
    assert dict(got)[keys[3]] == {"v": 1}
    w.close()


def test_a_partition_that_ends_in_an_aborted_transaction_is_read_to_its_end(config, topics):
    data, progress = topics
    w = RangeWriter.open(config, "view", WHOLE, progress_topic=progress)
    w.begin()
    w.send(data, ("only",), {"v": "aborted"})
    w.abort()
    started = time.monotonic()
    assert list(tail(config, data, policy=FAST)) == []
    assert read_frontier(config, progress, "view", WHOLE, policy=FAST) is None
    assert time.monotonic() - started < FAST.lock_timeout  # not by waiting out the deadline
    w.close()


def test_a_zombie_writer_is_fenced_by_the_next_open_of_its_range(config, topics):
    data, progress = topics
    zombie = RangeWriter.open(config, "view", LOW, progress_topic=progress)
    r1 = ProgressRecord.first("view", LOW, cp(0))
    commit(zombie, data, [(("a",), {"n": 1})], r1)
    zombie.begin()
    zombie.send(data, ("a",), {"n": "zombie"})
    successor = RangeWriter.open(config, "view", LOW, progress_topic=progress)
    with pytest.raises(FencedOff, match="_FENCED"):
        zombie.commit(r1.next(cp(1)))
    assert read_frontier(config, progress, "view", LOW) == r1
    r2 = r1.next(cp(1, "q1"))
    commit(successor, data, [(("a",), {"n": 2})], r2)
    assert read_frontier(config, progress, "view", LOW) == r2
    assert list(tail(config, data)) == [(("a",), {"n": 2})]
    successor.close()


def test_a_zombie_whose_producer_already_failed_is_told_it_was_fenced(config, topics):
    """After a background request met the fence, ``produce`` raises only librdkafka's bare
    ``_FATAL`` ("Unable to produce message"); the writer names the cause: FencedOff."""
    data, progress = topics
    zombie = RangeWriter.open(config, "view", LOW, progress_topic=progress)
    zombie.begin()
    zombie.send(data, ("a",), {"n": "zombie"})
    successor = RangeWriter.open(config, "view", LOW, progress_topic=progress)
    with pytest.raises(Exception):  # the fence reaches the zombie at this send or at a delivery
        zombie.send(data, ("b",), {"n": "zombie"})
        zombie._live().flush(10)
    with pytest.raises(FencedOff, match="_FENCED"):
        zombie.send(data, ("c",), {"n": "zombie"})
    assert not zombie.in_transaction
    successor.close()


CHILD = r"""
import sys
sys.path.insert(0, sys.argv[1])
from tidemark.drivers.kafka.progress import ProgressRecord
from tidemark.drivers.kafka.writer import RangeWriter
from tidemark.protocol.messages import Range
bootstrap, data, progress, begin, end = sys.argv[2:7]
key_range = Range(int(begin), int(end))
w = RangeWriter.open({"bootstrap.servers": bootstrap}, "view", key_range, progress_topic=progress)
w.begin()
w.send(data, ("dead",), {"n": 1})
rec = ProgressRecord.first("view", key_range, {"checkpoint_id": "q1", "batch_id": 7, "materialization": "view"})
w._produce(progress, rec.key, rec.encode())  # the progress record is in; the commit never comes
w._live().flush(20)
print("produced", flush=True)
sys.stdin.read()
"""


def kill_inside_commit(bootstrap, data, progress, key_range):
    """A real process that writes a batch and its progress record, and dies before committing."""
    root = REPO
    child = subprocess.Popen(
        [
            sys.executable,
            "-c",
            CHILD,
            root,
            bootstrap,
            data,
            progress,
            str(key_range.key_begin),
            str(key_range.key_end),
        ],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
    )
    ready, _, _ = select.select([child.stdout], [], [], 30)
    line = child.stdout.readline() if ready else ""
    os.kill(child.pid, signal.SIGKILL)
    child.wait()
    assert line.strip() == "produced", line


def test_a_writer_killed_inside_its_commit_blocks_readers_until_its_range_opens_again(config, topics, kafka_bootstrap):
    data, progress = topics
    w = RangeWriter.open(config, "view", LOW, progress_topic=progress)
    r1 = ProgressRecord.first("view", LOW, cp(0))
    commit(w, data, [(("a",), {"n": 1})], r1)
    w.close()
    kill_inside_commit(kafka_bootstrap, data, progress, LOW)
    # the dead transaction holds read_committed readers back: the frontier read gives up
    # after the policy's lock_timeout, as a transient error that names the partition
    with pytest.raises(EndpointUnavailable, match=r"last stable offset \d+, high watermark \d+"):
        read_frontier(config, progress, "view", LOW, policy=FAST)
    # the range's next session: init_transactions aborts it, and the frontier is the commit before
    successor = RangeWriter.open(config, "view", LOW, progress_topic=progress)
    assert read_frontier(config, progress, "view", LOW, policy=FAST) == r1
    assert list(tail(config, data, policy=FAST)) == [(("a",), {"n": 1})]
    successor.close()


def test_fence_and_abort_ends_every_transaction_of_an_old_layout(config, topics, kafka_bootstrap):
    """A rescale from 2 ranges to 1: the old layout's ids are fenced and their transactions aborted."""
    data, progress = topics
    old = {r: RangeWriter.open(config, "view", r, progress_topic=progress) for r in (LOW, HIGH)}
    committed = ProgressRecord.first("view", LOW, cp(0))
    commit(old[LOW], data, [(("a",), {"n": 1})], committed)
    old[LOW].begin()
    old[LOW].send(data, ("a",), {"n": "lingering"})  # a live zombie, mid-transaction
    old[LOW]._live().flush(10)
    old[HIGH].close()
    kill_inside_commit(kafka_bootstrap, data, progress, HIGH)  # and a dead one
    with pytest.raises(EndpointUnavailable):
        read_frontiers(config, progress, "view", policy=FAST)

    ids = layout_ids("view", [LOW, HIGH])
    assert fence_and_abort(config, ids) == ids
    assert fence_and_abort(config, ids) == ids  # idempotent
    assert read_frontiers(config, progress, "view", policy=FAST) == {LOW: committed}
    with pytest.raises(FencedOff):
        old[LOW].commit(committed.next(cp(1)))
    new = RangeWriter.open(config, "view", WHOLE, progress_topic=progress)
    inherited = committed.next(cp(1), range=WHOLE, transactional_id=new.transactional_id)
    commit(new, data, [(("a",), {"n": 2})], inherited)
    assert read_frontiers(config, progress, "view", policy=FAST) == {LOW: committed, WHOLE: inherited}
    assert list(tail(config, data, policy=FAST)) == [(("a",), {"n": 2})]
    new.close()


def test_an_unusual_materialization_name_works_end_to_end(config, topics):
    data, progress = topics
    name = "orders / by customer, ü " * 10
    w = RangeWriter.open(config, name, HIGH, progress_topic=progress)
    assert len(w.transactional_id) <= 160 and w.transactional_id.endswith(".80000000-ffffffff")
    rec = ProgressRecord.first(name, HIGH, cp(0, mat=name), transactional_id=w.transactional_id)
    commit(w, data, [((True, 2, "ü"), {"x": 1})], rec)
    assert read_frontier(config, progress, name, HIGH) == rec
    assert read_frontier(config, progress, name[:-1], HIGH) is None
    assert list(tail(config, data)) == [((True, 2, "ü"), {"x": 1})]
    w.close()
