"""The MySQL/MariaDB driver against a real server (``TIDEMARK_MYSQL_URL``), one database per test."""

from __future__ import annotations

import datetime as dt
import json
import logging
import threading
import uuid

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
from tests.support.mysql_support import connect, mysql_db, mysql_url, sql
from tidemark.drivers.mysql import MySqlDriver
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
    BindingSpec,
    Field,
    Flush,
    Load,
    Open,
    Quarantine,
    Range,
    StartCommit,
    Validate,
)

SECRET = "s3cr3t-Pa55word"


@pytest.fixture(params=["infile", "insert"])
def bulk(request):
    return request.param


@pytest.fixture
def config(mysql_url, mysql_db):
    return {"url": mysql_url, "schema": mysql_db}


@pytest.fixture
def driver(config):
    d = MySqlDriver(config)
    yield d
    d.close()


def test_registry_builds_mysql(config):
    d = load_driver("mysql", config)
    assert isinstance(d, MySqlDriver) and d.capabilities().exactly_once
    d.close()


def test_round_trip_types_keys_and_deletes(mysql_url, mysql_db, bulk):
    """Both bulk methods: typed columns, case- and space-distinct string keys, date-times in
    UTC, deletes, the checkpoint, and a second Apply with nothing to do."""
    d = MySqlDriver({"url": mysql_url, "schema": mysql_db, "bulk": bulk})
    b = binding(extra=(Field("seen", "/seen", "string", format="date-time"), Field("meta", "/meta", "object")))
    apply(d, b)
    t, opened = open_session(d, b)
    assert opened.runtime_checkpoint is None
    first = [
        doc("a", 1, seen="2024-05-01T12:00:00+02:00", meta={"x": 1}),
        doc("A", 20),
        doc("a ", 3),
        doc("c", 4),
        doc("tab\tnew\nline\\ cr\r nul\x00 \u00e9\U0001f600", 5),
    ]
    assert txn(t, b, first, 0) == {}
    loaded = txn(t, b, [doc("a", 2), doc("c", 3)], 1, deletes=[False, True])
    assert loaded == {("a",): first[0], ("c",): doc("c", 4)}
    t.close()
    view = {("a",): doc("a", 2), ("A",): doc("A", 20), ("a ",): doc("a ", 3), (first[4]["customer"],): first[4]}
    assert d.dump(MAT, b) == view
    [row] = d.checkpoints(MAT)
    assert row.runtime_checkpoint == cp(1) and row.fence == 1
    types = dict(
        sql(
            mysql_url,
            "SELECT column_name, column_type FROM information_schema.columns "
            "WHERE table_schema = %s AND table_name = 'customers'",
            (mysql_db,),
        )
    )
    assert types == {
        "customer": "varchar(255)",
        "amount": "bigint(20)",
        "score": "double",
        "vip": "tinyint(1)",
        "tags": "longtext",
        "seen": "datetime(6)",
        "meta": "longtext",
        "flow_document": "longtext",
    }
    rows = sql(
        mysql_url,
        f"SELECT customer, amount, score, vip, tags, JSON_VALUE(flow_document, '$.amount') "
        f"FROM `{mysql_db}`.customers WHERE customer = 'A'",
    )
    assert rows == [("A", 20, 10.0, 1, '["20"]', "20")]
    t, _ = open_session(d, b)
    txn(t, b, [doc("d", 1, seen="2024-05-01T12:00:00.25Z")], 2)
    t.close()
    assert sql(mysql_url, f"SELECT seen FROM `{mysql_db}`.customers WHERE customer = 'd'") == [
        (dt.datetime(2024, 5, 1, 12, 0, 0, 250000),)
    ]
    assert d.apply(Apply(MAT, d.config, (b,))).action_description == "nothing to do"
    d.close()


def test_load_is_deferred_until_acknowledged_and_chunked(driver):
    b = binding()
    apply(driver, b)
    t, _ = open_session(driver, b)
    txn(t, b, [doc(f"k{i:05d}", i) for i in range(3000)], 0, load=False)
    assert list(t.load(Load(0, (("k00001",),)))) == []  # before Acknowledged: deferred
    t.acknowledge(Acknowledge())
    got = {}
    for resp in t.load(Load(0, tuple((f"k{i:05d}",) for i in range(0, 6000, 2)))):
        got.update(zip(resp.keys, resp.docs))
    late, _ = t.flush(Flush())
    for resp in late:
        got.update(zip(resp.keys, resp.docs))
    assert len(got) == 1501 and got[("k00001",)] == doc("k00001", 1) and got[("k02998",)] == doc("k02998", 2998)
    t.close()


