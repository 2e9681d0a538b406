"""The SQLite driver against a real database file (no mocks).

The driver-neutral helpers (``binding``, ``txn``, ...) are in ``tests/support/driver_protocol.py``;
the other drivers' tests import them from there.
"""

from __future__ import annotations

import json
import multiprocessing
import sqlite3

import pytest

from tests.support.driver_protocol import HALF, MAT, apply, binding, cp, doc, load_all, open_session, store_msg, txn
from tidemark import faults
from tidemark.drivers.registry import load_driver
from tidemark.drivers.sqlite import SQLiteDriver
from tidemark.errors import EndpointUnavailable, FencedOff, IncompatibleSchema, RecoveryError
from tidemark.faults import InjectedFault
from tidemark.policy import RetryPolicy, retry
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

# --------------------------------------------------------------------------- helpers


@pytest.fixture
def db(tmp_path):
    return str(tmp_path / "views.db")


@pytest.fixture
def driver(db):
    d = SQLiteDriver({"path": db})
    yield d
    d.close()


# --------------------------------------------------------------------------- tests


def test_registry_builds_sqlite():
    d = load_driver("sqlite", {"path": ":memory:"})
    assert isinstance(d, SQLiteDriver)
    assert d.capabilities().commit_pattern.value == "store-authoritative"


def test_round_trip_upsert_delete(driver, db):
    b = binding()
    apply(driver, b)
    t, opened = open_session(driver, b)
    assert opened.runtime_checkpoint is None
    assert txn(t, b, [doc("a", 1), doc("b", 20), doc("c", 3)], 0) == {}
    # same session, next transaction: loads see the committed docs
    loaded = txn(t, b, [doc("a", 2), doc("c", 3)], 1, deletes=[False, True])
    assert loaded == {("a",): doc("a", 1), ("c",): doc("c", 3)}
    t.close()
    assert driver.dump(MAT, b) == {("a",): doc("a", 2), ("b",): doc("b", 20)}
    [row] = driver.checkpoints(MAT)
    assert row.range == Range() and row.runtime_checkpoint == cp(1)
    # typed columns, named as the properties; the document as JSON
    con = sqlite3.connect(db)
    rows = con.execute(
        "SELECT customer, amount, score, vip, tags, flow_document FROM customers ORDER BY customer"
    ).fetchall()
    assert rows[1] == ("b", 20, 10.0, 1, '["20"]', json.dumps(doc("b", 20), separators=(",", ":")))
    types = {r[1]: r[2] for r in con.execute("PRAGMA table_info(customers)")}
    assert types == {
        "customer": "TEXT",
        "amount": "INTEGER",
        "score": "REAL",
        "vip": "INTEGER",
        "tags": "TEXT",
        "flow_document": "TEXT",
    }
    con.close()
    # a new session resumes from the committed checkpoint
    t2, opened = open_session(driver, b)
    assert opened.runtime_checkpoint == cp(1)
    t2.close()


def test_load_is_deferred_until_acknowledged(driver):
    b = binding()
    apply(driver, b)
    t, _ = open_session(driver, b)
    txn(t, b, [doc("a", 1)], 0)
    # the runtime does not wait for Acknowledged before Loads: they are staged
    assert list(t.load(Load(0, (("a",), ("zz",))))) == []
    t.acknowledge(Acknowledge())
    late, _ = t.flush(Flush())
    assert [(r.keys, r.docs) for r in late] == [((("a",),), (doc("a", 1),))]
    t.close()


def test_integer_and_boolean_keys(driver):
    b = binding("ints", key_type="integer", key_name="id")
    c = binding("bools", key_type="boolean", key_name="flag")
    apply(driver, b, c)
    t, _ = open_session(driver, (b, c))
    t.acknowledge(Acknowledge())
    t.flush(Flush())
    t.store(store_msg(b, [doc(1, 1, key_name="id"), doc(2, 2, key_name="id")]))
    t.store(store_msg(c, [doc(True, 1, key_name="flag")], binding_index=1))
    t.start_commit(StartCommit(cp(0)))
    t.acknowledge(Acknowledge())
    assert load_all(t, 0, [(2,), (3,)]) == {(2,): doc(2, 2, key_name="id")}
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
    new, opened = open_session(driver, b)  # a retried task opens the same range
    assert opened.runtime_checkpoint is None
    old.acknowledge(Acknowledge())
    old.flush(Flush())
    old.store(store_msg(b, [doc("zombie", 1)]))
    with pytest.raises(FencedOff, match="newer session"):
        old.start_commit(StartCommit(cp(0)))
    assert driver.dump(MAT, b) == {}
    assert driver.checkpoints(MAT)[0].runtime_checkpoint is None
    txn(new, b, [doc("a", 1)], 0)
    assert driver.dump(MAT, b) == {("a",): doc("a", 1)}
    old.close()
    new.close()


