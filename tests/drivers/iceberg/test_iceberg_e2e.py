"""End to end on local Spark: JSON files → Iceberg tables (pyiceberg, SQL catalog on a SQLite file
or on PostgreSQL), read back with a pyiceberg catalog of our own (scan → Arrow, the documents
parsed here) and compared with the independent oracle; every table holds exactly one tidemark
snapshot per batch (the snapshot summaries' ``tidemark.batch``)."""

from __future__ import annotations

import json
import os
import uuid

import pytest

from tests.support.helpers import ORDERS_SCHEMA, normalize, oracle_orders, write_orders

pytestmark = pytest.mark.spark
pytest.importorskip("pyiceberg")


def sqlite_catalog(tmp) -> dict:
    return {"uri": f"sqlite:///{os.path.join(tmp, 'catalog.db')}", "warehouse": str(os.path.join(tmp, "warehouse"))}


def iceberg_spec(tmp, *, data_dir, catalog=None, shards=1, max_files=1, events=False, options=None) -> str:
    """A spec: orders → ``views.customers`` (and, with ``events``, a delta-updates ``views.events``)."""
    import yaml

    bindings = [{"source": "orders", "resource": {"table": "customers"}}]
    if events:
        bindings.append({"source": "orders", "resource": {"table": "events"}, "delta_updates": True})
    mat = {
        "endpoint": {"iceberg": {"catalog": catalog or sqlite_catalog(tmp), "namespace": "views"}},
        "shards": shards,
        "bindings": bindings,
    }
    if options:
        mat["options"] = options
    spec = {
        "collections": {
            "orders": {
                "key": ["/customer"],
                "schema": ORDERS_SCHEMA,
                "source": {"format": "json", "path": str(data_dir), "options": {"maxFilesPerTrigger": max_files}},
            }
        },
        "materializations": {"view": mat},
        "checkpoint": str(os.path.join(tmp, "checkpoints")),
    }
    path = os.path.join(tmp, "spec.yaml")
    with open(path, "w") as f:
        yaml.safe_dump(spec, f)
    return path


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


def distinct_keys_per_file(data_dir) -> list[str]:
    """The delta-updates oracle with one file per batch: one row per (batch, key)."""
    out = []
    for name in sorted(os.listdir(data_dir)):
        if name.endswith(".json"):
            with open(os.path.join(data_dir, name)) as f:
                out += sorted({json.loads(line)["customer"] for line in f})
    return sorted(out)


# ------------------------------------------------------------------ reading the tables (not tidemark)


def open_catalog(catalog: dict):
    """A pyiceberg SQL catalog of our own on the endpoint's database and warehouse."""
    from pyiceberg.catalog.sql import SqlCatalog

    props = {k: v for k, v in catalog.items() if k != "name"}
    if props["uri"].startswith("postgresql://"):
        props["uri"] = "postgresql+psycopg://" + props["uri"][len("postgresql://") :]
    return SqlCatalog(catalog.get("name", "tidemark"), **props)


def table_rows(catalog: dict, table: str):
    """The table's rows (pyiceberg scan → Arrow), or None if the table does not exist."""
    from pyiceberg.exceptions import NoSuchTableError

    cat = open_catalog(catalog)
    try:
        return cat.load_table(("views", table)).scan().to_arrow()
    except NoSuchTableError:
        return None
    finally:
        if hasattr(cat, "close"):
            cat.close()


def iceberg_view(catalog: dict, table: str = "customers") -> dict:
    """customer -> document (a lean row's columns and remainder, or flow_document); fails on a
    key held twice."""
    from pyiceberg.exceptions import NoSuchTableError

    from tests.support.helpers import lake_documents

    cat = open_catalog(catalog)
    try:
        t = cat.load_table(("views", table))
        return lake_documents(t.scan().to_arrow(), "customer", t.properties)
    except NoSuchTableError:
        return {}
    finally:
        if hasattr(cat, "close"):
            cat.close()


def iceberg_events(catalog: dict, table: str = "events") -> list[str]:
    """The customers of a delta-updates table's rows, sorted (one per row)."""
    rows = table_rows(catalog, table)
    return sorted(rows.column("customer").to_pylist()) if rows is not None else []


def snapshot_batches(catalog: dict, table: str, materialization: str = "view") -> list[int]:
    """The tidemark batch of every snapshot of the table, oldest first; every snapshot must be
    tidemark's (this materialization's) and name one checkpoint."""
    cat = open_catalog(catalog)
    try:
        t = cat.load_table(("views", table))
        snaps = sorted(t.snapshots(), key=lambda s: s.sequence_number)
        summaries = [s.summary for s in snaps]
        assert all(s is not None and s["tidemark.materialization"] == materialization for s in summaries), summaries
        assert len({s["tidemark.checkpoint-id"] for s in summaries}) <= 1, summaries
        return [int(s["tidemark.batch"]) for s in summaries]
    finally:
        if hasattr(cat, "close"):
            cat.close()


def staged(catalog: dict) -> list[str]:
    root = os.path.join(catalog["warehouse"], "_tidemark_staging")
    return [f for d, _, fs in os.walk(root) for f in fs]


class Iceberg:
    """The Iceberg endpoint as the other e2e tests see one (``endpoint()``, ``view()``), on a
    SQLite-file catalog; used by test_rescale_e2e."""

    name = "iceberg"

    def __init__(self, tmp):
        self.catalog = sqlite_catalog(tmp)

    def endpoint(self) -> dict:
        return {"iceberg": {"catalog": self.catalog, "namespace": "views"}}

    def view(self, table="customers") -> dict:
        return normalize(iceberg_view(self.catalog, table))

    def batches(self, table="customers") -> list[int]:
        return snapshot_batches(self.catalog, table)


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


def test_a_postgres_catalog(spark, tmp_path, postgres_url):
    """The shared-catalog case: the catalog's tables in PostgreSQL (a catalog name of the
    test's own, its rows deleted afterwards), the warehouse a folder; 2 shards on Spark."""
    from tests.drivers.iceberg.test_iceberg_driver import drop_pg_catalog

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
    finally:
        drop_pg_catalog(postgres_url, name)
