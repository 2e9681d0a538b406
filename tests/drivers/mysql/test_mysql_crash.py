"""SIGKILL `tidemark run` into MySQL/MariaDB at the crash-table points; restart; the view must be exact.

Every point fires once per run (``arm_in_sequence``) on the commit path without Spark; the default
run keeps the most telling point (right after the endpoint's COMMIT, before the recovery
log) and one kill at a random moment.
"""

from __future__ import annotations

import json
import random

import pytest

from tests.support.crash_points import (
    POINTS,
    kill_every_point_on_the_reduce_path,
    kill_typed_rows_between_the_staging_and_the_statement,
)
from tests.support.harness import arm_in_sequence, fired, run_until_done
from tests.support.helpers import normalize, oracle_orders, write_orders
from tests.support.mysql_support import mysql_db, mysql_spec, mysql_url, mysql_view, sql

pytestmark = pytest.mark.chaos


def batches(url, db) -> list:
    return sorted(json.loads(c)["batch_id"] for (c,) in sql(url, f"SELECT checkpoint FROM `{db}`.tidemark_checkpoints"))


def kill_at(points, tmp_path, url, db, shards, seed, plain=False):
    data, markers = tmp_path / "data", tmp_path / "markers"
    markers.mkdir()
    write_orders(data, files=1, per_file=150, customers=40, seed=seed, deletes=0.03)
    spec = mysql_spec(tmp_path, data_dir=data, url=url, schema=db, shards=shards)
    assert run_until_done(spec, plain=plain).kills == 0  # a clean first run: the killed batches Load existing keys
    more = len(points) // 2 + 1
    write_orders(data, files=more, per_file=150, customers=40, seed=seed + 10, start=1, deletes=0.03)

    outcome = run_until_done(spec, faults=arm_in_sequence(points, markers), max_attempts=len(points) + 2, plain=plain)

    assert fired(markers) == set(points), outcome
    # With several shards, two sessions may reach two armed points at once and die together.
    assert (outcome.kills == len(points)) if shards == 1 else (len(points) // 2 <= outcome.kills <= len(points)), (
        outcome
    )
    assert normalize(mysql_view(url, db)) == oracle_orders(data)
    assert batches(url, db) == [more] * shards


@pytest.mark.chaos_full  # with Spark; every point runs in the default run without it
def test_kill_right_after_the_endpoint_commit_then_restart_is_exact(tmp_path, mysql_url, mysql_db):
    """The most telling point: after a clean batch 0, the shard sessions committed batch 1
    (one or both), the recovery log never heard of it. The restart replays batch 1 — a
    committed shard must not apply it twice, the other must — Loading what batch 0 wrote."""
    kill_at(["after_endpoint_commit"], tmp_path, mysql_url, mysql_db, shards=2, seed=81)


@pytest.mark.parametrize("shards", [1, pytest.param(2, marks=pytest.mark.chaos_full)])  # 2: after the default run
def test_kill_at_every_point_then_restart_is_exact(tmp_path, mysql_url, mysql_db, shards):
    """Every point, on the commit path without Spark (tests/support/plain.py)."""
    kill_at(POINTS, tmp_path, mysql_url, mysql_db, shards=shards, seed=91 + shards, plain=True)


@pytest.mark.chaos_full
def test_kill_at_random_moments_then_restart_is_exact(tmp_path, mysql_url, mysql_db):
    """The harness SIGKILLs the run's process group at a random time (seeded), once."""
    data = tmp_path / "data"
    write_orders(data, files=3, per_file=150, customers=40, seed=7, deletes=0.03)
    spec = mysql_spec(tmp_path, data_dir=data, url=mysql_url, schema=mysql_db, shards=2)
    draw = random.Random(44)
    outcome = run_until_done(spec, kill_after=lambda a: draw.uniform(3.0, 7.0) if a < 1 else None)
    assert outcome.kills >= 1, outcome
    assert normalize(mysql_view(mysql_url, mysql_db)) == oracle_orders(data)


def test_kill_on_the_endpoint_reduce_path_then_restart_is_exact(tmp_path, mysql_url, mysql_db):
    """MariaDB reducing in the endpoint, killed at every point (see the helper)."""
    kill_every_point_on_the_reduce_path(
        tmp_path,
        {"mysql": {"url": mysql_url, "schema": mysql_db}},
        lambda: mysql_view(mysql_url, mysql_db),
        seed=63,
    )


@pytest.mark.chaos_full  # with Spark: the typed values come from Spark's combine
def test_typed_rows_killed_between_the_staged_load_and_the_statement_then_restart_is_exact(
    tmp_path, mysql_url, mysql_db
):
    """A lean view whose shard sessions run in the driver on typed values (``StoreRows``
    loaded by ``LOAD DATA``): `tidemark run` SIGKILLed after the staged load, before and after
    the reducing statement's commit; the restarted runs finish exactly."""
    endpoint = {"mysql": {"url": mysql_url, "schema": mysql_db}}
    kill_typed_rows_between_the_staging_and_the_statement(
        tmp_path, endpoint, lambda: mysql_view(mysql_url, mysql_db), seed=93
    )
    nulls = sql(mysql_url, f"SELECT COUNT(*) FROM `{mysql_db}`.customers WHERE flow_document IS NULL")
    assert nulls == sql(mysql_url, f"SELECT COUNT(*) FROM `{mysql_db}`.customers")  # lean rows
    from tidemark.runtime.recovery_log import RecoveryLog

    log = RecoveryLog(str(tmp_path / "checkpoints" / "view"), "view")
    assert {log.get(b).counts["path"] for b in log.batches()} == {"driver (typed rows)"}
