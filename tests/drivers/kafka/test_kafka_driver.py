"""The ``kafka`` endpoint's driver against a real Kafka-protocol broker (a private noida-db):
setup, a zombie's late commit, what dead producers leave open at start-up, the local store
behind and ahead of Kafka, quarantine, reset, and config mistakes."""

from __future__ import annotations

import shutil
import uuid

import pytest

pytest.importorskip("rocksdict")

from tests.support.kafka_broker import confluent_kafka_or_skip, kafka_bootstrap, kafka_broker

confluent_kafka_or_skip()

from tidemark.drivers.kafka import KafkaDriver
from tidemark.errors import FencedOff, RecoveryError, SpecError
from tidemark.protocol.messages import (
    Acknowledge,
    Apply,
    BindingSpec,
    Flush,
    Load,
    Open,
    Quarantine,
    Range,
    StartCommit,
    Store,
    Validate,
)

pytestmark = pytest.mark.kafka
MAT = "view"
WHOLE = Range()


def cp(batch):
    return {"checkpoint_id": "q1", "batch_id": batch, "materialization": MAT}


@pytest.fixture
def setup(kafka_bootstrap, tmp_path):
    tag = uuid.uuid4().hex[:8]
    config = {
        "bootstrap_servers": kafka_bootstrap,
        "state": str(tmp_path / "state"),
        "progress_topic": f"progress-{tag}",
        "quarantine_topic": f"quarantine-{tag}",
        "retry": {"lock_timeout": 10},
    }
    bindings = (
        BindingSpec({"topic": f"sums-{tag}", "partitions": 2}, "c", ("/k",), (), {}, False),
        BindingSpec({"topic": f"events-{tag}"}, "e", ("/k",), (), {}, True),
    )
    driver = KafkaDriver(config)
    driver.apply(Apply(MAT, "v1", bindings))
    return driver, bindings, config


def session(driver, bindings, key_range=WHOLE):
    txr, opened = driver.open(Open(MAT, "v1", key_range, bindings=bindings))
    txr.acknowledge(Acknowledge())
    return txr, opened


def store(txr, docs, binding=0, deletes=None):
    keys = tuple((d["k"],) for d in docs)
    txr.store(
        Store(
            binding,
            keys,
            tuple(() for _ in docs),
            tuple(docs),
            tuple(False for _ in docs),
            tuple(deletes or [False] * len(docs)),
        )
    )


def commit_batch(driver, bindings, batch, docs, deletes=None):
    txr, opened = session(driver, bindings)
    store(txr, docs, 0, deletes)
    txr.start_commit(StartCommit(cp(batch)))
    txr.close()
    return opened


def test_apply_creates_compacted_topics_and_is_idempotent(setup):
    from confluent_kafka.admin import AdminClient, ConfigResource

    driver, bindings, config = setup
    assert driver.apply(Apply(MAT, "v1", bindings)).action_description == "nothing to do"
    admin = AdminClient({"bootstrap.servers": config["bootstrap_servers"]})
    sums = bindings[0].resource["topic"]
    assert len(admin.list_topics(timeout=10).topics[sums].partitions) == 2
    res = ConfigResource(ConfigResource.Type.TOPIC, sums)
    assert admin.describe_configs([res])[res].result(10)["cleanup.policy"].value == "compact"


def test_documents_deletes_and_the_frontier(setup):
    driver, bindings, _ = setup
    assert commit_batch(driver, bindings, 0, [{"k": "a", "n": 1}, {"k": "b", "n": 2}]).runtime_checkpoint is None
    opened = commit_batch(driver, bindings, 1, [{"k": "a", "n": 3}, {"k": "b"}], deletes=[False, True])
    assert opened.runtime_checkpoint == cp(0)
    assert driver.dump(MAT, bindings[0]) == {("a",): {"k": "a", "n": 3}}
    (row,) = driver.checkpoints(MAT)
    assert row.runtime_checkpoint == cp(1) and row.fence == 2  # the range's second commit

    txr, opened = session(driver, bindings)  # Loads come from the local store
    assert opened.runtime_checkpoint == cp(1)
    loaded = list(txr.load(Load(0, (("a",), ("b",))))) + list(txr.flush(Flush())[0])
    assert [(lo.keys, lo.docs) for lo in loaded] == [((("a",),), ({"k": "a", "n": 3},))]
    txr.close()


