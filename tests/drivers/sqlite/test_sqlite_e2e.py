"""End to end on local Spark: JSON files → SQLite view, compared with an independent oracle."""

from __future__ import annotations

import os
import shutil

import pytest

from tests.support.helpers import assert_verified, normalize, oracle_orders, orders_spec, sqlite_view, write_orders

pytestmark = pytest.mark.spark


def run(spark, spec_path, **kw):
    from tidemark.spark.runner import run_spec

    reports = []
    runs = run_spec(spec_path, spark=spark, on_batch=reports.append, **kw)
    return reports, runs


@pytest.mark.parametrize("shards", [1, 4])
def test_several_batches_restart_and_resume(spark, tmp_path, shards):
    data = tmp_path / "data"
    db = tmp_path / "views.db"
    write_orders(data, files=3, per_file=200, customers=60, seed=shards, deletes=0.05)
    spec = orders_spec(tmp_path, data_dir=data, db_path=db, shards=shards, max_files=1)

    reports, _ = run(spark, spec)
    assert [r.batch_id for r in reports] == [0, 1, 2]
    assert all(r.shards == shards for r in reports)
    assert normalize(sqlite_view(db)) == oracle_orders(data)

    # More input arrives; a restart resumes exactly where it stopped.
    write_orders(data, files=2, per_file=200, customers=60, seed=100 + shards, start=3, deletes=0.05)
    reports, _ = run(spark, spec)
    assert [r.batch_id for r in reports] == [3, 4]
    assert normalize(sqlite_view(db)) == oracle_orders(data)
    assert sum(r.loaded for r in reports) > 0  # existing keys were loaded and reduced
    assert_verified(spec)


def test_a_file_older_than_the_newest_by_more_than_a_week_is_still_read(spark, tmp_path):
    """Spark's file source skips a new file more than maxFileAge (7 days by default) older than
    the newest it has seen; a backfilled file with its original mtime must still be read."""
    import time

    data, db = tmp_path / "data", tmp_path / "views.db"
    files = write_orders(data, files=2, per_file=50, customers=20, seed=7)
    os.utime(files[1], (time.time(), time.time()))  # today's file
    spec = orders_spec(tmp_path, data_dir=data, db_path=db, shards=2, max_files=1)
    reports, _ = run(spark, spec)
    assert [r.batch_id for r in reports] == [0, 1]

    write_orders(data, files=1, per_file=50, customers=20, seed=8, start=2)  # modified in 2023
    reports, _ = run(spark, spec)
    assert [r.batch_id for r in reports] == [2]
    assert normalize(sqlite_view(db)) == oracle_orders(data)
    assert_verified(spec)


def _remove_spark_log_entry(directory, batch_id: int):
    """Remove a Spark metadata-log entry and its checksum (a stale .crc makes Spark refuse
    to write the entry again, reporting "multiple streaming queries")."""
    os.remove(directory / str(batch_id))
    crc = directory / f".{batch_id}.crc"
    if crc.exists():
        os.remove(crc)


def test_rerun_batch_is_recognised(spark, tmp_path):
    """Spark re-runs a batch whose commits/N is missing: the recovery log recognises it."""
    data = tmp_path / "data"
    db = tmp_path / "views.db"
    write_orders(data, files=2, per_file=150, customers=40, seed=3)
    spec = orders_spec(tmp_path, data_dir=data, db_path=db, shards=2)
    run(spark, spec)
    expected = oracle_orders(data)
    assert normalize(sqlite_view(db)) == expected

    commits = tmp_path / "checkpoints" / "view" / "spark" / "commits"
    _remove_spark_log_entry(commits, 1)  # as if the process died after the recovery log, before Spark's commit
    reports, _ = run(spark, spec)
    assert [(r.batch_id, r.skipped) for r in reports] == [(1, True)]
    assert normalize(sqlite_view(db)) == expected
    assert_verified(spec)


def test_rerun_after_endpoint_commit_skips_committed_shards(spark, tmp_path):
    """Endpoint committed batch N but the recovery log did not: shards skip at Open."""
    data = tmp_path / "data"
    db = tmp_path / "views.db"
    write_orders(data, files=2, per_file=150, customers=40, seed=4)
    spec = orders_spec(tmp_path, data_dir=data, db_path=db, shards=3)
    run(spark, spec)
    expected = oracle_orders(data)

    root = tmp_path / "checkpoints" / "view"
    _remove_spark_log_entry(root / "spark" / "commits", 1)
    os.remove(root / "tidemark" / "log" / "1.json")  # as if killed before the recovery-log write
    reports, _ = run(spark, spec)
    assert [r.batch_id for r in reports] == [1]
    assert reports[0].replayed_shards == 3 and reports[0].stored == 0
    assert normalize(sqlite_view(db)) == expected
    assert_verified(spec)


def test_materialize_dataframe_api(spark, tmp_path):
    import tidemark
    from tests.support.helpers import ORDERS_SCHEMA

    data = tmp_path / "data"
    write_orders(data, files=2, per_file=100, customers=30, seed=5)
    df = spark.readStream.format("text").load(str(data))
    db = tmp_path / "api.db"
    run = tidemark.materialize(
        df,
        collection={"key": ["/customer"], "schema": ORDERS_SCHEMA},
        endpoint={"sqlite": {"path": str(db)}},
        resource={"table": "customers"},
        checkpoint=str(tmp_path / "chk"),
        shards=2,
        spark=spark,
        available_now=True,
    )
    run.await_termination()
    assert normalize(sqlite_view(db)) == oracle_orders(data)


