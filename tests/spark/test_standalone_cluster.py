"""A Spark standalone cluster — a master and two workers started from the PySpark
installation as separate processes — running tidemark into PostgreSQL and Delta Lake: exact
views; a worker SIGKILLed mid-batch (its tasks rescheduled on the other, its Python worker
left running as a zombie that must be fenced); the driver killed and restarted; and real
speculative task attempts (spark.speculation) with one shard stalled."""

from __future__ import annotations

import glob
import json
import os
import select
import subprocess
import sys
import time
import uuid

import pytest

from tests.support.harness import run_until_done
from tests.support.helpers import normalize, oracle_orders, orders_spec, postgres_spec, postgres_view, write_orders
from tests.support.paths import REPO, SUPPORT
from tests.support.spark_cluster import standalone

pytestmark = [pytest.mark.cluster, pytest.mark.postgres]


@pytest.fixture(autouse=True)
def _on_executors(monkeypatch):
    """These tests are about shard tasks on the cluster's workers: no batch runs its shard
    sessions in the driver (``small_batch_keys``; the runs inherit the environment)."""
    monkeypatch.setenv("TIDEMARK_SMALL_BATCH_KEYS", "0")


ROOT = REPO


@pytest.fixture
def schema(postgres_url):
    import psycopg

    name = f"cluster_{uuid.uuid4().hex[:8]}"
    yield name
    with psycopg.connect(postgres_url, autocommit=True) as con:
        con.execute(f'DROP SCHEMA IF EXISTS "{name}" CASCADE')


def child(spec: str, master: str, **conf) -> subprocess.Popen:
    env = {
        **os.environ,
        "PYSPARK_PYTHON": sys.executable,
        "SPARK_LOCAL_IP": "127.0.0.1",
        "TIDEMARK_DRIVER_MEMORY": "1g",
    }
    args = [f"{k}={v}" for k, v in conf.items()]
    return subprocess.Popen(
        [sys.executable, "-m", "tests.support.cluster_child", spec, master, *args],
        cwd=ROOT,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )


def executors(checkpoints: str, name: str = "view") -> set:
    from tidemark.runtime.recovery_log import RecoveryLog

    log = RecoveryLog(os.path.join(checkpoints, name), name)
    return {e for b in log.batches() for e in log.get(b).counts["executors"]}


def await_file(path, proc: subprocess.Popen, deadline: float = 120.0) -> str:
    until = time.monotonic() + deadline
    while time.monotonic() < until:
        if os.path.exists(path) and os.path.getsize(path) > 0:
            return open(path).read()
        if proc.poll() is not None:
            raise AssertionError(f"the run ended before {path} was written:\n{proc.stderr.read()[-3000:]}")
        time.sleep(0.1)  # polling a marker file a fault point writes, bounded by the deadline
    raise AssertionError(f"{path} not written in {deadline}s")


def await_exit(pid: int, deadline: float) -> None:
    try:
        fd = os.pidfd_open(pid)
    except ProcessLookupError:
        return
    try:
        assert select.select([fd], [], [], deadline)[0], f"process {pid} still runs after {deadline}s"
    finally:
        os.close(fd)


def test_postgres_and_delta_views_are_exact_with_tasks_on_both_workers(standalone, tmp_path, postgres_url, schema):
    data = tmp_path / "data"
    write_orders(data, files=3, per_file=200, customers=60, seed=301, deletes=0.03)
    (tmp_path / "pg").mkdir()
    (tmp_path / "delta").mkdir()
    spec = postgres_spec(tmp_path / "pg", data_dir=data, url=postgres_url, schema=schema, shards=4)
    assert run_until_done(spec, master=standalone.url).kills == 0
    assert normalize(postgres_view(postgres_url, schema)) == oracle_orders(data)
    assert len(executors(str(tmp_path / "pg" / "checkpoints"))) == 2  # shard tasks ran on both workers

    spec = orders_spec(
        tmp_path / "delta", data_dir=data, db_path=None, shards=2, endpoint={"delta": {"path": str(tmp_path / "lake")}}
    )
    assert run_until_done(spec, master=standalone.url).kills == 0
    from deltalake import DeltaTable

    from tests.support.helpers import lake_documents

    dt = DeltaTable(str(tmp_path / "lake" / "customers"))
    assert normalize(lake_documents(dt.to_pyarrow_table(), "customer", dt.metadata().configuration)) == oracle_orders(
        data
    )


