"""SIGKILL `tidemark run` at every named point of the crash table; restart; the view must be exact.

Each test arms every point once (``arm_in_sequence``): an attempt dies at the first point
it reaches whose marker is not yet written, the next attempt resumes and dies at the next
one, until a clean attempt consumes the rest of the input. The view is then compared with
the oracle, which reduces the input files without tidemark.
"""

from __future__ import annotations

import os
import random

import pytest

from tests.support.crash_points import POINTS, kill_every_point_on_the_reduce_path
from tests.support.harness import arm_in_sequence, fired, run_until_done
from tests.support.helpers import (
    compiled_oracle,
    compiled_spec,
    normalize,
    oracle_orders,
    orders_spec,
    sqlite_view,
    write_compiled_orders,
    write_orders,
)
from tidemark.runtime.recovery_log import RecoveryLog

pytestmark = pytest.mark.chaos


# The points that tell most (a session dies mid-transaction; the endpoint has N, the log not;
# the log has N, Spark not): with Spark, 1 shard. Every point, 4 shards: the commit path
# without Spark (tests/support/plain.py: a Python start-up per attempt, not a JVM's).
TELLING = ["mid_store", "after_endpoint_commit", "after_recovery_log"]


@pytest.mark.parametrize(
    "shards,points,plain",
    [pytest.param(1, TELLING, False, marks=pytest.mark.chaos_full), (4, POINTS, True)],
    ids=["1-telling", "4-every-plain"],
)
def test_kill_at_every_point_then_restart_is_exact(tmp_path, shards, points, plain):
    data, db, markers = tmp_path / "data", tmp_path / "views.db", tmp_path / "markers"
    markers.mkdir()
    write_orders(data, files=2, per_file=150, customers=40, seed=11 + shards, deletes=0.03)
    spec = orders_spec(tmp_path, data_dir=data, db_path=db, shards=shards, max_files=1)
    # A clean first run, so the killed batches load and reduce existing keys.
    assert run_until_done(spec, plain=plain).kills == 0
    write_orders(data, files=3, per_file=150, customers=40, seed=21 + shards, start=2, deletes=0.03)

    outcome = run_until_done(spec, faults=arm_in_sequence(points, markers), max_attempts=len(points) + 2, plain=plain)

    assert fired(markers) == set(points), outcome
    # With several shards, two sessions may reach two armed points at once and die together.
    assert (outcome.kills == len(points)) if shards == 1 else (len(points) // 2 <= outcome.kills <= len(points)), (
        outcome
    )
    assert normalize(sqlite_view(db)) == oracle_orders(data)
    log = RecoveryLog(str(tmp_path / "checkpoints" / "view"), "view")
    paths = [log.get(b).counts["path"] for b in log.batches()]
    # with Spark every batch (a small one) ran its shard sessions in the driver
    assert paths == (["plain"] * 5 if plain else ["checked in driver"] * 5)


# The points where the one-job plan differs (the shard stage in the combine's job, the
# endpoint commit, the log); ``-m chaos_full`` runs the rest (LOAD_POINTS).
ONE_JOB_POINTS = ["open", "mid_store", "after_endpoint_commit", "after_recovery_log"]


# The shard sessions on Spark's executors (the commit and the log) and in
# the driver ("Small batches"; after it) at the telling points on the endpoint-reduce path
# (SQLite reduces this schema itself: no Loads), and the Open, the Store, the Load and the
# last point before Spark's commit on the Load path (``endpoint_reduce: false``; after the
# default suite). Every point on both paths, 4 shards, is the plain runner's
# test above (``4-every-plain``): what Spark adds is where the sessions run.
LOAD_POINTS = ["mid_load", "before_spark_commit"]