def test_shard_count_change_at_boundary(spark, tmp_path):
    data = tmp_path / "data"
    db = tmp_path / "views.db"
    write_orders(data, files=2, per_file=150, customers=50, seed=6)
    spec = orders_spec(tmp_path, data_dir=data, db_path=db, shards=2)
    run(spark, spec)
    write_orders(data, files=2, per_file=150, customers=50, seed=7, start=2)
    spec = orders_spec(tmp_path, data_dir=data, db_path=db, shards=4)
    reports, _ = run(spark, spec)
    assert [r.shards for r in reports] == [4, 4]
    write_orders(data, files=1, per_file=150, customers=50, seed=8, start=4)
    spec = orders_spec(tmp_path, data_dir=data, db_path=db, shards=1)
    reports, _ = run(spark, spec)
    assert [r.shards for r in reports] == [1]
    assert normalize(sqlite_view(db)) == oracle_orders(data)
    assert_verified(spec)


@pytest.mark.parametrize("given_by", ["spec", "env"])
def test_shard_memory_stays_bounded_by_spilling(spark, tmp_path, monkeypatch, given_by):
    """A tiny memory budget makes every shard spill its combined rows and loaded documents
    to local disk; the view is still exact.  The budget is given by the spec's ``options:``
    block, or by environment variables (which override it)."""
    if given_by == "env":
        monkeypatch.setenv("TIDEMARK_SHARD_MEMORY_BYTES", "4096")
        monkeypatch.setenv("TIDEMARK_SHARD_MAX_LOADED", "16")
        options = {"memory_budget_bytes": 1 << 30}  # overridden
    else:
        monkeypatch.delenv("TIDEMARK_SHARD_MEMORY_BYTES", raising=False)
        monkeypatch.delenv("TIDEMARK_SHARD_MAX_LOADED", raising=False)
        options = {"memory_budget_bytes": 4096, "max_loaded_in_memory": 16}
    data = tmp_path / "data"
    db = tmp_path / "views.db"
    write_orders(data, files=2, per_file=400, customers=300, seed=14, deletes=0.02)
    spec = orders_spec(tmp_path, data_dir=data, db_path=db, shards=2, max_files=1, extra_mat={"options": options})
    reports, _ = run(spark, spec)
    assert [r.spilled for r in reports] == [True, True]
    assert normalize(sqlite_view(db)) == oracle_orders(data)
    assert_verified(spec)


@pytest.mark.parametrize("internals", ["1", "0"])  # "0": the plan read through explain(), as on an untested Spark
def test_non_replayable_source_is_refused(spark, tmp_path, monkeypatch, internals):
    monkeypatch.setenv("TIDEMARK_SPARK_INTERNALS", internals)
    import tidemark
    from tests.support.helpers import ORDERS_SCHEMA
    from tidemark.errors import SpecError

    df = spark.readStream.format("socket").option("host", "127.0.0.1").option("port", 9).load()
    with pytest.raises(SpecError, match="cannot replay a batch after a crash"):
        tidemark.materialize(
            df,
            collection={"key": ["/customer"], "schema": ORDERS_SCHEMA},
            endpoint={"sqlite": {"path": str(tmp_path / "x.db")}},
            checkpoint=str(tmp_path / "chk"),
            spark=spark,
        )
    assert not (tmp_path / "x.db").exists()


def test_the_reset_marker_of_a_delete_then_re_add_is_never_stored(spark, tmp_path):
    """Within one batch a key is added, deleted and added again: the stored document is the
    re-added one, and the marker that carried the reset through the reduction is not in it."""
    import json
    import sqlite3

    data, db = tmp_path / "data", tmp_path / "views.db"
    data.mkdir()
    doc = {"orders": 1, "city": "Oslo", "items": ["a"], "flags": {}}
    lines = [
        {"customer": "c1", "amount": 3, "largest": 3, **doc},
        {"customer": "c1", "amount": 0, "_meta": {"op": "d"}},
        {"customer": "c1", "amount": 5, "largest": 5, **doc},
        {"customer": "c2", "amount": 2, "largest": 2, **doc},
    ]
    (data / "orders-0000.json").write_text("".join(json.dumps(d) + "\n" for d in lines))
    spec = orders_spec(tmp_path, data_dir=data, db_path=db, shards=1)
    run(spark, spec)
    con = sqlite3.connect(db)
    stored = {k: json.loads(d) for k, d in con.execute("SELECT customer, flow_document FROM customers")}
    con.close()
    assert stored["c1"]["amount"] == 5 and "_meta" not in stored["c1"], stored
    assert normalize(stored) == oracle_orders(data)
    assert_verified(spec)


def test_an_apply_per_shard_endpoint_holds_the_last_batch_when_the_stream_stops(spark, tmp_path):
    """``idempotent-apply-shard``: each shard stages, and the staged work is applied by an
    Acknowledge. The last batch of a run is acknowledged by the coordinator right after the
    recovery log (not only when a next batch's sessions open), so the view is complete when
    the run stops."""
    import json

    data, mem = tmp_path / "data", tmp_path / "memory.json"
    write_orders(data, files=2, per_file=120, customers=30, seed=12, deletes=0.05)
    spec = orders_spec(
        tmp_path,
        data_dir=data,
        db_path=None,
        shards=2,
        endpoint={"memory": {"pattern": "idempotent-apply-shard", "path": str(mem)}},
    )
    reports, _ = run(spark, spec)
    assert [r.batch_id for r in reports] == [0, 1]
    views = json.loads(mem.read_text())["mats"]["view"]["views"]
    [view] = views.values()
    assert normalize({d["customer"]: d for d in view.values()}) == oracle_orders(data)
    assert_verified(spec)
