"""The PostgreSQL driver against a real server (``TIDEMARK_TEST_POSTGRES_URL``), one schema per test.

The test server trusts every local connection (``pg_hba.conf``: trust), so a *wrong
password* cannot be refused; the credentials tests use a role that does not exist (a real
refusal over TCP) and an unreachable port, and check that the password never appears.
A real wrong password, TLS and a server that comes back during the retries are tested
against a private server in ``test_postgres_tls.py``.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import json
import logging
import threading
import uuid

import psycopg
import pytest

from tests.support.driver_protocol import (
    HALF,
    MAT,
    apply,
    binding,
    cp,
    doc,
    load_all,
    open_session,
    store_msg,
    txn,
)
from tests.support.postgres_support import instant_binding
from tidemark.drivers.postgres import PostgresDriver
from tidemark.drivers.registry import load_driver
from tidemark.errors import (
    AuthenticationFailed,
    DriverError,
    EndpointUnavailable,
    FencedOff,
    IncompatibleSchema,
    RecoveryError,
    SpecError,
)
from tidemark.protocol.messages import (
    Acknowledge,
    Apply,
    Field,
    Flush,
    Load,
    Open,
    Quarantine,
    Range,
    StartCommit,
    Validate,
)

pytestmark = pytest.mark.postgres

SECRET = "s3cr3t-Pa55word"


@pytest.fixture
def schema(postgres_url):
    name = f"tm_test_{uuid.uuid4().hex[:10]}"
    yield name
    with psycopg.connect(postgres_url, autocommit=True) as con:
        con.execute(f'DROP SCHEMA IF EXISTS "{name}" CASCADE')


@pytest.fixture
def config(postgres_url, schema):
    return {"url": postgres_url, "schema": schema}


@pytest.fixture
def driver(config):
    d = PostgresDriver(config)
    yield d
    d.close()


def sql(postgres_url, query, params=()):
    with psycopg.connect(postgres_url, autocommit=True) as con:
        cur = con.execute(query, params)
        return cur.fetchall() if cur.description else None


def test_registry_builds_postgres(config):
    d = load_driver("postgres", config)
    assert isinstance(d, PostgresDriver) and d.capabilities().exactly_once
    d.close()


def test_round_trip_upsert_delete(driver, postgres_url, schema):
    b = binding(extra=(Field("seen", "/seen", "string", format="date-time"), Field("meta", "/meta", "object")))
    apply(driver, b)
    t, opened = open_session(driver, b)
    assert opened.runtime_checkpoint is None
    first = [doc("a", 1, seen="2024-05-01T12:00:00Z", meta={"x": 1}), doc("b", 20), doc("c", 3)]
    assert txn(t, b, first, 0) == {}
    loaded = txn(t, b, [doc("a", 2), doc("c", 3)], 1, deletes=[False, True])
    assert loaded == {("a",): first[0], ("c",): doc("c", 3)}
    t.close()
    assert driver.dump(MAT, b) == {("a",): doc("a", 2), ("b",): doc("b", 20)}
    [row] = driver.checkpoints(MAT)
    assert row.runtime_checkpoint == cp(1) and row.fence == 1
    types = dict(
        sql(
            postgres_url,
            "SELECT column_name, data_type FROM information_schema.columns "
            "WHERE table_schema = %s AND table_name = 'customers'",
            (schema,),
        )
    )
    assert types == {
        "customer": "text",
        "amount": "bigint",
        "score": "double precision",
        "vip": "boolean",
        "tags": "jsonb",
        "seen": "timestamp with time zone",
        "meta": "jsonb",
        "flow_document": "jsonb",
    }
    rows = sql(
        postgres_url, f'SELECT customer, amount, score, vip, tags, flow_document FROM "{schema}".customers ORDER BY 1'
    )
    assert rows == [("a", 2, 1.0, False, ["2"], doc("a", 2)), ("b", 20, 10.0, True, ["20"], doc("b", 20))]
    t2, opened = open_session(driver, b)
    assert opened.runtime_checkpoint == cp(1)
    t2.close()
    # typed value stored while a later doc cleared it
    t3, _ = open_session(driver, b)
    txn(t3, b, [doc("d", 1, seen="2024-05-01T12:00:00+02:00")], 2)
    t3.close()
    assert sql(postgres_url, f'SELECT seen FROM "{schema}".customers WHERE customer = %s', ("d",)) == [
        (dt.datetime(2024, 5, 1, 10, 0, tzinfo=dt.timezone.utc),)
    ]


def test_loaded_keys_are_updated_in_place_and_vanished_rows_written_again(driver, postgres_url, schema):
    """Store's ``exists`` flags split the commit into an UPDATE and an INSERT; a row removed
    behind the session's back between Load and commit is written again, not lost."""
    b = binding()
    apply(driver, b)
    t, _ = open_session(driver, b)
    txn(t, b, [doc(f"k{i}", i) for i in range(5)], 0)
    t.close()
    t, _ = open_session(driver, b)
    assert len(txn(t, b, [doc("k1", 10), doc("k2", 20), doc("new", 7)], 1)) == 2
    t.close()
    assert driver.dump(MAT, b) == {
        ("k0",): doc("k0", 0),
        ("k1",): doc("k1", 10),
        ("k2",): doc("k2", 20),
        ("k3",): doc("k3", 3),
        ("k4",): doc("k4", 4),
        ("new",): doc("new", 7),
    }
    t, _ = open_session(driver, b)
    t.acknowledge(Acknowledge())
    assert set(load_all(t, 0, [("k3",), ("k4",)])) == {("k3",), ("k4",)}
    sql(postgres_url, f'DELETE FROM "{schema}".customers WHERE customer = %s', ("k3",))  # not through tidemark
    t.store(store_msg(b, [doc("k3", 30), doc("k4", 40), doc("k9", 9)], exists=[True, True, False]))
    t.start_commit(StartCommit(cp(2)))
    t.close()
    got = driver.dump(MAT, b)
    assert got[("k3",)] == doc("k3", 30) and got[("k4",)] == doc("k4", 40) and got[("k9",)] == doc("k9", 9)
    assert len(got) == 7


