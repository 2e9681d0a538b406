"""Task-level faults: a duplicate task attempt racing the first, and a task that raises.

The race runs two attempts of one shard's transaction (``run_shard``, exactly what an
executor task runs) in two threads against the real SQLite endpoint: attempt A is held at
``after_store`` (everything staged, StartCommit not sent) while attempt B opens the same
range, bumping the fence, and commits; A is then released and its commit must be refused
by the fence, leaving the view equal to the oracle. The retry case kills nothing: a task
raises once at ``mid_store`` and Spark (``local[2,3]``: 3 attempts per task) retries it.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading

import pytest

from tests.support.helpers import normalize, oracle_orders, orders_spec, sqlite_view, write_orders
from tidemark.errors import FencedOff
from tidemark.faults import hooked


def _shard_task(spec_path: str, batch_id: int):
    """The Materializer and the ShardTask of one batch with one shard, as the processor builds them."""
    from tidemark.collection.collection import Collection
    from tidemark.protocol.messages import Range
    from tidemark.runtime.shard import ShardTask
    from tidemark.spark.processor import Materializer
    from tidemark.spec import load_spec

    spec = load_spec(spec_path)
    mat = spec.materializations["view"]
    colls = [Collection(spec.collections[b.source]) for b in mat.bindings]
    location = spec.checkpoint_location(mat.name)
    m = Materializer(spec, mat, colls, location)
    m.start_up()  # Validate + Apply: creates the table and the checkpoints table
    return ShardTask(
        materialization=mat.name,
        version=m.version,
        driver_name=m.driver_name,
        driver_config=m.driver_config,
        bindings=m.bindings,
        collections=m.collections,
        checkpoint_id=m.log.checkpoint_id,
        batch_id=batch_id,
        ranges=(Range(),),
        driver_checkpoint=None,
        runtime_checkpoint={
            "checkpoint_id": m.log.checkpoint_id,
            "batch_id": batch_id,
            "materialization": mat.name,
            "version": m.version,
        },
    )


def _rows(view: dict):
    """A shard's input: ((shard, binding, key_json), doc_json) sorted by key."""
    return [((0, 0, json.dumps([k])), json.dumps(doc)) for k, doc in sorted(view.items())]


def test_duplicate_attempt_racing_the_first_is_fenced(tmp_path):
    from tidemark.runtime.shard import run_shard

    data, db = tmp_path / "data", tmp_path / "views.db"
    write_orders(data, files=1, per_file=300, customers=40, seed=31)
    expected = oracle_orders(data)
    task = _shard_task(orders_spec(tmp_path, data_dir=data, db_path=db, shards=1), batch_id=0)

    a_staged, b_done = threading.Event(), threading.Event()
    outcome: dict = {}

    def hold_first_attempt(_point):
        if threading.current_thread().name == "attempt-A":
            a_staged.set()
            assert b_done.wait(60), "attempt B never finished"

    def attempt(name):
        try:
            outcome[name] = run_shard(task, 0, iter(_rows(expected)))
        except BaseException as exc:
            outcome[name] = exc
        finally:
            if name == "attempt-B":
                b_done.set()

    with hooked("after_store", hold_first_attempt):
        a = threading.Thread(target=attempt, args=("attempt-A",), name="attempt-A")
        a.start()
        assert a_staged.wait(60), f"attempt A never reached after_store: {outcome}"
        b = threading.Thread(target=attempt, args=("attempt-B",), name="attempt-B")
        b.start()
        b.join(60)
        a.join(60)

    assert not isinstance(outcome["attempt-B"], BaseException), outcome["attempt-B"]
    assert outcome["attempt-B"].stored == len(expected)
    assert isinstance(outcome["attempt-A"], FencedOff), outcome["attempt-A"]
    assert "stale" in str(outcome["attempt-A"])
    assert normalize(sqlite_view(db)) == expected  # B's data, once; nothing of A

    # A third attempt of the same batch (Spark re-running it) sees batch 0 committed and skips.
    again = run_shard(task, 0, iter(_rows(expected)))
    assert again.skipped and again.stored == 0
    assert normalize(sqlite_view(db)) == expected


@pytest.mark.spark
@pytest.mark.slow  # CI runs it after the default suite (-m slow)
def test_task_that_raises_is_retried_by_spark_and_exact(tmp_path):
    data, db = tmp_path / "data", tmp_path / "views.db"
    write_orders(data, files=2, per_file=200, customers=40, seed=32, deletes=0.05)
    # the shard sessions in Spark's tasks (these small batches would run them in the driver)
    spec = orders_spec(
        tmp_path, data_dir=data, db_path=db, shards=2, max_files=1, extra_mat={"options": {"small_batch_keys": 0}}
    )
    marker = tmp_path / "raised-once"
    env = {
        **os.environ,
        "PYSPARK_PYTHON": sys.executable,
        "SPARK_LOCAL_IP": "127.0.0.1",
        # the first shard session to reach mid_store raises (once across all attempts)
        "TIDEMARK_FAULTS": f"mid_store:raise!once={marker}",
    }
    proc = subprocess.run(
        [sys.executable, "-m", "tidemark", "--verbose", "run", spec, "--available-now", "--master", "local[2,3]"],
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert marker.exists(), "the fault never fired"
    assert "injected fault at mid_store" in proc.stderr  # Spark logged the failed attempt
    assert normalize(sqlite_view(db)) == oracle_orders(data)
