"""Specs and staged input for the Delta end-to-end and crash tests."""

from __future__ import annotations

import json
import os

import pytest

from tests.support.helpers import ORDERS_SCHEMA

# skips its importers without deltalake, as importing the test module these helpers came from did
pytest.importorskip("deltalake")


def delta_spec(tmp, *, data_dir, lake, shards=1, max_files=1, events=False, on_invalid=None) -> str:
    """A spec: orders → ``LAKE/customers`` (and, with ``events``, a delta-updates ``LAKE/events``)."""
    import yaml

    bindings = [{"source": "orders", "resource": {"table": "customers"}}]
    if events:
        bindings.append({"source": "orders", "resource": {"path": "events"}, "delta_updates": True})
    spec = {
        "collections": {
            "orders": {
                "key": ["/customer"],
                "schema": ORDERS_SCHEMA,
                "source": {"format": "json", "path": str(data_dir), "options": {"maxFilesPerTrigger": max_files}},
            }
        },
        "materializations": {
            "view": {
                "endpoint": {"delta": {"path": str(lake)}},
                "shards": shards,
                "bindings": bindings,
                **({"on_invalid": on_invalid} if on_invalid else {}),
            },
        },
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
        with open(os.path.join(data_dir, name)) as f:
            out += sorted({json.loads(line)["customer"] for line in f})
    return sorted(out)


def staged(lake) -> list[str]:
    root = os.path.join(lake, "_tidemark_staging")
    return [f for d, _, fs in os.walk(root) for f in fs]
