"""SIGKILL `tidemark run` reading a Kafka topic while a producer writes to it (some
transactions aborted, tombstones among the records), restart; the view must equal the
answer computed from the committed records only.  And a chain: view A writes a Kafka topic,
view B reads that topic into PostgreSQL, with kills on both."""

from __future__ import annotations

import os
import random
import threading
import time

import pytest
import yaml

from tests.support.harness import run_until_done
from tests.support.helpers import (
    kafka_spec,
    normalize,
    oracle_orders,
    postgres_view,
    reduce_orders,
    sqlite_view,
    write_orders,
)
from tests.support.kafka_broker import confluent_kafka_or_skip, kafka_bootstrap, kafka_broker
from tests.support.log_sources import create_topic, kafka_source_spec, produce_orders

confluent_kafka_or_skip()
pytestmark = [pytest.mark.chaos_full, pytest.mark.kafka]


class Producer(threading.Thread):
    """Writes ``rounds`` rounds of transactions, a pause between them; ``committed`` ends
    with the committed documents in write order."""

    def __init__(self, bootstrap: str, topic: str, rounds: int, seed: int):
        super().__init__(daemon=True)
        self.bootstrap, self.topic, self.rounds, self.seed = bootstrap, topic, rounds, seed
        self.committed: list[dict] = []
        self.error: BaseException | None = None

    def run(self) -> None:
        try:
            for r in range(self.rounds):
                self.committed += produce_orders(
                    self.bootstrap,
                    self.topic,
                    transactions=3,
                    per_transaction=30,
                    customers=40,
                    seed=self.seed * 100 + r,
                    abort_every=3,
                    deletes=0.02,
                    tombstones=0.02,
                    producer_id=f"p-{self.topic}",
                )
                time.sleep(0.5)
        except BaseException as exc:
            self.error = exc


@pytest.mark.parametrize("endpoint", ["sqlite", "postgres"])
def test_kills_while_a_producer_writes_leave_the_committed_records_once(
    tmp_path, kafka_bootstrap, endpoint, postgres_url, pg_schema
):
    topic = f"kill-{endpoint}"
    create_topic(kafka_bootstrap, topic, partitions=3)
    config = (
        {"sqlite": {"path": str(tmp_path / "view.db")}}
        if endpoint == "sqlite"
        else {"postgres": {"url": postgres_url, "schema": pg_schema}}
    )
    spec = kafka_source_spec(
        tmp_path, bootstrap=kafka_bootstrap, topic=topic, endpoint=config, shards=2, max_records_per_batch=120
    )
    producer = Producer(kafka_bootstrap, topic, rounds=12, seed=21 if endpoint == "sqlite" else 22)
    producer.start()
    draw = random.Random(61)
    outcome = run_until_done(spec, kill_after=lambda a: draw.uniform(4.0, 9.0) if a < 3 else None)
    producer.join(120)
    assert producer.error is None and not producer.is_alive()
    assert outcome.kills >= 1, outcome
    assert run_until_done(spec).kills == 0  # what was written after the last attempt began
    view = (
        sqlite_view(tmp_path / "view.db", json_columns=("items", "flags"))
        if endpoint == "sqlite"
        else postgres_view(postgres_url, pg_schema)
    )
    assert normalize(view) == reduce_orders(producer.committed)


def test_a_chain_of_views_through_a_kafka_topic_is_exact_with_kills_on_both(
    tmp_path, kafka_bootstrap, postgres_url, pg_schema
):
    """A: files -> Kafka topic ``chain-a`` (its deletions are tombstones); B: that topic ->
    PostgreSQL, each document of A taken whole (lastWriteWins), a tombstone a deletion."""
    a_dir, b_dir, data = tmp_path / "a", tmp_path / "b", tmp_path / "data"
    a_dir.mkdir()
    b_dir.mkdir()
    write_orders(data, files=3, per_file=150, customers=40, seed=31, deletes=0.05)
    spec_a = kafka_spec(a_dir, data, 2, kafka_bootstrap, topic="chain-a", state=str(a_dir / "state"))
    spec_b = kafka_source_spec(
        b_dir,
        bootstrap=kafka_bootstrap,
        topic="chain-a",
        endpoint={"postgres": {"url": postgres_url, "schema": pg_schema}},
        name="copy",
    )
    with open(spec_b) as f:
        obj = yaml.safe_load(f)
    obj["collections"]["orders"]["schema"] = {
        "type": "object",
        "required": ["customer"],
        "properties": {"customer": {"type": "string"}},
        "reduce": {"strategy": "lastWriteWins"},
        "if": {
            "properties": {"_meta": {"properties": {"op": {"const": "d"}}, "required": ["op"]}},
            "required": ["_meta"],
        },
        "then": {"reduce": {"delete": True}},
    }
    with open(spec_b, "w") as f:
        yaml.safe_dump(obj, f)

    draw = random.Random(71)
    kills = 0
    for round_ in range(2):
        kills += run_until_done(spec_a, kill_after=lambda a: draw.uniform(3.0, 7.0) if a < 2 else None).kills
        kills += run_until_done(spec_b, kill_after=lambda a: draw.uniform(3.0, 7.0) if a < 2 else None).kills
        if round_ == 0:
            write_orders(data, files=2, per_file=150, customers=40, seed=32, start=3, deletes=0.05)
    assert kills >= 2
    assert normalize(postgres_view(postgres_url, pg_schema)) == oracle_orders(data)
    assert os.path.isdir(a_dir / "state")
