"""Batch identity, the sealed recovery log, identity-based range inheritance, the start-up
checks of the coordinator, and errors that cross from a task to the driver."""

from __future__ import annotations

import json
import logging
import os

import pytest

from tidemark.errors import FencedOff, RecoveryError, SpecError, from_task_failure, mark_for_driver
from tidemark.protocol.messages import KEY_SPACE_MAX, Range
from tidemark.runtime.identity import BatchIdentity, SparkCheckpoint
from tidemark.runtime.recovery_log import LogEntry, RecoveryLog


def entry(n, **cp):
    return LogEntry(n, {"batch_id": n, **cp}, None, [[0, KEY_SPACE_MAX]], "v1", {}, [["t"]])


def test_a_torn_newest_entry_is_set_aside_and_an_older_one_refused(tmp_path, caplog):
    log = RecoveryLog(str(tmp_path), "m")
    for n in range(3):
        log.append(entry(n))
    newest = tmp_path / "tidemark" / "log" / "2.json"
    newest.write_bytes(newest.read_bytes()[:40])  # a write cut short
    with caplog.at_level(logging.WARNING, logger="tidemark"):
        assert log.last().batch_id == 1
    assert "torn" in caplog.text and not newest.exists()
    assert [p for p in os.listdir(newest.parent) if ".torn-" in p]
    log.append(entry(2))  # the batch runs again and is logged

    older = tmp_path / "tidemark" / "log" / "1.json"
    body = json.loads(older.read_text())
    body["entry"]["batch_id"] = 7  # parses, but the checksum no longer matches
    older.write_text(json.dumps(body))
    with pytest.raises(RecoveryError, match="entry of batch 1 is damaged"):
        log.get(1)


def test_entries_of_an_older_tidemark_still_read(tmp_path):
    log = RecoveryLog(str(tmp_path), "m")
    (tmp_path / "tidemark" / "log" / "4.json").write_text(
        json.dumps(
            {
                "batch_id": 4,
                "runtime_checkpoint": {"batch_id": 4},
                "driver_checkpoint": None,
                "layout": [[0, KEY_SPACE_MAX]],
                "version": "v",
                "counts": {},
            }
        )
    )
    last = log.last()
    assert last.batch_id == 4 and last.resources == [] and last.query_id is None


def test_spark_checkpoint_identity(tmp_path):
    spark = tmp_path / "spark"
    (spark / "offsets").mkdir(parents=True)
    cp = SparkCheckpoint(str(spark))
    assert cp.query_id() is None and cp.offsets(0) is None
    (spark / "metadata").write_text('{"id":"q-1"}\n')
    (spark / "offsets" / "0").write_text('v1\n{"batchTimestampMs":1}\n{"logOffset":0}\n')
    (spark / "offsets" / "1").write_text('v1\n{"batchTimestampMs":2}\n{"logOffset":0}\n')
    (spark / "offsets" / "2").write_text('v1\n{"batchTimestampMs":2}\n{"logOffset":5}\n')
    a, b, c = cp.identity(0), cp.identity(1), cp.identity(2)
    assert a.query_id == "q-1" and a.offsets == b.offsets != c.offsets  # the batch metadata line is not input
    assert BatchIdentity("q-1", 2, c.offsets).differences(c) == []
    assert BatchIdentity("q-2", 2, a.offsets).differences(c) == [
        "Spark query q-1 vs q-2",
        f"source offsets {c.offsets} vs {a.offsets}",
    ]
    assert BatchIdentity(None, 2, None).differences(c) == []  # an older tidemark recorded neither


def test_ranges_of_one_batch_agree_by_identity_not_by_the_whole_checkpoint():
    """A batch half-committed with 4 shards, re-run under a configured count of 3: its ranges'
    checkpoints differ in other fields (the spec version) but name the same batch."""
    from tidemark.drivers.common.fences import CheckpointState, plan_open

    a = {"checkpoint_id": "c", "batch_id": 5, "query_id": "q", "offsets": "o", "version": "v4"}
    b = {**a, "version": "v3"}
    rows = [CheckpointState(r, 1, cp) for r, cp in zip(Range.split(4), [a, b, a, b])]
    plan = plan_open("m", Range.split(3)[1], [r for r in rows if r.range.overlaps(Range.split(3)[1])])
    assert plan.checkpoint["batch_id"] == 5
    other = {**a, "offsets": "x"}  # the same batch number with other input: refused
    rows = [CheckpointState(r, 1, cp) for r, cp in zip(Range.split(2), [a, other])]
    with pytest.raises(RecoveryError, match="disagree or leave a gap.*tidemark reset SPEC -m m"):
        plan_open("m", Range(0, KEY_SPACE_MAX), rows)


