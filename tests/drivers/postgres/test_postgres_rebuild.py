"""``tidemark rebuild`` into PostgreSQL, without Spark: the table stays the table (OID, grants, dependent views).

A reduce change replaces the rows in place; a key change also changes the table's key in
the same transaction. The table's OID, a grant to a role, a comment and a dependent SQL view
survive the cut-over; the view equals an oracle over all the input, and a kill inside the
replacing transaction leaves the old view whole.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import uuid

import psycopg
import pytest

from tests.support import plain
from tests.support.helpers import normalize, postgres_spec, postgres_view, write_orders
from tests.support.paths import REPO
from tests.support.rebuild_support import assert_whole_readings, edit, oracle, rebuild_child, rebuild_while_live_commits
from tidemark.runtime.rebuild import Rebuild
from tidemark.spec import load_spec

pytestmark = pytest.mark.postgres


@pytest.fixture
def role(postgres_url):
    name = f"tm_reader_{uuid.uuid4().hex[:8]}"
    with psycopg.connect(postgres_url, autocommit=True) as con:
        con.execute(f'CREATE ROLE "{name}"')
    yield name
    with psycopg.connect(postgres_url, autocommit=True) as con:
        con.execute(f'DROP OWNED BY "{name}"')
        con.execute(f'DROP ROLE "{name}"')


def _live(tmp_path, url, schema, role, *, deletes):
    data = tmp_path / "data"
    write_orders(data, files=2, per_file=120, customers=30, seed=15, deletes=deletes)
    spec = postgres_spec(tmp_path, data_dir=data, url=url, schema=schema, shards=2)
    assert plain.run(spec) == 0
    with psycopg.connect(url, autocommit=True) as con:
        con.execute(f'GRANT SELECT ON "{schema}".customers TO "{role}"')
        con.execute(f"COMMENT ON TABLE \"{schema}\".customers IS 'the customers, reduced'")
        con.execute(f'CREATE VIEW "{schema}".spenders AS SELECT customer, amount FROM "{schema}".customers')
    return data, spec


def _table_facts(url, schema, role):
    with psycopg.connect(url) as con:
        oid = con.execute("SELECT to_regclass(%s)::oid", (f'"{schema}".customers',)).fetchone()[0]
        grant = con.execute("SELECT has_table_privilege(%s, %s, 'SELECT')", (role, f'"{schema}".customers')).fetchone()
        comment = con.execute("SELECT obj_description(%s::regclass, 'pg_class')", (f'"{schema}".customers',)).fetchone()
        spenders = con.execute(f'SELECT COUNT(*), COALESCE(SUM(amount), 0) FROM "{schema}".spenders').fetchone()
        shadows = con.execute(
            "SELECT COUNT(*) FROM pg_tables WHERE schemaname = %s AND tablename LIKE '%%tm_rebuild'", (schema,)
        ).fetchone()[0]
    return oid, grant[0], comment[0], tuple(spenders), shadows


def test_a_reduce_change_replaces_the_rows_in_place(tmp_path, postgres_url, pg_schema, role):
    data, spec = _live(tmp_path, postgres_url, pg_schema, role, deletes=0.03)
    oid, *_ = _table_facts(postgres_url, pg_schema, role)
    edit(spec, amount="maximize")
    Rebuild(load_spec(spec), "view", plain.run, say=lambda s: None).run()
    new = oracle(data, amount="maximize")
    assert normalize(postgres_view(postgres_url, pg_schema)) == new
    assert _table_facts(postgres_url, pg_schema, role) == (
        oid,
        True,
        "the customers, reduced",
        (len(new), sum(d["amount"] for d in new.values())),
        0,
    )
    write_orders(data, files=1, per_file=60, customers=30, seed=16, start=2, deletes=0.03)
    assert plain.run(spec) == 0
    assert normalize(postgres_view(postgres_url, pg_schema)) == oracle(data, amount="maximize")


def test_a_key_change_changes_the_key_of_the_same_table(tmp_path, postgres_url, pg_schema, role):
    data, spec = _live(tmp_path, postgres_url, pg_schema, role, deletes=0.0)
    with psycopg.connect(postgres_url, autocommit=True) as con:  # the dependent view reads only what stays
        con.execute(
            f'CREATE OR REPLACE VIEW "{pg_schema}".spenders AS SELECT customer, amount FROM "{pg_schema}".customers'
        )
    oid, *_ = _table_facts(postgres_url, pg_schema, role)
    edit(spec, key="city")
    Rebuild(load_spec(spec), "view", plain.run, say=lambda s: None).run()
    new = oracle(data, key="city")
    assert normalize(postgres_view(postgres_url, pg_schema, key="city")) == new
    facts = _table_facts(postgres_url, pg_schema, role)
    assert facts[:3] == (oid, True, "the customers, reduced") and facts[3][0] == len(new) and facts[4] == 0
    with psycopg.connect(postgres_url) as con:
        key = con.execute(
            "SELECT array_agg(a.attname::text) FROM pg_index i JOIN pg_attribute a ON a.attrelid = i.indrelid "
            "AND a.attnum = ANY(i.indkey) WHERE i.indrelid = to_regclass(%s) AND i.indisprimary",
            (f'"{pg_schema}".customers',),
        ).fetchone()[0]
    assert key == ["city"]
    write_orders(data, files=1, per_file=60, customers=30, seed=17, start=2)
    assert plain.run(spec) == 0
    assert normalize(postgres_view(postgres_url, pg_schema, key="city")) == oracle(data, key="city")


@pytest.mark.chaos
def test_a_kill_inside_the_replacing_transaction_leaves_the_old_view(tmp_path, postgres_url, pg_schema, role):
    data, spec = _live(tmp_path, postgres_url, pg_schema, role, deletes=0.03)
    edit(spec, amount="maximize")
    killed = rebuild_child(spec, "replace_contents:kill")
    assert killed.returncode == -signal.SIGKILL, killed.stderr[-3000:]
    assert normalize(postgres_view(postgres_url, pg_schema)) == oracle(data)
    done = rebuild_child(spec)
    assert done.returncode == 0, done.stderr[-3000:]
    assert normalize(postgres_view(postgres_url, pg_schema)) == oracle(data, amount="maximize")
    assert _table_facts(postgres_url, pg_schema, role)[1:3] == (True, "the customers, reduced")


def test_readers_see_the_old_or_the_new_view_while_the_live_view_commits(tmp_path, postgres_url, pg_schema):
    data = tmp_path / "data"
    write_orders(data, files=2, per_file=120, customers=30, seed=18, deletes=0.03)
    # one shard: each batch is one transaction of the live view; the cut-over is one for all
    spec = postgres_spec(tmp_path, data_dir=data, url=postgres_url, schema=pg_schema, shards=1)
    old = str(tmp_path / "old.yaml")
    with open(spec) as a, open(old, "w") as b:
        b.write(a.read())
    assert plain.run(spec) == 0
    edit(spec, amount="maximize")
    con = psycopg.connect(postgres_url, autocommit=True)
    query = f'SELECT COALESCE(SUM(amount), 0) FROM "{pg_schema}".customers'
    try:
        _, readings, _ = rebuild_while_live_commits(
            spec, old, data, lambda: int(con.execute(query).fetchone()[0]), seed=19
        )
    finally:
        con.close()
    new = oracle(data, amount="maximize")
    assert normalize(postgres_view(postgres_url, pg_schema)) == new
    assert_whole_readings(readings, data, new)