def test_a_worker_killed_mid_batch_is_replaced_and_its_zombie_is_fenced(standalone, tmp_path, postgres_url, schema):
    data = tmp_path / "data"
    write_orders(data, files=2, per_file=200, customers=60, seed=311, deletes=0.03)
    spec = postgres_spec(tmp_path, data_dir=data, url=postgres_url, schema=schema, shards=4)
    marker = tmp_path / "stalled"
    proc = child(spec, standalone.url, **{"spark.executorEnv.TIDEMARK_FAULTS": f"mid_store:stall=15!once={marker}"})
    try:
        _, pid = await_file(marker, proc).split()
        standalone.kill_worker_of(int(pid))  # the worker and its executor JVM; the Python worker lives on
        _, stderr = proc.communicate(timeout=300)
        assert proc.returncode == 0, stderr[-3000:]
        await_exit(int(pid), 60)  # the zombie woke and ended (fenced off, or cut off from its dead JVM)
    finally:
        if proc.poll() is None:
            proc.kill()
        standalone.add_worker()  # back to two workers for the next test
    assert normalize(postgres_view(postgres_url, schema)) == oracle_orders(data)


def test_the_driver_killed_mid_run_and_restarted_is_exact(standalone, tmp_path, postgres_url, schema):
    data = tmp_path / "data"
    write_orders(data, files=4, per_file=200, customers=60, seed=321, deletes=0.03)
    spec = postgres_spec(tmp_path, data_dir=data, url=postgres_url, schema=schema, shards=2)
    outcome = run_until_done(spec, master=standalone.url, kill_after=lambda a: 14.0 if a == 0 else None)
    assert outcome.kills == 1, outcome
    assert normalize(postgres_view(postgres_url, schema)) == oracle_orders(data)


def test_a_speculative_attempt_wins_and_the_stalled_one_is_fenced(standalone, tmp_path, postgres_url, schema):
    data = tmp_path / "data"
    write_orders(data, files=1, per_file=300, customers=80, seed=331, deletes=0.03)
    spec = postgres_spec(tmp_path, data_dir=data, url=postgres_url, schema=schema, shards=4)
    marker, events = tmp_path / "stalled", tmp_path / "events"
    events.mkdir()
    proc = child(
        spec,
        standalone.url,
        **{
            "spark.speculation": "true",
            "spark.speculation.interval": "100ms",
            "spark.speculation.quantile": "0.5",
            "spark.speculation.multiplier": "1.5",
            "spark.speculation.minTaskRuntime": "1s",
            "spark.speculation.efficiency.enabled": "false",  # else a task that read its rows fast is never "slow"
            "spark.eventLog.enabled": "true",
            "spark.eventLog.dir": f"file://{events}",
            "spark.eventLog.compress": "false",
            "spark.executorEnv.TIDEMARK_FAULTS": f"mid_store:stall=20!once={marker}",
        },
    )
    _, stderr = proc.communicate(timeout=300)
    assert proc.returncode == 0, stderr[-3000:]
    assert normalize(postgres_view(postgres_url, schema)) == oracle_orders(data)
    _, pid = open(marker).read().split()
    await_exit(int(pid), 60)  # the stalled attempt ended (fenced, or killed by Spark)
    logs = [f for f in glob.glob(str(events / "**" / "*"), recursive=True) if os.path.isfile(f)]
    starts = [
        json.loads(line) for f in logs for line in open(f, errors="replace") if '"SparkListenerTaskStart"' in line
    ]
    ends = [json.loads(line) for f in logs for line in open(f, errors="replace") if '"SparkListenerTaskEnd"' in line]
    summary = [
        (
            e["Stage ID"],
            e["Task Info"]["Index"],
            e["Task Info"]["Attempt"],
            e["Task Info"]["Speculative"],
            e["Task Info"]["Finish Time"] - e["Task Info"]["Launch Time"],
            e["Task End Reason"]["Reason"],
        )
        for e in ends
    ]
    assert any(s["Task Info"].get("Speculative") for s in starts), f"Spark launched no speculative attempt: {summary}"