def test_an_error_marked_in_a_task_is_read_back_as_itself():
    err = mark_for_driver(FencedOff("range 00000000-ffffffff: fence 3 is stale"))
    wrapped = RuntimeError(
        f"Job aborted.\nTraceback (most recent call last):\n  ...\n"
        f"tidemark.errors.FencedOff: {err}\n\tat org.apache.spark..."
    )
    back = from_task_failure(wrapped)
    assert type(back) is FencedOff and str(back) == "range 00000000-ffffffff: fence 3 is stale"
    chained = RuntimeError("outer")
    chained.__cause__ = SpecError("bad", file="s.yaml")
    assert isinstance(from_task_failure(chained), SpecError)
    assert from_task_failure(ValueError("nothing of ours")) is None


def test_the_at_least_once_warning_reads_parsed_strategies(tmp_path, caplog):
    from tidemark.drivers.registry import load_driver
    from tidemark.protocol.messages import BindingSpec
    from tidemark.runtime.coordinator import Coordinator

    driver = load_driver("memory", {"pattern": "at-least-once", "name": str(tmp_path)})

    def coordinator(strategies, delta=False):
        binding = BindingSpec({"table": "t"}, "c", ("/k",), (), {}, delta)
        return Coordinator(
            materialization="m",
            driver=driver,
            driver_name="memory",
            driver_config={},
            bindings=[binding],
            version="v",
            checkpoint_location=str(tmp_path / "chk"),
            shards=1,
            strategies=[strategies],
        )

    with caplog.at_level(logging.WARNING, logger="tidemark"):
        coordinator(("lastWriteWins", "maximize", "merge")).warn_unsafe()
        assert caplog.text == ""
        coordinator(("lastWriteWins", "sum")).warn_unsafe()
        assert "uses sum reductions" in caplog.text
        caplog.clear()
        coordinator(("lastWriteWins",), delta=True).warn_unsafe()
        assert "delta updates into an at-least-once endpoint" in caplog.text


def test_collection_strategies_come_from_the_parsed_schema():
    from tidemark.collection.collection import Collection
    from tidemark.spec import CollectionSpec

    schema = {
        "type": "object",
        "reduce": {"strategy": "merge"},
        "description": "not 'sum' here",
        "properties": {
            "n": {"type": "integer", "reduce": {"strategy": "sum"}},
            "xs": {"type": "array", "reduce": {"strategy": "append"}},
        },
    }
    assert Collection(CollectionSpec("c", ("/k",), schema)).strategies() == ("append", "lastWriteWins", "merge", "sum")
    plain = {"type": "object", "description": "mentions 'sum' and 'append'"}
    assert Collection(CollectionSpec("c", ("/k",), plain)).strategies() == ("lastWriteWins",)


def test_spark_s_unfinished_log_writes_are_removed_and_its_entries_kept(tmp_path):
    """What a killed Spark leaves of an atomic write (``.N.<uuid>.tmp`` and its ``.crc``) goes;
    the log entries, the metadata and anything else stay."""
    from tidemark.runtime.identity import remove_unfinished_writes

    spark = tmp_path / "spark"
    for log in ("offsets", "commits"):
        (spark / log).mkdir(parents=True)
    kept = [spark / "metadata", spark / "offsets" / "0", spark / "offsets" / ".0.crc", spark / "commits" / "0"]
    kept.append(spark / "offsets" / "notes.tmp")  # not Spark's temporary-file shape
    gone = [
        spark / "offsets" / ".1.af40d50d-20cf-461c-a4bf-3b48a2db334f.tmp",
        spark / "offsets" / "..1.af40d50d-20cf-461c-a4bf-3b48a2db334f.tmp.crc",
        spark / "commits" / ".0.0123abcd-0000-4000-8000-000000000000.tmp",
    ]
    for p in kept + gone:
        p.write_text("")
    assert sorted(remove_unfinished_writes(str(spark))) == sorted(str(p) for p in gone)
    assert all(p.exists() for p in kept) and not any(p.exists() for p in gone)
    assert remove_unfinished_writes(str(tmp_path / "none")) == []  # no checkpoint yet
