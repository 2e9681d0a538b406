"""What the Redis endpoint's docs say about persistence, on private ``redis-server``
processes (their own port and folder): with ``appendonly yes`` + ``appendfsync always`` a
commit survives a SIGKILL of the server and Apply warns about nothing; without the AOF the
commit and its checkpoint are lost together (the range is behind, never half-applied), and
Apply's warning says so."""

from __future__ import annotations

import logging

import pytest

pytest.importorskip("redis")

import redis

from tests.support.driver_protocol import MAT, binding, cp, doc, store_msg
from tests.support.redis_server import Server
from tidemark.drivers.redis import driver as redis_driver
from tidemark.drivers.registry import load_driver
from tidemark.protocol.messages import Acknowledge, Apply, Flush, Open, Range, StartCommit


@pytest.fixture
def server_factory(tmp_path):
    servers = []

    def make(*settings):
        s = Server(tmp_path, *settings)
        servers.append(s)
        return s

    yield make
    for s in servers:
        s.close()


def commit_one(driver, b):
    t, opened = driver.open(Open(MAT, "v1", Range(), bindings=(b,)))
    t.acknowledge(Acknowledge())
    t.flush(Flush())
    t.store(store_msg(b, [doc("a", 1)]))
    t.start_commit(StartCommit(cp(0)))
    t.close()
    return opened


def apply_warning(driver, b, caplog) -> str:
    redis_driver._WARNED.clear()
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="tidemark"):
        driver.apply(Apply(MAT, driver.config, (b,)))
    return caplog.text


@pytest.mark.parametrize("fsync", ["always", "everysec"])
def test_with_the_aof_a_commit_survives_a_killed_server(server_factory, caplog, fsync):
    server = server_factory("--appendonly", "yes", "--appendfsync", fsync)
    b = binding()
    d = load_driver("redis", {"url": server.url})
    warning = apply_warning(d, b, caplog)
    assert (warning == "") if fsync == "always" else ("appendfsync everysec" in warning and "machine" in warning)
    commit_one(d, b)
    d.close()
    server.kill()  # a crash of Redis (not of the machine): the AOF has the commit either way
    server.start()
    d = load_driver("redis", {"url": server.url})
    t, opened = d.open(Open(MAT, "v1", Range(), bindings=(b,)))
    assert opened.runtime_checkpoint == cp(0) and d.dump(MAT, b) == {("a",): doc("a", 1)}
    t.close()
    d.close()


def test_without_the_aof_data_and_checkpoint_are_lost_together(server_factory, caplog):
    server = server_factory("--appendonly", "no")
    b = binding()
    d = load_driver("redis", {"url": server.url})
    assert "persistence is off" in apply_warning(d, b, caplog)
    commit_one(d, b)
    d.close()
    server.kill()
    server.start()
    d = load_driver("redis", {"url": server.url})
    assert d.checkpoints(MAT) == [] and d.dump(MAT, b) == {}  # behind the recovery log, never half-applied
    d.close()


@pytest.mark.parametrize(
    "policy,refused", [("allkeys-lru", True), ("allkeys-random", True), ("volatile-lru", False), ("noeviction", False)]
)
def test_a_server_that_may_evict_the_view_is_refused_at_validate(server_factory, policy, refused):
    """``maxmemory`` with an ``allkeys-*`` policy evicts keys without a TTL — a view's
    documents and checkpoints — when the server is full: refused at Validate (so by
    ``tidemark check`` and before a run writes anything), naming the setting to change."""
    from tidemark.errors import IncompatibleSchema
    from tidemark.protocol.messages import Validate

    server = server_factory("--maxmemory", "64mb", "--maxmemory-policy", policy)
    b = binding()
    with load_driver("redis", {"url": server.url}) as d:
        if refused:
            with pytest.raises(
                IncompatibleSchema,
                match=f"maxmemory-policy {policy}.*CONFIG SET maxmemory-policy noeviction.*Nothing was changed",
            ):
                d.validate(Validate(MAT, d.config, (b,)))
        else:
            d.validate(Validate(MAT, d.config, (b,)))
    unlimited = server_factory("--maxmemory", "0", "--maxmemory-policy", "allkeys-lru")
    with load_driver("redis", {"url": unlimited.url}) as d:
        d.validate(Validate(MAT, d.config, (b,)))  # no limit: nothing is evicted
