"""A commit is all or nothing when its client is SIGKILLed: a real child process commits a
large batch (one script of several MB) and dies while sending it, after sending it, or at
a moment the parent picks; the view then holds batch 0 or batch 1, never a mixture."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

import pytest

pytest.importorskip("redis")

from tests.support.paths import REPO, SUPPORT
from tests.support.redis_commit_child import batch
from tests.support.redis_support import redis_ns, redis_url
from tidemark.drivers.redis.store import RedisConfig, RedisStore
from tidemark.protocol.messages import Range

pytestmark = pytest.mark.chaos

N = 60_000  # about 9 MB of script arguments
CHILD = os.path.join(SUPPORT, "redis_commit_child.py")
ROOT = REPO


@pytest.fixture
def store(redis_url, redis_ns):
    s = RedisStore(RedisConfig.from_config({"url": redis_url, "namespace": redis_ns}))
    fence = s.open_range("view", Range())
    s.commit(fence, {"checkpoint_id": "ck", "batch_id": 0}, batch(redis_ns + "docs:", N, "v0"))
    yield s
    s.close()


def start(redis_url, ns, how):
    env = {**os.environ, "PYTHONPATH": ROOT + os.pathsep + os.environ.get("PYTHONPATH", "")}
    child = subprocess.Popen(
        [sys.executable, CHILD, redis_url, ns, str(N), how],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
        cwd=ROOT,
    )
    assert child.stdout.readline().strip() == "committing", child.stderr.read()
    return child, child.stdout.readline().strip()


def server_done_with(store, name, timeout=60.0):
    """Wait until the server has closed the dead child's connection (it reads and runs a
    complete command before it sees the end of the stream)."""
    deadline = time.monotonic() + timeout
    while any(c.get("name") == name for c in store.client.client_list()):
        assert time.monotonic() < deadline, f"the server still holds {name}'s connection"
        time.sleep(0.01)  # waiting on another process's socket: nothing to block on


def committed_batch(store, ns) -> int:
    """Which batch the view holds; fails on any mixture of batch 0 and batch 1."""
    [row] = store.checkpoints("view")
    b = row.runtime_checkpoint["batch_id"]
    view = store.dump(ns + "docs:")
    if b == 0:
        assert len(view) == N and all(d["tag"] == "v0" for d in view.values()), "batch 1 partly written"
    else:
        assert b == 1
        assert len(view) == N - N // 10, "deletes of batch 1 partly applied"
        assert all(d["tag"] == "v1" for d in view.values()), "upserts of batch 1 partly applied"
    return b


@pytest.mark.parametrize("fraction", [0.01, 0.5, 0.999])
def test_killed_while_sending_the_script_writes_nothing(store, redis_url, redis_ns, fraction):
    child, name = start(redis_url, redis_ns, f"partial:{fraction}")
    assert child.wait(timeout=120) == -signal.SIGKILL
    server_done_with(store, name)
    assert committed_batch(store, redis_ns) == 0


def test_killed_after_sending_the_script_writes_everything(store, redis_url, redis_ns):
    child, name = start(redis_url, redis_ns, "sent")
    assert child.wait(timeout=120) == -signal.SIGKILL
    server_done_with(store, name)
    assert committed_batch(store, redis_ns) == 1


@pytest.fixture(scope="module")
def commit_seconds(redis_url):
    """How long the child takes from ``committing`` to ``committed`` on this machine now."""
    import uuid

    ns = f"tm_test_{uuid.uuid4().hex[:10]}:"
    s = RedisStore(RedisConfig.from_config({"url": redis_url, "namespace": ns}))
    s.commit(s.open_range("view", Range()), {"checkpoint_id": "ck", "batch_id": 0}, batch(ns + "docs:", N, "v0"))
    child, _name = start(redis_url, ns, "signal")
    began = time.monotonic()
    assert child.stdout.readline().strip() == "committed", child.stderr.read()
    seconds = time.monotonic() - began
    child.wait(timeout=60)
    s.drop("view", [ns + "docs:"])
    s.close()
    return seconds


@pytest.mark.parametrize("fraction", [0.0, 0.3, 0.6, 0.8, 0.95, 1.2])
def test_killed_at_any_moment_leaves_all_or_nothing(store, redis_url, redis_ns, commit_seconds, fraction):
    child, name = start(redis_url, redis_ns, "signal")
    time.sleep(commit_seconds * fraction)  # the moment of the crash: that it varies is the point
    child.send_signal(signal.SIGKILL)
    child.wait(timeout=120)
    server_done_with(store, name)
    b = committed_batch(store, redis_ns)
    # and the next session resumes from what the endpoint holds
    assert store.open_range("view", Range()).checkpoint["batch_id"] == b
