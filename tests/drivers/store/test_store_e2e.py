"""End to end on local Spark: JSON files → ``store`` view, compared with an independent
oracle; a write buffer smaller than one batch (spills); restore from the changelog after
the local store is deleted between runs."""

from __future__ import annotations

import json
import os
import shutil

import pytest

pytest.importorskip("rocksdict")

import tidemark
from tests.support.helpers import assert_verified, normalize, oracle_orders, store_spec, store_view, write_orders

pytestmark = pytest.mark.spark


def run(spark, spec_path):
    from tidemark.spark.runner import run_spec

    reports = []
    run_spec(spec_path, spark=spark, on_batch=reports.append)
    return reports


@pytest.mark.parametrize("shards", [pytest.param(1, marks=pytest.mark.slow), 4])
def test_several_batches_restart_and_resume(spark, tmp_path, shards):
    data = tmp_path / "data"
    write_orders(data, files=3, per_file=200, customers=60, seed=30 + shards, deletes=0.05)
    spec = store_spec(tmp_path, data, shards)
    reports = run(spark, spec)
    assert [r.batch_id for r in reports] == [0, 1, 2] and all(r.shards == shards for r in reports)
    assert normalize(store_view(spec)) == oracle_orders(data)

    write_orders(data, files=2, per_file=200, customers=60, seed=40 + shards, start=3, deletes=0.05)
    reports = run(spark, spec)
    assert [r.batch_id for r in reports] == [3, 4]
    assert sum(r.loaded for r in reports) > 0  # existing keys were loaded from the store and reduced
    assert normalize(store_view(spec)) == oracle_orders(data)
    with tidemark.open_view(spec, "customers") as view:
        assert view.batch == 4 and len(view.batches) == shards
        keys = [k for (k,), _ in view.scan()]
        assert keys == sorted(oracle_orders(data))  # key order
    assert_verified(spec)


def test_a_write_buffer_smaller_than_one_batch_spills(spark, tmp_path):
    data = tmp_path / "data"
    write_orders(data, files=2, per_file=300, customers=200, seed=51, deletes=0.03)
    spill = tmp_path / "spill"  # created by the first spill only
    spec = store_spec(tmp_path, data, 2, max_uncommitted_bytes=2000, spill_dir=str(spill))
    assert len(run(spark, spec)) == 2
    assert spill.is_dir() and os.listdir(spill) == []  # spilled, and each spill store was removed after its commit
    assert normalize(store_view(spec)) == oracle_orders(data)


def test_restore_from_the_changelog_after_the_local_store_is_deleted(spark, tmp_path):
    data = tmp_path / "data"
    write_orders(data, files=3, per_file=150, customers=50, seed=61, deletes=0.05)
    spec = store_spec(tmp_path, data, 2, changelog=str(tmp_path / "checkpoints" / "store-changelog"), snapshot_every=2)
    run(spark, spec)
    expected = oracle_orders(data)
    assert normalize(store_view(spec)) == expected
    logged = json.loads((tmp_path / "checkpoints" / "view" / "tidemark" / "log" / "2.json").read_text())["entry"]
    digests = logged["driver_checkpoint"]["store"]  # the changelog entries that count, per range
    assert sorted(digests) == ["00000000-7fffffff", "80000000-ffffffff"]
    assert all(d["batch"] == 2 and d["digest"] for d in digests.values())

    shutil.rmtree(tmp_path / "store")  # the machine lost its local disk
    assert normalize(store_view(spec)) == expected  # queries read the changelog meanwhile
    write_orders(data, files=2, per_file=150, customers=50, seed=62, start=3, deletes=0.05)
    reports = run(spark, spec)
    assert [r.batch_id for r in reports] == [3, 4] and sum(r.loaded for r in reports) > 0
    assert sorted(os.listdir(tmp_path / "store" / "view" / "ranges")) == ["00000000-7fffffff", "80000000-ffffffff"]
    assert normalize(store_view(spec)) == oracle_orders(data)