@pytest.mark.parametrize(
    "small_batch_keys,points,endpoint_reduce",
    [
        pytest.param(0, ONE_JOB_POINTS[2:], True, marks=pytest.mark.chaos_full),
        pytest.param(5000, ONE_JOB_POINTS, True, marks=pytest.mark.chaos_full),
        pytest.param(0, ONE_JOB_POINTS[:2] + LOAD_POINTS, False, marks=pytest.mark.chaos_full),
    ],
    ids=["spark-telling", "driver-telling", "spark-load"],
)
def test_one_job_plan_kill_at_every_point_then_restart_is_exact(tmp_path, points, small_batch_keys, endpoint_reduce):
    """The crash table on a collection whose batches run as one Spark job (docs/reductions.md,
    "One Spark job per batch"), with the shard sessions on Spark's executors or, for batches
    after a small one, in the driver ("Small batches"). One killed batch holds an invalid
    document: its shards get the odd row (or the driver sees it), commit nothing, and the
    batch commits on the checked plan (quarantined)."""
    data, db, markers = tmp_path / "data", tmp_path / "views.db", tmp_path / "markers"
    markers.mkdir()
    files = write_compiled_orders(data, files=2, per_file=150, customers=40, seed=31)
    spec = compiled_spec(
        tmp_path,
        data,
        db,
        shards=2,
        on_invalid="quarantine",
        options={"small_batch_keys": small_batch_keys, "endpoint_reduce": endpoint_reduce},
    )
    assert run_until_done(spec).kills == 0
    files += write_compiled_orders(data, files=3, per_file=150, customers=40, seed=32, start=2)
    with open(files[3]) as f:
        lines = f.readlines()
    lines[7] = '{"customer": "c0007", "amount": "lots"}\n'
    with open(files[3], "w") as f:
        f.writelines(lines)
    os.utime(files[3], (1_700_000_030,) * 2)

    outcome = run_until_done(spec, faults=arm_in_sequence(points, markers), max_attempts=len(points) + 2)

    assert fired(markers) == set(points), outcome
    assert len(points) // 2 <= outcome.kills <= len(points), outcome
    assert sqlite_view(db) == compiled_oracle(files, skip={(3, 7)})
    log = RecoveryLog(str(tmp_path / "checkpoints" / "view"), "view")
    paths = [log.get(b).counts["path"] for b in log.batches()]
    driver = "driver (typed rows)" if endpoint_reduce else "driver"  # a lean view SQLite reduces: typed values
    assert paths == (
        [driver, driver, driver, "checked in driver", driver]
        if small_batch_keys
        else ["one job", "one job", "one job", "checked", "one job"]
    )


def test_kill_on_the_endpoint_reduce_path_then_restart_is_exact(tmp_path):
    """SQLite reducing in the endpoint, killed at every point (see the helper)."""
    db = tmp_path / "views.db"
    kill_every_point_on_the_reduce_path(tmp_path, {"sqlite": {"path": str(db)}}, lambda: sqlite_view(db), seed=71)


@pytest.mark.chaos_full  # with Spark; CI runs it after the default suite
def test_kill_at_random_moments_then_restart_is_exact(tmp_path):
    """The harness SIGKILLs the run's process group at random times (seeded), up to three times."""
    data, db = tmp_path / "data", tmp_path / "views.db"
    write_orders(data, files=4, per_file=150, customers=40, seed=5, deletes=0.03)
    spec = orders_spec(tmp_path, data_dir=data, db_path=db, shards=2, max_files=1)
    draw = random.Random(42)
    # A clean attempt takes ~8-10 s here (JVM start ~4 s, then ~1 s per batch): kills land
    # between Spark's start and the last batch.
    outcome = run_until_done(spec, kill_after=lambda a: draw.uniform(3.0, 7.0) if a < 3 else None)
    assert outcome.kills >= 1, outcome
    assert normalize(sqlite_view(db)) == oracle_orders(data)


def test_jvm_killed_mid_stream_orphaned_workers_commit_nothing(tmp_path):
    """What the long run found (docs/guarantees.md): the JVM dies while it streams a shard's
    rows to the shard's Python worker, which outlives it (another process group) and reads
    the cut-off stream to its end. The worker must not commit what it got as the batch.

    ``mid_stream:orphan`` kills the driver and the JVM at a shard task's first row and spares
    the worker; the documents are big (~4 KB), so each shard's input (~10 MB) is far from
    delivered then. The harness waits for the orphans to finish before it restarts, so an
    orphan that committed would have done so before the restart's Open. (Without the end
    row this test fails: the view misses ~800 of 3,165 keys.)
    """
    data, db, markers = tmp_path / "data", tmp_path / "views.db", tmp_path / "markers"
    markers.mkdir()
    write_orders(data, files=1, per_file=5000, customers=5000, seed=17, pad=4000)
    # the shard sessions on the executors (a batch of 5,000 keys would run them in the driver)
    spec = orders_spec(tmp_path, data_dir=data, db_path=db, shards=2, extra_mat={"options": {"small_batch_keys": 0}})
    outcome = run_until_done(
        spec, faults=f"mid_stream:orphan@1!once={markers / 'fired-mid_stream'}", max_attempts=3, await_orphans=True
    )
    assert fired(markers) == {"mid_stream"}, outcome
    assert outcome.kills == 1, outcome
    assert normalize(sqlite_view(db)) == oracle_orders(data)


@pytest.mark.chaos_full  # with Spark; CI runs it after the default suite
def test_a_kill_after_the_first_batch_committed_before_the_log_has_it_resumes(tmp_path):
    """The endpoint holds batch 0 while the recovery log holds nothing: the restart skips the
    committed batch instead of refusing the view."""
    data, db = tmp_path / "data", tmp_path / "views.db"
    write_orders(data, files=2, per_file=100, customers=30, seed=211, deletes=0.03)
    spec = orders_spec(tmp_path, data_dir=data, db_path=db, shards=1, max_files=1)
    outcome = run_until_done(spec, faults=f"after_endpoint_commit:kill!once={tmp_path / 'fired'}", max_attempts=3)
    assert outcome.kills == 1, outcome
    assert normalize(sqlite_view(db)) == oracle_orders(data)
