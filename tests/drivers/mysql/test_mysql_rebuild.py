"""``tidemark rebuild`` into MariaDB, without Spark: rows replaced in one transaction, or a key change's tables swapped.

MariaDB commits DDL on its own: a cut-over that keeps the key and the types replaces the rows
in one transaction; one that changes them moves the records in one transaction, then swaps the
tables in one ``RENAME TABLE`` (drivers/sql/replace.py).  A kill at each step leaves the old
view or the new one.
"""

from __future__ import annotations

import json

import pytest

from tests.support import plain
from tests.support.harness import KILLED, arm_in_sequence, fired
from tests.support.helpers import normalize, write_orders
from tests.support.mysql_support import mysql_db, mysql_spec, mysql_url, mysql_view, sql
from tests.support.rebuild_support import (
    assert_whole_readings,
    edit,
    oracle,
    rebuild_child,
    rebuild_while_live_commits,
)
from tidemark.runtime.rebuild import Rebuild
from tidemark.spec import load_spec


def _tables(url, db) -> set:
    return {r[0] for r in sql(url, f"SHOW TABLES FROM `{db}`")}


def _primary_key(url, db) -> list:
    rows = sql(
        url,
        "SELECT column_name FROM information_schema.key_column_usage WHERE table_schema = %s "
        "AND table_name = 'customers' AND constraint_name = 'PRIMARY' ORDER BY ordinal_position",
        (db,),
    )
    return [r[0] for r in rows]


def test_a_reduce_change_replaces_the_rows_and_a_key_change_swaps_the_tables(tmp_path, mysql_url, mysql_db):
    data = tmp_path / "data"
    write_orders(data, files=2, per_file=120, customers=30, seed=25)
    spec = mysql_spec(tmp_path, data_dir=data, url=mysql_url, schema=mysql_db, shards=2)
    assert plain.run(spec) == 0
    sql(mysql_url, f"CREATE VIEW `{mysql_db}`.spenders AS SELECT customer, amount FROM `{mysql_db}`.customers")
    edit(spec, amount="maximize", add="segment")  # the new column is added before the transaction
    Rebuild(load_spec(spec), "view", plain.run, say=lambda s: None).run()
    assert normalize(mysql_view(mysql_url, mysql_db)) == oracle(data, amount="maximize")
    assert sql(mysql_url, f"SELECT COUNT(*) FROM `{mysql_db}`.spenders")[0][0] == len(oracle(data))
    tables = {r[0] for r in sql(mysql_url, f"SHOW TABLES FROM `{mysql_db}`")}
    assert "customers__tm_rebuild" not in tables
    columns = {r[0] for r in sql(mysql_url, f"SHOW COLUMNS FROM `{mysql_db}`.customers")}
    assert "segment" in columns
    # now a key change: the records move in one transaction, then one RENAME TABLE swaps the tables;
    # a grant on the table's name and the dependent view (by name) keep working
    user = f"tm_reader_{mysql_db}"[:32]
    sql(mysql_url, f"CREATE USER IF NOT EXISTS '{user}'@'localhost'")
    try:
        sql(mysql_url, f"GRANT SELECT ON `{mysql_db}`.customers TO '{user}'@'localhost'")
        edit(spec, key="city")
        said: list = []
        Rebuild(load_spec(spec), "view", plain.run, say=said.append).run()
        new = oracle(data, key="city", amount="maximize")
        assert normalize(mysql_view(mysql_url, mysql_db, key="city")) == new
        assert _primary_key(mysql_url, mysql_db) == ["city"]
        assert any("one RENAME TABLE" in line for line in said), said
        assert _tables(mysql_url, mysql_db) & {"customers__tm_rebuild", "customers__tm_old"} == set()
        assert sql(mysql_url, f"SELECT COUNT(*) FROM `{mysql_db}`.spenders")[0][0] == len(new)
        grants = " ".join(r[0] for r in sql(mysql_url, f"SHOW GRANTS FOR '{user}'@'localhost'"))
        assert f"`{mysql_db}`.`customers`" in grants, grants
    finally:
        sql(mysql_url, f"DROP USER IF EXISTS '{user}'@'localhost'")
    write_orders(data, files=1, per_file=60, customers=30, seed=28, start=2)
    assert plain.run(spec) == 0
    assert normalize(mysql_view(mysql_url, mysql_db, key="city")) == oracle(data, key="city", amount="maximize")


def _documents(url, db) -> list:
    """The view's documents, by the key its table has now: canonical JSON texts, sorted."""
    return _canonical(normalize(mysql_view(url, db, key=_primary_key(url, db)[0])))


def _canonical(view: dict) -> list:
    return sorted(json.dumps(d, sort_keys=True) for d in view.values())


@pytest.mark.chaos
def test_a_kill_at_every_step_of_a_key_change_leaves_the_old_or_the_new_view(tmp_path, mysql_url, mysql_db):
    data = tmp_path / "data"
    write_orders(data, files=2, per_file=120, customers=30, seed=29)
    spec = mysql_spec(tmp_path, data_dir=data, url=mysql_url, schema=mysql_db, shards=2)
    assert plain.run(spec) == 0
    before, after = _canonical(oracle(data)), _canonical(oracle(data, key="city"))
    edit(spec, key="city")
    markers = tmp_path / "markers"
    markers.mkdir()
    points = ["replace_contents", "before_table_swap", "after_table_swap", "after_cutover"]
    faults = arm_in_sequence(points, markers)
    seen = []
    for _attempt in range(len(points) + 2):
        proc = rebuild_child(spec, faults)
        docs = _documents(mysql_url, mysql_db)
        assert docs in (before, after), proc.stderr[-2000:]
        seen.append("new" if docs == after else "old")
        if proc.returncode == 0:
            break
        assert proc.returncode == KILLED, proc.stderr[-3000:]
    assert proc.returncode == 0, proc.stderr[-3000:]
    # a kill after the swap (before its old tables are dropped) is finished by the next attempt's
    # cut-over state, which then never reaches after_cutover
    assert fired(markers) == set(points) - {"after_cutover"}, seen
    assert seen == ["old", "old", "new", "new"], seen
    assert _primary_key(mysql_url, mysql_db) == ["city"]
    assert _tables(mysql_url, mysql_db) & {"customers__tm_rebuild", "customers__tm_old"} == set()
    write_orders(data, files=1, per_file=60, customers=30, seed=30, start=2)
    assert plain.run(spec) == 0
    assert normalize(mysql_view(mysql_url, mysql_db, key="city")) == oracle(data, key="city")


def test_readers_see_the_old_or_the_new_view_while_the_live_view_commits(tmp_path, mysql_url, mysql_db):
    data = tmp_path / "data"
    write_orders(data, files=2, per_file=120, customers=30, seed=26, deletes=0.03)
    spec = mysql_spec(tmp_path, data_dir=data, url=mysql_url, schema=mysql_db, shards=1)
    old = str(tmp_path / "old.yaml")
    with open(spec) as a, open(old, "w") as b:
        b.write(a.read())
    assert plain.run(spec) == 0
    edit(spec, amount="maximize")
    query = f"SELECT COALESCE(SUM(amount), 0) FROM `{mysql_db}`.customers"
    _, readings, _ = rebuild_while_live_commits(spec, old, data, lambda: int(sql(mysql_url, query)[0][0]), seed=27)
    new = oracle(data, amount="maximize")
    assert normalize(mysql_view(mysql_url, mysql_db)) == new
    assert_whole_readings(readings, data, new)
