"""End to end on local Spark: JSON files → a Kafka topic (a private noida-db broker), read
back by a plain read_committed consumer and compared with an independent oracle; the
local state lost between runs is rebuilt from the topic; no transaction is left open."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys

import pytest

pytest.importorskip("rocksdict")

from tests.support.helpers import (
    assert_verified,
    kafka_spec,
    kafka_view,
    normalize,
    open_transactions,
    oracle_orders,
    write_orders,
)
from tests.support.kafka_broker import confluent_kafka_or_skip, kafka_bootstrap, kafka_broker

confluent_kafka_or_skip()
pytestmark = [pytest.mark.spark, pytest.mark.kafka]


def run(spark, spec_path):
    from tidemark.spark.runner import run_spec

    reports = []
    run_spec(spec_path, spark=spark, on_batch=reports.append)
    return reports


@pytest.mark.parametrize("shards", [pytest.param(1, marks=pytest.mark.slow), 4])
def test_several_batches_restart_and_resume(spark, tmp_path, kafka_bootstrap, shards):
    topic = f"customers{shards}"
    data = tmp_path / "data"
    write_orders(data, files=3, per_file=200, customers=60, seed=130 + shards, deletes=0.05)
    spec = kafka_spec(tmp_path, data, shards, kafka_bootstrap, topic=topic, progress_topic=f"progress{shards}")
    reports = run(spark, spec)
    assert [r.batch_id for r in reports] == [0, 1, 2] and all(r.shards == shards for r in reports)
    assert normalize(kafka_view(kafka_bootstrap, topic)) == oracle_orders(data)

    write_orders(data, files=2, per_file=200, customers=60, seed=140 + shards, start=3, deletes=0.05)
    reports = run(spark, spec)
    assert [r.batch_id for r in reports] == [3, 4]
    assert sum(r.loaded for r in reports) > 0  # full documents came from the local store
    assert normalize(kafka_view(kafka_bootstrap, topic)) == oracle_orders(data)
    assert open_transactions(kafka_bootstrap) == {}
    assert_verified(spec)
    if shards == 1:  # `tidemark tail` prints the topic's committed view, in key order
        proc = subprocess.run(
            [sys.executable, "-m", "tidemark", "tail", spec, "--view", topic],
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert proc.returncode == 0, proc.stderr
        docs = [json.loads(line) for line in proc.stdout.splitlines()]
        assert [d["customer"] for d in docs] == sorted(oracle_orders(data))
        assert normalize({d["customer"]: d for d in docs}) == oracle_orders(data)


def test_lost_local_state_is_rebuilt_from_the_topic(spark, tmp_path, kafka_bootstrap):
    data = tmp_path / "data"
    write_orders(data, files=2, per_file=200, customers=50, seed=151, deletes=0.05)
    spec = kafka_spec(tmp_path, data, 2, kafka_bootstrap, topic="rebuilt", progress_topic="progress_rebuilt")
    run(spark, spec)
    shutil.rmtree(tmp_path / "state")  # the machine lost its disk (or the range moved to another one)
    write_orders(data, files=2, per_file=200, customers=50, seed=152, start=2, deletes=0.05)
    reports = run(spark, spec)
    assert [r.batch_id for r in reports] == [2, 3] and sum(r.loaded for r in reports) > 0
    assert normalize(kafka_view(kafka_bootstrap, "rebuilt")) == oracle_orders(data)
