"""SIGKILL `tidemark run` into a Kafka topic at named points and at random moments; restart;
a plain read_committed consumer's last document per key must equal the oracle, no committed
transaction's records may appear twice, and no transaction may be left open — also after
rescales 2 → 4 → 3 with a zombie of the old layout killed inside its transaction."""

from __future__ import annotations

import random
import subprocess
import sys

import pytest

pytest.importorskip("rocksdict")

from tests.support.harness import arm_in_sequence, fired, run_until_done
from tests.support.helpers import (
    kafka_spec,
    kafka_view,
    normalize,
    open_transactions,
    oracle_orders,
    set_shards,
    write_orders,
)
from tests.support.kafka_broker import confluent_kafka_or_skip, kafka_bootstrap, kafka_broker

confluent_kafka_or_skip()
pytestmark = [pytest.mark.chaos, pytest.mark.kafka]

POINTS = [
    "plan",  # before anything of the batch ran
    "open",  # a shard session opened (producer fenced), nothing written
    "mid_load",  # during Load from the local store
    "mid_store",  # records sent inside the open Kafka transaction
    "before_endpoint_commit",  # the transaction is complete (progress record not yet in it)
    "after_endpoint_commit",  # Kafka committed the batch, the local store did not: rebuilt at Open
    "before_recovery_log",  # every shard committed; the recovery log write never happens
    "after_recovery_log",  # the log has N; Spark's commits/N is never written
    "before_spark_commit",  # before commits/N
]
TELLING = ["mid_store", "after_endpoint_commit"]  # a quick check with Spark (chaos_full)

ZOMBIE = """
import os, signal, sys
from tidemark.drivers.kafka.writer import RangeWriter
from tidemark.protocol.messages import Range
config = {"bootstrap.servers": sys.argv[1]}
w = RangeWriter.open(config, "view", Range(0, 0x7fffffff), progress_topic=sys.argv[2])
w.begin()
w.send(sys.argv[3], ("zombie",), {"customer": "zombie"})
w._producer.flush(10)  # the record is on the broker, inside the open transaction
os.kill(os.getpid(), signal.SIGKILL)
"""


def _every_point(tmp_path, bootstrap, points, shards, tag, plain=False):
    data, markers = tmp_path / "data", tmp_path / "markers"
    markers.mkdir()
    write_orders(data, files=2, per_file=150, customers=40, seed=171 + shards, deletes=0.03)
    spec = kafka_spec(tmp_path, data, shards, bootstrap, topic=f"chaos_{tag}", progress_topic=f"progress_{tag}")
    assert run_until_done(spec, plain=plain).kills == 0  # a clean first run: the killed batches load existing keys
    write_orders(data, files=len(points) + 1, per_file=100, customers=40, seed=181 + shards, start=2, deletes=0.03)
    outcome = run_until_done(spec, faults=arm_in_sequence(points, markers), max_attempts=len(points) + 2, plain=plain)
    assert fired(markers) == set(points), outcome
    assert outcome.kills >= (len(points) if shards == 1 else 1), outcome
    assert normalize(kafka_view(bootstrap, f"chaos_{tag}")) == oracle_orders(data)
    assert open_transactions(bootstrap) == {}


@pytest.mark.chaos_full  # with Spark; every point runs in the default run without it (below)
def test_kill_at_the_telling_points_then_restart_is_exact(tmp_path, kafka_bootstrap):
    _every_point(tmp_path, kafka_bootstrap, TELLING, 1, "telling")


@pytest.mark.parametrize("shards", [pytest.param(1, marks=pytest.mark.chaos_full), 4])
def test_kill_at_every_point_then_restart_is_exact(tmp_path, kafka_bootstrap, shards):
    """Every point on the commit path without Spark (tests/support/plain.py)."""
    _every_point(tmp_path, kafka_bootstrap, POINTS, shards, f"every{shards}", plain=True)


@pytest.mark.chaos_full
def test_kill_at_random_moments_then_restart_is_exact(tmp_path, kafka_bootstrap):
    data = tmp_path / "data"
    write_orders(data, files=1, per_file=150, customers=40, seed=191, deletes=0.03)
    spec = kafka_spec(tmp_path, data, 2, kafka_bootstrap, topic="chaos_random", progress_topic="progress_random")
    assert run_until_done(spec).kills == 0
    write_orders(data, files=4, per_file=150, customers=40, seed=192, start=1, deletes=0.03)
    draw = random.Random(47)
    outcome = run_until_done(spec, kill_after=lambda a: draw.uniform(3.0, 7.0) if a < 3 else None)
    assert outcome.kills >= 1, outcome
    assert normalize(kafka_view(kafka_bootstrap, "chaos_random")) == oracle_orders(data)
    assert open_transactions(kafka_bootstrap) == {}


@pytest.mark.chaos_full  # (the commit path without Spark: the plain runner's sessions, as the driver runs them)
def test_rescale_2_4_3_with_kills_and_a_zombie_leaves_no_open_transaction(tmp_path, kafka_bootstrap):
    data, markers = tmp_path / "data", tmp_path / "markers"
    markers.mkdir()
    topic, progress = "chaos_rescale", "progress_rescale"
    write_orders(data, files=2, per_file=120, customers=40, seed=201, deletes=0.03)
    spec = kafka_spec(tmp_path, data, 2, kafka_bootstrap, topic=topic, progress_topic=progress)
    assert run_until_done(spec, plain=True).kills == 0

    # A zombie of the 2-shard layout's first range dies inside a transaction it opened.
    subprocess.run([sys.executable, "-c", ZOMBIE, kafka_bootstrap, progress, topic], timeout=60)
    assert open_transactions(kafka_bootstrap), "the zombie's transaction should be open"

    write_orders(data, files=2, per_file=120, customers=40, seed=202, start=2, deletes=0.03)
    set_shards(spec, 4)  # 2 -> 4, killed inside a transaction of the new layout
    outcome = run_until_done(spec, faults=arm_in_sequence(["mid_store"], markers), max_attempts=4, plain=True)
    assert outcome.kills == 1, outcome
    assert open_transactions(kafka_bootstrap) == {}  # the new ranges fenced the old layout's ids
    assert normalize(kafka_view(kafka_bootstrap, topic)) == oracle_orders(data)

    write_orders(data, files=2, per_file=120, customers=40, seed=203, start=4, deletes=0.03)
    set_shards(spec, 3)  # 4 -> 3 (a merge of unequal ranges), killed after Kafka committed
    outcome = run_until_done(
        spec, faults=arm_in_sequence(["after_endpoint_commit"], markers), max_attempts=4, plain=True
    )
    assert outcome.kills == 1, outcome
    assert normalize(kafka_view(kafka_bootstrap, topic)) == oracle_orders(data)
    assert open_transactions(kafka_bootstrap) == {}
