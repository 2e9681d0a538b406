"""``tidemark rebuild`` with Spark (``tidemark.rebuild``, and the CLI): Spark's checkpoint moves with the view.

The shadow is built by Spark's file source from the sources' start; after the cut-over the
live view's checkpoint folder is the shadow's, so the next ``tidemark run`` reads only new
files. The CLI names what it refuses in one line.
"""

from __future__ import annotations

import os
import sqlite3
import subprocess
import sys

import pytest

from tests.support.helpers import normalize, orders_spec, sqlite_view, write_orders
from tests.support.rebuild_support import edit, oracle

pytestmark = pytest.mark.spark


def _cli(*args):
    return subprocess.run(
        [sys.executable, "-m", "tidemark", *args],
        capture_output=True,
        text=True,
        env={**os.environ, "COLUMNS": "300", "PYTHONPATH": os.pathsep.join(sys.path)},
        timeout=300,
    )


def test_rebuild_with_spark_then_run_on(spark, tmp_path):
    import tidemark
    from tidemark.spark.runner import run_spec

    data, db = tmp_path / "data", tmp_path / "views.db"
    write_orders(data, files=2, per_file=80, customers=20, seed=31, deletes=0.03)
    spec = orders_spec(tmp_path, data_dir=data, db_path=db, shards=2)
    run_spec(spec, spark=spark)
    assert normalize(sqlite_view(db)) == oracle(data)
    edit(spec, amount="maximize")
    said = tidemark.rebuild(spec, spark=spark, say=lambda s: None)
    assert "now holds the view of the edited spec" in said
    assert normalize(sqlite_view(db)) == oracle(data, amount="maximize")
    write_orders(data, files=1, per_file=80, customers=20, seed=32, start=2, deletes=0.03)
    [run] = run_spec(spec, spark=spark)
    assert normalize(sqlite_view(db)) == oracle(data, amount="maximize")
    # a rebuild of a view whose input is gone is refused (the source log Spark wrote names it)
    os.rename(data / "orders-0000.json", tmp_path / "moved.json")
    edit(spec, amount="sum")
    cli = _cli("rebuild", spec, "-m", "view")
    assert cli.returncode == 1, cli.stdout + cli.stderr
    assert cli.stderr.startswith("error: ") and "orders-0000.json" in cli.stderr and "Traceback" not in cli.stderr
    cli = _cli("rebuild", spec, "-m", "view", "--abandon")
    assert cli.returncode == 0 and "no rebuild in progress" in cli.stdout, cli.stdout + cli.stderr


@pytest.mark.slow  # (a quicker sibling: tests/runtime/test_rebuild.py::test_the_cut_over_asks_the_live_run_to_stop...)
def test_the_cut_over_stops_a_live_tidemark_run_at_a_batch_boundary(tmp_path):
    from tests.support.day_ops import ENV, wait_for

    data, db = tmp_path / "data", tmp_path / "views.db"
    write_orders(data, files=2, per_file=80, customers=20, seed=33, deletes=0.03)
    spec = orders_spec(tmp_path, data_dir=data, db_path=db, shards=2)
    old = tmp_path / "old.yaml"
    old.write_text(open(spec).read())
    err = open(tmp_path / "live.err", "w+")
    live = subprocess.Popen(
        [sys.executable, "-m", "tidemark", "run", str(old), "--no-spark-ui"],
        stdout=err,
        stderr=err,
        env={**ENV, "PYTHONPATH": os.pathsep.join(sys.path)},
        start_new_session=True,
    )
    try:
        wait_for(
            "the live run to commit the input", lambda: os.path.exists(db) and _view(db) == oracle(data), proc=live
        )
        edit(spec, amount="maximize")
        cli = _cli("rebuild", spec, "-m", "view", "--wait", "120")
        assert cli.returncode == 0, cli.stdout + cli.stderr
        assert "asked the live run to stop at its next batch boundary" in cli.stderr, cli.stdout + cli.stderr
        assert live.wait(timeout=60) == 75
    finally:
        if live.poll() is None:
            os.killpg(live.pid, 9)
            live.wait()
    text = (tmp_path / "live.err").read_text()
    assert "stopped for rebuild " in text and "Traceback" not in text, text[-3000:]
    assert normalize(sqlite_view(db)) == oracle(data, amount="maximize")


def _view(db):
    try:
        return normalize(sqlite_view(db))
    except sqlite3.OperationalError:  # the table is not there yet
        return None


@pytest.mark.slow  # (a quicker sibling: test_rebuild_with_spark_then_run_on; the seeding: tests/runtime)
def test_an_adopted_view_is_rebuilt_from_its_adopted_rows_and_the_input_after_them(spark, tmp_path):
    import sqlite3

    import tidemark
    from tests.support.adopt_tables import first_files, hand_table_sqlite, mtime
    from tidemark.spark.adopt import adopt
    from tidemark.spark.runner import run_spec

    data, db = tmp_path / "data", tmp_path / "views.db"
    write_orders(data, files=3, per_file=80, customers=20, seed=33, deletes=0.03)
    hand = first_files(data, 2, tmp_path)  # what a hand-written job held after files 0-1
    hand_table_sqlite(db, "by_hand", hand)
    spec = orders_spec(tmp_path, data_dir=data, db_path=db, shards=2)
    adopt(spec, from_="by_hand", since=mtime(data, 1), spark=spark)
    assert normalize(sqlite_view(db)) == oracle(data, start=hand, after=2)
    con = sqlite3.connect(db)
    con.execute('DROP TABLE "by_hand"')  # the rebuild reads the adopted rows the adopt recorded
    con.commit()
    con.close()
    edit(spec, amount="maximize")
    said = tidemark.rebuild(spec, spark=spark, say=lambda s: None)
    assert "now holds the view of the edited spec" in said
    # the adopted rows as they were, the input after them reduced on top by the edited spec
    assert normalize(sqlite_view(db)) == oracle(data, amount="maximize", start=hand, after=2)
    write_orders(data, files=1, per_file=80, customers=20, seed=34, start=3, deletes=0.03)
    run_spec(spec, spark=spark)
    assert normalize(sqlite_view(db)) == oracle(data, amount="maximize", start=hand, after=2)
