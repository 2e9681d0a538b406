"""SIGKILL `tidemark run` into PostgreSQL at the crash-table points; restart; the view must be exact.

Each run arms several points, each with its own ``!once=`` marker: the first attempt dies
at the first point it reaches, the restarted one at the next, and so on, so one run of
Spark start-ups covers several rows of the crash table.  The zombie test runs two real
processes on one key range.
"""

from __future__ import annotations

import multiprocessing

import psycopg
import pytest

from tests.support.crash_points import (
    POINTS,
    kill_every_point_on_the_reduce_path,
    kill_typed_rows_between_the_staging_and_the_statement,
)
from tests.support.harness import arm_in_sequence, fired, run_until_done
from tests.support.helpers import (
    COMPILED_SCHEMA,
    compiled_oracle,
    normalize,
    oracle_orders,
    orders_spec,
    postgres_spec,
    postgres_view,
    write_compiled_orders,
    write_orders,
)

pytestmark = [pytest.mark.chaos, pytest.mark.postgres]


# Every point with 2 shards on the commit path without Spark (tests/support/plain.py); the telling
# points with Spark and 4 shards (every batch's shard sessions on Spark's executors) in chaos_full.
TELLING = ["mid_store", "before_endpoint_commit", "after_endpoint_commit", "after_recovery_log"]


@pytest.mark.parametrize(
    "shards,points,plain",
    [(2, POINTS, True), pytest.param(4, TELLING, False, marks=pytest.mark.chaos_full)],
    ids=["2-every-plain", "4-telling"],
)
def test_kill_at_every_point_then_restart_is_exact(tmp_path, postgres_url, pg_schema, shards, points, plain):
    """Every crash-table point fires once (``arm_in_sequence``): each attempt dies at the
    next point it reaches, after a clean first run so the killed batches Load existing keys."""
    data, markers = tmp_path / "data", tmp_path / "markers"
    markers.mkdir()
    write_orders(data, files=2, per_file=150, customers=40, seed=41 + shards, deletes=0.03)
    spec = postgres_spec(
        tmp_path,
        data_dir=data,
        url=postgres_url,
        schema=pg_schema,
        shards=shards,
        options={"small_batch_keys": 0 if shards > 1 else 5000},
    )
    assert run_until_done(spec, plain=plain).kills == 0
    write_orders(data, files=3, per_file=150, customers=40, seed=51 + shards, start=2, deletes=0.03)

    outcome = run_until_done(spec, faults=arm_in_sequence(points, markers), max_attempts=len(points) + 2, plain=plain)

    assert fired(markers) == set(points), outcome
    # With several shards, two sessions may reach two armed points at once and die together.
    assert len(points) // 2 <= outcome.kills <= len(points), outcome
    assert normalize(postgres_view(postgres_url, pg_schema)) == oracle_orders(data)
    with psycopg.connect(postgres_url) as con:
        batches = con.execute(f"SELECT checkpoint->>'batch_id' FROM \"{pg_schema}\".tidemark_checkpoints").fetchall()
    assert sorted(batches) == [("4",)] * shards


def test_kill_on_the_endpoint_reduce_path_then_restart_is_exact(tmp_path, postgres_url, pg_schema):
    """PostgreSQL reducing in the endpoint, killed at every point (see the helper)."""
    kill_every_point_on_the_reduce_path(
        tmp_path,
        {"postgres": {"url": postgres_url, "schema": pg_schema}},
        lambda: postgres_view(postgres_url, pg_schema),
        seed=61,
    )


# ------------------------------------------------------------------ zombie


def _zombie(config, to_zombie, from_zombie):
    """An older session in its own process: Store, wait until told, then try to commit."""
    from tests.support.driver_protocol import binding, cp, doc, open_session, store_msg
    from tidemark.drivers.postgres import PostgresDriver
    from tidemark.errors import FencedOff
    from tidemark.protocol.messages import Acknowledge, Flush, StartCommit

    d = PostgresDriver(config)
    t, _ = open_session(d, binding())
    t.acknowledge(Acknowledge())
    t.flush(Flush())
    t.store(store_msg(binding(), [doc("zombie", 1), doc("a", 99)]))
    from_zombie.send("stored")
    to_zombie.recv()  # the newer session has opened (and committed)
    try:
        t.start_commit(StartCommit(cp(0)))
        from_zombie.send("committed")
    except FencedOff as exc:
        from_zombie.send(f"fenced: {exc}")
    t.close()
    d.close()


def test_zombie_process_commit_is_rejected(postgres_url, pg_schema):
    from tests.support.driver_protocol import MAT, apply, binding, cp, doc, open_session, txn
    from tidemark.drivers.postgres import PostgresDriver

    config = {"url": postgres_url, "schema": pg_schema}
    d = PostgresDriver(config)
    apply(d, binding())
    ctx = multiprocessing.get_context("spawn")
    to_zombie, zombie_end = ctx.Pipe()
    zombie_reply, from_zombie = ctx.Pipe()
    proc = ctx.Process(target=_zombie, args=(config, zombie_end, from_zombie))
    proc.start()
    try:
        assert zombie_reply.recv() == "stored"
        newer, opened = open_session(d, binding())  # a retried task opens the same range
        assert opened.runtime_checkpoint is None
        txn(newer, binding(), [doc("a", 1)], 0)
        to_zombie.send("go")
        answer = zombie_reply.recv()
        assert answer.startswith("fenced:") and "newer session" in answer, answer
        proc.join()
        assert proc.exitcode == 0
        assert d.dump(MAT, binding()) == {("a",): doc("a", 1)}
        [row] = d.checkpoints(MAT)
        assert row.runtime_checkpoint == cp(0) and row.fence == 2
        newer.close()
    finally:
        if proc.is_alive():
            proc.kill()
        d.close()


@pytest.mark.chaos_full  # 40 s of JVM restarts: after the default suite (the budget); the SQLite kills cover the path there
def test_typed_rows_killed_between_the_staged_copy_and_the_statement_then_restart_is_exact(
    tmp_path, postgres_url, pg_schema
):
    """A lean view whose shard sessions run in the driver on typed values (Spark's struct,
    ``StoreRows`` COPYed as CSV): `tidemark run` SIGKILLed after the staged COPY, before and
    after the reducing statement's commit; the restarted runs finish exactly. (A kill inside
    the Store is MariaDB's test, and every point's on the plain runner.)"""
    endpoint = {"postgres": {"url": postgres_url, "schema": pg_schema}}
    kill_typed_rows_between_the_staging_and_the_statement(
        tmp_path,
        endpoint,
        lambda: postgres_view(postgres_url, pg_schema),
        seed=91,
        points=("before_endpoint_commit", "after_endpoint_commit"),
    )
    with psycopg.connect(postgres_url, autocommit=True) as con:
        nulls = con.execute(f'SELECT count(*) FROM "{pg_schema}".customers WHERE flow_document IS NULL').fetchone()
        total = con.execute(f'SELECT count(*) FROM "{pg_schema}".customers').fetchone()
    assert nulls == total  # lean rows: every property in its column
