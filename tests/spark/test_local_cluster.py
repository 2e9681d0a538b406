"""Shard tasks in separate executor processes (local-cluster) give the same view."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from tests.support.helpers import normalize, oracle_orders, orders_spec, sqlite_view, write_orders

pytestmark = pytest.mark.spark


@pytest.mark.slow  # CI runs it after the default suite (-m slow)
def test_local_cluster_two_executors(tmp_path):
    data = tmp_path / "data"
    db = tmp_path / "views.db"
    write_orders(data, files=2, per_file=300, customers=80, seed=21, deletes=0.02)
    spec = orders_spec(
        tmp_path, data_dir=data, db_path=db, shards=4, max_files=1, extra_mat={"options": {"small_batch_keys": 0}}
    )  # every batch's shards on executors
    env = {**os.environ, "PYSPARK_PYTHON": sys.executable, "SPARK_LOCAL_IP": "127.0.0.1"}
    proc = subprocess.run(
        [sys.executable, "-m", "tidemark", "run", spec, "--available-now", "--master", "local-cluster[2,1,1024]"],
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert normalize(sqlite_view(db)) == oracle_orders(data)
    executors = set()
    from tidemark.runtime.recovery_log import RecoveryLog

    log = RecoveryLog(str(tmp_path / "checkpoints" / "view"), "view")
    for batch in log.batches():
        executors.update(log.get(batch).counts["executors"])
    assert len(executors) == 2, executors  # shard tasks ran in two executor JVMs
