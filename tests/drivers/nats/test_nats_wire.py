"""tidemark.drivers.nats.wire without a server: subjects, headers, message ids, progress records."""

from __future__ import annotations

import json

import pytest

from tidemark.drivers.nats import wire
from tidemark.drivers.nats.channel import subject_matches, version_tuple
from tidemark.drivers.nats.wire import BatchId, Channel, Frontier, InFlightMark, ProgressRecord
from tidemark.protocol.messages import Range


def test_subject_tokens_are_safe_and_distinct():
    assert wire.subject_token("customer_view-2") == "customer_view-2"
    assert wire.subject_token("a.b") == "a~2Eb" != wire.subject_token("a_b")
    assert wire.subject_token("x y>*") == "x~20y~3E~2A"
    assert wire.subject_token("é") == "~C3~A9"
    ch = Channel("VIEWS", "a.b", Range.split(2)[1])
    assert ch.progress_subject == "tidemark.VIEWS.progress.a~2Eb.80000000-ffffffff"
    assert subject_matches(wire.progress_wildcard(ch.prefix), ch.progress_subject)
    assert Range.parse(ch.range.name) == ch.range


def test_message_ids_are_deterministic_per_range_batch_counter():
    a, b = Channel("S", "m", Range.split(2)[0]), Channel("S", "m", Range.split(2)[1])
    one = BatchId("cp1", 7)
    assert wire.msg_id(a, one, 3) == wire.msg_id(a, BatchId("cp1", 7), 3) == "tm/m/00000000-7fffffff/cp1/7/3"
    ids = {wire.msg_id(c, bt, n) for c in (a, b) for bt in (one, BatchId("cp1", 8), BatchId("cp2", 7)) for n in (1, 2)}
    assert len(ids) == 12
    h = wire.data_headers(a, one, 3, ["k", 1], delete=True)
    assert h[wire.H_KEY] == '["k",1]' and h[wire.H_OP] == "delete" and h[wire.H_MSG_ID] == wire.msg_id(a, one, 3)
    d = wire.decode_data(9, "S.d", h, b"")
    assert (d.key, d.batch, d.counter, d.delete, d.range) == (("k", 1), one, 3, True, a.range.name)
    assert wire.decode_data(1, "S.d", {"Other": "x"}, b"{}") is None


def test_batch_order_within_and_across_checkpoints():
    assert BatchId("cp", 2).after(BatchId("cp", 1)) and not BatchId("cp", 1).after(BatchId("cp", 1))
    assert BatchId("cp", 1).after(None)
    assert BatchId("other", 1).after(BatchId("cp", 9))  # a new checkpoint starts over


def test_progress_record_round_trip_and_version():
    rec = ProgressRecord(
        wire.KIND_CHUNK,
        "m",
        "00000000-ffffffff",
        "s1",
        committed=BatchId("cp", 4),
        count=10,
        checkpoint={"batch_id": 4},
        committed_seq=17,
        inflight=InFlightMark(BatchId("cp", 5), 99),
    )
    assert ProgressRecord.decode(rec.encode()) == rec
    assert json.loads(rec.encode())["v"] == wire.RECORD_VERSION
    bad = json.loads(rec.encode()) | {"v": 99}
    with pytest.raises(ValueError, match="version 99"):
        ProgressRecord.decode(json.dumps(bad).encode())
    with pytest.raises(ValueError):
        ProgressRecord("bogus", "m", "r", "s")


def test_frontier_committed_seq():
    commit = ProgressRecord(wire.KIND_COMMIT, "m", "r", "s", committed=BatchId("cp", 1), count=1)
    assert Frontier(commit, 12).committed_seq == 12
    assert (
        Frontier(
            ProgressRecord(wire.KIND_OPEN, "m", "r", "s", committed=BatchId("cp", 1), committed_seq=12), 20
        ).committed_seq
        == 12
    )
    inherited = ProgressRecord(wire.KIND_OPEN, "m", "r", "s", committed=BatchId("cp", 1), inherited_from=("x",))
    assert Frontier(inherited, 30).committed_seq == 30
    assert Frontier(None, 0).committed_seq == 0
    assert Frontier(ProgressRecord(wire.KIND_OPEN, "m", "r", "s"), 5).committed_seq == 0


def test_subject_matching_and_versions():
    assert subject_matches("a.*.c", "a.b.c") and not subject_matches("a.*.c", "a.b.d")
    assert subject_matches("a.>", "a.b.c") and not subject_matches("a.>", "a")
    assert version_tuple("2.15.1") == (2, 15, 1) and version_tuple("v2.12.0-beta.1") == (2, 12, 0)
