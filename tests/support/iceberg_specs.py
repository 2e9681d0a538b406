"""Specs, endpoints and read-backs for the Iceberg end-to-end, crash and rescale tests."""

from __future__ import annotations

import json
import os

import pytest

from tests.support.helpers import ORDERS_SCHEMA, normalize

# skips its importers without pyiceberg, as importing the test module these helpers came from did
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


def distinct_keys_per_file(data_dir) -> list[str]:
    """The delta-updates oracle with one file per batch: one row per (batch, key)."""
    out = []
    for name in sorted(os.listdir(data_dir)):
        if name.endswith(".json"):
            with open(os.path.join(data_dir, name)) as f:
                out += sorted({json.loads(line)["customer"] for line in f})
    return sorted(out)


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
