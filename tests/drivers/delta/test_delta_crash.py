"""SIGKILL `tidemark run` into Delta tables at every crash-table row; restart; the tables must be exact.

One run on the commit path without Spark (tests/support/plain.py), killed four times (each
point fires once, marked by a file), 2 shards, a standard and a delta-updates binding:

1. ``after_endpoint_commit`` — a shard staged batch 0, the recovery log never got it;
2. ``after_recovery_log``    — batch 0 is logged, its MERGE has not started;
3. ``mid_apply`` (3rd time)  — during the MERGE of batch 1 (start-up re-applied batch 0
   first, with the two tables reaching the point once each);
4. ``before_spark_commit``   — batch 2 is logged and applied, Spark's commits/2 is missing.
"""

from __future__ import annotations

import pytest

from tests.support.delta_specs import delta_spec, distinct_keys_per_file, staged
from tests.support.delta_support import independent_rows, independent_view
from tests.support.harness import run_until_done
from tests.support.helpers import normalize, oracle_orders, write_orders

pytestmark = pytest.mark.chaos
deltalake = pytest.importorskip("deltalake")


def test_kill_at_every_crash_point_then_restart_is_exact(tmp_path):
    data, lake = tmp_path / "data", tmp_path / "lake"
    write_orders(data, files=3, per_file=150, customers=50, seed=11, deletes=0.03)
    spec = delta_spec(tmp_path, data_dir=data, lake=lake, shards=2, events=True)
    points = [
        "after_endpoint_commit:kill@1",
        "after_recovery_log:kill@1",
        "mid_apply:kill@3",
        "before_spark_commit:kill@1",
    ]
    faults = ",".join(f"{p}!once={tmp_path / ('killed-' + p.split(':')[0])}" for p in points)

    outcome = run_until_done(spec, faults=faults, max_attempts=6, plain=True)

    assert outcome.kills == 4, outcome
    assert all((tmp_path / f"killed-{p.split(':')[0]}").exists() for p in points)
    assert normalize(independent_view(lake / "customers")) == oracle_orders(data)
    assert sorted(k for (k,) in independent_rows(lake / "events", ["customer"])) == distinct_keys_per_file(data)
    history = deltalake.DeltaTable(str(lake / "customers")).history()
    assert [h["operation"] for h in history].count("MERGE") == 3  # one per batch, never re-applied
    assert staged(lake) == []  # applied and orphaned staged files are gone
