"""End to end on local Spark: JSON files → a MySQL/MariaDB view, compared with an
independent oracle (``tests.support.helpers.oracle_orders`` reduces the files without tidemark).

Every test materializes into a database of its own and drops it afterwards.
"""

from __future__ import annotations

import json

import pytest

from tests.support.helpers import assert_verified, normalize, oracle_orders, write_orders
from tests.support.mysql_support import mysql_db, mysql_spec, mysql_url, mysql_view, sql

pytestmark = pytest.mark.spark


def run(spark, spec_path):
    from tidemark.spark.runner import run_spec

    reports = []
    run_spec(spec_path, spark=spark, on_batch=reports.append)
    return reports


@pytest.mark.parametrize("shards", [1, 2])
def test_several_batches_restart_and_resume(spark, tmp_path, mysql_url, mysql_db, shards):
    data = tmp_path / "data"
    write_orders(data, files=2, per_file=200, customers=60, seed=70 + shards, deletes=0.05)
    spec = mysql_spec(tmp_path, data_dir=data, url=mysql_url, schema=mysql_db, shards=shards)

    reports = run(spark, spec)
    assert [r.batch_id for r in reports] == [0, 1] and all(r.shards == shards for r in reports)
    assert normalize(mysql_view(mysql_url, mysql_db)) == oracle_orders(data)

    # More input; a restart resumes where it stopped and Loads existing keys.
    write_orders(data, files=1, per_file=200, customers=60, seed=170 + shards, start=2, deletes=0.05)
    reports = run(spark, spec)
    assert [r.batch_id for r in reports] == [2] and sum(r.loaded for r in reports) > 0
    assert normalize(mysql_view(mysql_url, mysql_db)) == oracle_orders(data)
    rows = sql(
        mysql_url,
        f"SELECT key_begin, key_end, checkpoint FROM `{mysql_db}`.tidemark_checkpoints "
        "WHERE materialization = 'view' ORDER BY key_begin",
    )
    assert len(rows) == shards and {json.loads(r[2])["batch_id"] for r in rows} == {2}
    assert rows[0][0] == 0 and rows[-1][1] == 0xFFFFFFFF
    assert_verified(spec)
