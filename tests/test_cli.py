"""The `tidemark` command as a user runs it: check, run --available-now, status."""

from __future__ import annotations

import os
import re
import subprocess
import sys

import pytest

from tests.support.helpers import normalize, oracle_orders, orders_spec, sqlite_view, write_orders

pytestmark = pytest.mark.spark


def tidemark(*args, timeout=300):
    env = {**os.environ, "PYSPARK_PYTHON": sys.executable, "SPARK_LOCAL_IP": "127.0.0.1", "COLUMNS": "200"}
    return subprocess.run(
        [sys.executable, "-m", "tidemark", *args], capture_output=True, text=True, env=env, timeout=timeout
    )


def test_check_run_status(tmp_path):
    data, db = tmp_path / "data", tmp_path / "views.db"
    write_orders(data, files=2, per_file=100, customers=20, seed=41)
    spec = orders_spec(tmp_path, data_dir=data, db_path=db, shards=2, max_files=1)

    checked = tidemark("check", spec)
    assert checked.returncode == 0, checked.stderr
    assert "materialization view: endpoint sqlite ok, 1 binding(s)" in checked.stdout + checked.stderr
    assert not db.exists() or "customers" not in db.read_bytes().decode("latin-1")  # dry run: no table

    ran = tidemark("run", spec, "--available-now", "--master", "local[2]")
    assert ran.returncode == 0, ran.stderr[-3000:]
    out = ran.stdout + ran.stderr
    assert re.search(r"view batch 0: 100 docs .* over 2 shard\(s\).*\| lag 1 file\(s\)", out), out[-2000:]
    assert re.search(r"view batch 1: 100 docs .*\| lag 0 file\(s\)", out), out[-2000:]
    assert "done: 2 batch(es), 200 documents" in out
    assert normalize(sqlite_view(db)) == oracle_orders(data)

    status = tidemark("status", spec)
    assert status.returncode == 0, status.stderr
    rows = [ln for ln in (status.stdout + status.stderr).splitlines() if re.search(r"[0-9a-f]{8}-[0-9a-f]{8}", ln)]
    assert len(rows) == 2, status.stdout + status.stderr
    for row in rows:
        # range, fence, the batch the endpoint holds
        assert row.split()[-1] == "1" and row.split()[-2].isdigit(), row
    assert "up to date: no input waiting" in status.stdout.splitlines()[0], status.stdout


@pytest.mark.slow  # CI runs it after the default suite (-m slow)
def test_an_error_in_a_shard_task_is_one_line_and_reset_starts_over(tmp_path):
    """An endpoint error raised inside a Spark task (a trigger refuses the row) reaches the
    terminal as one line and exit code 1, without Spark's or Python's tracebacks (those come
    with --verbose); `tidemark reset` then asks for confirmation, and with --yes starts over."""
    import sqlite3

    data, db = tmp_path / "data", tmp_path / "views.db"
    write_orders(data, files=1, per_file=50, customers=10, seed=42)
    spec = orders_spec(tmp_path, data_dir=data, db_path=db, shards=2, max_files=1)
    assert tidemark("run", spec, "--available-now", "--master", "local[2]").returncode == 0
    con = sqlite3.connect(db)
    con.execute("CREATE TRIGGER refuse BEFORE UPDATE ON customers BEGIN SELECT RAISE(ABORT, 'frozen by the DBA'); END")
    con.commit()
    con.close()
    write_orders(data, files=1, per_file=50, customers=10, seed=43, start=1)

    failed = tidemark("run", spec, "--available-now", "--master", "local[2]")
    assert failed.returncode == 1
    lines = [ln for ln in failed.stderr.splitlines() if ln.strip()]
    assert lines[-1].startswith("error: SQLite database") and "frozen by the DBA" in lines[-1], failed.stderr[-3000:]
    assert "Traceback" not in failed.stderr and "py4j" not in failed.stderr and "tidemark-error" not in failed.stderr
    verbose = tidemark("--verbose", "run", spec, "--available-now", "--master", "local[2]")
    assert verbose.returncode == 1 and "Traceback" in verbose.stderr

    refused = tidemark("reset", spec)  # no terminal to confirm on
    assert refused.returncode == 1 and "pass --yes" in refused.stderr
    assert normalize(sqlite_view(db)) != {}
    done = tidemark("reset", spec, "--yes")
    assert done.returncode == 0, done.stderr
    assert "dropped table customers" in done.stdout and "deleted checkpoint folder" in done.stdout
    assert not (tmp_path / "checkpoints" / "view").exists()
    con = sqlite3.connect(db)
    assert con.execute("SELECT count(*) FROM sqlite_master WHERE name = 'customers'").fetchone() == (0,)
    con.close()
    # (a run after a reset replays the whole input: tests/test_operator_actions.py)
