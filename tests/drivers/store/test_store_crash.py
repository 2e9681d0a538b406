"""SIGKILL `tidemark run` into a ``store`` view at every named point of the crash table and
at the store's own points; restart; the view must be exact, and no range's store may have
been wiped and rebuilt (its RocksDB keeps its identity and directory from the clean run).

Follows test_sqlite_crash.py: each point is armed once (``arm_in_sequence``); an attempt
dies at the first point it reaches whose marker is not written yet.
"""

from __future__ import annotations

import os
import random

import pytest

pytest.importorskip("rocksdict")

from tests.support.harness import arm_in_sequence, fired, run_until_done
from tests.support.helpers import normalize, oracle_orders, store_spec, store_view, write_orders

pytestmark = pytest.mark.chaos

POINTS = [
    "plan",  # before anything of the batch ran
    "open",  # a shard session opened (fence bumped), nothing written
    "mid_load",  # during Load of shard s
    "mid_store",  # during Store of shard s (into the write buffer)
    "before_endpoint_commit",  # the transaction is complete, the commit has not started
    "store_after_changelog",  # the changelog has batch N, the local store does not: rolled forward
    "store_after_commit",  # the local atomic write is done, the commit has not returned
    "after_endpoint_commit",  # shard s committed; the recovery log does not have N
    "before_recovery_log",  # every shard committed; the log write never happens
    "after_recovery_log",  # the log has N; Spark's commits/N is never written
    "before_spark_commit",  # before commits/N
]


def chaos_store_spec(tmp_path, data, shards: int) -> str:
    return store_spec(
        tmp_path, data, shards, changelog=str(tmp_path / "checkpoints" / "store-changelog"), snapshot_every=3
    )


def identities(tmp_path) -> dict[str, tuple]:
    """Per range: the directory's inode and RocksDB's IDENTITY (a rebuilt store has new ones)."""
    base = tmp_path / "store" / "view" / "ranges"
    out = {}
    for name in sorted(os.listdir(base)):
        if not name.startswith("."):
            out[name] = (os.stat(base / name).st_ino, (base / name / "IDENTITY").read_text())
    return out


# Every point on the commit path without Spark (tests/support/plain.py); the random kills below
# run with Spark.
@pytest.mark.parametrize("shards", [pytest.param(1, marks=pytest.mark.chaos_full), 4])  # 1: after the default run
def test_kill_at_every_point_then_restart_is_exact_and_nothing_is_wiped(tmp_path, shards):
    data, markers = tmp_path / "data", tmp_path / "markers"
    markers.mkdir()
    write_orders(data, files=2, per_file=150, customers=40, seed=71 + shards, deletes=0.03)
    spec = chaos_store_spec(tmp_path, data, shards)
    assert run_until_done(spec, plain=True).kills == 0  # a clean first run: the killed batches load existing keys
    before = identities(tmp_path)
    assert len(before) == shards
    write_orders(data, files=3, per_file=150, customers=40, seed=81 + shards, start=2, deletes=0.03)

    outcome = run_until_done(spec, faults=arm_in_sequence(POINTS, markers), max_attempts=len(POINTS) + 2, plain=True)

    assert fired(markers) == set(POINTS), outcome
    assert (outcome.kills == len(POINTS)) if shards == 1 else (len(POINTS) // 2 <= outcome.kills <= len(POINTS)), (
        outcome
    )
    assert normalize(store_view(spec)) == oracle_orders(data)
    assert identities(tmp_path) == before  # no range was wiped and rebuilt


@pytest.mark.chaos_full  # with Spark; every point runs in the default run without it
def test_kill_at_random_moments_then_restart_is_exact_and_nothing_is_wiped(tmp_path):
    data = tmp_path / "data"
    write_orders(data, files=1, per_file=150, customers=40, seed=91, deletes=0.03)
    spec = chaos_store_spec(tmp_path, data, 2)
    assert run_until_done(spec).kills == 0
    before = identities(tmp_path)
    write_orders(data, files=4, per_file=150, customers=40, seed=92, start=1, deletes=0.03)
    draw = random.Random(43)
    outcome = run_until_done(spec, kill_after=lambda a: draw.uniform(3.0, 7.0) if a < 3 else None)
    assert outcome.kills >= 1, outcome
    assert normalize(store_view(spec)) == oracle_orders(data)
    assert identities(tmp_path) == before
