"""The ``nats`` driver without Spark, against a private JetStream server: a zombie's publish is
rejected and leaves nothing a reader sees, operator mistakes are refused with clear errors,
a state store ahead of the log is refused, and ``drop`` removes the view."""

from __future__ import annotations

import uuid

import pytest

pytest.importorskip("nats", reason="pip install -e '.[test,nats]'")
pytest.importorskip("rocksdict")

from tests.support.nats_server import nats_server, private_nats_server
from tidemark.drivers.nats import (
    NatsDriver,
    wire,
)
from tidemark.drivers.nats.client import NatsClient
from tidemark.errors import FencedOff, IncompatibleSchema, RecoveryError, SpecError
from tidemark.protocol.messages import (
    Acknowledge,
    Apply,
    BindingSpec,
    Field,
    Open,
    Range,
    StartCommit,
    Store,
)

FIELDS = (Field("id", "/id", "string", is_key=True), Field("n", "/n", "integer"))


@pytest.fixture
def setup(nats_server, tmp_path):
    stream = f"D{uuid.uuid4().hex[:8]}"
    binding = BindingSpec({"stream": stream, "subject": f"{stream}.docs"}, "docs", ("/id",), FIELDS)
    cfg = {"url": nats_server.url, "state": str(tmp_path / "state"), "max_batch": 5}
    with NatsDriver(cfg) as d:
        d.apply(Apply("m", {}, (binding,), checkpoint_id="cp"))
    return cfg, binding, stream


def commit(txn, batch: int, n: int = 12) -> None:
    txn.acknowledge(Acknowledge())
    docs = [{"id": f"k{i:03d}", "n": batch} for i in range(n)]
    txn.store(
        Store(
            0, tuple((d["id"],) for d in docs), tuple((d["n"],) for d in docs), tuple(docs), (False,) * n, (False,) * n
        )
    )
    txn.start_commit(StartCommit({"checkpoint_id": "cp", "batch_id": batch, "materialization": "m"}))


def test_a_zombies_publish_is_rejected_and_leaves_nothing(setup):
    cfg, binding, stream = setup
    with NatsDriver(cfg) as a, NatsDriver(cfg) as b:
        zombie, _ = a.open(Open("m", "v", Range(), bindings=(binding,)))
        owner, opened = b.open(Open("m", "v", Range(), bindings=(binding,)))
        assert opened.runtime_checkpoint is None
        with pytest.raises(FencedOff, match="progress subject moved"):
            commit(zombie, 0)
        with NatsClient(cfg["url"]) as nc:
            assert nc.scan(stream, 1, [f"{stream}.docs"]) == []  # atomic: not one message of the zombie
        commit(owner, 0)
        assert b.dump("m", binding) == {(f"k{i:03d}",): {"id": f"k{i:03d}", "n": 0} for i in range(12)}
        rows = b.checkpoints("m")
        assert [(r.range, r.runtime_checkpoint["batch_id"]) for r in rows] == [(Range(), 0)]


def test_operator_mistakes_are_refused_clearly(setup, tmp_path):
    cfg, binding, stream = setup
    with pytest.raises(SpecError, match="url"):
        NatsDriver({"url": "http://user:secret@host:4222"})
    try:
        NatsDriver({"url": "http://user:secret@host:4222"})
    except SpecError as exc:
        assert "secret" not in str(exc)
    other = BindingSpec({"stream": "OTHER", "subject": "other.docs"}, "docs2", ("/id",), FIELDS)
    with NatsDriver(cfg) as d, pytest.raises(IncompatibleSchema, match="same stream"):
        d.apply(Apply("m", {}, (binding, other)))
    bad = BindingSpec({"stream": stream, "subject": f"tidemark.{stream}.progress.x"}, "d", ("/id",), FIELDS)
    with NatsDriver(cfg) as d, pytest.raises(SpecError, match="progress records"):
        d.apply(Apply("m", {}, (bad,)))
    with NatsDriver(cfg) as d, pytest.raises(RecoveryError, match="tidemark reset"):
        d.apply(Apply("m", {}, (binding,), checkpoint_id="another"))  # fine until something is committed
        txn, _ = d.open(Open("m", "v", Range(), bindings=(binding,)))
        commit(txn, 0)
        txn.close()
        d.apply(Apply("m", {}, (binding,), checkpoint_id="another"))


def test_a_state_store_ahead_of_the_log_is_refused_and_drop_removes_the_view(setup):
    cfg, binding, stream = setup
    with NatsDriver(cfg) as d:
        txn, _ = d.open(Open("m", "v", Range(), bindings=(binding,)))
        commit(txn, 0)
        txn.close()
        with NatsClient(cfg["url"]) as nc:  # the stream is reset under the state store
            nc.purge(stream, [wire.progress_wildcard(wire.default_prefix(stream))])
        with pytest.raises(RecoveryError, match="tidemark reset"):
            d.open(Open("m", "v", Range(), bindings=(binding,)))
        done = d.drop("m", (binding,))
        assert any("purged" in x for x in done) and any("state store" in x for x in done)
        assert d.checkpoints("m") == [] and d.dump("m", binding) == {}
        txn, opened = d.open(Open("m", "v", Range(), bindings=(binding,)))  # starts over
        assert opened.runtime_checkpoint is None
        txn.close()


