"""``tidemark adopt``: a table that exists becomes a view's starting state; newer input on top.

Each test builds the "hand-written" table as a correct upsert job would have left it after
the first files (the oracle's view of them, as plain columns), adopts it, adds input, runs,
and compares the view with the oracle over every file: a table adopted twice, or files read
twice or not at all, shows as wrong sums.
"""

from __future__ import annotations

import json
import os
import sqlite3

import pytest

from tests.support.adopt_tables import first_files, hand_table_sqlite, mtime
from tests.support.helpers import (
    normalize,
    oracle_orders,
    orders_spec,
    postgres_spec,
    postgres_view,
    sqlite_view,
    write_orders,
)

pytestmark = [pytest.mark.spark]

COLUMNS = ("customer", "amount", "orders", "largest", "city", "items", "flags")


def test_adopt_a_sqlite_table_then_newer_files_on_top_and_later_runs_are_exact(spark, tmp_path):
    from tidemark.spark.adopt import adopt
    from tidemark.spark.runner import run_spec

    data, db = tmp_path / "data", tmp_path / "views.db"
    write_orders(data, files=4, per_file=120, customers=30, seed=7, deletes=0.03)
    hand = first_files(data, 2, tmp_path)
    hand_table_sqlite(db, "by_hand", hand)
    spec = orders_spec(tmp_path, data_dir=data, db_path=db, shards=2, max_files=1)

    # the table holds files 0-1; files 2-3 (modified later) are reduced on top in batch 0
    got = adopt(spec, from_="by_hand", since=mtime(data, 1), spark=spark)
    assert got["rows"] == {"customers": len(hand)}
    per_file = 120
    assert got["batch"].documents == len(hand) + 2 * per_file
    assert normalize(sqlite_view(db)) == normalize(oracle_orders(data))

    write_orders(data, files=2, per_file=120, customers=30, seed=8, start=4, deletes=0.03)
    reports = []
    run_spec(spec, spark=spark, on_batch=reports.append)
    assert [r.batch_id for r in reports] == [1, 2]  # files 4 and 5, each once
    assert normalize(sqlite_view(db)) == normalize(oracle_orders(data))
    # the hand-written table is left as it was
    assert sqlite3.connect(db).execute('SELECT count(*) FROM "by_hand"').fetchone()[0] == len(hand)


