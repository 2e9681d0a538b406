"""The webhook driver against real local HTTP receivers (tests/support/webhook_support.py):
full documents from the local state store, delta rows, chunk bodies and keys, refusals that
commit nothing, fencing, and a real process killed between its POSTs and its commit."""

from __future__ import annotations

import os
import subprocess
import sys
from collections import Counter

import pytest

pytest.importorskip("urllib3")
pytest.importorskip("rocksdict")

from tests.support.driver_protocol import MAT, cp, load_all
from tests.support.paths import REPO, SUPPORT
from tests.support.webhook_driver_child import BINDING, docs
from tests.support.webhook_support import dedup_receiver, naive_receiver
from tidemark.drivers.base import CommitPattern, capabilities_of
from tidemark.drivers.registry import load_driver, resolve_config
from tidemark.errors import AuthenticationFailed, EndpointRefused, EndpointUnavailable, FencedOff, SpecError
from tidemark.protocol.messages import (
    Acknowledge,
    Apply,
    BindingSpec,
    Field,
    Flush,
    Open,
    Range,
    StartCommit,
    Store,
    Validate,
)

CHILD = os.path.join(SUPPORT, "webhook_driver_child.py")
ROOT = REPO
FIELDS = (Field("customer", "/customer", "string", is_key=True), Field("amount", "/amount", "integer"))
DELTA = BindingSpec({"name": "events"}, "orders", ("/customer",), FIELDS, delta_updates=True)
FAST = {"attempts": 3, "base_delay": 0.01, "max_delay": 0.02}


def store_msg(ds, index=0, deletes=None):
    return Store(
        index,
        tuple((d["customer"],) for d in ds),
        tuple((d.get("amount"),) for d in ds),
        tuple(ds),
        (False,) * len(ds),
        tuple(deletes or (False,) * len(ds)),
    )


def make(url, tmp_path, **extra):
    d = load_driver("webhook", {"url": url, "state": str(tmp_path / "state"), **extra})
    bindings = (BINDING, DELTA)
    d.validate(Validate(MAT, d.config, bindings))
    d.apply(Apply(MAT, d.config, bindings))
    return d


def session(d, key_range=Range()):
    return d.open(Open(MAT, "v1", key_range, bindings=(BINDING, DELTA)))


def test_config_state_defaults_beside_the_spec_and_reserved_headers_are_refused(tmp_path):
    assert resolve_config("webhook", {"url": "http://h/x"}, str(tmp_path))["state"] == str(tmp_path / "webhook-state")
    assert resolve_config("webhook", {"url": "http://h/x", "state": "s"}, str(tmp_path))["state"] == str(tmp_path / "s")
    assert resolve_config("webhook", {"url": "http://h/x", "state": {"path": "s", "changelog": "c"}}, str(tmp_path))[
        "state"
    ] == {"path": str(tmp_path / "s"), "changelog": str(tmp_path / "c")}
    d = load_driver("webhook", {"url": "http://h/x", "state": str(tmp_path)})
    assert capabilities_of(d).commit_pattern is CommitPattern.STORE_AUTHORITATIVE
    with pytest.raises(SpecError, match="set by tidemark"):
        load_driver("webhook", {"url": "http://h/x", "headers": {"Idempotency-Key": "x"}})
    with pytest.raises(SpecError, match="webhook endpoint needs resource {name"):
        d.validate(Validate(MAT, d.config, (BindingSpec({"bucket": "x"}, "orders", ("/customer",), FIELDS),)))
    with pytest.raises(SpecError, match="unknown state option"):
        load_driver("webhook", {"url": "http://h/x", "state": {"path": "s", "colour": "red"}})


def test_full_documents_from_the_state_store_and_delta_rows_are_posted(dedup_receiver, tmp_path):
    d = make(dedup_receiver.url, tmp_path, headers={"Authorization": "Bearer tok-123"}, chunk_docs=2)
    t, opened = session(d)
    assert opened.runtime_checkpoint is None
    t.acknowledge(Acknowledge())
    t.flush(Flush())
    t.store(store_msg(docs(3)))
    t.store(store_msg([{"customer": "c0000", "amount": 1}], index=1))
    t.start_commit(StartCommit(cp(0)))
    assert t.log.delivered.chunks == 3 and t.log.delivered.documents == 4  # 2 + 1 of customers, 1 of events
    t.acknowledge(Acknowledge())
    prior = load_all(t, 0, [("c0001",), ("c0009",)])  # Loads read the state store
    assert prior == {("c0001",): {"customer": "c0001", "amount": 1}}
    t.store(
        store_msg(
            [{"customer": "c0001", "amount": 11}, {"customer": "c0002", "_meta": {"op": "d"}}], deletes=[False, True]
        )
    )
    t.start_commit(StartCommit(cp(1)))
    t.close()
    heads = [r["headers"] for r in dedup_receiver.requests]
    assert all(h["Authorization"] == "Bearer tok-123" and h["Idempotency-Key"].startswith("tm1-") for h in heads)
    assert len({h["Idempotency-Key"] for h in heads}) == len(heads) == 4
    assert [(b, doc) for _m, r, b, doc in dedup_receiver.rows if r == "customers" and b == 1] == [
        (1, {"customer": "c0001", "amount": 11}),
        (1, {"customer": "c0002", "_meta": {"op": "d"}}),
    ]
    assert dedup_receiver.documents(MAT, "events") == [{"customer": "c0000", "amount": 1}]
    assert d.dump(MAT, BINDING) == {("c0000",): docs(1)[0], ("c0001",): {"customer": "c0001", "amount": 11}}
    with pytest.raises(NotImplementedError, match="receiver"):
        d.dump(MAT, DELTA)
    [row] = d.checkpoints(MAT)
    assert row.runtime_checkpoint == cp(1)
    d.close()


