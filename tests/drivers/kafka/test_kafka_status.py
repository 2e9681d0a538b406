"""`tidemark status --checkpoint DIR --kafka-bootstrap ...` for a view that reads Kafka:
messages past the last committed batch's offsets, counted on a real broker (noida-db).
The Spark checkpoint is written by hand in the form Spark's Kafka source writes it."""

from __future__ import annotations

import json
import os
import subprocess
import sys

from tests.support.kafka_broker import kafka_bootstrap, kafka_broker
from tidemark.protocol.messages import KEY_SPACE_MAX
from tidemark.runtime.recovery_log import LogEntry, RecoveryLog
from tidemark.status import status_of_checkpoint


def _offsets(chk, batch, offsets: dict):
    os.makedirs(os.path.join(chk, "spark", "offsets"), exist_ok=True)
    with open(os.path.join(chk, "spark", "offsets", str(batch)), "w") as f:
        f.write('v1\n{"batchWatermarkMs":0,"batchTimestampMs":0}\n' + json.dumps(offsets) + "\n")


def test_status_counts_the_kafka_messages_past_the_committed_offsets(kafka_broker, tmp_path):
    from confluent_kafka import Producer
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient(kafka_broker.config())
    for fut in admin.create_topics([NewTopic("orders", num_partitions=2, replication_factor=1)]).values():
        fut.result(timeout=30)
    producer = Producer(kafka_broker.config())
    for i in range(10):
        producer.produce("orders", value=b"{}", partition=i % 2)
    assert producer.flush(30) == 0

    chk = str(tmp_path / "chk")
    log = RecoveryLog(chk, "orders_view")
    _offsets(chk, 0, {"orders": {"0": 3, "1": 2}})
    first = status_of_checkpoint(chk, kafka=kafka_broker.bootstrap)
    assert first.input.offsets_waiting == 10, first  # none committed
    log.append(LogEntry(0, {"batch_id": 0}, None, [[0, KEY_SPACE_MAX]], "v", {"documents": 5, "endpoint": "postgres"}))
    _offsets(chk, 1, {"orders": {"0": 5, "1": 5}})  # planned, not committed

    st = status_of_checkpoint(chk, kafka=kafka_broker.bootstrap)
    assert st.input.kind == "offsets" and st.input.read_to == {"0": {"orders": {"0": 3, "1": 2}}}
    assert st.input.offsets_waiting == (5 - 3) + (5 - 2) and st.behind is True

    done = subprocess.run(
        [sys.executable, "-m", "tidemark", "status", "--checkpoint", chk, "--kafka-bootstrap", kafka_broker.bootstrap],
        capture_output=True,
        text=True,
        timeout=60,
        env={**os.environ, "COLUMNS": "80"},
    )
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert lines[0].startswith("orders_view (postgres): behind: 5 message(s) waiting, 1 planned batch(es)"), lines
    assert '  source 0     committed to {"orders":{"0":3,"1":2}}' in lines
    assert all(len(ln) <= 80 for ln in lines), lines

    # without the brokers' address: the offsets, and the hint
    lines = [
        ln
        for ln in subprocess.run(
            [sys.executable, "-m", "tidemark", "status", "--checkpoint", chk],
            capture_output=True,
            text=True,
            timeout=60,
        ).stdout.splitlines()
    ]
    assert any("give --kafka-bootstrap" in ln for ln in lines), lines
