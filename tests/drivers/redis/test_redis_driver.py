"""The redis driver against a real Redis (127.0.0.1:6379, or TIDEMARK_TEST_REDIS_URL): the
protocol round trip, read-committed Loads, delta rows, fences, quarantine, at-least-once
mode, drop, and its refusals.  Every test works under a key namespace of its own."""

from __future__ import annotations

import dataclasses
import json
import logging

import pytest

pytest.importorskip("redis")

import redis

from tests.support.driver_protocol import MAT, binding, cp, doc, load_all, store_msg
from tests.support.helpers import free_port
from tests.support.redis_support import redis_ns, redis_url
from tidemark.drivers.base import CommitPattern, capabilities_of
from tidemark.drivers.registry import load_driver
from tidemark.errors import EndpointUnavailable, FencedOff, IncompatibleSchema, SpecError
from tidemark.protocol.messages import (
    Acknowledge,
    Apply,
    Flush,
    Load,
    Open,
    Quarantine,
    Range,
    StartCommit,
    Validate,
)


def rbinding(ns, name="customers", delta=False):
    return dataclasses.replace(binding(name, delta=delta), resource={"prefix": f"{ns}{name}:"})


@pytest.fixture
def cfg(redis_url, redis_ns):
    return {"url": redis_url, "namespace": redis_ns}


@pytest.fixture
def driver(cfg):
    d = load_driver("redis", cfg)
    yield d
    d.close()


@pytest.fixture
def raw(redis_url):
    c = redis.Redis.from_url(redis_url)
    yield c
    c.close()


def session(driver, *bindings, key_range=Range()):
    return driver.open(Open(MAT, "v1", key_range, bindings=tuple(bindings)))


def commit(t, b, docs, batch, deletes=None, index=0):
    t.acknowledge(Acknowledge())
    t.flush(Flush())
    t.store(store_msg(b, docs, deletes, binding_index=index))
    t.start_commit(StartCommit(cp(batch)))


def test_capabilities_follow_the_mode(cfg):
    assert capabilities_of(load_driver("redis", cfg)).commit_pattern is CommitPattern.STORE_AUTHORITATIVE
    alo = load_driver("redis", {**cfg, "mode": "at-least-once"})
    assert capabilities_of(alo).commit_pattern is CommitPattern.AT_LEAST_ONCE
    with pytest.raises(SpecError, match="mode must be"):
        load_driver("redis", {**cfg, "mode": "maybe"})


def test_round_trip_keys_are_json_documents_under_the_prefix(driver, redis_ns, raw):
    b = rbinding(redis_ns)
    t, opened = session(driver, b)
    assert opened.runtime_checkpoint is None
    commit(t, b, [doc("c1", 5), doc("c2", 7)], 0)
    assert json.loads(raw.get(f'{redis_ns}customers:["c1"]'.encode())) == doc("c1", 5)
    t.acknowledge(Acknowledge())
    assert load_all(t, 0, [("c1",), ("c3",)]) == {("c1",): doc("c1", 5)}
    t.store(store_msg(b, [doc("c1", 6), doc("c2", 7)], deletes=[False, True]))
    t.start_commit(StartCommit(cp(1)))
    assert driver.dump(MAT, b) == {("c1",): doc("c1", 6)}
    [row] = driver.checkpoints(MAT)
    assert row.runtime_checkpoint == cp(1) and row.fence == 1
    [pos] = driver.positions(MAT, [b])
    assert pos.batch_id == 1 and pos.checkpoint_id == "chk-1"
    t.close()
    t2, opened = session(driver, b)  # a new session resumes from the committed checkpoint
    assert opened.runtime_checkpoint == cp(1)
    t2.close()


def test_loads_wait_for_acknowledged(driver, redis_ns):
    b = rbinding(redis_ns)
    t, _ = session(driver, b)
    commit(t, b, [doc("a", 1)], 0)
    assert t.load(Load(0, (("a",),))) == []  # before Acknowledge: deferred to Flush
    t.acknowledge(Acknowledge())
    late, _ = t.flush(Flush())
    assert [(r.keys, r.docs) for r in late] == [((("a",),), (doc("a", 1),))]


def test_delta_rows_are_appended_in_order_and_a_retried_commit_adds_nothing(driver, redis_ns, raw):
    s, d = rbinding(redis_ns), rbinding(redis_ns, "events", delta=True)
    t, _ = session(driver, s, d)
    commit(t, d, [doc("a", 1), doc("b", 2)], 0, index=1)
    commit(t, d, [doc("a", 3)], 1, index=1)
    assert [json.loads(v) for v in raw.lrange(f'{redis_ns}events:["a"]', 0, -1)] == [doc("a", 1), doc("a", 3)]
    rs = t.rs  # the commit's reply was lost and the library retries it: the script sees its checkpoint
    rs.commit(t.fence, cp(1), appends=[(f"{redis_ns}events:", ("a",), doc("a", 3))])
    assert sorted(r["amount"] for r in driver.dump(MAT, d)) == [1, 2, 3]
    t.close()


def test_a_newer_session_fences_the_older_one_which_writes_nothing(driver, redis_ns):
    b = rbinding(redis_ns)
    old, _ = session(driver, b)
    old.acknowledge(Acknowledge())
    old.flush(Flush())
    old.store(store_msg(b, [doc("zombie", 1)]))
    new, _ = session(driver, b, key_range=Range(0, 0x7FFFFFFF))  # overlapping: bumps the old range's fence
    with pytest.raises(FencedOff, match="newer session"):
        old.start_commit(StartCommit(cp(0)))
    assert driver.dump(MAT, b) == {}
    commit(new, b, [doc("a", 1)], 0)
    assert driver.dump(MAT, b) == {("a",): doc("a", 1)}
    old.close()
    new.close()


