"""tidemark.sources.nats against a real nats-server: settings, bounds, ranges read exactly and
repeatably (also across deleted and filtered-out sequences, without waiting for a timeout),
batches planned over a growing stream, retention loss refused, deletions, and a view written
by tidemark's own nats endpoint read back as source records.  No Spark."""

from __future__ import annotations

import asyncio
import json
import socket
import time
import uuid

import pytest

from tests.support.nats_server import nats_server

nats = pytest.importorskip("nats", reason="pip install -e '.[test,nats]'")

from tidemark.drivers.nats import wire
from tidemark.drivers.nats.channel import OutDoc
from tidemark.drivers.nats.client import NatsClient
from tidemark.drivers.nats.wire import BatchId, Channel
from tidemark.errors import EndpointUnavailable, SpecError
from tidemark.protocol.messages import Range
from tidemark.sources import log_settings, open_log
from tidemark.sources.log import Bounds, Record, SourceGone, check_retained, initial, key_document, plan, ranges
from tidemark.sources.nats import NatsLog, read_settings, to_record

QUICK = 2.0  # seconds: a read that waited for a fetch timeout (5 s) would take longer


def run(coro):
    return asyncio.run(coro)


async def _with_js(url, fn):
    nc = await nats.connect(url, connect_timeout=10)
    try:
        return await fn(nc.jetstream(timeout=10))
    finally:
        await nc.close()


def js(url, fn):
    """``await fn(js)`` on a fresh connection."""
    return run(_with_js(url, fn))


def new_stream(url: str) -> str:
    name = f"S{uuid.uuid4().hex[:10]}"
    js(url, lambda j: j.add_stream(name=name, subjects=[f"{name}.>"]))
    return name


def publish(url: str, stream: str, n: int, *, subjects=("a",), first: int = 0) -> list[int]:
    """``n`` messages ``{"i": first..}`` on ``<stream>.<subject>``, round robin; their sequences."""

    async def go(j):
        out = []
        for i in range(first, first + n):
            ack = await j.publish(f"{stream}.{subjects[i % len(subjects)]}", json.dumps({"i": i}).encode())
            out.append(ack.seq)
        return out

    return js(url, go)


def opened(url: str, stream: str, **more) -> NatsLog:
    return NatsLog({"url": url, "stream": stream, **more})


def timed_read(log: NatsLog, start: int, end: int) -> list[Record]:
    t0 = time.monotonic()
    out = list(log.read(log.name, start, end))
    assert time.monotonic() - t0 < QUICK, f"read {start}..{end} waited for a timeout"
    return out


def seqs(records) -> list[int]:
    return [r.offset for r in records]


# ---------------------------------------------------------------- settings (no server)
def test_settings_defaults_and_refusals():
    v = read_settings({"url": "nats://127.0.0.1:4222", "stream": "ORDERS"})
    assert v == {
        "url": "nats://127.0.0.1:4222",
        "stream": "ORDERS",
        "subjects": None,
        "starting_offsets": "earliest",
        "max_records_per_batch": None,
    }
    v = log_settings("nats", {"url": "nats://h:1", "stream": "S", "starting_offsets": "LATEST", "subjects": ["a.>"]})
    assert (v["starting_offsets"], v["subjects"]) == ("latest", ["a.>"])
    assert read_settings(v) == v  # settings already read read the same
    assert (
        read_settings({"url": "nats://h:1", "stream": "S", "max_records_per_batch": "50"})["max_records_per_batch"]
        == 50
    )

    with pytest.raises(SpecError) as e:
        read_settings({"url": "nats://h:1", "strem": "S"}, "collections.orders.source")
    msg = str(e.value)
    assert msg.startswith("collections.orders.source: nats source: unknown setting(s) 'strem' (did you mean 'stream'?)")
    assert "endpoint" not in msg
    with pytest.raises(SpecError, match="nats source: url is required"):
        read_settings({"stream": "S"})
    with pytest.raises(SpecError, match="nats source: stream is required"):
        read_settings({"url": "nats://h:1"})
    for bad in ({"starting_offsets": "middle"}, {"max_records_per_batch": 0}, {"subjects": "a.>"}, {"stream": "a.b"}):
        with pytest.raises(SpecError, match="nats source"):
            read_settings({"url": "nats://h:1", "stream": "S", **bad})
    # a password or a token never shows
    for url in ("http://user:s3cret@h:1", "ftp://s3cret@h:1", ["s3cret"]):
        with pytest.raises(SpecError, match="nats source: url must be") as e:
            read_settings({"url": url, "stream": "S"})
        assert "s3cret" not in str(e.value)
    assert "s3cret" not in repr(opened("nats://s3cret@127.0.0.1:4222", "S"))
    assert "s3cret" not in repr(opened("nats://u:s3cret@127.0.0.1:4222", "S"))
    assert isinstance(open_log("nats", {"url": "nats://h:1", "stream": "S"}), NatsLog)


