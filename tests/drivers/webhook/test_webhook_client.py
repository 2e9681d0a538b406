"""The webhook library against two real HTTP receivers: one honours Idempotency-Key, one
does not.  Replays after a SIGKILLed delivery, retries of 5xx/429/lost replies, refusals."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

import pytest

pytest.importorskip("urllib3")

from tests.support.helpers import free_port
from tests.support.paths import REPO, SUPPORT
from tests.support.webhook_child import CHECKPOINT, batch
from tests.support.webhook_support import dedup_receiver, naive_receiver
from tidemark.drivers.webhook.chunks import plan_chunks
from tidemark.drivers.webhook.client import WebhookClient, retry_after_seconds
from tidemark.drivers.webhook.settings import WebhookConfig
from tidemark.errors import AuthenticationFailed, EndpointRefused, EndpointUnavailable, SpecError
from tidemark.protocol.messages import Range

CHILD = os.path.join(SUPPORT, "webhook_child.py")
ROOT = REPO
FAST = {"attempts": 4, "base_delay": 0.01, "max_delay": 0.05}
TOKEN = "Bearer s3cr3t-t0ken"


def client_for(url, **extra):
    return WebhookClient(WebhookConfig.from_config({"url": url, "retry": FAST, **extra}))


def chunks(n=10, chunk_docs=4, cp=CHECKPOINT, **kw):
    return plan_chunks("view", Range(), cp, batch(n), chunk_docs=chunk_docs, **kw)


# ------------------------------------------------------------------------- chunks


def test_chunks_and_keys_are_deterministic():
    a, b = chunks(), chunks()
    assert [(c.key, c.body) for c in a] == [(c.key, c.body) for c in b]
    assert [c.documents for c in a] == [4, 4, 2] and [c.first for c in a] == [0, 4, 8]
    assert len({c.key for c in a}) == 3
    other_batch = chunks(cp={**CHECKPOINT, "offsets": {"files": 13}})  # same batch number, other input
    assert not {c.key for c in a} & {c.key for c in other_batch}
    other_range = plan_chunks("view", Range.split(2)[0], CHECKPOINT, batch(10), chunk_docs=4)
    assert not {c.key for c in a} & {c.key for c in other_range}
    resized = chunks(chunk_docs=5)  # settings changed before a replay: new keys, never a dropped document
    assert not {c.key for c in a} & {c.key for c in resized}
    assert chunks(n=0) == []


def test_chunks_close_at_chunk_bytes_and_a_big_document_goes_alone():
    docs = [{"id": 0, "pad": "x" * 10}, {"id": 1, "pad": "x" * 500}, {"id": 2}, {"id": 3}]
    out = plan_chunks("view", Range(), CHECKPOINT, docs, chunk_docs=100, chunk_bytes=100)
    assert [c.documents for c in out] == [1, 1, 2]
    import json

    body = json.loads(out[1].body)
    assert body["documents"] == [docs[1]] and (body["chunk"], body["chunks"], body["batch_id"]) == (1, 3, 4)


def test_retry_after_parsing():
    assert retry_after_seconds("3") == 3.0
    assert retry_after_seconds("Wed, 21 Oct 2015 07:28:00 GMT", now=1445412470.0) == 10.0
    assert retry_after_seconds("soon") is None and retry_after_seconds(None) is None


def test_config_is_checked_and_never_shows_header_values():
    with pytest.raises(SpecError, match="Idempotency-Key"):
        WebhookConfig.from_config({"url": "http://h/x", "headers": {"Idempotency-Key": "x"}})
    with pytest.raises(SpecError, match="http"):
        WebhookConfig.from_config({"url": "ftp://h/x"})
    with pytest.raises(SpecError) as info:
        WebhookConfig.from_config({"url": "http://h/x", "headers": {"Authorization": TOKEN + "\n"}})
    assert "s3cr3t" not in str(info.value)


# ------------------------------------------------------------ crash, then replay


def run_child(url, n, chunk_docs, faults=None):
    env = {**os.environ, "PYTHONPATH": ROOT + os.pathsep + os.environ.get("PYTHONPATH", "")}
    env.pop("TIDEMARK_FAULTS", None)
    if faults:
        env["TIDEMARK_FAULTS"] = faults
    return subprocess.run(
        [sys.executable, CHILD, url, str(n), str(chunk_docs)],
        env=env,
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_replay_after_a_crash_applies_once_with_keys_and_twice_without(dedup_receiver, naive_receiver):
    n, size = 50, 10  # 5 chunks; the first delivery dies after 3 of them
    for receiver in (dedup_receiver, naive_receiver):
        crashed = run_child(receiver.url, n, size, faults="webhook_after_chunk:kill@3")
        assert crashed.returncode == -signal.SIGKILL, crashed.stderr
        assert sum(receiver.applied.values()) == 30
        replay = run_child(receiver.url, n, size)  # the restarted batch sends every chunk again
        assert replay.returncode == 0 and "delivered 5 chunks" in replay.stdout, replay.stderr
    # with the same keys on the replay, the deduplicating receiver skips the 3 chunks it has
    assert [r["outcome"] for r in dedup_receiver.requests] == ["applied"] * 3 + ["duplicate"] * 3 + ["applied"] * 2
    assert dedup_receiver.applied == {i: 1 for i in range(n)}  # effectively once
    # the other applies them again: at-least-once
    assert naive_receiver.applied == {i: (2 if i < 30 else 1) for i in range(n)}
    keys = [r["key"] for r in naive_receiver.requests]
    assert keys[:3] == keys[3:6]  # the replay sent the same keys for the same chunks


# -------------------------------------------------------------------- retries


def test_5xx_then_success_is_retried(dedup_receiver):
    dedup_receiver.script.extend([(503, {}, "busy"), (500, {}, "oops")])
    with client_for(dedup_receiver.url) as client:
        done = client.deliver(chunks())
    assert (done.chunks, done.documents, done.requests) == (3, 10, 5)
    assert dedup_receiver.applied == {i: 1 for i in range(10)}
    first = [r for r in dedup_receiver.requests if r["key"] == dedup_receiver.requests[0]["key"]]
    assert [r["outcome"] for r in first] == [503, 500, "applied"]  # one key across the retries


def test_429_waits_for_retry_after(dedup_receiver):
    dedup_receiver.script.append((429, {"Retry-After": "1"}, "slow down"))
    began = time.monotonic()
    with client_for(dedup_receiver.url) as client:
        done = client.deliver(chunks(n=3))
    assert time.monotonic() - began >= 1.0 and done.requests == 2


def test_a_lost_reply_is_retried_with_the_same_key(dedup_receiver, naive_receiver):
    for receiver in (dedup_receiver, naive_receiver):
        receiver.script.append("apply_then_drop")  # applied, then the acknowledgement is lost
        with client_for(receiver.url) as client:
            assert client.deliver(chunks(n=4)).requests == 2
    assert dedup_receiver.applied == {i: 1 for i in range(4)}
    assert naive_receiver.applied == {i: 2 for i in range(4)}


def test_a_dropped_connection_is_retried(dedup_receiver):
    dedup_receiver.script.append("drop")
    with client_for(dedup_receiver.url) as client:
        assert client.deliver(chunks(n=4)).requests == 2
    assert dedup_receiver.applied == {i: 1 for i in range(4)}


# -------------------------------------------------------------------- refusals


def test_400_is_refused_at_once_and_names_url_status_and_chunk(naive_receiver):
    naive_receiver.script.extend([None, (400, {}, f"bad document; you sent Authorization: {TOKEN}")])
    url = naive_receiver.url.replace("http://", "http://alice:pa55word@") + "?token=qu3ry-s3cret"
    with client_for(url, headers={"Authorization": TOKEN}) as client:
        with pytest.raises(EndpointRefused) as info:
            client.deliver(chunks())
    message = str(info.value)
    assert "HTTP 400" in message and "chunk 2/3 (documents 4-7)" in message and "Idempotency-Key tm1-" in message
    assert naive_receiver.url.replace("/hook", "") in message.replace("****@", "")
    for secret in ("s3cr3t-t0ken", "pa55word", "alice", "qu3ry-s3cret"):
        assert secret not in message
    assert len(naive_receiver.requests) == 2  # no retry of the 400
    assert naive_receiver.requests[0]["headers"]["Authorization"] == TOKEN  # the header was sent


def test_401_is_an_authentication_failure(naive_receiver):
    naive_receiver.script.append((401, {}, ""))
    with client_for(naive_receiver.url, headers={"Authorization": TOKEN}) as client:
        with pytest.raises(AuthenticationFailed, match="HTTP 401") as info:
            client.deliver(chunks(n=1))
    assert "s3cr3t" not in str(info.value) and len(naive_receiver.requests) == 1


def test_5xx_until_the_attempts_are_spent(naive_receiver):
    naive_receiver.script.extend([(502, {}, "bad gateway")] * 10)
    with client_for(naive_receiver.url) as client:
        with pytest.raises(EndpointUnavailable, match=r"HTTP 502.*gave up after 4 attempts"):
            client.deliver(chunks(n=1))
    assert len(naive_receiver.requests) == 4 and not naive_receiver.applied


def test_connection_refused_is_retried_then_reported_without_credentials():
    url = f"http://bob:hunter2@127.0.0.1:{free_port()}/hook?key=abcdef"
    with client_for(url) as client:
        with pytest.raises(EndpointUnavailable) as info:
            client.deliver(chunks(n=1))
    message = str(info.value)
    assert "gave up after 4 attempts" in message and "chunk 1/1" in message
    assert "hunter2" not in message and "bob" not in message and "abcdef" not in message
