"""The one-job plan: a compiled collection's batches read, combine and reach the shards in
one Spark job, planned from the first batch's analyzed plan (``PlanRebind.java``)."""

from __future__ import annotations

import json
import os
import random

import pytest
import yaml

from tests.helpers import sqlite_view

pytestmark = pytest.mark.spark

# Every reduction compiles (no conditionals, no deletes): the one-job plan applies.
SCHEMA = {
    "type": "object", "required": ["customer", "amount"], "reduce": {"strategy": "merge"},
    "properties": {
        "customer": {"type": "string"},
        "amount": {"type": "integer", "reduce": {"strategy": "sum"}},
        "largest": {"type": "integer", "reduce": {"strategy": "maximize"}},
        "city": {"type": "string", "reduce": {"strategy": "lastWriteWins"}},
        "items": {"type": "array", "items": {"type": "string"}, "reduce": {"strategy": "append"}},
    },
}


def write_stream(directory, files: int, per_file: int, customers: int, seed: int) -> list[str]:
    rng = random.Random(seed)
    os.makedirs(directory, exist_ok=True)
    paths = []
    for f in range(files):
        path = os.path.join(directory, f"orders-{f:04d}.json")
        with open(path, "w") as out:
            for _ in range(per_file):
                amount = rng.randrange(1, 500)
                out.write(json.dumps({"customer": f"c{rng.randrange(customers):04d}", "amount": amount,
                                      "largest": amount, "city": rng.choice(["Oslo", "Lima", "Accra"]),
                                      "items": [f"sku-{rng.randrange(9)}"]}) + "\n")
        os.utime(path, (1_700_000_000 + 10 * f,) * 2)  # Spark takes files in modification order
        paths.append(path)
    return paths


def oracle(paths, skip=()) -> dict:
    """The view, folded here in Python, file by file and line by line."""
    view: dict = {}
    for i, path in enumerate(paths):
        with open(path) as f:
            for j, line in enumerate(f):
                if (i, j) in skip:
                    continue
                d = json.loads(line)
                cur = view.get(d["customer"])
                if cur is None:
                    view[d["customer"]] = d
                    continue
                cur["amount"] += d["amount"]
                cur["largest"] = max(cur["largest"], d["largest"])
                cur["city"] = d["city"]
                cur["items"] = cur["items"] + d["items"]
    return view


def write_spec(tmp_path, data, db, **mat) -> str:
    spec = {
        "collections": {"orders": {"key": ["/customer"], "schema": SCHEMA,
                                   "source": {"format": "json", "path": str(data),
                                              "options": {"maxFilesPerTrigger": 1}}}},
        "materializations": {"view": {"endpoint": {"sqlite": {"path": str(db)}}, "shards": 2,
                                      "bindings": [{"source": "orders", "resource": {"table": "customers"}}],
                                      **mat}},
        "checkpoint": str(tmp_path / "checkpoints"),
    }
    path = tmp_path / "spec.yaml"
    path.write_text(yaml.safe_dump(spec))
    return str(path)


def _run(spark, spec):
    from tidemark.spark.runner import run_spec

    reports = []
    runs = run_spec(spec, spark=spark, on_batch=reports.append)
    plans = list(runs[0].materializer._one_job.values())
    return reports, plans


@pytest.mark.parametrize("rebind", ["1", "0"])
def test_later_batches_reuse_the_first_batch_plan_and_the_view_is_exact(spark, tmp_path, monkeypatch, rebind):
    monkeypatch.setenv("TIDEMARK_PLAN_REBIND", rebind)
    data, db = tmp_path / "data", tmp_path / "views.db"
    files = write_stream(data, files=4, per_file=120, customers=30, seed=41)
    spec = write_spec(tmp_path, data, db)

    reports, plans = _run(spark, spec)
    assert [r.batch_id for r in reports] == [0, 1, 2, 3]
    assert {r.path for r in reports} == {"one job"}
    assert sum(r.documents for r in reports) == 480  # counted by the shards from the combined rows
    assert sqlite_view(db) == oracle(files)
    assert len(plans) == 1 and plans[0].ok
    assert plans[0].rebound == (3 if rebind == "1" else 0)


def test_a_batch_with_an_invalid_document_after_rebound_ones_takes_the_checked_plan(spark, tmp_path):
    data, db = tmp_path / "data", tmp_path / "views.db"
    files = write_stream(data, files=3, per_file=60, customers=12, seed=42)
    spec = write_spec(tmp_path, data, db, on_invalid="quarantine")
    with open(files[2]) as f:
        lines = f.readlines()
    lines[4] = '{"customer": "c0003", "amount": "lots"}\n'
    with open(files[2], "w") as f:
        f.writelines(lines)

    reports, plans = _run(spark, spec)
    assert [(r.batch_id, r.path, r.invalid) for r in reports] == [(0, "one job", 0), (1, "one job", 0),
                                                                  (2, "checked", 1)]
    assert plans[0].rebound == 2  # batches 1 and 2 (whose shards then committed nothing on it)
    assert sqlite_view(db) == oracle(files, skip={(2, 4)})