def test_integer_boolean_and_composite_keys_and_duplicate_stores(driver):
    b = binding("ints", key_type="integer", key_name="id")
    c = binding("bools", key_type="boolean", key_name="flag")
    pair = BindingSpec(
        {"table": "pairs"},
        "orders",
        ("/region", "/n"),
        (
            Field("region", "/region", "string", is_key=True),
            Field("n", "/n", "integer", is_key=True),
            Field("amount", "/amount", "integer"),
        ),
    )
    apply(driver, b, c, pair)
    t, _ = open_session(driver, (b, c, pair))
    t.acknowledge(Acknowledge())
    t.flush(Flush())
    t.store(store_msg(b, [doc(1, 1, key_name="id"), doc(2, 2, key_name="id")]))
    t.store(store_msg(b, [doc(2, 7, key_name="id")]))  # the same key twice: the last Store wins
    t.store(store_msg(c, [doc(True, 1, key_name="flag")], binding_index=1))
    t.store(
        store_msg(pair, [{"region": "eu", "n": 1, "amount": 1}, {"region": "EU", "n": 1, "amount": 2}], binding_index=2)
    )
    t.start_commit(StartCommit(cp(0)))
    t.acknowledge(Acknowledge())
    assert load_all(t, 2, [("EU", 1), ("eu", 2)]) == {("EU", 1): {"region": "EU", "n": 1, "amount": 2}}
    t.close()
    assert driver.dump(MAT, b) == {(1,): doc(1, 1, key_name="id"), (2,): doc(2, 7, key_name="id")}
    assert driver.dump(MAT, c) == {(True,): doc(True, 1, key_name="flag")}
    assert len(driver.dump(MAT, pair)) == 2


def test_delta_updates_append(driver):
    b = binding("events", delta=True)
    apply(driver, b)
    t, _ = open_session(driver, b)
    txn(t, b, [doc("a", 1), doc("b", 2)], 0, load=False)
    txn(t, b, [doc("a", 5)], 1, deletes=[True], load=False)
    t.close()
    assert driver.dump(MAT, b) == [doc("a", 1), doc("b", 2), doc("a", 5)]


def test_fence_rejects_the_older_session_and_its_quarantine(driver, mysql_url, mysql_db):
    b = binding()
    apply(driver, b)
    old, _ = open_session(driver, b)
    bad = [
        {"location": "orders-0001.json:7", "key_json": '["x"]', "reason": "amount: not an integer", "value": {"x": 1}}
    ]
    old.acknowledge(Acknowledge())
    old.flush(Flush())
    old.store(store_msg(b, [doc("zombie", 1)]))
    old.quarantine(Quarantine(tuple(bad)))
    new, _ = open_session(driver, b)  # a retried task opens the same range while the old one runs
    with pytest.raises(FencedOff, match="newer session"):
        old.start_commit(StartCommit(cp(0)))
    assert driver.dump(MAT, b) == {} and driver.checkpoints(MAT)[0].runtime_checkpoint is None
    new.acknowledge(Acknowledge())
    new.flush(Flush())
    new.quarantine(Quarantine(tuple(bad)))
    new.store(store_msg(b, [doc("a", 1)]))
    new.start_commit(StartCommit(cp(0)))
    assert driver.dump(MAT, b) == {("a",): doc("a", 1)}
    rows = sql(
        mysql_url,
        f"SELECT materialization, batch_id, location, key_json, reason, value FROM `{mysql_db}`.tidemark_quarantine",
    )
    assert rows == [(MAT, 0, "orders-0001.json:7", '["x"]', "amount: not an integer", '{"x":1}')]
    old.close()
    new.close()


def test_concurrent_shards_and_split_merge(driver):
    b = binding()
    apply(driver, b)
    errors = []

    def shard(key_range, prefix):
        try:
            d = MySqlDriver(driver.config)
            t, _ = open_session(d, b, key_range)
            for n in range(5):
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
    assert len(driver.dump(MAT, b)) == 2000
    assert [r.runtime_checkpoint["batch_id"] for r in driver.checkpoints(MAT)] == [4, 4]
    merged, om = open_session(driver, b)  # the halves agree: the merge inherits
    assert om.runtime_checkpoint == cp(4)
    merged.close()
    left, _ = open_session(driver, b, Range(0, HALF))
    txn(left, b, [doc("b", 3)], 5)
    left.close()
    with pytest.raises(RecoveryError, match="cannot inherit"):
        open_session(driver, b, Range(0, 0xFFFFFFFE))


