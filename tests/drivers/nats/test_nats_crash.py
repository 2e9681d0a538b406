"""SIGKILL `tidemark run` into a ``nats`` view (a private JetStream server) at named fault
points and at random moments; restart.  After the run: the read-committed view and a plain
consumer's last message per key both equal the oracle, and no message of a committed batch
is in the stream twice.  While the writer is killed mid-batch, a reader polling the
read-committed view only ever sees the state after a whole batch.

``nats_mid_batch`` is reached while the middle document of a batch is encoded: with
``max_batch: 8`` the batch's first atomic chunks are already in the stream (ordered mode:
its first messages), its commit record is not.
"""

from __future__ import annotations

import os
import random
import shutil
import threading

import pytest

pytest.importorskip("nats", reason="pip install -e '.[test,nats]'")
pytest.importorskip("rocksdict")

from tests.support.harness import arm_in_sequence, fired, run_until_done
from tests.support.helpers import normalize, oracle_orders, write_orders
from tests.support.nats_helpers import committed_copies, committed_view, nats_spec, raw_last_per_key
from tests.support.nats_server import private_nats_server

pytestmark = pytest.mark.chaos

POINTS = [
    "plan",
    "open",
    "mid_load",
    "mid_store",
    "before_endpoint_commit",  # the batch is complete in memory; nothing of it is in the stream
    "nats_mid_batch",  # part of the batch is in the stream, its progress record is not
    "after_endpoint_commit",  # the stream committed the batch, the local state store did not (rebuilt)
    "store_after_commit",  # the state store committed too; the runtime did not hear of it
    "before_recovery_log",
    "after_recovery_log",
    "before_spark_commit",
]
TELLING = ["nats_mid_batch", "after_endpoint_commit"]


def check_exact(url: str, data) -> None:
    expected = oracle_orders(data)
    assert normalize(committed_view(url)) == expected
    assert normalize(raw_last_per_key(url)) == expected
    copies = committed_copies(url)
    assert copies and set(copies.values()) == {1}, [k for k, n in copies.items() if n > 1][:5]


def kill_run(
    tmp_path, url: str, points: list[str], shards: int, atomic: str, clean_files: int = 2, plain: bool = False
) -> None:
    """A clean run of ``clean_files`` batches first (so the killed batches load existing keys),
    then one kill per point."""
    data, markers = tmp_path / "data", tmp_path / "markers"
    markers.mkdir()
    spec = nats_spec(tmp_path, data, shards, url, max_batch=8, atomic=atomic)
    if clean_files:
        write_orders(data, files=clean_files, per_file=120, customers=40, seed=171 + shards, deletes=0.03)
        assert run_until_done(spec, plain=plain).kills == 0
    write_orders(
        data, files=len(points), per_file=120, customers=40, seed=181 + shards, start=clean_files, deletes=0.03
    )
    outcome = run_until_done(spec, faults=arm_in_sequence(points, markers), max_attempts=len(points) + 2, plain=plain)
    assert fired(markers) == set(points), outcome
    check_exact(url, data)


@pytest.mark.chaos_full  # with Spark; every point runs in the default run without it (below)
def test_kill_at_the_telling_points_then_restart_is_exact(tmp_path, private_nats_server):
    kill_run(tmp_path, private_nats_server.url, TELLING, 1, "auto", clean_files=0)


@pytest.mark.parametrize(
    "shards,atomic", [pytest.param(1, "auto", marks=pytest.mark.chaos_full), (4, "auto"), (2, "false")]
)
def test_kill_at_every_point_then_restart_is_exact(tmp_path, private_nats_server, shards, atomic):
    """Every point on the commit path without Spark (tests/support/plain.py)."""
    kill_run(tmp_path, private_nats_server.url, POINTS, shards, atomic, plain=True)


def prefix_states(data, tmp_path) -> list[dict]:
    """The oracle after each prefix of the files (batch k reads file k: maxFilesPerTrigger 1)."""
    names = sorted(n for n in os.listdir(data) if n.endswith(".json"))
    states = [{}]
    for i in range(1, len(names) + 1):
        d = tmp_path / f"prefix{i}"
        d.mkdir()
        for n in names[:i]:
            shutil.copy(data / n, d / n)
        states.append(oracle_orders(d))
    return states


@pytest.mark.chaos_full  # with Spark; every point runs in the default run without it
def test_kill_at_random_moments_while_a_reader_polls_is_exact(tmp_path, private_nats_server):
    """One shard, ordered mode (a batch's messages land one by one): the writer is SIGKILLed at
    random moments; a reader polling the read-committed view never sees a partial batch."""
    url = private_nats_server.url
    data = tmp_path / "data"
    write_orders(data, files=3, per_file=120, customers=40, seed=191, deletes=0.03)
    states = [normalize(s) for s in prefix_states(data, tmp_path)]
    spec = nats_spec(tmp_path, data, 1, url, atomic=False)
    seen, bad, stop = [], [], threading.Event()

    def poll() -> None:
        while not stop.is_set():
            try:
                view = normalize(committed_view(url))
            except Exception:
                continue
            seen.append(len(view))
            if view not in states:
                bad.append(view)

    reader = threading.Thread(target=poll, daemon=True)
    reader.start()
    draw = random.Random(47)
    try:
        outcome = run_until_done(spec, kill_after=lambda a: draw.uniform(2.5, 5.5) if a < 2 else None)
    finally:
        stop.set()
        reader.join(60)
    assert outcome.kills >= 1, outcome
    assert not bad, f"the reader saw {len(bad)} views that are no whole batch"
    assert len(seen) > 3
    check_exact(url, data)