def test_load_is_deferred_until_acknowledged_and_chunked(driver):
    b = binding()
    apply(driver, b)
    t, _ = open_session(driver, b)
    txn(t, b, [doc(f"k{i:05d}", i) for i in range(3000)], 0, load=False)
    assert list(t.load(Load(0, (("k00001",),)))) == []  # before Acknowledged: staged
    t.acknowledge(Acknowledge())
    got = {}
    for resp in t.load(Load(0, tuple((f"k{i:05d}",) for i in range(0, 6000, 2)))):
        got.update(zip(resp.keys, resp.docs))
    late, _ = t.flush(Flush())
    for resp in late:
        got.update(zip(resp.keys, resp.docs))
    assert len(got) == 1501 and got[("k00001",)] == doc("k00001", 1) and got[("k02998",)] == doc("k02998", 2998)
    t.close()


def test_integer_and_boolean_keys_and_duplicate_stores(driver):
    b = binding("ints", key_type="integer", key_name="id")
    c = binding("bools", key_type="boolean", key_name="flag")
    apply(driver, b, c)
    t, _ = open_session(driver, (b, c))
    t.acknowledge(Acknowledge())
    t.flush(Flush())
    t.store(store_msg(b, [doc(1, 1, key_name="id"), doc(2, 2, key_name="id")]))
    t.store(store_msg(b, [doc(2, 7, key_name="id")]))  # the same key twice: the last Store wins
    t.store(store_msg(c, [doc(True, 1, key_name="flag")], binding_index=1))
    t.start_commit(StartCommit(cp(0)))
    t.acknowledge(Acknowledge())
    assert load_all(t, 0, [(2,), (3,)]) == {(2,): doc(2, 7, key_name="id")}
    t.close()
    assert driver.dump(MAT, c) == {(True,): doc(True, 1, key_name="flag")}


def test_delta_updates_append(driver):
    b = binding("events", delta=True)
    apply(driver, b)
    t, _ = open_session(driver, b)
    txn(t, b, [doc("a", 1), doc("b", 2)], 0, load=False)
    txn(t, b, [doc("a", 5)], 1, deletes=[True], load=False)
    t.close()
    assert driver.dump(MAT, b) == [doc("a", 1), doc("b", 2), doc("a", 5)]


def test_fence_rejects_the_older_session(driver):
    b = binding()
    apply(driver, b)
    old, _ = open_session(driver, b)
    old.acknowledge(Acknowledge())
    old.flush(Flush())
    old.store(store_msg(b, [doc("zombie", 1)]))
    new, _ = open_session(driver, b)  # a retried task opens the same range while the old one runs
    with pytest.raises(FencedOff, match="newer session"):
        old.start_commit(StartCommit(cp(0)))
    assert driver.dump(MAT, b) == {}
    assert driver.checkpoints(MAT)[0].runtime_checkpoint is None
    txn(new, b, [doc("a", 1)], 0)
    assert driver.dump(MAT, b) == {("a",): doc("a", 1)}
    old.close()
    new.close()


