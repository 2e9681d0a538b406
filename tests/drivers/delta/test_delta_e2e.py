"""End to end on local Spark: JSON files → Delta tables (delta-rs), read back without delta-rs
and compared with the independent oracle."""

from __future__ import annotations

import json
import os

import pytest

from tests.support.delta_specs import delta_spec, distinct_keys_per_file, staged
from tests.support.delta_support import independent_rows, independent_view
from tests.support.helpers import assert_verified, normalize, oracle_orders, write_orders

pytestmark = pytest.mark.spark
deltalake = pytest.importorskip("deltalake")


def run(spark, spec_path):
    from tidemark.spark.runner import run_spec

    reports = []
    run_spec(spec_path, spark=spark, on_batch=reports.append)
    return reports


def rerun_last_batch(tmp_path, batch):
    """As if the process died after the recovery log (and the apply) of ``batch``, before Spark's commits."""
    commits = tmp_path / "checkpoints" / "view" / "spark" / "commits"
    os.remove(commits / str(batch))
    if (commits / f".{batch}.crc").exists():
        os.remove(commits / f".{batch}.crc")


@pytest.mark.parametrize("shards", [pytest.param(1, marks=pytest.mark.slow), 4])
def test_batches_rerun_restart_and_resume_into_delta(spark, tmp_path, shards):
    data, lake = tmp_path / "data", tmp_path / "lake"
    write_orders(data, files=2, per_file=200, customers=60, seed=shards, deletes=0.05)
    spec = delta_spec(tmp_path, data_dir=data, lake=lake, shards=shards, events=True)

    reports = run(spark, spec)
    assert [r.batch_id for r in reports] == [0, 1]
    assert all(r.shards == shards for r in reports)
    assert normalize(independent_view(lake / "customers")) == oracle_orders(data)
    version = deltalake.DeltaTable(str(lake / "customers")).version()

    # As if the process died after the recovery log (and the apply) of batch 1, before
    # Spark's commits/1: Spark re-runs batch 1, which is recognised and not re-applied.
    rerun_last_batch(tmp_path, 1)
    # More input arrives; the restart resumes exactly where it stopped.
    write_orders(data, files=1, per_file=200, customers=60, seed=100 + shards, start=2, deletes=0.05)
    reports = run(spark, spec)
    assert [(r.batch_id, r.skipped) for r in reports] == [(1, True), (2, False)]
    assert reports[1].loaded > 0  # existing keys were loaded back from the table and reduced
    assert normalize(independent_view(lake / "customers")) == oracle_orders(data)
    assert sorted(k for (k,) in independent_rows(lake / "events", ["customer"])) == distinct_keys_per_file(data)
    # one commit per batch and table, each carrying its batch; nothing left in staging
    dt = deltalake.DeltaTable(str(lake / "customers"))
    assert dt.version() == version + 1
    assert [h["operation"] for h in dt.history()].count("MERGE") == 3
    assert staged(lake) == []
    assert_verified(spec)


def test_quarantine_writes_the_bad_line_once(spark, tmp_path):
    from tests.support.input_files import _replace_line

    data, lake, valid = tmp_path / "data", tmp_path / "lake", tmp_path / "valid"
    files = write_orders(data, files=2, per_file=60, customers=10, seed=11)
    _replace_line(files[1], 5, "not json at all")
    _replace_line(files[1], 8, '{"customer": "c0002", "amount": "lots"}')
    spec = delta_spec(tmp_path, data_dir=data, lake=lake, shards=2, on_invalid="quarantine")
    reports = run(spark, spec)
    assert [(r.batch_id, r.invalid) for r in reports] == [(0, 0), (1, 2)]

    # the view holds exactly the valid lines
    valid.mkdir()
    for path in files:
        with open(path) as f:
            lines = [ln for i, ln in enumerate(f, 1) if path != files[1] or i not in (5, 8)]
        (valid / os.path.basename(path)).write_text("".join(lines))
    assert normalize(independent_view(lake / "customers")) == oracle_orders(valid)

    # Spark re-runs batch 1: the recovery log has it, the dead letters are not written again
    rerun_last_batch(tmp_path, 1)
    assert [(r.batch_id, r.skipped) for r in run(spark, spec)] == [(1, True)]
    rows = sorted(
        independent_rows(lake / "tidemark_quarantine", ["materialization", "batch_id", "location", "reason", "value"])
    )
    assert [(r[0], r[1], r[2].rsplit("/", 1)[-1]) for r in rows] == [
        ("view", 1, "orders-0001.json:5"),
        ("view", 1, "orders-0001.json:8"),
    ]
    assert "unparseable JSON" in rows[0][3] and rows[0][4] == "not json at all"
    assert "/amount" in rows[1][3]
    assert normalize(independent_view(lake / "customers")) == oracle_orders(valid)
    assert staged(lake) == []
    assert_verified(spec)