def test_apply_evolves_widens_and_refuses(driver, mysql_url, mysql_db):
    b = binding()
    apply(driver, b)
    t, _ = open_session(driver, b)
    txn(t, b, [doc("a", 3)], 0)
    t.close()
    grown = binding(extra=(Field("note", "/note", "string"),), types={"amount": "number"})
    plan = apply(driver, grown).action_description
    assert "add column note longtext" in plan and "change column amount of" in plan and "to double" in plan
    types = dict(
        sql(
            mysql_url,
            "SELECT column_name, data_type FROM information_schema.columns "
            "WHERE table_schema = %s AND table_name = 'customers'",
            (mysql_db,),
        )
    )
    assert types["amount"] == "double" and types["note"] == "longtext"
    assert sql(mysql_url, f"SELECT amount FROM `{mysql_db}`.customers") == [(3.0,)]
    with pytest.raises(IncompatibleSchema, match="'vip' is boolean, the binding needs longtext"):
        apply(driver, binding(types={"amount": "number", "vip": "string"}))
    # a key column in the server's case-insensitive collation would merge "a" and "A"
    sql(
        mysql_url,
        f"CREATE TABLE `{mysql_db}`.ci (customer varchar(255) PRIMARY KEY, amount bigint, score double, "
        "vip boolean, tags json, flow_document json NOT NULL) COLLATE utf8mb4_general_ci",
    )
    with pytest.raises(IncompatibleSchema, match="collate utf8mb4_general_ci"):
        apply(driver, binding("ci"))
    sql(mysql_url, f"CREATE TABLE `{mysql_db}`.hand (customer varchar(255) PRIMARY KEY, amount bigint)")
    with pytest.raises(IncompatibleSchema, match="has no 'flow_document' column"):
        apply(driver, binding("hand"))
    other = MySqlDriver(driver.config)
    driver.apply(Apply(MAT, driver.config, (grown,), checkpoint_id="c1"))
    with pytest.raises(RecoveryError, match="written by materialization 'view'"):
        other.apply(Apply("another", other.config, (grown,), checkpoint_id="c2"))
    other.close()


def test_identifier_limits_and_quoting(driver, mysql_url, mysql_db):
    long = "t" * 65
    with pytest.raises(SpecError, match="65 characters; MySQL allows 64"):
        driver.validate(Validate(MAT, driver.config, (binding(long),)))
    with pytest.raises(IncompatibleSchema, match="key field"):
        driver.validate(Validate(MAT, driver.config, (binding(key_name="k" * 65),)))
    four = BindingSpec(
        {"table": "four"},
        "orders",
        tuple(f"/k{i}" for i in range(4)),
        tuple(Field(f"k{i}", f"/k{i}", "string", is_key=True) for i in range(4)),
    )
    with pytest.raises(IncompatibleSchema, match="at most 3 string columns"):
        driver.validate(Validate(MAT, driver.config, (four,)))
    field = "v" * 70
    b = binding("we`ird; DROP TABLE x", extra=(Field(field, f"/{field}", "integer"),))
    validated = driver.validate(Validate(MAT, driver.config, (b,)))
    assert field in validated.bindings[0].constraints
    assert "leave field" in apply(driver, b).action_description
    t, _ = open_session(driver, b)
    txn(t, b, [doc("a", 1, **{field: 5})], 0)
    t.close()
    assert driver.dump(MAT, b) == {("a",): doc("a", 1, **{field: 5})}
    tables = {
        r[0]
        for r in sql(mysql_url, "SELECT table_name FROM information_schema.tables WHERE table_schema = %s", (mysql_db,))
    }
    assert "we`ird; DROP TABLE x" in tables


def test_bad_values_are_named_and_nothing_is_committed(mysql_url, mysql_db, bulk):
    d = MySqlDriver({"url": mysql_url, "schema": mysql_db, "bulk": bulk})
    b = binding(extra=(Field("seen", "/seen", "string", format="date-time"),))
    apply(d, b)
    t, _ = open_session(d, b)
    txn(t, b, [doc("keep", 1)], 0)
    with pytest.raises(DriverError, match="key .'" + "x" * 300 + "'. has a 'customer' of 300 characters"):
        txn(t, b, [doc("x" * 300, 1)], 1)
    t.close()
    t, _ = open_session(d, b)
    with pytest.raises(DriverError, match="key \\['late'\\] field 'seen': '2024-02-30T00:00:00Z' is not an RFC 3339"):
        txn(t, b, [doc("ok", 1), doc("late", 1, seen="2024-02-30T00:00:00Z")], 1)
    t.close()
    assert d.dump(MAT, b) == {("keep",): doc("keep", 1)}
    assert d.checkpoints(MAT)[0].runtime_checkpoint == cp(0)
    # an integer beyond bigint: the full row's column is NULL, its document keeps the value
    t, _ = open_session(d, b)
    txn(t, b, [doc("big", 2**70)], 1)
    t.close()
    assert d.dump(MAT, b)[("big",)] == doc("big", 2**70)
    assert sql(mysql_url, f"SELECT amount FROM `{mysql_db}`.customers WHERE customer = 'big'") == [(None,)]
    d.close()