def test_a_zombie_commit_after_a_newer_open_is_rejected_and_writes_nothing(setup):
    driver, bindings, _ = setup
    commit_batch(driver, bindings, 0, [{"k": "a", "n": 1}])
    zombie, _ = session(driver, bindings)
    store(zombie, [{"k": "a", "n": 100}])
    newer, opened = session(driver, bindings)  # a retried task: init_transactions fences the zombie
    assert opened.runtime_checkpoint == cp(0)
    with pytest.raises(FencedOff):
        zombie.start_commit(StartCommit(cp(1)))
    zombie.close()
    store(newer, [{"k": "a", "n": 2}])
    newer.start_commit(StartCommit(cp(1)))
    newer.close()
    assert driver.dump(MAT, bindings[0]) == {("a",): {"k": "a", "n": 2}}


DIES_COMMITTING = """
import os, signal, sys
from tidemark.drivers.kafka.progress import ProgressRecord
from tidemark.drivers.kafka.writer import RangeWriter
from tidemark.protocol.messages import Range
bootstrap, progress, topic, checkpoint_id, begin, end = sys.argv[1:7]
key_range = Range(int(begin), int(end))
w = RangeWriter.open({"bootstrap.servers": bootstrap}, "view", key_range, progress_topic=progress)
w.begin()
w.send(topic, ("a",), {"k": "a", "n": 100})
if checkpoint_id:  # killed inside its commit; else while storing (nothing in the progress topic)
    checkpoint = {"checkpoint_id": checkpoint_id, "batch_id": 1, "materialization": "view"}
    record = ProgressRecord.first("view", key_range, checkpoint, transactional_id=w.transactional_id)
    w._produce(progress, record.key, record.encode(), partition=0)  # what commit() does before committing
w._producer.flush(10)  # on the broker, inside the open transaction
os.kill(os.getpid(), signal.SIGKILL)
"""


def test_recover_at_start_up_aborts_what_a_run_of_this_checkpoint_left_open_and_nothing_else(setup):
    """A range killed inside its commit leaves its progress record in an open transaction;
    every read_committed read of the progress topic (the start-up's position check first)
    would wait for that range's own next Open. Start-up's recover fences it — only for
    the checkpoint that wrote it."""
    import subprocess
    import sys

    from tests.support.helpers import open_transactions
    from tidemark.errors import EndpointUnavailable

    driver, bindings, config = setup
    commit_batch(driver, bindings, 0, [{"k": "a", "n": 1}])
    progress, topic = config["progress_topic"], bindings[0].resource["topic"]
    bootstrap = config["bootstrap_servers"]

    def dies(checkpoint_id: str, key_range: Range) -> None:
        died = subprocess.run(
            [
                sys.executable,
                "-c",
                DIES_COMMITTING,
                bootstrap,
                progress,
                topic,
                checkpoint_id,
                str(key_range.key_begin),
                str(key_range.key_end),
            ],
            timeout=60,
        )
        assert died.returncode == -9

    dies("q1", Range(0, 0x7FFFFFFF))
    assert (progress, 0) in open_transactions(bootstrap)
    impatient = KafkaDriver({**config, "retry": {"lock_timeout": 1}})
    with pytest.raises(EndpointUnavailable, match=f"{progress}.*open transactions"):
        impatient.checkpoints(MAT)

    for mat, checkpoint_id in ((MAT, "another-checkpoint"), ("other-view", "q1")):
        with pytest.raises(EndpointUnavailable):  # not its writer: left alone, and the read waits as before
            impatient.recover(mat, checkpoint_id)
    assert (progress, 0) in open_transactions(bootstrap)
    aborted, fenced = driver.recover(MAT, "q1")
    assert "tidemark.view.00000000-7fffffff" in aborted and progress in aborted
    assert fenced == "kafka: fenced the producers of 1 range(s) of earlier runs"  # the committed range's, too
    assert open_transactions(bootstrap) == {}
    (row,) = impatient.checkpoints(MAT)  # the dead commit never happened
    assert row.runtime_checkpoint == cp(0)
    assert driver.dump(MAT, bindings[0]) == {("a",): {"k": "a", "n": 1}}
    assert driver.recover(MAT, "q1") == [fenced]  # nothing left open; the ranges are fenced at every start

    # a range of the log's layout that never committed, killed while storing: only its data
    # topic is held, and only the layout names it
    upper = Range(0x80000000, 0xFFFFFFFF)
    dies("", upper)
    assert set(open_transactions(bootstrap)) <= {(topic, 0), (topic, 1)} and open_transactions(bootstrap)
    assert driver.recover(MAT, "q1") == [fenced]
    assert open_transactions(bootstrap)
    assert driver.recover(MAT, "q1", [WHOLE, upper]) == ["kafka: fenced the producers of 2 range(s) of earlier runs"]
    assert open_transactions(bootstrap) == {}