def test_tidemark_query_prints_only_committed_documents(tmp_path, private_nats_server):
    """`tidemark query` over a nats view: the last committed document per key, in key order;
    a batch whose progress record is missing (a writer killed mid-batch) is not shown."""
    import json
    import os
    import subprocess
    import sys

    from tests.support.nats_helpers import STREAM, SUBJECT, nats_spec
    from tidemark.spec import load_spec

    url = private_nats_server.url
    spec = nats_spec(tmp_path, tmp_path / "data", 1, url, atomic=False)
    mat = load_spec(spec).materializations["view"]
    binding = BindingSpec({"stream": STREAM, "subject": SUBJECT}, "orders", ("/customer",), FIELDS)
    with NatsDriver(mat.driver_config) as d:
        d.apply(Apply("view", {}, (binding,), checkpoint_id="cp"))
        txn, _ = d.open(Open("view", "v", Range(), bindings=(binding,)))
        for batch, n in ((0, 3), (1, 2)):
            txn.acknowledge(Acknowledge())
            keys = tuple((f"c{i}",) for i in range(n))
            docs = tuple({"customer": k[0], "batch": batch} for k in keys)
            txn.store(Store(0, keys, ((0,),) * n, docs, (False,) * n, (False,) * n))
            txn.start_commit(StartCommit({"checkpoint_id": "cp", "batch_id": batch, "materialization": "view"}))
        txn.close()
    with NatsClient(url) as nc:  # a partial batch 2: data without its progress record
        nc.ensure_stream(STREAM, [SUBJECT])
        from tidemark.drivers.nats.wire import BatchId, Channel

        ch = Channel(STREAM, "view", Range())
        h = wire.data_headers(ch, BatchId("cp", 2), 1, ["c0"])
        nc._run(nc._aio.js.publish(SUBJECT, json.dumps({"customer": "c0", "batch": 2}).encode(), headers=h), "pub")
    env = {**os.environ, "PYTHONPATH": os.getcwd()}
    out = subprocess.run(
        [sys.executable, "-m", "tidemark", "query", spec, "--view", SUBJECT],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
    )
    assert out.returncode == 0, out.stderr
    assert [json.loads(line) for line in out.stdout.splitlines()] == [
        {"customer": "c0", "batch": 1},
        {"customer": "c1", "batch": 1},
        {"customer": "c2", "batch": 0},
    ]
    out = subprocess.run(
        [sys.executable, "-m", "tidemark", "query", spec, "--view", "view", "--key", '"c2"'],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
    )
    assert out.returncode == 0 and json.loads(out.stdout) == {"customer": "c2", "batch": 0}, out.stderr


def test_check_and_apply_say_when_batches_are_not_published_atomically(nats_server, tmp_path):
    """``atomic: false`` (or a server older than 2.12): the dry run that ``tidemark check``
    prints, and the run's apply, say ordered mode and what a plain consumer may see."""
    stream = f"O{uuid.uuid4().hex[:8]}"
    binding = BindingSpec({"stream": stream, "subject": f"{stream}.docs"}, "docs", ("/id",), FIELDS)
    for atomic, expect in (
        ("false", "ordered mode: a plain consumer of the stream may see part of a batch"),
        ("true", "atomic batch publish on"),
    ):
        with NatsDriver({"url": nats_server.url, "state": str(tmp_path / f"state-{atomic}"), "atomic": atomic}) as d:
            dry = d.apply(Apply("m", {}, (binding,), dry_run=True))
            assert expect in dry.action_description and "nats-server 2." in dry.action_description
    with NatsDriver({"url": nats_server.url, "state": str(tmp_path / "state"), "atomic": "false"}) as d:
        assert "ordered mode" in d.apply(Apply("m", {}, (binding,), checkpoint_id="cp")).action_description


@pytest.mark.parametrize("limit", [{"max_age": 3600}, {"max_msgs": 1000}, {"max_bytes": 1 << 20}])
def test_a_stream_that_deletes_messages_on_its_own_is_refused(nats_server, tmp_path, limit):
    """A view's stream with a limit (max age, messages, bytes): the server would silently
    drop documents and progress records. Refused by the dry run (``tidemark check``) and by
    Apply, naming the limit; nothing is changed."""
    import asyncio

    import nats

    stream = f"L{uuid.uuid4().hex[:8]}"
    binding = BindingSpec({"stream": stream, "subject": f"{stream}.docs"}, "docs", ("/id",), FIELDS)

    async def make():
        nc = await nats.connect(nats_server.url)
        try:
            await nc.jetstream().add_stream(name=stream, subjects=[f"{stream}.docs"], **limit)
        finally:
            await nc.close()

    asyncio.run(make())
    ((name, value),) = limit.items()
    with NatsDriver({"url": nats_server.url, "state": str(tmp_path / "state")}) as d:
        for dry in (True, False):
            with pytest.raises(
                IncompatibleSchema, match=f"deletes messages on its own \\({name} .*Nothing was changed"
            ):
                d.apply(Apply("m", {}, (binding,), dry_run=dry, checkpoint_id="cp"))
        assert d.log.client().stream_config(stream)["subjects"] == [f"{stream}.docs"]  # not extended


def test_a_second_materialization_on_a_subject_is_refused(setup, tmp_path):
    """A subject holds one materialization's view: another materialization's Apply (and the dry
    run of ``tidemark check``) on a subject the first writes is refused; another subject of the
    same stream is fine."""
    cfg, binding, stream = setup
    with NatsDriver(cfg) as d:
        t, _ = d.open(Open("m", "v1", Range(), bindings=(binding,)))
        commit(t, 0)
        t.close()
    with NatsDriver(dict(cfg, state=str(tmp_path / "state2"))) as d:
        for dry in (True, False):
            with pytest.raises(
                RecoveryError,
                match=f"subject '{stream}.docs' of stream '{stream}' holds the view of "
                "materialization 'm'.*Nothing was changed",
            ):
                d.apply(Apply("intruder", {}, (binding,), dry_run=dry, checkpoint_id="cp2"))
        other = BindingSpec({"stream": stream, "subject": f"{stream}.other"}, "docs", ("/id",), FIELDS)
        d.apply(Apply("neighbour", {}, (other,), checkpoint_id="cp3"))