def test_concurrent_shards_commit_different_ranges(driver):
    b = binding()
    apply(driver, b)
    errors = []

    def shard(key_range, prefix):
        try:
            d = PostgresDriver(driver.config)
            t, _ = open_session(d, b, key_range)
            for n in range(10):
                txn(t, b, [doc(f"{prefix}{n}-{i}", i) for i in range(200)], n)
            t.close()
            d.close()
        except BaseException as exc:  # pragma: no cover - reported below
            errors.append(exc)

    threads = [
        threading.Thread(target=shard, args=(Range(0, HALF), "L")),
        threading.Thread(target=shard, args=(Range(HALF + 1, 0xFFFFFFFF), "R")),
    ]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    assert errors == []
    assert len(driver.dump(MAT, b)) == 4000
    assert [r.runtime_checkpoint["batch_id"] for r in driver.checkpoints(MAT)] == [9, 9]


def test_split_and_merge_inheritance(driver):
    b = binding()
    apply(driver, b)
    parent, _ = open_session(driver, b)
    txn(parent, b, [doc("a", 1)], 3)
    zombie, _ = open_session(driver, b)
    left, ol = open_session(driver, b, Range(0, HALF))
    right, orr = open_session(driver, b, Range(HALF + 1, 0xFFFFFFFF))
    assert ol.runtime_checkpoint == cp(3) and orr.runtime_checkpoint == cp(3)
    zombie.acknowledge(Acknowledge())
    zombie.flush(Flush())
    with pytest.raises(FencedOff):
        zombie.start_commit(StartCommit(cp(4)))
    txn(left, b, [doc("b", 1)], 4)
    txn(right, b, [doc("c", 1)], 4)
    merged, om = open_session(driver, b)
    assert om.runtime_checkpoint == cp(4)
    for t in (parent, zombie, left, right, merged):
        t.close()
    # a half that is behind cannot merge
    other_left, _ = open_session(driver, b, Range(0, HALF))
    txn(other_left, b, [doc("b", 3)], 5)
    other_left.close()
    with pytest.raises(RecoveryError, match="cannot inherit"):
        open_session(driver, b, Range(0, 0xFFFFFFFE))


def test_schema_evolution(driver, postgres_url, schema):
    b = binding()
    apply(driver, b)
    t, _ = open_session(driver, b)
    txn(t, b, [doc("a", 1)], 0)
    t.close()
    grown = binding(extra=(Field("city", "/city", "string"),))
    assert "add column city" in apply(driver, grown).action_description
    t, _ = open_session(driver, grown)
    txn(t, grown, [doc("b", 2, city="Oslo")], 1)
    t.close()
    assert sql(postgres_url, f'SELECT customer, city FROM "{schema}".customers ORDER BY 1') == [
        ("a", None),
        ("b", "Oslo"),
    ]
    with pytest.raises(IncompatibleSchema, match="amount"):
        driver.validate(Validate(MAT, {}, (binding(types={"amount": "string"}),)))
    with pytest.raises(IncompatibleSchema, match="key"):
        driver.validate(Validate(MAT, {}, (binding(key_name="id"),)))
    with pytest.raises(IncompatibleSchema, match="mode"):
        driver.validate(Validate(MAT, {}, (binding(delta=True),)))
    assert apply(driver, grown).action_description == "nothing to do"
    # a field leaves the schema: its column stays, and Apply says that nothing writes it
    shrunk = dataclasses.replace(grown, fields=tuple(f for f in grown.fields if f.name != "score"))
    assert (
        apply(driver, shrunk).action_description
        == f"leave column score of {schema}.customers as it is: no field writes it"
    )
    t, _ = open_session(driver, shrunk)
    txn(t, shrunk, [doc("a", 7)], 2)
    t.close()
    assert sql(postgres_url, f'SELECT amount, score FROM "{schema}".customers WHERE customer = %s', ("a",)) == [
        (7, 0.5)
    ]