def test_a_store_behind_kafka_is_rebuilt_and_a_store_ahead_is_refused(setup, tmp_path):
    driver, bindings, config = setup
    commit_batch(driver, bindings, 0, [{"k": "a", "n": 1}, {"k": "b", "n": 1}])
    saved = tmp_path / "saved"
    shutil.copytree(tmp_path / "state", saved)  # the store at batch 0
    commit_batch(driver, bindings, 1, [{"k": "a", "n": 2}, {"k": "b"}], deletes=[False, True])
    shutil.rmtree(tmp_path / "state")
    shutil.copytree(saved, tmp_path / "state")  # as if the store's commit of batch 1 never happened
    txr, opened = session(driver, bindings)
    assert opened.runtime_checkpoint == cp(1)
    loaded = list(txr.load(Load(0, (("a",), ("b",))))) + list(txr.flush(Flush())[0])
    assert [(lo.keys, lo.docs) for lo in loaded] == [((("a",),), ({"k": "a", "n": 2},))]
    txr.close()

    other = KafkaDriver({**config, "progress_topic": f"{config['progress_topic']}-new"})  # "the topics were reset"
    other.apply(Apply(MAT, "v1", bindings))
    with pytest.raises(RecoveryError, match="tidemark reset"):
        other.open(Open(MAT, "v1", WHOLE, bindings=bindings))


def test_quarantined_rows_commit_with_the_batch(setup):
    import orjson

    from tidemark.drivers.kafka.reader import committed_messages

    driver, bindings, config = setup
    txr, _ = session(driver, bindings)
    store(txr, [{"k": "a", "n": 1}])
    txr.quarantine(
        Quarantine(({"binding": 0, "location": "f.json:3", "key_json": '["x"]', "reason": "bad", "value": {"k": "x"}},))
    )
    txr.start_commit(StartCommit(cp(0)))
    txr.close()
    rows = [
        orjson.loads(m.value())
        for m in committed_messages({"bootstrap.servers": config["bootstrap_servers"]}, config["quarantine_topic"])
    ]
    assert [(r["batch_id"], r["resource"], r["location"]) for r in rows] == [
        (0, bindings[0].resource["topic"], "f.json:3")
    ]


def test_drop_starts_the_view_over(setup, tmp_path):
    driver, bindings, _ = setup
    commit_batch(driver, bindings, 0, [{"k": "a", "n": 1}])
    done = driver.drop(MAT, bindings)
    assert any("forgot" in d for d in done) and any("removed local state" in d for d in done)
    assert driver.checkpoints(MAT) == []
    driver.apply(Apply(MAT, "v1", bindings))
    assert commit_batch(driver, bindings, 0, [{"k": "b", "n": 1}]).runtime_checkpoint is None


@pytest.mark.parametrize(
    "config,match",
    [
        ({}, "bootstrap_servers is required"),
        (
            {"bootstrap_servers": "h:1", "progres_topic": "x"},
            r"unknown setting\(s\) 'progres_topic' \(did you mean 'progress_topic'\?\)",
        ),
        ({"bootstrap_servers": "h:1", "transactional.id": "x"}, "transactional.id is set by tidemark"),
        ({"bootstrap_servers": "h:1", "progress_topic": "no spaces"}, "progress_topic must be a topic name"),
        ({"bootstrap_servers": "h:1", "partitions": 0}, "endpoint kafka: partitions must be an integer >= 1, got 0"),
    ],
)
def test_config_mistakes_are_named(config, match):
    with pytest.raises(SpecError, match=match):
        KafkaDriver(config)