def test_rows_that_break_the_schema_are_refused_before_anything_is_written(tmp_path):
    from tidemark.errors import DocumentError
    from tidemark.spark.adopt import adopt

    data, db = tmp_path / "data", tmp_path / "views.db"
    write_orders(data, files=1, per_file=10, customers=5, seed=1)
    con = sqlite3.connect(db)
    con.execute('CREATE TABLE "by_hand" (customer TEXT, amount)')
    con.executemany('INSERT INTO "by_hand" VALUES (?, ?)', [("a", 1), ("b", "lots"), ("a", 3), (None, 4)])
    con.commit()
    con.close()
    spec = orders_spec(tmp_path, data_dir=data, db_path=db, shards=2)

    def no_spark():
        raise AssertionError("Spark was started for an adopt that must be refused")

    with pytest.raises(DocumentError) as err:
        adopt(spec, from_="by_hand", spark=no_spark)
    text = str(err.value)
    assert text.startswith("adopt customers from 'by_hand': 3 row(s) do not fit collection 'orders'")
    assert 'row 2 (key ["b"])' in text and 'rows 1 and 3 both hold key ["a"]' in text
    assert "\n  row 4: document has no key" in text
    assert not (tmp_path / "checkpoints" / "view" / "adopt").exists()
    tables = {r[0] for r in sqlite3.connect(db).execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
    assert "customers" not in tables


def test_a_view_that_holds_batches_is_not_adopted_into(spark, tmp_path):
    from tidemark.errors import RecoveryError
    from tidemark.spark.adopt import adopt
    from tidemark.spark.runner import run_spec

    data, db = tmp_path / "data", tmp_path / "views.db"
    write_orders(data, files=1, per_file=10, customers=5, seed=1)
    hand_table_sqlite(db, "by_hand", oracle_orders(data))
    spec = orders_spec(tmp_path, data_dir=data, db_path=db, shards=1)
    run_spec(spec, spark=spark)
    before = sqlite_view(db)
    with pytest.raises(
        RecoveryError,
        match=r"holds batches up to 0 already; adopt starts a view. Start over with "
        r"`tidemark reset SPEC -m view`",
    ):
        adopt(spec, from_="by_hand", spark=spark)
    assert sqlite_view(db) == before


def test_adopt_a_delta_table_then_run(spark, tmp_path):
    import pyarrow as pa
    from deltalake import write_deltalake

    from tidemark.ops import committed_view
    from tidemark.spark.adopt import adopt
    from tidemark.spark.runner import run_spec

    data, lake = tmp_path / "data", tmp_path / "lake"
    write_orders(data, files=3, per_file=100, customers=25, seed=3)
    hand = first_files(data, 2, tmp_path)
    rows = [
        {
            "customer": d["customer"],
            "amount": d["amount"],
            "orders": d["orders"],
            "largest": d["largest"],
            "city": d["city"],
            "items": d["items"],
            "flags": json.dumps(d["flags"]),
        }
        for d in hand.values()
    ]
    write_deltalake(str(tmp_path / "hand"), pa.Table.from_pylist(rows))
    spec = orders_spec(tmp_path, data_dir=data, db_path=None, shards=2, endpoint={"delta": {"path": str(lake)}})

    got = adopt(spec, from_=str(tmp_path / "hand"), since=mtime(data, 1), spark=spark)
    assert got["rows"] == {"customers": len(hand)}
    write_orders(data, files=1, per_file=100, customers=25, seed=4, start=3)
    run_spec(spec, spark=spark)
    _, view = committed_view(spec, "customers")
    assert normalize({k[0]: v for k, v in view.items()}) == normalize(oracle_orders(data))


@pytest.mark.postgres
@pytest.mark.chaos
@pytest.mark.chaos_full  # Spark runs: after the default suite
def test_a_killed_adopt_is_refused_by_run_and_finished_by_adopt_again(tmp_path, postgres_url, pg_schema):
    """``tidemark adopt`` SIGKILLed at each point of batch 0 in turn (every attempt dies at the
    next point it reaches); after each kill ``run`` refuses the view (naming the adopt); the
    adopt again finishes it; more input; the view equals the oracle."""
    import subprocess
    import sys

    import psycopg

    from tests.support.harness import KILLED, ROOT, arm_in_sequence, fired

    points = ["adopt_recorded", "after_endpoint_commit", "before_spark_commit", "adopt_before_done"]
    markers = tmp_path / "markers"
    markers.mkdir()
    data = tmp_path / "data"
    write_orders(data, files=3, per_file=150, customers=40, seed=11, deletes=0.03)
    hand = first_files(data, 2, tmp_path)
    with psycopg.connect(postgres_url, autocommit=True) as con:
        con.execute(f'CREATE SCHEMA IF NOT EXISTS "{pg_schema}"')
        con.execute(
            f'CREATE TABLE "{pg_schema}".by_hand (customer text PRIMARY KEY, amount numeric, orders bigint, '
            "largest bigint, city text, items jsonb, flags jsonb)"
        )
        with con.cursor() as cur:
            cur.executemany(
                f'INSERT INTO "{pg_schema}".by_hand VALUES (%s, %s, %s, %s, %s, %s, %s)',
                [
                    (
                        d["customer"],
                        d["amount"],
                        d["orders"],
                        d["largest"],
                        d["city"],
                        json.dumps(d["items"]),
                        json.dumps(d["flags"]),
                    )
                    for d in hand.values()
                ],
            )
    spec = postgres_spec(tmp_path, data_dir=data, url=postgres_url, schema=pg_schema, shards=2)

    def tidemark(*args, faults=""):
        env = {**os.environ, "TIDEMARK_FAULTS": faults, "TIDEMARK_FAULT_SCOPE": "group", "PYTHONPATH": ROOT}
        # its own process group, as the chaos harness does: a kill in an executor takes the JVM and the CLI
        return subprocess.run(
            [sys.executable, "-m", "tidemark", *args],
            cwd=ROOT,
            env=env,
            capture_output=True,
            text=True,
            timeout=600,
            start_new_session=True,
        )

    adopt = ["adopt", spec, "--from", f"{pg_schema}.by_hand", "--since", str(mtime(data, 1))]
    faults = arm_in_sequence(points, markers)
    for attempt in range(len(points) + 1):
        # the first with --since; again without it: the recorded one
        again = tidemark(*(adopt if attempt == 0 else adopt[:-2]), faults=faults)
        if again.returncode == 0:
            break
        assert again.returncode == KILLED, again.stderr[-2000:]
        refused = tidemark("run", spec, "--available-now")
        assert refused.returncode == 1
        first = refused.stderr.strip().splitlines()[0]
        assert "its adopt (customers from" in first and "did not finish" in first, first
        assert "tidemark adopt SPEC -m view" in first, first
    assert again.returncode == 0, again.stderr[-2000:]
    assert fired(markers) == set(points)
    assert "adopted" in again.stdout and "as batch 0" in again.stdout
    write_orders(data, files=1, per_file=150, customers=40, seed=12, start=3, deletes=0.03)
    done = tidemark("run", spec, "--available-now")
    assert done.returncode == 0, done.stderr[-2000:]
    assert normalize(postgres_view(postgres_url, pg_schema)) == normalize(oracle_orders(data))


def test_an_endpoint_that_cannot_read_a_table_says_so_before_anything_is_written(tmp_path):
    from tests.support.helpers import store_spec
    from tidemark.errors import SpecError
    from tidemark.spark.adopt import adopt

    data = tmp_path / "data"
    write_orders(data, files=1, per_file=10, customers=5, seed=1)
    spec = store_spec(tmp_path, data, 2)
    with pytest.raises(
        SpecError,
        match=r"^materialization 'view': the store driver cannot read an existing table to "
        r"adopt \(SQLite, PostgreSQL, MySQL and Delta can\)",
    ):
        adopt(spec, from_="anything", spark=lambda: pytest.fail("Spark started"))
    assert not (tmp_path / "checkpoints" / "view" / "adopt").exists()
