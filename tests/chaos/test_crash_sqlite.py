"""SIGKILL `tidemark run` at the crash-table points; restart; the view must be exact."""

from __future__ import annotations

import pytest

from tests.chaos.harness import run_until_done
from tests.helpers import normalize, oracle_orders, orders_spec, sqlite_view, write_orders

pytestmark = pytest.mark.chaos


@pytest.mark.parametrize(
    "point",
    [
        "after_endpoint_commit",  # a shard committed, the process dies before the recovery log
        "before_recovery_log",  # every shard committed; the log write never happens
        "after_recovery_log",  # the log has N; Spark's commits/N is never written
        "before_spark_commit",
    ],
)
def test_kill_at_point_then_restart_is_exact(tmp_path, point):
    data = tmp_path / "data"
    db = tmp_path / "views.db"
    write_orders(data, files=3, per_file=200, customers=50, seed=11, deletes=0.03)
    spec = orders_spec(tmp_path, data_dir=data, db_path=db, shards=2, max_files=1)
    marker = tmp_path / "killed-once"
    # die the 2nd time the point is reached (batch 1 for driver-side points), once.
    outcome = run_until_done(spec, faults=f"{point}:kill@2!once={marker}")
    assert outcome.kills == 1, outcome
    assert normalize(sqlite_view(db)) == oracle_orders(data)