def test_split_fences_the_parent_and_merge_inherits(driver):
    b = binding()
    apply(driver, b)
    parent, _ = open_session(driver, b)
    txn(parent, b, [doc("a", 1)], 3)
    zombie, _ = open_session(driver, b)  # a session of the old layout, still running
    left, ol = open_session(driver, b, Range(0, HALF))
    right, orr = open_session(driver, b, Range(HALF + 1, 0xFFFFFFFF))
    assert ol.runtime_checkpoint == cp(3) and orr.runtime_checkpoint == cp(3)  # a split copies
    zombie.acknowledge(Acknowledge())
    zombie.flush(Flush())
    with pytest.raises(FencedOff):
        zombie.start_commit(StartCommit(cp(4)))
    txn(left, b, [doc("b", 1)], 4)
    txn(right, b, [doc("c", 1)], 4)
    for t in (parent, zombie, left, right):
        t.close()
    merged, om = open_session(driver, b)  # merge back: the halves' later batch wins
    assert om.runtime_checkpoint == cp(4)
    merged.close()
    ranges = [(r.range.key_begin, r.range.key_end) for r in driver.checkpoints(MAT)]
    assert ranges == [(0, HALF), (0, 0xFFFFFFFF), (HALF + 1, 0xFFFFFFFF)]


def test_merge_of_disagreeing_ranges_is_refused(driver):
    b = binding()
    apply(driver, b)
    left, _ = open_session(driver, b, Range(0, HALF))
    right, _ = open_session(driver, b, Range(HALF + 1, 0xFFFFFFFF))
    txn(left, b, [doc("a", 1)], 0)
    txn(right, b, [doc("b", 1)], 0)
    txn(left, b, [doc("a", 2)], 1)  # the right half never committed batch 1
    left.close()
    right.close()
    with pytest.raises(RecoveryError, match="cannot inherit"):
        open_session(driver, b)
    # equal checkpoints without batch ids merge too
    other = "other"
    for key_range in (Range(0, 9), Range(10, 19)):
        t, _ = driver.open(Open(other, "v1", key_range, bindings=(b,)))
        t.acknowledge(Acknowledge())
        t.flush(Flush())
        t.start_commit(StartCommit({"offsets": [1, 2]}))
        t.close()
    t, opened = driver.open(Open(other, "v1", Range(0, 19), bindings=(b,)))
    assert opened.runtime_checkpoint == {"offsets": [1, 2]}
    t.close()


def test_a_table_tidemark_did_not_make_is_refused_by_validate(driver, db):
    """The table of a hand-written upsert (no flow_document), or one with a NOT NULL column
    that no field writes, is refused by Validate, naming the column; a default makes it fine."""
    con = sqlite3.connect(db)
    cols = "customer TEXT PRIMARY KEY, amount INTEGER, score REAL, vip INTEGER, tags TEXT"
    con.execute(f"CREATE TABLE by_hand ({cols})")
    con.execute(f"CREATE TABLE audited ({cols}, flow_document TEXT NOT NULL, updated_by TEXT NOT NULL)")
    con.commit()
    for table, reason in [
        ("by_hand", "exists but has no 'flow_document' column"),
        ("audited", "column 'updated_by' is NOT NULL without a default"),
    ]:
        with pytest.raises(IncompatibleSchema, match=rf"\.{table}'.*{reason}") as exc:
            driver.validate(Validate(MAT, {}, (binding(table),)))
        if table == "by_hand":  # the way to start a view from it is named
            assert "tidemark adopt SPEC -m MATERIALIZATION --from main.by_hand" in str(exc.value)
    con.executescript(
        "DROP TABLE audited; CREATE TABLE audited ("
        + cols
        + ", flow_document TEXT NOT NULL, updated_by TEXT NOT NULL DEFAULT 'tidemark');"
    )
    con.close()
    assert apply(driver, binding("audited")).action_description == "nothing to do"
    t, _ = open_session(driver, binding("audited"))
    txn(t, binding("audited"), [doc("b", 2)], 0)
    t.close()
    con = sqlite3.connect(db)
    assert con.execute("SELECT customer, amount, updated_by FROM audited").fetchall() == [("b", 2, "tidemark")]
    con.close()


