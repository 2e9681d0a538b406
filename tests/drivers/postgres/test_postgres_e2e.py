"""End to end on local Spark: JSON files → PostgreSQL view, compared with an independent oracle.

Every test materializes into a schema of its own and drops it afterwards.
"""

from __future__ import annotations

import psycopg
import pytest

from tests.support.helpers import (
    ORDERS_SCHEMA,
    assert_verified,
    normalize,
    oracle_orders,
    postgres_spec,
    postgres_view,
    write_orders,
)

pytestmark = [pytest.mark.spark, pytest.mark.postgres]


def checkpoint_rows(url, schema, materialization="view"):
    with psycopg.connect(url) as con:
        return con.execute(
            f'SELECT key_begin, key_end, fence, checkpoint FROM "{schema}".tidemark_checkpoints '
            "WHERE materialization = %s ORDER BY key_begin",
            (materialization,),
        ).fetchall()


def run(spark, spec_path):
    from tidemark.spark.runner import run_spec

    reports = []
    run_spec(spec_path, spark=spark, on_batch=reports.append)
    return reports


@pytest.mark.parametrize("shards", [1, 4])
def test_several_batches_restart_and_resume(spark, tmp_path, postgres_url, pg_schema, shards):
    data = tmp_path / "data"
    write_orders(data, files=3, per_file=200, customers=60, seed=20 + shards, deletes=0.05)
    spec = postgres_spec(tmp_path, data_dir=data, url=postgres_url, schema=pg_schema, shards=shards)

    reports = run(spark, spec)
    assert [r.batch_id for r in reports] == [0, 1, 2]
    assert all(r.shards == shards for r in reports)
    assert normalize(postgres_view(postgres_url, pg_schema)) == oracle_orders(data)
    rows = checkpoint_rows(postgres_url, pg_schema)
    assert len(rows) == shards and {r[3]["batch_id"] for r in rows} == {2}
    assert rows[0][0] == 0 and rows[-1][1] == 0xFFFFFFFF

    # More input arrives; a restart resumes exactly where it stopped and Loads existing keys.
    write_orders(data, files=2, per_file=200, customers=60, seed=120 + shards, start=3, deletes=0.05)
    reports = run(spark, spec)
    assert [r.batch_id for r in reports] == [3, 4]
    assert sum(r.loaded for r in reports) > 0
    assert normalize(postgres_view(postgres_url, pg_schema)) == oracle_orders(data)
    assert {r[3]["batch_id"] for r in checkpoint_rows(postgres_url, pg_schema)} == {4}
    assert_verified(spec)


def test_shard_count_change_splits_and_merges(spark, tmp_path, postgres_url, pg_schema):
    """1 → 4 shards (the new ranges inherit the parent's checkpoint), then 4 → 1 (a merge)."""
    data = tmp_path / "data"
    write_orders(data, files=1, per_file=200, customers=50, seed=31)
    run(spark, postgres_spec(tmp_path, data_dir=data, url=postgres_url, schema=pg_schema, shards=1))
    write_orders(data, files=2, per_file=200, customers=50, seed=32, start=1, deletes=0.05)
    reports = run(spark, postgres_spec(tmp_path, data_dir=data, url=postgres_url, schema=pg_schema, shards=4))
    assert [(r.batch_id, r.shards) for r in reports] == [(1, 4), (2, 4)]
    write_orders(data, files=1, per_file=200, customers=50, seed=33, start=3)
    spec = postgres_spec(tmp_path, data_dir=data, url=postgres_url, schema=pg_schema, shards=1)
    reports = run(spark, spec)
    assert [(r.batch_id, r.shards) for r in reports] == [(3, 1)]
    assert normalize(postgres_view(postgres_url, pg_schema)) == oracle_orders(data)
    full = [r for r in checkpoint_rows(postgres_url, pg_schema) if (r[0], r[1]) == (0, 0xFFFFFFFF)]
    assert len(full) == 1 and full[0][3]["batch_id"] == 3
    assert_verified(spec)


def test_materialize_dataframe_api(spark, tmp_path, postgres_url, pg_schema):
    import tidemark

    data = tmp_path / "data"
    write_orders(data, files=2, per_file=100, customers=30, seed=34)
    # one file per batch: within one batch, a DataFrame source does not order lines across files
    df = spark.readStream.format("text").option("maxFilesPerTrigger", 1).load(str(data))
    run = tidemark.materialize(
        df,
        collection={"key": ["/customer"], "schema": ORDERS_SCHEMA},
        endpoint={"postgres": {"url": postgres_url, "schema": pg_schema}},
        resource={"table": "customers"},
        checkpoint=str(tmp_path / "chk"),
        shards=2,
        spark=spark,
        available_now=True,
    )
    run.await_termination()
    assert normalize(postgres_view(postgres_url, pg_schema)) == oracle_orders(data)


def test_a_field_widened_from_integer_to_number_carries_on(spark, tmp_path, postgres_url, pg_schema):
    """`amount` goes from integer to number between two runs. The second run's Apply changes
    its column to double precision, recomputed from flow_document, and the sums go on
    exactly (the new amounts end in .5, which binary floating point holds exactly)."""
    import json
    import os

    import yaml

    data = tmp_path / "data"
    write_orders(data, files=2, per_file=200, customers=40, seed=61)
    spec = postgres_spec(tmp_path, data_dir=data, url=postgres_url, schema=pg_schema, shards=2)
    run(spark, spec)

    with open(spec) as f:
        doc = yaml.safe_load(f)
    doc["collections"]["orders"]["schema"]["properties"]["amount"]["type"] = "number"
    with open(spec, "w") as f:
        yaml.safe_dump(doc, f)
    [path] = write_orders(data, files=1, per_file=200, customers=40, seed=62, start=2)
    with open(path) as f:
        lines = [json.loads(line) for line in f]
    with open(path, "w") as f:
        f.writelines(json.dumps(dict(d, amount=d["amount"] + 0.5)) + "\n" for d in lines)
    os.utime(path, (1_700_000_020, 1_700_000_020))  # the file source goes by mtime

    [report] = run(spark, spec)
    assert report.loaded > 0
    with psycopg.connect(postgres_url) as con:
        kind = con.execute(
            "SELECT data_type FROM information_schema.columns WHERE table_schema = %s "
            "AND table_name = 'customers' AND column_name = 'amount'",
            (pg_schema,),
        ).fetchone()[0]
        columns = dict(con.execute(f'SELECT customer, amount FROM "{pg_schema}".customers').fetchall())
    view = oracle_orders(data)
    assert kind == "double precision"
    assert normalize(postgres_view(postgres_url, pg_schema)) == view
    assert columns == {k: d["amount"] for k, d in view.items()}
    assert_verified(spec)
