"""The store across real OS processes: SIGKILL mid-transaction and mid-commit leaves the
committed state (no wipe), a crash after the changelog rolls forward, a newer process
fences an older one, a read-committed reader never sees part of a batch."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time

import pytest

pytest.importorskip("rocksdict")

from tests.support.paths import REPO, SUPPORT
from tidemark.protocol.messages import Range
from tidemark.store import Isolation, RangeStore, Reader, StoreConfig, tidemark_key

ROOT = REPO
FULL = Range()
DEADLINE = 120.0

pytestmark = pytest.mark.chaos


class Child:
    def __init__(self, command: str, args: dict, faults: str = ""):
        env = dict(os.environ, PYTHONPATH=ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""))
        env.pop("TIDEMARK_FAULTS", None)
        if faults:
            env["TIDEMARK_FAULTS"] = faults
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "tests.support.store_child", command, json.dumps(args)],
            cwd=ROOT,
            env=env,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        self.lines: list[str] = []

    def await_line(self, prefix: str) -> str:
        """Read lines until one starts with ``prefix`` (fails if the child exits first)."""
        while True:
            line = self.proc.stdout.readline()
            if not line:
                self.proc.wait(timeout=DEADLINE)
                pytest.fail(
                    f"child exited ({self.proc.returncode}) before {prefix!r}; "
                    f"lines {self.lines}; stderr: {self.proc.stderr.read()[-2000:]}"
                )
            self.lines.append(line.strip())
            if line.startswith(prefix):
                return line.strip()

    def send(self, text: str = "go") -> None:
        self.proc.stdin.write(text + "\n")
        self.proc.stdin.flush()

    def kill(self) -> None:
        self.proc.send_signal(signal.SIGKILL)
        self.proc.wait(timeout=DEADLINE)
        assert self.proc.returncode == -signal.SIGKILL

    def wait(self) -> int:
        out, err = self.proc.communicate(timeout=DEADLINE)
        self.lines += out.splitlines()
        return self.proc.returncode

    def close(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(timeout=DEADLINE)
        for f in (self.proc.stdin, self.proc.stdout, self.proc.stderr):
            f.close()


def key(i: int) -> bytes:
    return tidemark_key([f"key-{i}"])


def value(batch: int, i: int, size: int = 16) -> bytes:
    return (b"b%08d-%06d-" % (batch, i)).ljust(size, b"x")


def committed(cfg: StoreConfig, isolation=Isolation.READ_COMMITTED):
    with Reader(cfg, FULL, isolation) as r:
        return r.checkpoint, dict(r.scan())


@pytest.fixture
def child_factory():
    children: list[Child] = []

    def make(*a, **kw) -> Child:
        children.append(Child(*a, **kw))
        return children[-1]

    yield make
    for c in children:
        c.close()


def test_sigkill_mid_transaction_keeps_committed_state_without_a_wipe(tmp_path, child_factory):
    args = {"path": str(tmp_path / "store"), "keys": 200, "max_uncommitted_bytes": 2000}
    child = child_factory("hang_in_transaction", args)
    assert child.await_line("in-transaction") == "in-transaction spilled=True"
    child.kill()
    cfg = StoreConfig(path=args["path"])  # no changelog: the state can only be the local one
    store = RangeStore.open(cfg, FULL)
    assert store.recover()["batch_id"] == 0
    assert committed(cfg)[1] == {key(i): value(0, i) for i in range(200)}


@pytest.mark.parametrize("spill", [False, True], ids=["write-batch", "sst-ingest"])
def test_sigkill_during_commits_leaves_whole_batches(tmp_path, child_factory, spill):
    keys, size = 3000, 200  # ~600 kB per batch: the kill lands inside a commit's write
    args = {
        "path": str(tmp_path / "store"),
        "keys": keys,
        "value_size": size,
        "first": 0,
        "last": 10_000,
        "max_uncommitted_bytes": 50_000 if spill else 64 << 20,
    }
    cfg = StoreConfig(path=args["path"])
    first = 0
    for target in (2, 5):
        child = child_factory("batches", {**args, "first": first})
        child.await_line(f"committing {target}")
        child.kill()
        checkpoint, data = committed(cfg)
        committed_batch = checkpoint["batch_id"]
        assert committed_batch in (target - 1, target)
        assert data == {key(i): value(committed_batch, i, size) for i in range(keys)}, "part of a batch"
        assert RangeStore.open(cfg, FULL).recover() == checkpoint  # Open keeps it: no wipe, no rollback
        first = committed_batch + 1


def test_a_crash_after_the_changelog_entry_rolls_forward_at_open(tmp_path, child_factory):
    args = {
        "path": str(tmp_path / "store"),
        "changelog": str(tmp_path / "changelog"),
        "keys": 50,
        "first": 0,
        "last": 3,
    }
    child = child_factory("batches", args, faults="store_after_changelog:kill@2")
    assert child.wait() == -signal.SIGKILL
    assert "committed 0" in child.lines and "committed 1" not in child.lines
    cfg = StoreConfig(path=args["path"], changelog=args["changelog"])
    assert committed(cfg)[0]["batch_id"] == 0  # the local commit never happened
    store = RangeStore.open(cfg, FULL)
    assert store.recover()["batch_id"] == 1  # rolled forward from the changelog
    assert committed(cfg) == (store.recover(), {key(i): value(1, i) for i in range(50)})


def test_a_newer_process_fences_an_older_one(tmp_path, child_factory):
    args = {"path": str(tmp_path / "store"), "keys": 20, "batch": 0}
    zombie = child_factory("commit_when_told", args)
    zombie.await_line("ready")
    cfg = StoreConfig(path=args["path"])
    newer = RangeStore.open(cfg, FULL)  # a task retry while the old attempt still runs
    zombie.send()
    assert zombie.await_line("fenced").startswith("fenced store ")
    assert "00000000-ffffffff" in zombie.lines[-1]
    assert committed(cfg) == (None, {})
    txn = newer.transaction()
    txn.put(key(1), b"newer")
    txn.commit({"materialization": "m", "checkpoint_id": "c1", "batch_id": 0})
    assert committed(cfg)[1] == {key(1): b"newer"}
    assert zombie.wait() == 0


@pytest.mark.parametrize("isolation", list(Isolation))
def test_a_reader_in_another_process_never_sees_part_of_a_batch(tmp_path, child_factory, isolation):
    keys = 300
    args = {"path": str(tmp_path / "store"), "keys": keys, "first": 0, "last": 60}
    writer = child_factory("batches", args)
    writer.await_line("committed 0")
    cfg = StoreConfig(path=args["path"])
    seen = set()
    deadline = time.monotonic() + DEADLINE
    while writer.proc.poll() is None and time.monotonic() < deadline:
        checkpoint, data = committed(cfg, isolation)
        batch = checkpoint["batch_id"]
        assert data == {key(i): value(batch, i) for i in range(keys)}, f"part of a batch after {batch}"
        seen.add(batch)
    assert writer.wait() == 0 and writer.lines[-1] == "done"
    assert committed(cfg)[0]["batch_id"] == 60
    assert len(seen) > 10, f"the reader polled during the commits and saw batches {sorted(seen)}"