def test_a_receiver_that_keeps_failing_commits_nothing_and_the_error_names_url_status_chunk(dedup_receiver, tmp_path):
    url = dedup_receiver.url + "?token=hunter22"
    d = make(url, tmp_path, retry=FAST)
    t, _ = session(d)
    t.acknowledge(Acknowledge())
    t.flush(Flush())
    t.store(store_msg(docs(3)))
    dedup_receiver.script.extend([(502, {}, "upstream down")] * 3)
    with pytest.raises(EndpointUnavailable) as err:
        t.start_commit(StartCommit(cp(0)))
    text = str(err.value)
    assert "HTTP 502" in text and "chunk 1/1" in text and "gave up after 3 attempts" in text
    assert "token=****" in text and "hunter22" not in text
    assert d.dump(MAT, BINDING) == {} and d.checkpoints(MAT)[0].runtime_checkpoint is None
    t.close()
    # the batch runs again (the same documents): the same key; applied once
    t, opened = session(d)
    assert opened.runtime_checkpoint is None
    t.acknowledge(Acknowledge())
    t.flush(Flush())
    t.store(store_msg(docs(3)))
    t.start_commit(StartCommit(cp(0)))
    assert len({r["key"] for r in dedup_receiver.requests}) == 1 and dedup_receiver.requests[-1]["outcome"] == "applied"
    assert len(d.dump(MAT, BINDING)) == 3
    t.close()
    d.close()


@pytest.mark.parametrize("status,error", [(400, EndpointRefused), (401, AuthenticationFailed)])
def test_a_refusal_is_not_retried_and_commits_nothing(dedup_receiver, tmp_path, status, error):
    d = make(dedup_receiver.url, tmp_path, headers={"Authorization": "Bearer tok-123"}, retry=FAST)
    t, _ = session(d)
    t.acknowledge(Acknowledge())
    t.flush(Flush())
    t.store(store_msg(docs(2)))
    dedup_receiver.script.append((status, {}, "no: Bearer tok-123"))
    with pytest.raises(error, match=f"HTTP {status}") as err:
        t.start_commit(StartCommit(cp(0)))
    assert "tok-123" not in str(err.value) and len(dedup_receiver.requests) == 1
    assert d.dump(MAT, BINDING) == {}
    t.close()
    d.close()


def test_a_fenced_off_session_posts_nothing(dedup_receiver, tmp_path):
    d = make(dedup_receiver.url, tmp_path)
    old, _ = session(d)
    old.acknowledge(Acknowledge())
    old.flush(Flush())
    old.store(store_msg(docs(2)))
    newer, _ = session(d, Range(0, 0x7FFFFFFF))  # a new layout's session overlaps the old range
    with pytest.raises(FencedOff):
        old.start_commit(StartCommit(cp(0)))
    assert dedup_receiver.requests == []
    old.close()
    newer.close()
    d.close()


def run_child(url, state, batch, n, faults=None):
    env = {k: v for k, v in os.environ.items() if k != "TIDEMARK_FAULTS"}
    env["PYTHONPATH"] = ROOT
    if faults:
        env["TIDEMARK_FAULTS"] = faults
    return subprocess.run(
        [sys.executable, CHILD, url, state, str(batch), str(n)], env=env, capture_output=True, text=True, timeout=120
    )


@pytest.mark.parametrize("dedup", [True, False], ids=["dedup", "naive"])
def test_a_kill_between_the_posts_and_the_commit_replays_the_same_keys(dedup, dedup_receiver, naive_receiver, tmp_path):
    """SIGKILL after every chunk was acknowledged, before the state store committed: the
    restarted batch posts the same chunks with the same keys.  The deduplicating receiver
    applies each document once; the other one applies all of them twice."""
    receiver = dedup_receiver if dedup else naive_receiver
    state = str(tmp_path / "state")
    killed = run_child(receiver.url, state, 0, 25, faults="webhook_after_post:kill")
    assert killed.returncode == -9, killed.stderr
    first = [r["key"] for r in receiver.requests]
    assert len(first) == 3  # 25 documents in chunks of 10
    replay = run_child(receiver.url, state, 0, 25)
    assert replay.returncode == 0 and replay.stdout.split() == ["opened", "none", "committed"], replay.stderr
    assert [r["key"] for r in receiver.requests] == first * 2
    applied = Counter(d["customer"] for _m, _r, _b, d in receiver.rows)
    assert set(applied) == {d["customer"] for d in docs(25)}
    assert set(applied.values()) == ({1} if dedup else {2})
    again = run_child(receiver.url, state, 0, 25)  # the batch is committed: nothing is posted again
    assert again.stdout.split() == ["opened", "0", "skipped"] and len(receiver.requests) == 6


def test_quarantined_documents_stay_in_the_state_store_with_the_batch(dedup_receiver, tmp_path):
    from tidemark.protocol.messages import Quarantine

    d = make(dedup_receiver.url, tmp_path)
    t, _ = session(d)
    t.acknowledge(Acknowledge())
    t.flush(Flush())
    t.store(store_msg(docs(1)))
    t.quarantine(
        Quarantine(
            (
                {
                    "binding": 0,
                    "location": "/amount",
                    "key_json": '["x"]',
                    "reason": "not an integer",
                    "value": {"customer": "x", "amount": "lots"},
                },
            )
        )
    )
    t.start_commit(StartCommit(cp(0)))
    [row] = d.quarantined(MAT)
    assert row["resource"] == "customers" and row["batch_id"] == 0 and row["value"]["amount"] == "lots"
    assert [doc for *_x, doc in dedup_receiver.rows] == docs(1)  # the receiver gets only the valid documents
    t.close()
    d.close()