def test_a_widened_field_changes_its_column_and_recomputes_it(driver, postgres_url, schema):
    """integer -> number, and boolean -> a union of types (jsonb): Validate passes, Apply
    changes both columns in one ALTER and recomputes their values from flow_document, which
    holds them exactly; later batches write the new types. A narrowing (number -> integer)
    and a change no old value survives (integer -> string) stay IncompatibleSchema."""
    odd = "o'k\\"  # a name to quote
    b = binding(extra=(Field(odd, f"/{odd}", "integer"),))
    apply(driver, b)
    big = 2**60 + 1
    t, _ = open_session(driver, b)
    txn(t, b, [doc("a", 5, **{odd: 3}), doc("b", big)], 0)
    t.close()

    wide = binding(types={"amount": "number", "vip": "json"}, extra=(Field(odd, f"/{odd}", "number"),))
    driver.validate(Validate(MAT, {}, (wide,)))
    done = apply(driver, wide).action_description
    assert (
        f"change column amount of {schema}.customers from bigint to double precision (recomputed from flow_document)"
    ) in done
    assert f"change column vip of {schema}.customers from boolean to jsonb" in done
    types = dict(
        sql(
            postgres_url,
            "SELECT column_name, data_type FROM information_schema.columns "
            "WHERE table_schema = %s AND table_name = 'customers'",
            (schema,),
        )
    )
    assert (types["amount"], types["vip"]) == ("double precision", "jsonb")
    assert sql(
        postgres_url,
        f'SELECT customer, amount, vip, flow_document->\'amount\', "o\'k\\" FROM "{schema}".customers ORDER BY 1',
    ) == [("a", 5.0, False, 5, 3.0), ("b", float(big), True, big, None)]

    t, _ = open_session(driver, wide)
    txn(t, wide, [dict(doc("c", 1), amount=2.5, vip="gold", **{odd: 0.5})], 1)
    t.close()
    assert sql(postgres_url, f"SELECT amount, vip FROM \"{schema}\".customers WHERE customer = 'c'") == [(2.5, "gold")]
    assert apply(driver, wide).action_description == "nothing to do"
    for narrower in ({"amount": "integer", "vip": "json"}, {"amount": "string", "vip": "json"}):
        with pytest.raises(IncompatibleSchema, match="column 'amount' is double precision"):
            driver.validate(Validate(MAT, {}, (binding(types=narrower, extra=wide.fields[-1:]),)))


def test_a_table_tidemark_did_not_make_is_refused_by_validate(driver, postgres_url, schema):
    """Pointing a binding at the table of a hand-written upsert (no flow_document), at one
    whose document column is text, or at one with a NOT NULL column that no field writes:
    Validate refuses each, naming the table and the column, before any data moves (these
    used to pass Validate and fail the first batch's Load or commit). A NOT NULL column with
    a default is fine: the commit leaves it to the default."""
    cols = "customer text PRIMARY KEY, amount bigint, score double precision, vip boolean, tags jsonb"
    sql(postgres_url, f'CREATE SCHEMA "{schema}"')
    sql(postgres_url, f'CREATE TABLE "{schema}".by_hand ({cols})')
    sql(postgres_url, f"INSERT INTO \"{schema}\".by_hand VALUES ('a', 5, 1.0, false, '[]')")
    sql(postgres_url, f'CREATE TABLE "{schema}".text_doc ({cols}, flow_document text NOT NULL)')
    sql(
        postgres_url,
        f'CREATE TABLE "{schema}".audited ({cols}, flow_document jsonb NOT NULL, '
        "updated_by text NOT NULL, seen timestamptz NOT NULL DEFAULT now())",
    )
    for table, reason in [
        ("by_hand", "exists but has no 'flow_document' column"),
        ("text_doc", "column 'flow_document' is text, tidemark needs jsonb or json"),
        ("audited", "column 'updated_by' is NOT NULL without a default"),
    ]:
        with pytest.raises(IncompatibleSchema, match=rf"{schema}\.{table}'.*{reason}"):
            driver.validate(Validate(MAT, {}, (binding(table),)))
    assert sql(postgres_url, f'SELECT customer, amount FROM "{schema}".by_hand') == [("a", 5)]
    assert sql(postgres_url, "SELECT count(*) FROM pg_tables WHERE schemaname = %s", (schema,)) == [
        (3,)
    ]  # nothing made

    # a json (not jsonb) document column is fine: PostgreSQL casts on assignment
    sql(postgres_url, f'CREATE TABLE "{schema}".json_doc ({cols}, flow_document json NOT NULL)')
    assert apply(driver, binding("json_doc")).action_description == "nothing to do"
    t, _ = open_session(driver, binding("json_doc"))
    txn(t, binding("json_doc"), [doc("a", 1)], 0)
    assert txn(t, binding("json_doc"), [doc("a", 2)], 1) == {("a",): doc("a", 1)}
    t.close()

    sql(postgres_url, f"ALTER TABLE \"{schema}\".audited ALTER COLUMN updated_by SET DEFAULT 'tidemark'")
    assert apply(driver, binding("audited")).action_description == "; ".join(
        f"leave column {c} of {schema}.audited as it is: no field writes it" for c in ("seen", "updated_by")
    )
    t, _ = open_session(driver, binding("audited"))
    txn(t, binding("audited"), [doc("b", 2)], 2)
    t.close()
    assert sql(postgres_url, f'SELECT customer, amount, updated_by FROM "{schema}".audited') == [("b", 2, "tidemark")]


