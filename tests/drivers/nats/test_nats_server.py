"""The NATS server behaviours the JetStream sink relies on, checked against a real server.

Each test states one property with raw nats-py calls (no tidemark code), so a server or
client upgrade that changes one fails here first.  docs/dev/nats-server.md lists them.
"""

from __future__ import annotations

import asyncio
import json
import uuid

import pytest

from tests.support.nats_server import MIN_VERSION, nats_server, private_nats_server

nats = pytest.importorskip("nats", reason="pip install -e '.[test,nats]'")
from nats.js.api import StreamConfig
from nats.js.errors import BadRequestError, NotFoundError

ELSS = "Nats-Expected-Last-Subject-Sequence"


def run(coro):
    return asyncio.run(coro)


async def connect(url):
    nc = await nats.connect(url, connect_timeout=10)
    return nc, nc.jetstream(timeout=10)


async def new_stream(js, *, atomic=True, window=120.0):
    name = f"T{uuid.uuid4().hex[:10]}"
    await js.add_stream(
        StreamConfig(name=name, subjects=[f"{name}.>"], allow_atomic=atomic or None, duplicate_window=window)
    )
    return name


async def batch_send(nc, msgs, *, batch_id=None, commit=True, timeout=5.0):
    """Publish ``[(subject, headers, payload)]`` as one atomic batch (ADR-50) with raw headers:
    the first message as a request (empty ack or an error), the others plain publishes,
    the last with ``Nats-Batch-Commit: 1`` as a request whose reply is the pub ack."""
    bid = batch_id or uuid.uuid4().hex
    reply = None
    for i, (subject, headers, payload) in enumerate(msgs, start=1):
        h = {**headers, "Nats-Batch-Id": bid, "Nats-Batch-Sequence": str(i)}
        last = i == len(msgs)
        if last and commit:
            h["Nats-Batch-Commit"] = "1"
        if i == 1 or (last and commit):
            r = await nc.request(subject, payload, headers=h, timeout=timeout)
            reply = json.loads(r.data) if r.data else {}
            if "error" in reply:
                return reply
        else:
            await nc.publish(subject, payload, headers=h)
    await nc.flush()
    return reply


async def messages(js, stream):
    return (await js.stream_info(stream)).state.messages


def test_server_version_supports_atomic_batch(nats_server):
    async def go():
        nc, js = await connect(nats_server.url)
        try:
            v = nc.connected_server_version
            assert (v.major, v.minor, v.patch) >= MIN_VERSION
            name = await new_stream(js)
            assert (await js.stream_info(name)).config.allow_atomic is True
        finally:
            await nc.close()

    run(go())


def test_msg_id_dedup_within_duplicate_window(nats_server):
    async def go():
        nc, js = await connect(nats_server.url)
        try:
            s = await new_stream(js, atomic=False)
            first = await js.publish(f"{s}.d", b"1", headers={"Nats-Msg-Id": "tm/m/r/cp/1/1"})
            again = await js.publish(f"{s}.d", b"1", headers={"Nats-Msg-Id": "tm/m/r/cp/1/1"})
            other = await js.publish(f"{s}.d", b"2", headers={"Nats-Msg-Id": "tm/m/r/cp/1/2"})
            assert not first.duplicate and again.duplicate is True
            assert again.seq == first.seq  # the ack names the stored copy
            assert other.seq == first.seq + 1
            assert await messages(js, s) == 2
        finally:
            await nc.close()

    run(go())


def test_expected_last_subject_sequence_rejects_a_stale_publisher(nats_server):
    async def go():
        nc, js = await connect(nats_server.url)
        try:
            s = await new_stream(js, atomic=False)
            p = f"{s}.progress"
            # 0 means "the subject has no message yet".
            a = await js.publish(p, b"open-a", headers={ELSS: "0"})
            with pytest.raises(BadRequestError) as stale0:
                await js.publish(p, b"x", headers={ELSS: "0"})
            assert stale0.value.err_code == 10071
            # Other subjects do not move this subject's last sequence.
            await js.publish(f"{s}.data", b"d")
            # Two sessions both read the fence a.seq; the first to publish wins.
            b = await js.publish(p, b"open-b", headers={ELSS: str(a.seq)})
            with pytest.raises(BadRequestError) as stale:
                await js.publish(p, b"commit-a", headers={ELSS: str(a.seq)})
            assert stale.value.err_code == 10071
            assert stale.value.code == 400
            assert f"wrong last sequence: {b.seq}" in stale.value.description
            last = await js.get_last_msg(s, p)
            assert (last.seq, last.data) == (b.seq, b"open-b")
        finally:
            await nc.close()

    run(go())


def test_atomic_batch_commits_all_messages_contiguously(nats_server):
    async def go():
        nc, js = await connect(nats_server.url)
        try:
            s = await new_stream(js)
            msgs = [(f"{s}.d", {"Nats-Msg-Id": f"id{i}"}, b"%d" % i) for i in range(5)]
            msgs.append((f"{s}.progress", {ELSS: "0"}, b"commit"))
            ack = await batch_send(nc, msgs, batch_id="b1")
            assert ack == {"stream": s, "seq": 6, "batch": "b1", "count": 6}
            assert await messages(js, s) == 6
            assert (await js.get_last_msg(s, f"{s}.progress")).seq == 6
        finally:
            await nc.close()

    run(go())