def test_schema_evolution(driver, db):
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
    con = sqlite3.connect(db)
    assert con.execute("SELECT customer, city FROM customers ORDER BY customer").fetchall() == [
        ("a", None),
        ("b", "Oslo"),
    ]
    con.close()
    with pytest.raises(IncompatibleSchema, match="amount"):
        driver.validate(Validate(MAT, {}, (binding(types={"amount": "string"}),)))
    with pytest.raises(IncompatibleSchema, match="key"):
        driver.validate(Validate(MAT, {}, (binding(key_name="id"),)))
    with pytest.raises(IncompatibleSchema, match="mode"):
        driver.validate(Validate(MAT, {}, (binding(delta=True),)))
    assert apply(driver, grown).action_description == "nothing to do"
    # integer -> number: the INTEGER column keeps fractional values as REAL; nothing to change
    wide = binding(extra=(Field("city", "/city", "string"),), types={"amount": "number"})
    assert apply(driver, wide).action_description == "nothing to do"
    t, _ = open_session(driver, wide)
    txn(t, wide, [dict(doc("c", 1), amount=2.5)], 2)
    t.close()
    con = sqlite3.connect(db)
    assert con.execute("SELECT amount, typeof(amount) FROM customers WHERE customer = 'c'").fetchall() == [
        (2.5, "real")
    ]
    con.close()
    with pytest.raises(IncompatibleSchema, match="amount"):  # SQLite changes no column's type
        driver.validate(Validate(MAT, {}, (binding(types={"amount": "json"}),)))


def test_injection_like_identifiers(driver, db):
    evil = 'x"; DROP TABLE y; --'
    con = sqlite3.connect(db)
    con.execute("CREATE TABLE y (a)")
    con.commit()
    b = binding(evil, key_name='k"ey', types={'amo"unt': "integer", "select": "string"})
    apply(driver, b)
    t, _ = open_session(driver, b)
    d = {'k"ey': "a", 'amo"unt': 1, "select": "from"}
    txn(t, b, [d], 0)
    assert txn(t, b, [dict(d, select="where")], 1) == {("a",): d}
    t.close()
    assert driver.dump(MAT, b) == {("a",): dict(d, select="where")}
    assert con.execute("SELECT count(*) FROM y").fetchone() == (0,)
    assert con.execute(f'SELECT "amo""unt", "select" FROM "{evil.replace(chr(34), chr(34) * 2)}"').fetchall() == [
        (1, "where")
    ]
    con.close()


def test_quarantine_commits_with_the_transaction(driver, db):
    b = binding()
    apply(driver, b)
    old, _ = open_session(driver, b)
    new, _ = open_session(driver, b)
    bad = [
        {"location": "orders-0001.json:7", "key_json": '["x"]', "reason": "amount: not an integer", "value": '{"x":1}'}
    ]
    old.acknowledge(Acknowledge())
    old.flush(Flush())
    old.quarantine(Quarantine(tuple(bad)))
    with pytest.raises(FencedOff):
        old.start_commit(StartCommit(cp(0)))
    new.acknowledge(Acknowledge())
    new.flush(Flush())
    new.quarantine(Quarantine(tuple(bad)))
    new.start_commit(StartCommit(cp(0)))
    con = sqlite3.connect(db)
    rows = con.execute(
        "SELECT materialization, batch_id, location, key_json, reason, value FROM tidemark_quarantine"
    ).fetchall()
    assert rows == [(MAT, 0, "orders-0001.json:7", '["x"]', "amount: not an integer", '{"x":1}')]
    con.close()
    old.close()
    new.close()


def test_fault_points_bracket_the_commit(driver, monkeypatch):
    b = binding()
    apply(driver, b)
    monkeypatch.setenv(faults.ENV, "before_endpoint_commit:raise")
    faults.rearm()
    try:
        t, _ = open_session(driver, b)
        with pytest.raises(InjectedFault):
            txn(t, b, [doc("a", 1)], 0)
        t.close()
        assert driver.dump(MAT, b) == {} and driver.checkpoints(MAT)[0].runtime_checkpoint is None
        monkeypatch.setenv(faults.ENV, "after_endpoint_commit:raise")
        faults.rearm()
        t, _ = open_session(driver, b)
        with pytest.raises(InjectedFault):
            txn(t, b, [doc("a", 1)], 0)
        t.close()
        assert driver.dump(MAT, b) == {("a",): doc("a", 1)}
        assert driver.checkpoints(MAT)[0].runtime_checkpoint == cp(0)
    finally:
        monkeypatch.delenv(faults.ENV)
        faults.rearm()