def test_records_of_messages():
    s = "VIEWS"
    # tidemark's progress records and quarantine are not documents
    assert to_record(s, 1, "tidemark.VIEWS.progress.m.00000000-ffffffff", {}, b"{}") is None
    assert to_record(s, 2, "tidemark.VIEWS.quarantine.m", {}, b"{}") is None
    ch = Channel(s, "m", Range())
    up = wire.data_headers(ch, BatchId("cp", 1), 1, ["c1", 2])
    assert to_record(s, 3, "views.c", up, b'{"x":1}') == Record(3, b'{"x":1}', b'["c1",2]')
    gone = to_record(s, 4, "views.c", wire.data_headers(ch, BatchId("cp", 1), 2, ["c1", 2], delete=True), b"{}")
    assert gone == Record(4, None, b'["c1",2]')
    assert key_document(["/id", "/n"], gone.key, "x") == {"_meta": {"op": "d"}, "id": "c1", "n": 2}
    # NATS KV
    assert to_record(s, 5, "$KV.b.k.1", {"KV-Operation": "DEL"}, b"") == Record(5, None, b'"k.1"')
    assert to_record(s, 6, "$KV.b.k", {"KV-Operation": "PURGE"}, b"") == Record(6, None, b'"k"')
    assert to_record(s, 7, "$KV.b.k", {"Nats-Marker-Reason": "MaxAge"}, b"") == Record(7, None, b'"k"')
    assert to_record(s, 8, "$KV.b.k", None, b"v") == Record(8, b"v", b'"k"')
    # a plain message: its payload, no key; a KV marker outside $KV: no key (key_document refuses it)
    assert to_record(s, 9, "orders.new", None, b"{}") == Record(9, b"{}", None)
    assert to_record(s, 10, "orders.x", {"KV-Operation": "DEL"}, b"") == Record(10, None, None)


# ---------------------------------------------------------------- against a server
def test_bounds_of_empty_filled_and_missing_stream(nats_server):
    url = nats_server.url
    stream = new_stream(url)
    with opened(url, stream) as log:
        assert log.bounds() == {stream: Bounds(1, 1)}
        assert list(log.read(stream, 1, 1)) == []
        publish(url, stream, 5)
        assert log.bounds() == {stream: Bounds(1, 6)}
        js(url, lambda j: j.purge_stream(stream))
        assert log.bounds() == {stream: Bounds(6, 6)}  # empty again: earliest = end = last_seq + 1
    with opened(url, "NO_SUCH_STREAM") as log:
        assert log.bounds() == {}


def test_read_range_exactly_and_repeatably(nats_server):
    url = nats_server.url
    stream = new_stream(url)
    publish(url, stream, 20, subjects=("a", "b"))
    with opened(url, stream) as log:
        first = timed_read(log, 5, 12)
        assert seqs(first) == list(range(5, 12))
        assert [json.loads(r.value)["i"] for r in first] == list(range(4, 11))
        assert timed_read(log, 5, 12) == first  # a replay reads the same records
        assert seqs(timed_read(log, 1, 21)) == list(range(1, 21))
        assert seqs(timed_read(log, 20, 21)) == [20]
        assert timed_read(log, 21, 21) == []
        it = log.read(stream, 1, 21)
        assert next(it).offset == 1
        it.close()  # a reader stopped early drops its consumer too
    with opened(url, stream) as other:  # another connection, same records
        assert timed_read(other, 5, 12) == first
    info = js(url, lambda j: j.stream_info(stream))
    assert info.state.consumer_count == 0  # every read dropped its ephemeral consumer


