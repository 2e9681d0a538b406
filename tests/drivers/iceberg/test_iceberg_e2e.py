"""End to end on local Spark: JSON files → Iceberg tables (pyiceberg, SQL catalog on a SQLite file
or on PostgreSQL), read back with a pyiceberg catalog of our own (scan → Arrow, the documents
parsed here) and compared with the independent oracle; every table holds exactly one tidemark
snapshot per batch (the snapshot summaries' ``tidemark.batch``)."""

from __future__ import annotations

import os
import uuid

import pytest

from tests.support.helpers import assert_verified, normalize, oracle_orders, write_orders
from tests.support.iceberg_specs import (
    Iceberg,
    distinct_keys_per_file,
    iceberg_events,
    iceberg_spec,
    iceberg_view,
    snapshot_batches,
    sqlite_catalog,
    staged,
)

pytestmark = pytest.mark.spark
pytest.importorskip("pyiceberg")


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


# ------------------------------------------------------------------ reading the tables (not tidemark)


# ------------------------------------------------------------------ tests


@pytest.mark.parametrize("shards", [pytest.param(1, marks=pytest.mark.slow), 4])
def test_batches_rerun_restart_and_resume_into_iceberg(spark, tmp_path, shards):
    """Several batches, a standard and a delta-updates binding; 4 shards run their sessions on
    Spark's executors for every batch (``small_batch_keys: 0``), 1 shard runs the batches after
    the first in the driver (the default after a small batch)."""
    data = tmp_path / "data"
    catalog = sqlite_catalog(tmp_path)
    write_orders(data, files=2, per_file=200, customers=60, seed=shards, deletes=0.05)
    spec = iceberg_spec(
        tmp_path, data_dir=data, shards=shards, events=True, options={"small_batch_keys": 0} if shards > 1 else None
    )

    reports = run(spark, spec)
    assert [r.batch_id for r in reports] == [0, 1]
    assert all(r.shards == shards for r in reports)
    assert normalize(iceberg_view(catalog)) == oracle_orders(data)
    assert snapshot_batches(catalog, "customers") == snapshot_batches(catalog, "events") == [0, 1]

    # As if the process died after the recovery log (and the apply) of batch 1, before
    # Spark's commits/1: Spark re-runs batch 1, which is recognised and not re-applied.
    rerun_last_batch(tmp_path, 1)
    # More input arrives; the restart resumes exactly where it stopped.
    write_orders(data, files=1, per_file=200, customers=60, seed=100 + shards, start=2, deletes=0.05)
    reports = run(spark, spec)
    assert [(r.batch_id, r.skipped) for r in reports] == [(1, True), (2, False)]
    assert reports[1].loaded > 0  # existing keys were loaded back from the table and reduced
    assert normalize(iceberg_view(catalog)) == oracle_orders(data)
    assert iceberg_events(catalog) == distinct_keys_per_file(data)
    # one snapshot per batch and table, each carrying its batch; nothing left in staging
    assert snapshot_batches(catalog, "customers") == snapshot_batches(catalog, "events") == [0, 1, 2]
    assert staged(catalog) == []
    assert_verified(spec)


def test_a_postgres_catalog(spark, tmp_path, postgres_url):
    """The shared-catalog case: the catalog's tables in PostgreSQL (a catalog name of the
    test's own, its rows deleted afterwards), the warehouse a folder; 2 shards on Spark."""
    from tests.support.iceberg_support import drop_pg_catalog

    data = tmp_path / "data"
    name = f"tm_e2e_{uuid.uuid4().hex[:10]}"
    catalog = {"uri": postgres_url, "warehouse": str(tmp_path / "warehouse"), "name": name}
    write_orders(data, files=3, per_file=150, customers=50, seed=7, deletes=0.05)
    spec = iceberg_spec(
        tmp_path, data_dir=data, catalog=catalog, shards=2, events=True, options={"small_batch_keys": 0}
    )
    try:
        reports = run(spark, spec)
        assert [(r.batch_id, r.shards) for r in reports] == [(0, 2), (1, 2), (2, 2)]
        assert normalize(iceberg_view(catalog)) == oracle_orders(data)
        assert iceberg_events(catalog) == distinct_keys_per_file(data)
        assert snapshot_batches(catalog, "customers") == snapshot_batches(catalog, "events") == [0, 1, 2]
        # a second run with no new input changes nothing (start-up re-acknowledges batch 2)
        assert run(spark, spec) == []
        assert snapshot_batches(catalog, "customers") == snapshot_batches(catalog, "events") == [0, 1, 2]
        assert staged(catalog) == []
        assert_verified(spec)
    finally:
        drop_pg_catalog(postgres_url, name)