def test_a_lost_session_connection_is_not_retried_and_commits_nothing(driver, mysql_url):
    b = binding()
    apply(driver, b)
    t, _ = open_session(driver, b)
    t.acknowledge(Acknowledge())
    t.flush(Flush())
    t.store(store_msg(b, [doc("a", 1)]))
    sql(mysql_url, f"KILL CONNECTION {t.con.thread_id()}")
    with pytest.raises(EndpointUnavailable, match="connection lost"):
        t.start_commit(StartCommit(cp(0)))
    t.close()
    assert driver.dump(MAT, b) == {}
    t, opened = open_session(driver, b)
    assert opened.runtime_checkpoint is None
    txn(t, b, [doc("a", 1)], 0)
    t.close()
    assert driver.dump(MAT, b) == {("a",): doc("a", 1)}


def test_positions_and_drop(driver, mysql_url, mysql_db):
    b = binding()
    apply(driver, b)
    driver.apply(Apply(MAT, driver.config, (b,), checkpoint_id="c1"))
    t, _ = open_session(driver, b)
    txn(t, b, [doc("a", 1)], 0)
    t.close()
    places = {p.place: (p.checkpoint_id, p.batch_id) for p in driver.positions(MAT, [b])}
    assert places[f"table {mysql_db}.customers"] == ("c1", -1) and any(v[1] == 0 for v in places.values()), places
    done = driver.drop(MAT, [b])
    assert f"dropped table {mysql_db}.customers" in done and any("checkpoint rows" in x for x in done)
    assert driver.checkpoints(MAT) == []


def test_passwords_are_redacted_and_credentials_terminal(mysql_url, caplog):
    url = f"mysql://root:{SECRET}@127.0.0.1:1/test"
    fields = {"host": "127.0.0.1", "port": 1, "user": "root", "password": SECRET, "database": "test"}
    for config in ({"url": url}, fields):
        d = MySqlDriver(dict(config, retry={"attempts": 2, "base_delay": 0}))
        assert SECRET not in repr(d) and SECRET not in str(d.spec())
        with caplog.at_level(logging.DEBUG), pytest.raises(EndpointUnavailable) as info:
            d.checkpoints(MAT)
        assert "127.0.0.1:1" in str(info.value) and SECRET not in str(info.value) + repr(info.value.args)
        assert SECRET not in caplog.text and "try 1 of 2" in caplog.text
        caplog.clear()
    user = f"nobody_{uuid.uuid4().hex[:6]}"
    d = MySqlDriver({"url": mysql_url, "user": user, "password": SECRET})
    with pytest.raises(AuthenticationFailed) as exc:
        d.apply(Apply(MAT, d.config, ()))
    assert user in str(exc.value) and SECRET not in str(exc.value)
    with pytest.raises(SpecError, match="no database"):
        MySqlDriver({"url": "mysql://root@127.0.0.1:3306"})
    with pytest.raises(SpecError, match="bulk must be one of"):
        MySqlDriver({"url": mysql_url, "bulk": "copy"})


def test_two_spellings_of_one_instant_are_two_keys_and_two_rows(driver, mysql_url, mysql_db):
    """A date-time key is its text in a binary collation: a datetime(6) column would keep
    neither offset and make "…T10:00:00Z" and "…T12:00:00+02:00" one row of two keys."""
    from tests.support.postgres_support import instant_binding

    b = instant_binding()
    apply(driver, b)
    t, _ = open_session(driver, b)
    docs = [{"at": "2026-01-01T10:00:00Z", "n": 1}, {"at": "2026-01-01T12:00:00+02:00", "n": 2}]
    txn(t, b, docs, 0)
    t.close()
    assert driver.dump(MAT, b) == {(d["at"],): d for d in docs}
    [(kind,)] = sql(
        mysql_url,
        "SELECT data_type FROM information_schema.columns WHERE table_schema = %s AND "
        "table_name = 'events' AND column_name = 'at'",
        (mysql_db,),
    )
    assert kind == "varchar"