def test_fillfactor_of_new_view_tables(driver, config, postgres_url, schema):
    """View tables get room on each page for updated rows (HOT updates); append-only tables
    do not unless their resource asks; a resource overrides the endpoint; an existing table is left as it is; a value
    out of range is a SpecError that names it, from Validate, before anything is created."""

    def options(table):
        rows = sql(
            postgres_url,
            "SELECT c.reloptions FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace "
            "WHERE n.nspname = %s AND c.relname = %s",
            (schema, table),
        )
        return rows[0][0] if rows else "missing"

    dense = dataclasses.replace(binding("dense"), resource={"table": "dense", "fillfactor": 50})
    log = dataclasses.replace(binding("log", delta=True), resource={"table": "log", "fillfactor": 90})
    done = apply(driver, binding(), binding("events", delta=True), dense, log).action_description
    assert f"create table {schema}.customers (fillfactor 70); create table {schema}.events; " in done
    assert options("customers") == ["fillfactor=70"]
    assert options("events") is None
    assert options("dense") == ["fillfactor=50"]
    assert options("log") == ["fillfactor=90"]  # what the resource asks for, even append-only
    t, _ = open_session(driver, binding())
    txn(t, binding(), [doc("a", 1)], 0)
    txn(t, binding(), [doc("a", 2)], 1)
    t.close()
    assert sql(postgres_url, f'SELECT amount FROM "{schema}".customers') == [(2,)]

    sql(
        postgres_url,
        f'CREATE TABLE "{schema}".mine (customer text PRIMARY KEY, amount bigint, score double precision, '
        "vip boolean, tags jsonb, flow_document jsonb NOT NULL)",
    )
    apply(driver, binding("mine"))
    assert options("mine") is None  # not altered

    full = PostgresDriver(dict(config, fillfactor=100))
    try:
        apply(full, binding("packed"))
        assert options("packed") is None
    finally:
        full.close()
    for bad in (5, 101, "ten", 7.5, True, "²"):
        with pytest.raises(
            SpecError, match=r"fillfactor must be an integer from 10 to 100.*" + repr(bad).replace(".", r"\.")
        ):
            PostgresDriver(dict(config, fillfactor=bad))
    wrong = dataclasses.replace(dense, resource={"table": "wrong", "fillfactor": 0})
    with pytest.raises(SpecError, match=r"binding '\w+\.wrong': resource fillfactor .* got 0"):
        driver.validate(Validate(MAT, driver.config, (wrong,)))
    assert options("wrong") == "missing"


def test_injection_like_identifiers(driver, postgres_url, schema):
    evil = 'x"; DROP TABLE y; --'
    sql(postgres_url, f'CREATE SCHEMA IF NOT EXISTS "{schema}"; CREATE TABLE "{schema}".y (a int)')
    b = binding(evil, key_name='k"ey', types={'amo"unt': "integer", "select": "string"})
    apply(driver, b)
    t, _ = open_session(driver, b)
    d = {'k"ey': "a", 'amo"unt': 1, "select": "from"}
    txn(t, b, [d], 0)
    assert txn(t, b, [dict(d, select="where")], 1) == {("a",): d}
    t.close()
    assert driver.dump(MAT, b) == {("a",): dict(d, select="where")}
    assert sql(postgres_url, f'SELECT count(*) FROM "{schema}".y') == [(0,)]
    weird = evil.replace('"', '""')
    assert sql(postgres_url, f'SELECT "amo""unt", "select" FROM "{schema}"."{weird}"') == [(1, "where")]
    # an evil schema name, too
    evil_schema = f'{schema}"; DROP SCHEMA public; --'
    d2 = PostgresDriver({"url": postgres_url, "schema": evil_schema})
    try:
        apply(d2, binding())
        t, _ = open_session(d2, binding())
        txn(t, binding(), [doc("a", 1)], 0)
        t.close()
        assert d2.dump(MAT, binding()) == {("a",): doc("a", 1)}
    finally:
        d2.close()
        sql(postgres_url, f'DROP SCHEMA IF EXISTS "{evil_schema.replace(chr(34), chr(34) * 2)}" CASCADE')