def test_deleted_and_filtered_sequences_end_the_read_without_waiting(nats_server):
    url = nats_server.url
    stream = new_stream(url)
    publish(url, stream, 30, subjects=("a", "b", "c"))  # seq s is on a, b, c for s % 3 == 1, 2, 0

    async def delete(j):
        for s in (10, 11, 18, 19, 29, 30):
            await j.delete_msg(stream, s)

    js(url, delete)
    with opened(url, stream) as log:
        assert log.bounds() == {stream: Bounds(1, 31)}
        assert seqs(timed_read(log, 5, 20)) == [5, 6, 7, 8, 9, 12, 13, 14, 15, 16, 17]  # 18, 19 deleted
        assert seqs(timed_read(log, 18, 20)) == []  # every sequence of the range deleted
        assert seqs(timed_read(log, 25, 31)) == [25, 26, 27, 28]  # the stream's last ones deleted
    with opened(url, stream, subjects=[f"{stream}.a"]) as log:
        assert seqs(timed_read(log, 1, 31)) == [1, 4, 7, 13, 16, 22, 25, 28]
        assert seqs(timed_read(log, 5, 7)) == []  # nothing of the range matches; more after it
        assert seqs(timed_read(log, 2, 5)) == [4]
    with opened(url, stream, subjects=[f"{stream}.a", f"{stream}.c"]) as log:
        assert seqs(timed_read(log, 1, 13)) == [1, 3, 4, 6, 7, 9, 12]


def test_plan_and_read_over_a_growing_stream_reads_each_record_once(nats_server):
    url = nats_server.url
    stream = new_stream(url)
    publish(url, stream, 23)
    read: list[int] = []
    with opened(url, stream) as log:
        b = log.bounds()
        offsets = initial(b)
        assert offsets == {stream: 1}
        batches = 0
        for grow in (17, 0, 9, 0):
            while True:
                b = log.bounds()
                check_retained(log.name, log.kind, offsets, b)
                end = plan(offsets, b, cap=10)
                if end == offsets:
                    break
                for part, start, stop in ranges(offsets, end, b):
                    read += seqs(log.read(part, start, stop))
                offsets, batches = end, batches + 1
            if grow:
                publish(url, stream, grow, first=len(read))
        assert batches == 6  # 10 + 10 + 3, then 10 + 7, then 9
    assert read == list(range(1, 50))
    with opened(url, stream, starting_offsets="latest") as log:
        assert initial(log.bounds(), "latest") == {stream: 50}


def test_retention_loss_and_a_deleted_stream_are_refused(nats_server):
    url = nats_server.url
    stream = new_stream(url)
    publish(url, stream, 10)
    with opened(url, stream) as log:
        assert seqs(log.read(stream, 1, 5)) == [1, 2, 3, 4]  # the view read up to 4; 5.. next
        js(url, lambda j: j.purge_stream(stream, keep=3))  # 1..7 purged: 5, 6, 7 never read
        b = log.bounds()
        assert b == {stream: Bounds(8, 11)}
        with pytest.raises(SourceGone) as e:
            check_retained(log.name, log.kind, {stream: 5}, b)
        msg = str(e.value)
        assert msg.startswith(
            f"nats source {stream}: {stream} holds offsets 8..10 but the view must read from offset 5"
        )
        assert "3 records were deleted" in msg
        with pytest.raises(SourceGone, match="offsets 8..10"):
            list(log.read(stream, 5, 11))  # an executor refuses too, before it reads anything
        assert seqs(log.read(stream, 8, 11)) == [8, 9, 10]
        js(url, lambda j: j.delete_stream(stream))
        assert log.bounds() == {}
        with pytest.raises(SourceGone, match=f"{stream} no longer exists"):
            check_retained(log.name, log.kind, {stream: 11}, log.bounds())
        with pytest.raises(SourceGone, match="no longer exists"):
            list(log.read(stream, 11, 12))