def test_binding_mistakes_are_refused_before_anything_is_created(kafka_bootstrap):
    driver = KafkaDriver({"bootstrap_servers": kafka_bootstrap})
    same = (
        BindingSpec({"topic": "t"}, "a", ("/k",), (), {}, False),
        BindingSpec({"topic": "t"}, "b", ("/k",), (), {}, False),
    )
    with pytest.raises(SpecError, match="both write topic 't'"):
        driver.validate(Validate(MAT, "v1", same))
    with pytest.raises(SpecError, match="needs resource {topic: NAME}"):
        driver.validate(Validate(MAT, "v1", (BindingSpec({"partitions": 1}, "a", ("/k",), (), {}, False),)))
    own = (BindingSpec({"topic": "tidemark_progress"}, "a", ("/k",), (), {}, False),)
    with pytest.raises(SpecError, match="tidemark's own progress"):
        driver.validate(Validate(MAT, "v1", own))


def test_a_secret_in_the_client_config_is_never_shown(tmp_path):
    from tidemark.errors import TidemarkError

    driver = KafkaDriver(
        {
            "bootstrap_servers": "127.0.0.1:1",
            "sasl.password": "hunter2-secret",
            "security.protocol": "SASL_PLAINTEXT",
            "sasl.mechanism": "PLAIN",
            "sasl.username": "u",
            "state": str(tmp_path / "s"),
            "retry": {"connect_timeout": 1, "lock_timeout": 1},
        }
    )
    assert "hunter2" not in repr(driver)
    with pytest.raises(TidemarkError) as info:
        driver.apply(Apply(MAT, "v1", (BindingSpec({"topic": "t"}, "a", ("/k",), (), {}, False),)))
    assert "hunter2" not in str(info.value)


def test_partitions_added_to_a_data_topic_are_refused_at_open_before_anything_is_written(setup):
    from confluent_kafka.admin import AdminClient, NewPartitions

    from tidemark.errors import IncompatibleSchema

    driver, bindings, config = setup
    commit_batch(driver, bindings, 0, [{"k": "a", "n": 1}, {"k": "b", "n": 2}])
    (row,) = driver.log.frontiers(MAT).values()
    sums = bindings[0].resource["topic"]
    assert row.partitions[sums] == 2  # recorded with the commit
    admin = AdminClient({"bootstrap.servers": config["bootstrap_servers"]})
    admin.create_partitions([NewPartitions(sums, 3)])[sums].result(10)
    with pytest.raises(IncompatibleSchema) as err:
        driver.open(Open(MAT, "v1", WHOLE, bindings=bindings))
    assert str(err.value).startswith(
        f"kafka: topic {sums!r} has 3 partitions, but materialization 'view' wrote it with 2 (up to batch 0)"
    )
    assert "tidemark reset" in str(err.value)
    assert driver.dump(MAT, bindings[0]) == {("a",): {"k": "a", "n": 1}, ("b",): {"k": "b", "n": 2}}


def test_a_rebuild_takes_only_this_views_records(setup, tmp_path):
    """Records another writer put on the topic (another view's, or without tidemark's headers)
    are not this view's documents when its local state is rebuilt from the topic."""
    from confluent_kafka import Producer

    driver, bindings, config = setup
    commit_batch(driver, bindings, 0, [{"k": "a", "n": 1}])
    sums = bindings[0].resource["topic"]
    producer = Producer({"bootstrap.servers": config["bootstrap_servers"]})
    producer.produce(
        sums,
        key=b'["a"]',
        value=b'{"k":"a","n":100}',
        headers=[("tidemark-range", b"00000000-ffffffff"), ("tidemark-materialization", b"other")],
    )
    producer.produce(sums, key=b'["b"]', value=b'{"k":"b","n":7}')  # no tidemark headers
    producer.flush(10)
    shutil.rmtree(tmp_path / "state")  # the range runs on a machine without its state: a rebuild
    txr, opened = session(driver, bindings)
    assert opened.runtime_checkpoint == cp(0)
    loaded = list(txr.load(Load(0, (("a",), ("b",))))) + list(txr.flush(Flush())[0])
    assert [(lo.keys, lo.docs) for lo in loaded] == [((("a",),), ({"k": "a", "n": 1},))]
    txr.close()


def test_a_second_materialization_on_a_topic_is_refused_at_validate(setup):
    from tidemark.errors import IncompatibleSchema

    driver, bindings, _ = setup
    commit_batch(driver, bindings, 0, [{"k": "a", "n": 1}])
    driver.validate(Validate(MAT, {}, bindings))  # its own records: fine
    with pytest.raises(IncompatibleSchema) as err:
        driver.validate(Validate("other_view", {}, bindings))
    assert str(err.value).startswith(
        f"kafka: topic {bindings[0].resource['topic']!r} is written by materialization 'view', not only by 'other_view'"
    )