def test_identifiers_longer_than_postgres_allows(driver, config, postgres_url, schema):
    """PostgreSQL cuts identifiers at 63 bytes without a word. A value field with a longer name is
    not a column (its value stays in the document); two such names sharing 63 bytes no longer
    collide; a long table, schema or key name is refused by Validate, before any data moves."""
    fits = "f" * 63  # exactly 63 bytes: a column
    long1 = "g" * 63 + "_one"  # 67 bytes
    long2 = "g" * 63 + "_two"  # the same first 63 bytes
    wide = "é" * 32  # 32 characters, 64 bytes
    b = binding(types={fits: "string", long1: "string", long2: "integer", wide: "string"})
    validated = driver.validate(Validate(MAT, driver.config, (b,)))
    assert set(validated.bindings[0].constraints) == {long1, long2, wide}
    applied = apply(driver, b)
    assert (
        f"leave field {long1} out of" in applied.action_description
        and "stays in flow_document" in applied.action_description
    )
    t, _ = open_session(driver, b)
    d = {"customer": "a", fits: "x", long1: "y", long2: 2, wide: "z"}
    txn(t, b, [d], 0)
    assert txn(t, b, [dict(d, **{long2: 3})], 1) == {("a",): d}
    t.close()
    assert driver.dump(MAT, b) == {("a",): dict(d, **{long2: 3})}
    cols = [
        r[0]
        for r in sql(
            postgres_url,
            "SELECT column_name FROM information_schema.columns "
            "WHERE table_schema = %s AND table_name = 'customers' ORDER BY ordinal_position",
            (schema,),
        )
    ]
    assert cols == ["customer", "amount", "score", "vip", "tags", fits, "flow_document"]
    assert sql(postgres_url, f'SELECT "{fits}", flow_document->>%s FROM "{schema}".customers', (long1,)) == [("x", "y")]
    again = apply(driver, b).action_description  # a second Apply adds nothing
    assert "create" not in again and "add column" not in again

    with pytest.raises(SpecError, match="table name .* 64 bytes"):
        driver.validate(Validate(MAT, driver.config, (binding("t" * 64),)))
    with pytest.raises(IncompatibleSchema, match="key field"):
        driver.validate(Validate(MAT, driver.config, (binding("k", key_name="k" * 64),)))
    with pytest.raises(SpecError, match="schema name .* 64 bytes"):
        PostgresDriver(dict(config, schema="s" * 64))  # the endpoint's schema: when the config is read
    with pytest.raises(SpecError, match="schema name .* 64 bytes"):  # a binding's own schema: from Validate
        own_schema = dataclasses.replace(binding("t"), resource={"table": "t", "schema": "s" * 64})
        driver.validate(Validate(MAT, driver.config, (own_schema,)))


@pytest.mark.parametrize(
    "where, bad, named",
    [
        ("value column", dict(doc("a", 1), note="x\x00y"), "document of key ['a'] (at /note)"),
        (
            "nested, document only",
            dict(doc("a", 1), meta={"z": ["ok", "p\x00q"]}),
            "document of key ['a'] (at /meta/z/1)",
        ),
        ("property name", dict(doc("a", 1), meta={"n\x00l": 1}), "document of key ['a'] (at /meta/n\x00l)"),
        ("key", doc("c\x00d", 1), "key ['c\\x00d']"),
    ],
)
def test_nul_characters_are_named_and_nothing_is_committed(driver, where, bad, named):
    """PostgreSQL's text and jsonb cannot hold U+0000; its error names only a COPY line. The
    driver's names the key, and the path in the document, and commits nothing."""
    b = binding(types={"note": "string", "meta": "object"})
    apply(driver, b)
    t, _ = open_session(driver, b)
    txn(t, b, [doc("keep", 1)], 0)
    with pytest.raises(DriverError, match="U\\+0000") as exc:
        txn(t, b, [doc("keep", 2), bad], 1)
    assert named in str(exc.value) and "nothing of this shard's transaction was committed" in str(exc.value)
    assert not isinstance(exc.value, EndpointUnavailable)
    t.close()
    assert driver.dump(MAT, b) == {("keep",): doc("keep", 1)}
    [row] = driver.checkpoints(MAT)
    assert row.runtime_checkpoint == cp(0)


def test_a_value_postgres_refuses_is_named_by_key_and_field(driver):
    """A ``date-time`` string PostgreSQL cannot read (validation refuses this one before it
    reaches a driver, but a driver must not rely on that): PostgreSQL's error names a staging
    line and column; the driver's names the key and field."""
    b = binding(extra=(Field("seen", "/seen", "string", format="date-time"),))
    apply(driver, b)
    t, _ = open_session(driver, b)
    good = doc("keep", 1, seen="2024-06-30T23:59:60Z")  # a leap second: PostgreSQL takes it
    txn(t, b, [good], 0)
    with pytest.raises(
        DriverError,
        match=r"the document of key \['b'\]: field 'seen' \(timestamp with time zone\) "
        r"was refused: date/time field value out of range: \"2024-02-30",
    ) as exc:
        txn(t, b, [doc("a", 1, seen="2024-01-01T00:00:00Z"), doc("b", 2, seen="2024-02-30T00:00:00Z")], 1)
    assert "Nothing of this shard's transaction was committed" in str(exc.value)
    assert not isinstance(exc.value, EndpointUnavailable)
    t.close()
    assert driver.dump(MAT, b) == {("keep",): good}


