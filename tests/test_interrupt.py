"""Ctrl-C (SIGINT to the process group, as a terminal sends it) while ``tidemark.materialize``'s
run is awaited from a Python script: the batch in progress commits, the query stops, the
script ends with a short KeyboardInterrupt — no py4j, Spark or JVM traces, then or later."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap

import pytest

from tests.support.day_ops import ENV, _group_alive, _only, wait_for
from tests.support.helpers import normalize, oracle_orders, orders_spec, sqlite_view, write_orders
from tidemark.runtime.recovery_log import RecoveryLog

pytestmark = pytest.mark.spark


def test_ctrl_c_in_a_python_script_commits_the_batch_in_progress_and_stops_without_traces(tmp_path):
    data, db = tmp_path / "data", tmp_path / "views.db"
    files = write_orders(data, files=1, per_file=100, customers=20, seed=1)
    spec = orders_spec(tmp_path, data_dir=data, db_path=db, shards=2)
    chk = os.path.join(tmp_path, "checkpoints", "view")
    script = tmp_path / "job.py"
    script.write_text(
        textwrap.dedent(f"""
        import tidemark
        run = tidemark.materialize({str(spec)!r}, on_batch=lambda r: print("batch", r.batch_id, flush=True))
        run.await_termination()
        print("not reached")
    """)
    )
    err = open(tmp_path / "job.err", "w+")
    proc = subprocess.Popen([sys.executable, str(script)], stdout=err, stderr=err, env=ENV, start_new_session=True)
    try:
        wait_for("batch 0 to commit", lambda: "batch 0\n" in (tmp_path / "job.err").read_text(), proc=proc)
        files += write_orders(data, files=1, per_file=20000, customers=5000, seed=2, start=1)
        wait_for(
            "batch 1 to start", lambda: os.path.exists(os.path.join(chk, "tidemark", "intent", "1.json")), proc=proc
        )
        os.killpg(proc.pid, signal.SIGINT)
        assert proc.wait(timeout=120) == -signal.SIGINT  # Python's exit on an unhandled KeyboardInterrupt
        wait_for("the job's JVM to exit", lambda: not _group_alive(proc.pid))
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
    text = (tmp_path / "job.err").read_text()
    tail = text[text.index("batch 0\n") :]
    assert "batch 1\n" in tail and "not reached" not in tail, text[-3000:]  # the batch in progress committed
    assert tail.rstrip().endswith("KeyboardInterrupt: stopped on request; every committed batch stays"), text[-3000:]
    for noise in ("py4j", "Exception", "ERROR", "Py4J"):
        assert noise not in tail, text[-3000:]
    assert RecoveryLog(chk, "view", create=False).last().batch_id == 1
    assert normalize(sqlite_view(db)) == oracle_orders(
        _only(data, [os.path.basename(f) for f in files], tmp_path / "oracle")
    )


def test_query_stop_during_a_batch_ends_quietly_and_commits_nothing_of_it(tmp_path):
    """``query.stop()`` while a batch's Spark job runs (a shard task stalled at its first row):
    no ``StackOverflowError`` (Spark's stop check runs a regular expression over the batch's
    error, which a Py4JJavaError's 10 KB Java trace overflowed), no Java stack; the batch is
    not committed, and the next run commits it exactly."""
    data, db = tmp_path / "data", tmp_path / "views.db"
    files = write_orders(data, files=1, per_file=200, customers=20, seed=3)
    spec = orders_spec(tmp_path, data_dir=data, db_path=db, shards=2)
    chk = os.path.join(tmp_path, "checkpoints", "view")
    script = tmp_path / "job.py"
    script.write_text(
        textwrap.dedent(f"""
        import os, time
        import tidemark
        run = tidemark.materialize({str(spec)!r})
        intent = os.path.join({chk!r}, "tidemark", "intent", "0.json")
        while not os.path.exists(intent):
            time.sleep(0.05)
        time.sleep(2)  # the batch's job is under way (its first row stalls)
        run.stop()
        print("stopped", flush=True)
    """)
    )
    env = {**ENV, "TIDEMARK_FAULTS": f"mid_stream:stall=20!once={tmp_path / 'stalled'}"}
    err = open(tmp_path / "job.err", "w+")
    proc = subprocess.run([sys.executable, str(script)], stdout=err, stderr=err, env=env, timeout=240)
    text = (tmp_path / "job.err").read_text()
    assert proc.returncode == 0 and "stopped" in text, text[-3000:]
    assert "StackOverflowError" not in text and "\tat " not in text, text[-3000:]
    assert RecoveryLog(chk, "view", create=False).last() is None  # nothing of the stopped batch
    subprocess.run([sys.executable, "-m", "tidemark", "run", str(spec), "--available-now"], env=ENV, check=True)
    assert normalize(sqlite_view(db)) == oracle_orders(
        _only(data, [os.path.basename(f) for f in files], tmp_path / "oracle")
    )


@pytest.mark.spark
def test_a_run_killed_while_spark_wrote_its_first_offsets_restarts(spark, tmp_path):
    """``kill -9`` while Spark wrote ``offsets/0`` leaves its temporary file; Spark 4 refuses to
    start batch 0 beside it (STATE_STORE_CHECKPOINT_LOCATION_NOT_EMPTY). The next run removes
    it and the view is exact (found by the chaos test of a chain of views through Kafka)."""
    from tidemark.spark.runner import run_spec

    data, db = tmp_path / "data", tmp_path / "views.db"
    write_orders(data, files=2, per_file=20, customers=5, seed=3)
    spec = orders_spec(tmp_path, data_dir=data, db_path=db)
    offsets = tmp_path / "checkpoints" / "view" / "spark" / "offsets"
    offsets.mkdir(parents=True)
    (offsets / ".0.af40d50d-20cf-461c-a4bf-3b48a2db334f.tmp").write_text("")  # as the killed run left it
    run_spec(spec, spark=spark)
    assert normalize(sqlite_view(db)) == oracle_orders(data)
    assert not any(n.endswith(".tmp") for n in os.listdir(offsets))