def test_quarantined_rows_commit_with_the_batch(driver, redis_ns):
    b = rbinding(redis_ns)
    t, _ = session(driver, b)
    t.acknowledge(Acknowledge())
    t.flush(Flush())
    t.store(store_msg(b, [doc("a", 1)]))
    t.quarantine(
        Quarantine(
            (
                {
                    "binding": 0,
                    "location": "/amount",
                    "key_json": '["x"]',
                    "reason": "not an integer",
                    "value": {"customer": "x", "amount": "lots"},
                },
            )
        )
    )
    assert driver.quarantined(MAT) == []  # nothing before the commit
    t.start_commit(StartCommit(cp(0)))
    [row] = driver.quarantined(MAT)
    assert row["resource"] == f"{redis_ns}customers:" and row["batch_id"] == 0 and row["reason"] == "not an integer"
    t.close()


def test_a_delta_binding_over_string_keys_is_refused_whole(driver, redis_ns, raw):
    d = rbinding(redis_ns, "events", delta=True)
    raw.set(f'{redis_ns}events:["b"]', b"{}")  # e.g. the prefix held a standard binding before
    t, _ = session(driver, d)
    with pytest.raises(IncompatibleSchema, match="not a list"):
        commit(t, d, [doc("a", 1), doc("b", 2)], 0)
    assert raw.exists(f'{redis_ns}events:["a"]') == 0 and driver.checkpoints(MAT)[0].runtime_checkpoint is None
    t.close()


def test_at_least_once_writes_without_fences_or_checkpoints(cfg, redis_ns, raw):
    d = load_driver("redis", {**cfg, "mode": "at-least-once"})
    b = rbinding(redis_ns)
    t, opened = session(d, b)
    assert opened.runtime_checkpoint is None
    commit(t, b, [doc("a", 1), doc("b", 2)], 0)
    commit(t, b, [doc("a", 3)], 1)
    assert d.dump(MAT, b) == {("a",): doc("a", 3), ("b",): doc("b", 2)}
    assert d.checkpoints(MAT) == [] and d.positions(MAT, [b]) == []
    assert not list(raw.scan_iter(match=f"{redis_ns}checkpoints:*"))
    t.close()
    d.close()


def test_validate_refuses_shared_or_missing_prefixes_and_apply_warns_about_persistence(driver, redis_ns, caplog):
    a = rbinding(redis_ns)
    with pytest.raises(SpecError, match="both use redis prefix"):
        driver.validate(Validate(MAT, driver.config, (a, dataclasses.replace(a, collection="other"))))
    with pytest.raises(SpecError, match="needs resource {prefix"):
        driver.validate(Validate(MAT, driver.config, (dataclasses.replace(a, resource={"bucket": "x"}),)))
    driver.validate(Validate(MAT, driver.config, (a,)))
    from tidemark.drivers.redis import driver as redis_driver

    redis_driver._WARNED.clear()
    with caplog.at_level(logging.WARNING, logger="tidemark"):
        driver.apply(Apply(MAT, driver.config, (a,)))
    server = driver.store.persistence()
    if server.appendonly == "yes" and server.appendfsync == "always":
        assert caplog.text == ""
    else:
        assert "appendonly yes" in caplog.text and "appendfsync always" in caplog.text


def test_drop_removes_documents_rows_checkpoints_and_quarantine(driver, redis_ns, raw):
    s, d = rbinding(redis_ns), rbinding(redis_ns, "events", delta=True)
    t, _ = session(driver, s, d)
    commit(t, s, [doc("a", 1)], 0)
    commit(t, d, [doc("a", 1)], 1, index=1)
    t.close()
    done = driver.drop(MAT, [s, d])
    assert any("checkpoints" in line for line in done)
    assert list(raw.scan_iter(match=f"{redis_ns}*")) == []


def test_an_unreachable_server_is_transient_and_the_password_is_not_shown():
    d = load_driver(
        "redis",
        {
            "url": f"redis://:s3cretpw@127.0.0.1:{free_port()}/0",
            "retry": {"attempts": 2, "base_delay": 0, "connect_timeout": 1},
        },
    )
    with pytest.raises(EndpointUnavailable) as err:
        d.open(Open(MAT, "v1", Range(), bindings=(binding(),)))
    assert "s3cretpw" not in str(err.value) and "127.0.0.1" in str(err.value)


def test_a_second_materialization_on_a_prefix_is_refused_until_the_first_is_reset(driver, redis_ns, raw):
    """Each prefix records which materialization and checkpoint write it; another view on the
    same prefix (whose sums would mix with the first's) is refused at Apply and by the dry run
    of ``tidemark check``, before anything is written; ``drop`` (reset) gives the prefix back."""
    from tidemark.errors import RecoveryError
    from tidemark.protocol.messages import Apply

    b = rbinding(redis_ns)
    driver.apply(Apply("first", {}, (b,), checkpoint_id="cp-1"))
    driver.apply(Apply("first", {}, (b,), checkpoint_id="cp-1"))  # its owner goes on
    for dry in (True, False):
        with pytest.raises(
            RecoveryError,
            match=f"prefix '{redis_ns}customers:' is written by materialization "
            "'first' of tidemark checkpoint cp-1.*Nothing was changed",
        ):
            driver.apply(Apply("second", {}, (b,), checkpoint_id="cp-2", dry_run=dry))
    with pytest.raises(RecoveryError, match="checkpoint cp-1, not by 'first' of checkpoint cp-9"):
        driver.apply(Apply("first", {}, (b,), checkpoint_id="cp-9"))  # the first view's checkpoint deleted
    driver.drop("first", (b,))
    driver.apply(Apply("second", {}, (b,), checkpoint_id="cp-2"))