def test_quarantine_commits_with_the_transaction(driver, postgres_url, schema):
    b = binding()
    apply(driver, b)
    old, _ = open_session(driver, b)
    new, _ = open_session(driver, b)
    bad = [
        {"location": "orders-0001.json:7", "key_json": '["x"]', "reason": "amount: not an integer", "value": {"x": 1}}
    ]
    for t in (old, new):
        t.acknowledge(Acknowledge())
        t.flush(Flush())
        t.quarantine(Quarantine(tuple(bad)))
    with pytest.raises(FencedOff):
        old.start_commit(StartCommit(cp(0)))
    new.start_commit(StartCommit(cp(0)))
    rows = sql(
        postgres_url,
        f'SELECT materialization, batch_id, location, key_json, reason, value FROM "{schema}".tidemark_quarantine',
    )
    assert rows == [(MAT, 0, "orders-0001.json:7", '["x"]', "amount: not an integer", '{"x":1}')]
    old.close()
    new.close()


def test_passwords_are_redacted(postgres_url, caplog):
    url_form = {"url": f"postgresql://postgres:{SECRET}@127.0.0.1:1/test", "retry": {"attempts": 2, "base_delay": 0}}
    field_form = {
        "host": "127.0.0.1",
        "port": 1,
        "user": "postgres",
        "password": SECRET,
        "database": "test",
        "retry": {"attempts": 2, "base_delay": 0},
    }
    for config in (url_form, field_form):
        d = PostgresDriver(config)
        assert SECRET not in repr(d) and SECRET not in repr(d.settings) and SECRET not in str(d.spec())
        with caplog.at_level(logging.DEBUG):
            with pytest.raises(EndpointUnavailable) as info:
                d.checkpoints(MAT)
            with pytest.raises(EndpointUnavailable) as info2:
                d.open(Open(MAT, "v1", Range(), config=config))
        for exc in (info.value, info2.value):
            text = str(exc) + repr(exc) + "".join(str(a) for a in exc.args)
            assert "127.0.0.1:1" in text and SECRET not in text
            assert exc.__cause__ is None or SECRET not in str(exc.__cause__)
        assert SECRET not in caplog.text
        assert "try 1 of 2" in caplog.text  # the policy retried the transient failure
        caplog.clear()
        d.close()
    from tidemark.drivers.common.redact import redact

    assert SECRET not in redact(f"postgresql://u:{SECRET}@h/db password={SECRET} password='{SECRET}'")


def test_wrong_credentials_are_terminal(postgres_url):
    # trust authentication accepts any password, so use a role that does not exist:
    # the server refuses it over TCP exactly like a wrong password.
    info = psycopg.conninfo.conninfo_to_dict(postgres_url)
    config = {
        "host": info.get("host", "127.0.0.1"),
        "port": info.get("port", 5432),
        "database": info.get("dbname", "test"),
        "user": f"nobody_{uuid.uuid4().hex[:6]}",
        "password": SECRET,
    }
    d = PostgresDriver(config)
    with pytest.raises(AuthenticationFailed) as exc:
        d.apply(Apply(MAT, config, ()))
    assert SECRET not in str(exc.value) and config["user"] in str(exc.value)
    assert not isinstance(exc.value, EndpointUnavailable)
    d.close()


def test_values_round_trip_exactly(driver, postgres_url, schema):
    """COPY escaping and the JSON fast paths: control characters, backslashes, unicode,
    integers beyond 64 bits (kept exact), floats, nulls, composite keys."""
    b = binding(extra=(Field("note", "/note", "string"), Field("meta", "/meta", "object")))
    apply(driver, b)
    weird = 'tab\there\nnew\rline \\N back\\slash "quote" é 😀 \\t'
    docs = [
        doc(weird, 1, note=weird, meta={"big": 2**70, "neg": -(2**65), "f": 0.1, "s": weird, "n": None}),
        doc("plain", 2, note=None, meta=None),
        doc("k" + "1" * 25, 3, note="digits " + "9" * 30),
        dict(doc("float-int", 4), amount=4.0, score=float("1e16")),  # 4.0 is an integer in JSON Schema
    ]
    t, _ = open_session(driver, b)
    txn(t, b, docs, 0)
    assert sql(postgres_url, f'SELECT note FROM "{schema}".customers WHERE customer = %s', (weird,)) == [(weird,)]
    big = sql(
        postgres_url, f"SELECT flow_document->'meta'->>'big' FROM \"{schema}\".customers WHERE customer = %s", (weird,)
    )
    assert big == [(str(2**70),)]
    assert sql(
        postgres_url, f'SELECT amount, score, vip FROM "{schema}".customers WHERE customer = %s', ("float-int",)
    ) == [(4, 1e16, False)]
    loaded = txn(t, b, [doc(weird, 5), doc("plain", 6), doc("k" + "1" * 25, 7), doc("float-int", 8)], 1)
    t.close()
    assert loaded == {(d["customer"],): d for d in docs}


