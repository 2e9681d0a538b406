"""End to end on local Spark: JSON files → PostgreSQL view, compared with an independent oracle.

Every test materializes into a schema of its own and drops it afterwards.
"""

from __future__ import annotations


import psycopg
import pytest

from tests.helpers import ORDERS_SCHEMA, normalize, oracle_orders, write_orders, postgres_spec, postgres_view

pytestmark = [pytest.mark.spark, pytest.mark.postgres]


def checkpoint_rows(url, schema, materialization="view"):
    with psycopg.connect(url) as con:
        return con.execute(
            f'SELECT key_begin, key_end, fence, checkpoint FROM "{schema}".tidemark_checkpoints '
            "WHERE materialization = %s ORDER BY key_begin", (materialization,)).fetchall()


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


def test_shard_count_change_splits_and_merges(spark, tmp_path, postgres_url, pg_schema):
    """1 → 4 shards (the new ranges inherit the parent's checkpoint), then 4 → 1 (a merge)."""
    data = tmp_path / "data"
    write_orders(data, files=1, per_file=200, customers=50, seed=31)
    run(spark, postgres_spec(tmp_path, data_dir=data, url=postgres_url, schema=pg_schema, shards=1))
    write_orders(data, files=2, per_file=200, customers=50, seed=32, start=1, deletes=0.05)
    reports = run(spark, postgres_spec(tmp_path, data_dir=data, url=postgres_url, schema=pg_schema, shards=4))
    assert [(r.batch_id, r.shards) for r in reports] == [(1, 4), (2, 4)]
    write_orders(data, files=1, per_file=200, customers=50, seed=33, start=3)
    reports = run(spark, postgres_spec(tmp_path, data_dir=data, url=postgres_url, schema=pg_schema, shards=1))
    assert [(r.batch_id, r.shards) for r in reports] == [(3, 1)]
    assert normalize(postgres_view(postgres_url, pg_schema)) == oracle_orders(data)
    full = [r for r in checkpoint_rows(postgres_url, pg_schema) if (r[0], r[1]) == (0, 0xFFFFFFFF)]
    assert len(full) == 1 and full[0][3]["batch_id"] == 3


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
    )
    run.await_termination()
    assert normalize(postgres_view(postgres_url, pg_schema)) == oracle_orders(data)


def customers_in(data, names) -> set:
    import json
    import os

    out = set()
    for name in names:
        with open(os.path.join(data, name)) as f:
            out |= {json.loads(line)["customer"] for line in f}
    return out


def test_keys_above_the_largest_stored_are_not_loaded(spark, tmp_path, postgres_url, pg_schema):
    """Growing keys: a key above the largest one its range has stored cannot exist, so it is
    not Loaded (tidemark.runtime.maxkey).  The counts are computed here from the files; the
    view is compared with the oracle after every run, through a split and a merge."""
    data = tmp_path / "data"

    def spec(shards):
        return postgres_spec(tmp_path, data_dir=data, url=postgres_url, schema=pg_schema, shards=shards)

    # Batch 0 into the table Apply has just created: nothing can exist, nothing is Loaded.
    write_orders(data, files=1, per_file=300, customers=100, seed=41, deletes=0.05)
    [r0] = run(spark, spec(1))
    assert (r0.loaded, r0.load_skipped) == (0, len(customers_in(data, ["orders-0000.json"])))
    assert normalize(postgres_view(postgres_url, pg_schema)) == oracle_orders(data)

    # Batch 1 reaches back into old keys: those at or below batch 0's largest are Loaded,
    # the new ones above it are not.
    top0 = max(customers_in(data, ["orders-0000.json"]))
    before = set(oracle_orders(data))
    write_orders(data, files=1, per_file=300, customers=150, seed=42, start=1, first=70, deletes=0.05)
    keys1 = customers_in(data, ["orders-0001.json"])
    [r1] = run(spark, spec(1))
    assert r1.load_skipped == len({k for k in keys1 if k > top0}) > 0
    assert r1.loaded == len(keys1 & before) > 0
    assert normalize(postgres_view(postgres_url, pg_schema)) == oracle_orders(data)

    # 1 -> 2 shards: each half inherits the whole range's largest key, which bounds its own.
    top1 = max(top0, max(keys1))
    before = set(oracle_orders(data))
    write_orders(data, files=1, per_file=300, customers=150, seed=43, start=2, first=200, deletes=0.05)
    keys2 = customers_in(data, ["orders-0002.json"])
    [r2] = run(spark, spec(2))
    assert r2.shards == 2
    assert r2.load_skipped == len({k for k in keys2 if k > top1}) > 0
    assert r2.loaded == len(keys2 & before) > 0
    assert normalize(postgres_view(postgres_url, pg_schema)) == oracle_orders(data)
    halves = [r[3]["max_keys"] for r in checkpoint_rows(postgres_url, pg_schema) if r[3]["batch_id"] == 2]
    assert len(halves) == 2 and all(h["bindings"]["customers"] for h in halves)

    # 2 -> 1 shard (a merge): one half's largest key says nothing of the other half's, so
    # the merged range Loads every key from now on, and records that it does not know.
    before = set(oracle_orders(data))
    write_orders(data, files=1, per_file=300, customers=150, seed=44, start=3, first=300)
    keys3 = customers_in(data, ["orders-0003.json"])
    [r3] = run(spark, spec(1))
    assert r3.load_skipped == 0 and r3.loaded == len(keys3 & before) > 0
    assert normalize(postgres_view(postgres_url, pg_schema)) == oracle_orders(data)
    [full] = [r[3] for r in checkpoint_rows(postgres_url, pg_schema) if (r[0], r[1]) == (0, 0xFFFFFFFF)]
    assert full["batch_id"] == 3 and full["max_keys"]["bindings"] == {"customers": None}


def test_an_existing_table_is_loaded_from(spark, tmp_path, postgres_url, pg_schema, monkeypatch):
    """A table this run's Apply did not create may hold anything: every key is Loaded (and a
    second materialization writing it reduces into what is there).  TIDEMARK_MAX_KEY=0 turns
    the skipping off."""
    data = tmp_path / "data"
    write_orders(data, files=1, per_file=200, customers=40, seed=45)
    one, two = tmp_path / "one", tmp_path / "two"
    one.mkdir()
    two.mkdir()
    run(spark, postgres_spec(one, data_dir=data, url=postgres_url, schema=pg_schema, name="first"))
    keys = set(oracle_orders(data))
    [r] = run(spark, postgres_spec(two, data_dir=data, url=postgres_url, schema=pg_schema, name="second"))
    assert (r.loaded, r.load_skipped) == (len(keys), 0)

    monkeypatch.setenv("TIDEMARK_MAX_KEY", "0")
    with psycopg.connect(postgres_url, autocommit=True) as con:
        con.execute(f'DROP SCHEMA "{pg_schema}" CASCADE')
    three = tmp_path / "three"
    three.mkdir()
    [r] = run(spark, postgres_spec(three, data_dir=data, url=postgres_url, schema=pg_schema, name="third"))
    assert (r.loaded, r.load_skipped) == (0, 0)
    assert normalize(postgres_view(postgres_url, pg_schema)) == oracle_orders(data)