def test_deletions_become_key_documents(nats_server):
    url = nats_server.url
    stream = new_stream(url)
    ch = Channel(stream, "m", Range())

    async def write(j):
        await j.publish(f"{stream}.c", b'{"id":"c1","v":1}', headers=wire.data_headers(ch, BatchId("cp", 1), 1, ["c1"]))
        h = wire.data_headers(ch, BatchId("cp", 1), 2, ["c1"], delete=True)
        await j.publish(f"{stream}.c", b'{"id":"c1","_meta":{"op":"d"}}', headers=h)
        await j.publish(f"{stream}.c", b'{"id":"c2"}')

    js(url, write)
    with opened(url, stream) as log:
        got = timed_read(log, 1, 4)
    assert got == [Record(1, b'{"id":"c1","v":1}', b'["c1"]'), Record(2, None, b'["c1"]'), Record(3, b'{"id":"c2"}')]
    assert key_document(["/id"], got[1].key, "x") == {"_meta": {"op": "d"}, "id": "c1"}

    bucket = f"B{uuid.uuid4().hex[:8]}"

    async def kv(j):
        b = await j.create_key_value(bucket=bucket, history=5)
        await b.put("k1", b'{"id":"k1"}')
        await b.put("k2", b'{"id":"k2"}')
        await b.delete("k1")
        await b.purge("k2")

    js(url, kv)
    with opened(url, f"KV_{bucket}") as log:
        ((part, b),) = log.bounds().items()
        got = timed_read(log, b.earliest, b.end)
    # the purge removed k2's earlier revision from the stream (a rollup): its marker remains
    assert got == [Record(1, b'{"id":"k1"}', b'"k1"'), Record(3, None, b'"k1"'), Record(4, None, b'"k2"')]
    assert key_document(["/id"], got[2].key, "x") == {"_meta": {"op": "d"}, "id": "k2"}


@pytest.mark.parametrize("atomic", [True, False], ids=["atomic", "ordered"])
def test_a_view_written_by_the_nats_endpoint_reads_back_as_its_documents(nats_server, atomic):
    url = nats_server.url
    stream = f"V{uuid.uuid4().hex[:10]}"
    subject = f"{stream}.customers"
    with NatsClient(url) as nc:
        nc.ensure_stream(stream, [subject], atomic=atomic)
        session = nc.open(Channel(stream, "view", Range()))
        for batch in (1, 2):
            docs = [
                OutDoc(subject, [f"c{i}"], {"c": f"c{i}", "b": batch}, delete=(batch == 2 and i % 3 == 0))
                for i in range(10)
            ]
            nc.publish_batch(session, BatchId("cp", batch), docs, {"checkpoint_id": "cp", "batch_id": batch})
        expected = {k[0]: doc for k, doc in nc.committed_view(stream, subject).items()}
    for subjects in (None, [subject]):
        with opened(url, stream, subjects=subjects) as log:
            b = log.bounds()[stream]
            records = timed_read(log, b.earliest, b.end)
        assert len(records) == 20  # the data messages only: no progress record comes out
        view: dict = {}
        for r in records:  # last write wins, in stream order
            key = json.loads(r.key)[0]
            if r.value is None:
                view.pop(key, None)
            else:
                view[key] = json.loads(r.value)
        assert view == expected and len(view) == 6


def test_an_unreachable_server_is_endpoint_unavailable_without_its_password():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]  # closed again: nothing listens there
    with opened(f"nats://user:s3cret@127.0.0.1:{port}", "S") as log:
        with pytest.raises(EndpointUnavailable) as e:
            log.bounds()
    assert "s3cret" not in str(e.value) and "nats source S" in str(e.value)