def test_tls_options(postgres_url):
    info = psycopg.conninfo.conninfo_to_dict(postgres_url)
    with pytest.raises(SpecError, match="sslmode"):
        PostgresDriver({"url": postgres_url, "sslmode": "sometimes"})
    d = PostgresDriver(
        {
            "url": postgres_url,
            "sslmode": "verify-full",
            "sslrootcert": "/nonexistent/ca.pem",
            "sslcert": "/nonexistent/client.crt",
            "sslkey": "/nonexistent/client.key",
        }
    )
    params = psycopg.conninfo.conninfo_to_dict(d.settings.conninfo)
    assert params["sslmode"] == "verify-full" and params["sslrootcert"] == "/nonexistent/ca.pem"
    assert params["sslcert"] == "/nonexistent/client.crt" and params["sslkey"] == "/nonexistent/client.key"
    assert params["host"] == info.get("host", "127.0.0.1")
    with pytest.raises(DriverError, match="sslrootcert") as exc:
        d.checkpoints(MAT)
    assert not isinstance(exc.value, EndpointUnavailable)  # a misconfiguration is not retried
    d.close()
    ssl_on = sql(postgres_url, "SHOW ssl")[0][0] == "on"
    d = PostgresDriver(
        {"url": postgres_url, "sslmode": "require", "password": SECRET, "retry": {"attempts": 3, "base_delay": 0}}
    )
    try:
        if ssl_on:  # pragma: no cover - the test server has TLS off
            assert d.checkpoints(MAT) == []
        else:
            with pytest.raises(DriverError, match="TLS") as exc:
                d.checkpoints(MAT)
            assert not isinstance(exc.value, EndpointUnavailable) and SECRET not in str(exc.value)
    finally:
        d.close()


def test_two_spellings_of_one_instant_are_two_keys_and_two_rows(driver, postgres_url, schema):
    """tidemark keys by the document's text: "…T10:00:00Z" and "…T12:00:00+02:00" are two keys,
    so they are two rows too (a timestamptz key column would make them one: a batch holding
    both would fail, and across shards one would overwrite the other's contribution)."""
    b = instant_binding()
    apply(driver, b)
    t, _ = open_session(driver, b)
    docs = [{"at": "2026-01-01T10:00:00Z", "n": 1}, {"at": "2026-01-01T12:00:00+02:00", "n": 2}]
    txn(t, b, docs, 0)
    assert txn(t, b, [{"at": "2026-01-01T10:00:00Z", "n": 3}], 1) == {("2026-01-01T10:00:00Z",): docs[0]}
    t.close()
    assert driver.dump(MAT, b) == {
        ("2026-01-01T10:00:00Z",): {"at": "2026-01-01T10:00:00Z", "n": 3},
        ("2026-01-01T12:00:00+02:00",): docs[1],
    }
    assert sql(
        postgres_url,
        "SELECT data_type FROM information_schema.columns WHERE table_schema = %s AND "
        "table_name = 'events' AND column_name = 'at'",
        (schema,),
    ) == [("text",)]


def test_a_timestamptz_key_column_is_refused_naming_the_reason_and_reset(driver, postgres_url, schema):
    """A table made with the key as timestamptz (by an older tidemark) is refused before anything is
    written, rather than collapse two keys into one row."""
    sql(postgres_url, f'CREATE SCHEMA IF NOT EXISTS "{schema}"')
    sql(
        postgres_url,
        f'CREATE TABLE "{schema}".events (at timestamp with time zone PRIMARY KEY, n bigint, '
        "flow_document jsonb NOT NULL)",
    )
    with pytest.raises(
        IncompatibleSchema,
        match=r"key column 'at' is timestamp with time zone, where two spellings of "
        r"one instant .* start this view over with `tidemark reset`",
    ):
        apply(driver, instant_binding())