def test_atomic_batch_without_commit_is_never_visible(nats_server):
    async def go():
        nc, js = await connect(nats_server.url)
        try:
            s = await new_stream(js)
            r = await batch_send(
                nc, [(f"{s}.d", {}, b"a"), (f"{s}.d", {}, b"b"), (f"{s}.d", {}, b"c")], batch_id="open", commit=False
            )
            assert r == {}  # the first message got the empty "batch started" ack
            # Other publishes are stored meanwhile; the open batch is not.
            plain = await js.publish(f"{s}.d", b"plain")
            assert plain.seq == 1 and await messages(js, s) == 1
            # The writer dies (its connection closes): the batch never becomes visible, and a
            # commit with the same id from elsewhere cannot complete it (sequence gap).
            await nc.close()
            nc2, js2 = await connect(nats_server.url)
            try:
                r = await nc2.request(
                    f"{s}.d",
                    b"z",
                    headers={"Nats-Batch-Id": "open", "Nats-Batch-Sequence": "9", "Nats-Batch-Commit": "1"},
                    timeout=5,
                )
                assert json.loads(r.data)["error"]["err_code"] == 10176, r.data  # incomplete
                assert await messages(js2, s) == 1
            finally:
                await nc2.close()
        finally:
            if nc.is_connected:
                await nc.close()

    run(go())


def test_atomic_batch_fails_as_a_whole_when_its_progress_fence_is_stale(nats_server):
    async def go():
        nc, js = await connect(nats_server.url)
        try:
            s = await new_stream(js)
            p = f"{s}.progress"
            fence = (await js.publish(p, b"open-1", headers={ELSS: "0"})).seq
            await js.publish(p, b"open-2", headers={ELSS: str(fence)})  # a newer session
            zombie = [(f"{s}.d", {"Nats-Msg-Id": f"z{i}"}, b"z") for i in range(3)] + [(p, {ELSS: str(fence)}, b"c")]
            r = await batch_send(nc, zombie)
            assert r["error"]["err_code"] == 10071
            assert await messages(js, s) == 2  # not one of the zombie's data messages
            # The zombie's message ids were not recorded: the owner can store them.
            ok = await batch_send(nc, zombie[:3] + [(p, {ELSS: str(fence + 1)}, b"c")])
            assert ok["count"] == 4
        finally:
            await nc.close()

    run(go())


def test_atomic_batch_with_an_already_stored_msg_id_fails_as_a_whole(nats_server):
    async def go():
        nc, js = await connect(nats_server.url)
        try:
            s = await new_stream(js)
            await js.publish(f"{s}.d", b"1", headers={"Nats-Msg-Id": "m1"})
            r = await batch_send(nc, [(f"{s}.d", {"Nats-Msg-Id": "m1"}, b"1"), (f"{s}.d", {"Nats-Msg-Id": "m2"}, b"2")])
            assert r["error"]["err_code"] == 10201
            assert await messages(js, s) == 1
        finally:
            await nc.close()

    run(go())


def test_atomic_batch_limits_and_disabled_stream(nats_server):
    async def go():
        nc, js = await connect(nats_server.url)
        try:
            s = await new_stream(js)
            too_big = await batch_send(nc, [(f"{s}.d", {}, b"x")] * 1001)
            assert too_big["error"]["err_code"] == 10199
            full = await batch_send(nc, [(f"{s}.d", {}, b"x")] * 1000)
            assert full["count"] == 1000
            off = await new_stream(js, atomic=False)
            r = await batch_send(nc, [(f"{off}.d", {}, b"x")])
            assert r["error"]["err_code"] == 10174
        finally:
            await nc.close()

    run(go())


def test_get_last_message_by_subject(nats_server):
    async def go():
        nc, js = await connect(nats_server.url)
        try:
            s = await new_stream(js, atomic=False)
            with pytest.raises(NotFoundError) as none:
                await js.get_last_msg(s, f"{s}.progress.m.r")
            assert none.value.err_code == 10037
            await js.publish(f"{s}.progress.m.r", b"one", headers={"Tidemark-X": "1"})
            await js.publish(f"{s}.progress.m.other", b"elsewhere")
            await js.publish(f"{s}.progress.m.r", b"two", headers={"Tidemark-X": "2"})
            await js.publish(f"{s}.d", b"data")
            last = await js.get_last_msg(s, f"{s}.progress.m.r")
            assert (last.seq, last.data, last.headers["Tidemark-X"]) == (3, b"two", "2")
        finally:
            await nc.close()

    run(go())


@pytest.mark.parametrize("hard", [False, True], ids=["stop", "sigkill"])
def test_acked_data_survives_a_server_restart(private_nats_server, hard):
    server = private_nats_server

    async def write():
        nc, js = await connect(server.url)
        try:
            s = await new_stream(js)
            await js.publish(f"{s}.d", b"plain", headers={"Nats-Msg-Id": "p1"})
            ack = await batch_send(nc, [(f"{s}.d", {}, b"b1"), (f"{s}.progress", {ELSS: "0"}, b"c")])
            assert ack["count"] == 2
            return s
        finally:
            await nc.close()

    async def read(s):
        nc, js = await connect(server.url)
        try:
            assert await messages(js, s) == 3
            assert (await js.get_last_msg(s, f"{s}.progress")).data == b"c"
            assert (await js.stream_info(s)).config.allow_atomic is True
            # The duplicate window survives too: the same id is still a duplicate.
            assert (await js.publish(f"{s}.d", b"plain", headers={"Nats-Msg-Id": "p1"})).duplicate is True
        finally:
            await nc.close()

    s = run(write())
    server.restart(hard=hard)
    run(read(s))
