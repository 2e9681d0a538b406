"""``tidemark rebuild`` into MariaDB, without Spark: rows replaced in one transaction; a key change refused.

MariaDB commits DDL on its own, so a cut-over that would change a key or a column's type
cannot be one transaction: it is refused before anything changes, and the live view runs on.
"""

from __future__ import annotations

import pytest

from tests.support import plain
from tests.support.helpers import normalize, write_orders
from tests.support.mysql_support import mysql_db, mysql_spec, mysql_url, mysql_view, sql
from tests.support.rebuild_support import assert_whole_readings, edit, oracle, rebuild_while_live_commits
from tidemark.errors import IncompatibleSchema
from tidemark.runtime.rebuild import Rebuild
from tidemark.spec import load_spec


def test_a_reduce_change_is_rebuilt_and_a_key_change_refused(tmp_path, mysql_url, mysql_db):
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
    # now a key change: MariaDB cannot change a key inside the transaction that replaces the rows
    edit(spec, key="city")
    rebuild = Rebuild(load_spec(spec), "view", plain.run, say=lambda s: None)
    with pytest.raises(IncompatibleSchema, match=r"its key \(\['/customer'\] -> \['/city'\]\).*Nothing was changed"):
        rebuild.run()
    rebuild.close()
    assert "customers__tm_rebuild" not in {r[0] for r in sql(mysql_url, f"SHOW TABLES FROM `{mysql_db}`")}
    assert normalize(mysql_view(mysql_url, mysql_db)) == oracle(data, amount="maximize")


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