def test_busy_database_is_transient_and_retried(db):
    fast = {"path": db, "retry": {"attempts": 2, "busy_timeout": 0.05, "base_delay": 0.01}}
    driver = SQLiteDriver(fast)
    b = binding()
    apply(driver, b)
    t, _ = open_session(driver, b)
    t.acknowledge(Acknowledge())
    t.flush(Flush())
    t.store(store_msg(b, [doc("a", 1)]))
    blocker = sqlite3.connect(db, isolation_level=None)
    blocker.execute("BEGIN IMMEDIATE")  # another shard holds the write lock
    with pytest.raises(EndpointUnavailable, match="busy|locked"):
        t.start_commit(StartCommit(cp(0)))
    blocker.execute("ROLLBACK")
    blocker.close()
    t.start_commit(StartCommit(cp(0)))  # the staged rows survived the failed attempt
    assert driver.dump(MAT, b) == {("a",): doc("a", 1)}
    t.close()
    driver.close()


def test_retry_policy():
    calls = []

    def flaky():
        calls.append(1)
        if len(calls) < 3:
            raise EndpointUnavailable("down")
        return "ok"

    policy = RetryPolicy.from_config({"attempts": "3", "base_delay": "0"})
    assert retry(flaky, policy) == "ok" and len(calls) == 3
    calls.clear()
    with pytest.raises(EndpointUnavailable):
        retry(flaky, RetryPolicy(attempts=2, base_delay=0))
    with pytest.raises(ValueError):
        retry(lambda: (_ for _ in ()).throw(ValueError("terminal")), policy)
    assert RetryPolicy(base_delay=1, max_delay=3, jitter=0).delay(5) == 3


def _writer(path: str, key_range: tuple[int, int], prefix: str, batches: int, per: int) -> None:
    driver = SQLiteDriver({"path": path})
    b = binding()
    t, opened = driver.open(Open(MAT, "v1", Range(*key_range), bindings=(b,)))
    for n in range(batches):
        txn(t, b, [doc(f"{prefix}{n:03d}-{i:03d}", n + i) for i in range(per)], n)
    t.close()
    driver.close()


def test_two_processes_write_one_file(driver, db):
    b = binding()
    apply(driver, b)
    ctx = multiprocessing.get_context("spawn")
    procs = [
        ctx.Process(target=_writer, args=(db, (0, HALF), "L", 20, 50)),
        ctx.Process(target=_writer, args=(db, (HALF + 1, 0xFFFFFFFF), "R", 20, 50)),
    ]
    for p in procs:
        p.start()
    for p in procs:
        p.join(120)
    assert [p.exitcode for p in procs] == [0, 0]
    view = driver.dump(MAT, b)
    assert len(view) == 2000
    assert view[("L019-049",)] == doc("L019-049", 68)
    assert [r.runtime_checkpoint["batch_id"] for r in driver.checkpoints(MAT)] == [19, 19]
    con = sqlite3.connect(db)
    assert con.execute("PRAGMA journal_mode").fetchone() == ("wal",)
    con.close()


def test_table_names_that_differ_only_in_case_are_one_table_with_one_owner(driver):
    """SQLite folds the case of table names: ``orders`` and ``ORDERS`` are one table. A second
    materialization naming it ``ORDERS`` is refused like one naming it ``orders``; nothing is
    written."""
    from tidemark.protocol.messages import Apply

    driver.apply(Apply("first", {}, (binding("orders"),), checkpoint_id="cp-1"))
    with pytest.raises(
        RecoveryError, match=r"table 'ORDERS' is written by materialization 'first'.*Nothing was changed"
    ):
        driver.apply(Apply("second", {}, (binding("ORDERS"),), checkpoint_id="cp-2"))
    assert driver.apply(Apply("first", {}, (binding("orders"),), checkpoint_id="cp-1"))  # its owner goes on
    # the view's record is found under either spelling, and names the table as SQLite resolves it
    driver.apply(Apply("first", {}, (binding("Orders"),), checkpoint_id="cp-1", identities=({"collection": "o"},)))
    kept = driver.identities("first", (binding("ORDERS"),))
    assert kept == [{"collection": "o", "resolved": "orders"}]
