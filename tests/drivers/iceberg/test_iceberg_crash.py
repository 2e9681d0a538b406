"""SIGKILL `tidemark run` into Iceberg tables at the crash-table points; restart; the tables must
be exact, and every table must hold exactly one tidemark snapshot per batch (a re-run of the
coordinator's apply never adds a second one).

Two bindings (a standard ``views.customers``, a delta-updates ``views.events``), so a batch's
apply commits two tables one after the other (``views.customers`` first): ``mid_apply`` is
reached before each table's commit, ``iceberg_after_commit`` after it; the N-th time in one
process tells which table (see :func:`arm`).  The default run kills twice; ``-m chaos_full``
kills once at every point of the runtime and of the driver, on 1 and on 4 shards.
"""

from __future__ import annotations

import os

import pytest

pytest.importorskip("pyiceberg")

from tests.support.harness import fired, run_until_done
from tests.support.helpers import normalize, oracle_orders, write_orders
from tests.support.iceberg_specs import (
    distinct_keys_per_file,
    iceberg_events,
    iceberg_spec,
    iceberg_view,
    snapshot_batches,
    sqlite_catalog,
    staged,
)

pytestmark = pytest.mark.chaos

# Every fault point a batch into Iceberg reaches, in the order it reaches them: NAME or
# NAME@N (the N-th time in one process).
POINTS = [
    "plan",  # before anything of the batch ran
    "open",  # a shard session opened, nothing staged
    "mid_load",  # during Load (a scan of the table as of the last apply)
    "after_load",
    "mid_store",  # rows streaming into the session's staged Parquet file
    "after_store",
    "before_endpoint_commit",  # the staged files closed; the patch naming them not returned
    "after_endpoint_commit",  # a shard's patch returned; the recovery log does not have N
    "before_recovery_log",  # every shard staged; the log write never happens
    "after_recovery_log",  # the log has N; no table has it
    "mid_apply@1",  # before the first table's commit of an apply
    "mid_apply@2",  # between two tables' commits (or before the first of the next batch)
    "iceberg_after_commit@1",  # right after a table's commit
    "iceberg_after_commit@2",
    "after_apply",  # every table holds N; staged files removed; Spark's commits/N missing
    "before_spark_commit",  # before commits/N: Spark re-runs N, which is only acknowledged
]


def arm(points: list[str], marker_dir) -> str:
    """TIDEMARK_FAULTS that kill once at each point (``NAME@N``: at its N-th time in a
    process), marked ``fired-NAME@N`` in ``marker_dir``; an attempt dies at the first armed
    point it reaches whose marker is not yet written (``harness.arm_in_sequence`` with a count
    per point)."""
    out = []
    for p in points:
        name, _, nth = p.partition("@")
        out.append(f"{name}:kill@{nth or 1}!once={os.path.join(marker_dir, 'fired-' + p)}")
    return ",".join(out)


def check(tmp_path, data, batches: int) -> None:
    catalog = sqlite_catalog(tmp_path)
    assert normalize(iceberg_view(catalog)) == oracle_orders(data)
    assert iceberg_events(catalog) == distinct_keys_per_file(data)
    # one snapshot per (table, batch), whatever ran the apply again
    assert snapshot_batches(catalog, "customers") == snapshot_batches(catalog, "events") == list(range(batches))
    assert staged(catalog) == []  # applied and orphaned staged files are gone


def test_kill_between_two_tables_and_before_spark_commit_then_restart_is_exact(tmp_path):
    """The two telling rows of the crash table, in one run of four batches on 2 shards:

    1. ``mid_apply`` the 4th time: batch 0 applied (2 times), batch 1 committed to
       ``views.customers`` (3rd), killed before ``views.events``' commit (4th): the restart's
       apply skips the first table and applies the second;
    2. ``before_spark_commit`` the 2nd time in the restarted process (batch 3): every table
       holds it, Spark re-runs it, the apply runs again and adds nothing.
    """
    data, markers = tmp_path / "data", tmp_path / "markers"
    markers.mkdir()
    write_orders(data, files=4, per_file=150, customers=40, seed=61, deletes=0.03)
    spec = iceberg_spec(tmp_path, data_dir=data, shards=2, events=True)
    points = ["mid_apply@4", "before_spark_commit@2"]

    outcome = run_until_done(spec, faults=arm(points, markers), max_attempts=4, plain=True)

    assert fired(markers) == set(points), outcome
    assert outcome.kills == 2, outcome
    check(tmp_path, data, 4)


# Every point on the commit path without Spark (tests/support/plain.py), 4 shards (the
# coordinator's apply, where Iceberg's own points are, is the same for any count).
@pytest.mark.parametrize("shards", [4])
def test_kill_at_every_point_then_restart_is_exact(tmp_path, shards):
    data, markers = tmp_path / "data", tmp_path / "markers"
    markers.mkdir()
    write_orders(data, files=2, per_file=150, customers=40, seed=71 + shards, deletes=0.03)
    spec = iceberg_spec(
        tmp_path, data_dir=data, shards=shards, events=True, options={"small_batch_keys": 0 if shards > 1 else 5000}
    )
    assert run_until_done(spec, plain=True).kills == 0  # a clean first run: the killed batches load existing keys
    write_orders(data, files=4, per_file=150, customers=40, seed=81 + shards, start=2, deletes=0.03)

    outcome = run_until_done(spec, faults=arm(POINTS, markers), max_attempts=len(POINTS) + 2, plain=True)

    assert fired(markers) == set(POINTS), outcome
    # With several shards, two sessions may reach two armed points at once and die together.
    assert (outcome.kills == len(POINTS)) if shards == 1 else (len(POINTS) // 2 <= outcome.kills <= len(POINTS)), (
        outcome
    )
    check(tmp_path, data, 6)
