"""tidemark.drivers.nats against a real server: frontier, in-flight scan, fenced batch publish in both
modes (atomic batches, ordered with message ids), the read-committed reader, rescale, and a
writer SIGKILLed mid-batch followed by a replay that writes no message twice."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import uuid
from collections import Counter

import pytest

from tests.support.nats_server import nats_server

pytest.importorskip("nats", reason="pip install -e '.[test,nats]'")

from tests.support import nats_writer
from tidemark.drivers.nats import wire
from tidemark.drivers.nats.channel import NatsSettings, OutDoc
from tidemark.drivers.nats.client import NatsClient
from tidemark.drivers.nats.wire import BatchId, Channel
from tidemark.errors import EndpointUnavailable, FencedOff, RecoveryError
from tidemark.policy import RetryPolicy
from tidemark.protocol.messages import Range

MODES = ["atomic", "ordered"]
CP = "cp-test"


@pytest.fixture
def client(nats_server):
    # A small max_batch makes the atomic mode split batches into several chunks.
    with NatsClient(nats_server.url, settings=NatsSettings(max_batch=50)) as nc:
        yield nc


def make_stream(nc: NatsClient, mode: str) -> tuple[str, str]:
    stream = f"S{uuid.uuid4().hex[:10]}"
    setup = nc.ensure_stream(stream, [f"{stream}.customers"], atomic=(mode == "atomic"))
    assert setup.atomic is (mode == "atomic")
    return stream, f"{stream}.customers"


def docs(subject: str, batch: int, n: int, *, start: int = 0) -> list[OutDoc]:
    return [OutDoc(subject, [f"k{i:04d}"], {"k": i, "batch": batch}) for i in range(start, start + n)]


def cp(batch: int) -> dict:
    return {"checkpoint_id": CP, "batch_id": batch, "materialization": "m"}


def data_counters(nc: NatsClient, stream: str, subject: str) -> Counter:
    """(range, batch, counter) -> how many copies the stream holds."""
    out: Counter = Counter()
    for seq, subj, headers, data in nc.scan(stream, 1, [subject]):
        d = wire.decode_data(seq, subj, headers, data)
        out[(d.range, d.batch.batch_id, d.counter)] += 1
    return out


@pytest.mark.parametrize("mode", MODES)
def test_frontier_open_commit_and_idempotent_replay(client, mode):
    stream, subject = make_stream(client, mode)
    ch = Channel(stream, "m", Range())
    empty = client.read_frontier(ch)
    assert (empty.record, empty.seq, empty.committed, empty.committed_seq) == (None, 0, None, 0)

    s = client.open(ch)
    assert s.frontier.record.kind == "open" and s.frontier.seq > 0 and s.atomic is (mode == "atomic")
    batch = docs(subject, 1, 120)
    c = client.publish_batch(s, BatchId(CP, 1), batch, cp(1))
    assert (c.count, c.written, c.skipped) == (120, 120, 0)
    if mode == "atomic":
        assert c.atomic_batches == 3  # 49 + 49 + 22 data messages, each chunk ends with a record
    f = client.read_frontier(ch)
    assert f.record.kind == "commit" and f.committed == BatchId(CP, 1) and f.checkpoint == cp(1)
    assert f.seq == c.seq == f.committed_seq

    # Calling it again for the same batch writes nothing (commit is safe to call twice).
    again = client.publish_batch(s, BatchId(CP, 1), batch, cp(1))
    assert (again.written, again.skipped) == (0, 120)
    assert client.written_after(ch, client.read_frontier(ch)).written == {}
    assert client.committed_view(stream, subject) == {(d.key[0],): d.document for d in batch}

    # A new session carries the frontier forward in its open record.
    s2 = client.open(ch)
    assert s2.frontier.committed == BatchId(CP, 1) and s2.frontier.committed_seq == c.seq
    client.publish_batch(
        s2, BatchId(CP, 2), docs(subject, 2, 10) + [OutDoc(subject, ["k0050"], None, delete=True)], cp(2)
    )
    view = client.committed_view(stream, subject)
    assert len(view) == 119 and ("k0050",) not in view and view[("k0003",)] == {"k": 3, "batch": 2}
    assert max(data_counters(client, stream, subject).values()) == 1


@pytest.mark.parametrize("mode", MODES)
def test_newer_session_fences_the_older_one(client, mode):
    stream, subject = make_stream(client, mode)
    ch = Channel(stream, "m", Range())
    zombie = client.open(ch)
    owner = client.open(ch)
    with pytest.raises(FencedOff, match="expected"):
        client.publish_batch(zombie, BatchId(CP, 1), docs(subject, 1, 30), cp(1))
    assert data_counters(client, stream, subject) == Counter()  # refused before any data
    client.publish_batch(owner, BatchId(CP, 1), docs(subject, 1, 30), cp(1))
    assert len(client.committed_view(stream, subject)) == 30


@pytest.mark.parametrize("mode", MODES)
def test_zombie_fenced_at_its_progress_record(client, mode, monkeypatch):
    """The race the up-front check cannot see: the newer session opens after the zombie
    checked its fence.  Atomic: every chunk is refused whole, nothing lands.  Ordered: the
    zombie's data lands, its commit is refused; the owner's replay skips that data."""
    stream, subject = make_stream(client, mode)
    ch = Channel(stream, "m", Range())
    zombie = client.open(ch)
    owner = client.open(ch)

    async def no_resync(session):
        return None

    monkeypatch.setattr(client._aio, "_resync", no_resync)
    batch = docs(subject, 1, 80)
    with pytest.raises(FencedOff):
        client.publish_batch(zombie, BatchId(CP, 1), batch, cp(1), skip=wire.InFlight())
    monkeypatch.undo()
    landed = data_counters(client, stream, subject)
    assert sum(landed.values()) == (0 if mode == "atomic" else 80)
    assert client.committed_view(stream, subject) == {}  # nothing committed, nothing read

    inflight = client.written_after(ch, owner.frontier)
    assert inflight.counters(BatchId(CP, 1)) == (frozenset() if mode == "atomic" else frozenset(range(1, 81)))
    c = client.publish_batch(owner, BatchId(CP, 1), batch, cp(1), skip=inflight)
    assert c.written == (80 if mode == "atomic" else 0)
    assert set(data_counters(client, stream, subject).values()) == {1}
    assert len(client.committed_view(stream, subject)) == 80


def test_ordered_zombie_data_after_the_owner_scanned_is_dropped_by_msg_id(client, monkeypatch):
    """Ordered mode: a zombie writes the same counters after the owner's scan; the
    duplicate window drops them, so each counter is stored once."""
    stream, subject = make_stream(client, "ordered")
    ch = Channel(stream, "m", Range())
    zombie = client.open(ch)
    owner = client.open(ch)
    batch = docs(subject, 1, 40)
    inflight = client.written_after(ch, owner.frontier)  # empty: the owner will write all 40

    async def no_resync(session):
        return None

    monkeypatch.setattr(client._aio, "_resync", no_resync)
    with pytest.raises(FencedOff):
        client.publish_batch(zombie, BatchId(CP, 1), batch[:25], cp(1), skip=wire.InFlight())
    monkeypatch.undo()
    c = client.publish_batch(owner, BatchId(CP, 1), batch, cp(1), skip=inflight)
    assert c.written == 40  # it sent all 40; the server kept the zombie's 25 copies
    assert set(data_counters(client, stream, subject).values()) == {1}
    assert len(client.committed_view(stream, subject)) == 40


def test_reader_ignores_uncommitted_and_late_duplicates():
    """The fold alone: a partial batch is held back, duplicates and late copies dropped."""
    from tidemark.drivers.nats.reader import fold_committed
    from tidemark.drivers.nats.wire import ProgressRecord

    ch = Channel("S", "m", Range())
    b1, b2 = BatchId(CP, 1), BatchId(CP, 2)

    def data(seq, b, c, key):
        return seq, "S.d", wire.data_headers(ch, b, c, [key]), b'{"v":%d}' % seq

    def rec(seq, kind, b, n):
        r = ProgressRecord(kind, "m", ch.range.name, "s", committed=b, count=n)
        return seq, ch.progress_subject, {}, r.encode()

    msgs = [
        data(1, b1, 1, "a"),
        data(2, b1, 2, "b"),
        data(3, b1, 1, "a"),
        rec(4, "commit", b1, 2),
        data(5, b1, 2, "b"),  # late zombie copy of a committed batch
        data(6, b2, 1, "a"),
    ]  # batch 2 never committed
    out = list(fold_committed(msgs, ch.prefix))
    assert [(m.message.seq, m.key, m.commit_seq) for m in out] == [(1, ("a",), 4), (2, ("b",), 4)]
    with pytest.raises(RecoveryError, match="not in the stream"):
        list(fold_committed([data(1, b1, 1, "a"), rec(2, "commit", b1, 2)], ch.prefix))


def test_rescale_inherits_the_frontier_and_closes_old_ranges(client):
    stream, subject = make_stream(client, "atomic")
    whole = Range()
    halves = Range.split(2)
    old = client.open(Channel(stream, "m", whole))
    client.publish_batch(old, BatchId(CP, 1), docs(subject, 1, 20), cp(1))

    frontiers = client.rescale(stream, "m", [whole], halves)
    for r in halves:
        f = frontiers[r.name]
        assert f.record.kind == "open" and f.record.inherited_from == (whole.name,)
        assert f.committed == BatchId(CP, 1) and f.checkpoint == cp(1)
        assert client.read_frontier(Channel(stream, "m", r)).seq == f.seq
    closed = client.read_frontier(Channel(stream, "m", whole))
    assert closed.closed and closed.record.successors == tuple(r.name for r in halves)
    assert closed.committed == BatchId(CP, 1)
    # Re-running the rescale changes nothing.
    assert {k: v.seq for k, v in client.rescale(stream, "m", [whole], halves).items()} == {
        k: v.seq for k, v in frontiers.items()
    }

    # The old range's session is fenced, and it cannot be opened again.
    with pytest.raises(FencedOff):
        client.publish_batch(old, BatchId(CP, 2), docs(subject, 2, 20), cp(2))
    with pytest.raises(FencedOff, match="closed by a rescale"):
        client.open(Channel(stream, "m", whole))

    # The new ranges replay batch 2 from the inherited frontier; batch 1 counts as committed.
    for i, r in enumerate(halves):
        s = client.open(Channel(stream, "m", r))
        assert s.frontier.committed == BatchId(CP, 1)
        assert client.publish_batch(s, BatchId(CP, 1), [], cp(1)).written == 0
        client.publish_batch(s, BatchId(CP, 2), docs(subject, 2, 10, start=10 * i), cp(2))
    view = client.committed_view(stream, subject)
    assert len(view) == 20 and {d["batch"] for d in view.values()} == {2}

    # Merging back needs equal frontiers: one half commits batch 3, the other does not.
    s = client.open(Channel(stream, "m", halves[0]))
    client.publish_batch(s, BatchId(CP, 3), docs(subject, 3, 1), cp(3))
    with pytest.raises(RecoveryError, match="different batches"):
        client.rescale(stream, "m", halves, [whole])


def test_unreachable_server_is_endpoint_unavailable():
    from tests.support.helpers import free_port

    with pytest.raises(EndpointUnavailable):
        NatsClient(f"nats://127.0.0.1:{free_port()}", policy=RetryPolicy(connect_timeout=1.0))


# ---------------------------------------------------------------- a writer killed mid-batch
WRITER_MAX_BATCH = 100  # the writer's atomic chunks: 99 documents + a progress record


@pytest.mark.chaos
@pytest.mark.parametrize("mode", MODES)
def test_writer_killed_mid_batch_then_replayed(client, nats_server, mode):
    n = 2000
    stream = f"K{uuid.uuid4().hex[:10]}"
    subject = nats_writer.subject(stream)
    client.ensure_stream(stream, [subject], atomic=(mode == "atomic"))
    states = [{}, nats_writer.expected_view(1, n), nats_writer.expected_view(2, n), nats_writer.expected_view(3, n)]

    # A reader on its own connection reads all along: always a whole number of batches.
    stop = threading.Event()
    seen: list = []

    def read_all_along() -> None:
        with NatsClient(nats_server.url) as reader:
            while not stop.is_set():
                view = reader.committed_view(stream, subject)
                seen.append(states.index(view) if view in states else "partial")

    reader = threading.Thread(target=read_all_along, daemon=True)
    reader.start()
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [os.getcwd(), os.environ.get("PYTHONPATH")]))}
    child = subprocess.Popen(
        [sys.executable, "-m", "tests.support.nats_writer", nats_server.url, stream, str(n), str(WRITER_MAX_BATCH)],
        stdout=subprocess.PIPE,
        text=True,
        env=env,
    )
    try:
        for line in child.stdout:  # type: ignore[union-attr]
            if line.startswith("mid"):
                child.send_signal(signal.SIGKILL)  # in the middle of batch 2
                break
        else:
            pytest.fail(f"the writer exited with {child.wait()} before batch 2")
    finally:
        child.kill()
        child.wait()
        stop.set()
        reader.join(timeout=60)
    assert child.returncode == -signal.SIGKILL
    assert seen and "partial" not in seen, seen

    ch = Channel(stream, nats_writer.MATERIALIZATION, Range())
    frontier = client.read_frontier(ch)
    assert frontier.committed == BatchId(nats_writer.CHECKPOINT, 1)  # batch 2 never committed
    assert client.committed_view(stream, subject) == states[1]  # no partial batch is read

    # Replay, as the next session would: open (fence), find what batch 2 left, skip it.
    session = client.open(ch)
    inflight = client.written_after(ch, session.frontier, [subject])
    b2 = BatchId(nats_writer.CHECKPOINT, 2)
    left = inflight.counters(b2)
    assert 0 < len(left) < n, "the kill should land in the middle of batch 2"
    if mode == "atomic":  # whole chunks only
        assert left == frozenset(range(1, len(left) + 1)) and len(left) % (WRITER_MAX_BATCH - 1) == 0
    c = client.publish_batch(
        session, b2, nats_writer.batch_docs(stream, 2, n), nats_writer.checkpoint(2), skip=inflight
    )
    assert (c.written, c.skipped) == (n - len(left), len(left))
    client.publish_batch(
        session, BatchId(nats_writer.CHECKPOINT, 3), nats_writer.batch_docs(stream, 3, n), nats_writer.checkpoint(3)
    )

    copies = data_counters(client, stream, subject)
    assert len(copies) == 3 * n and set(copies.values()) == {1}  # no message twice
    assert client.committed_view(stream, subject) == states[3]
