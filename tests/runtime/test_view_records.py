"""The view-identity record every endpoint keeps with each bound resource, without Spark:
the real coordinator's start-up writes it (Apply), ``Driver.identities`` reads it back, and a
later start-up that names another view on the same resources is refused before anything is
written — by the record, also where the recovery log has no batch to compare with yet.

Scenarios, on every shipped endpoint: a moved source and a changed key under the same
checkpoint (no batch committed yet, so only the endpoint's record can tell), another
materialization on the same resources, and ``drop`` (reset) forgetting the record."""

from __future__ import annotations

import dataclasses
import os
import uuid

import pytest

from tests.support.conformance_drivers import SHIPPED, URL_FIXTURES
from tests.support.kafka_broker import kafka_bootstrap, kafka_broker
from tests.support.mysql_support import mysql_url
from tests.support.nats_server import nats_server, nats_url
from tidemark.drivers.registry import load_driver
from tidemark.errors import RecoveryError
from tidemark.runtime.coordinator import Coordinator
from tidemark.testing.workload import bindings as make_bindings

# endpoints whose resources live under the materialization's name (the store's folder, the
# webhook's state store): another materialization's "orders" is another resource
PER_MATERIALIZATION = {"store", "webhook"}
DRIVERS = [d for d in SHIPPED if d not in ("store-changelog", "redis-at-least-once")]


def coordinator(factory, bindings, mat: str, folder: str, sources) -> Coordinator:
    driver = factory()
    return Coordinator(
        materialization=mat,
        driver=driver,
        driver_name=driver.name or "driver",
        driver_config=dict(driver.config),
        bindings=bindings,
        version="v1",
        checkpoint_location=folder,
        shards=1,
        sources=sources,
    )


def start(factory, bindings, mat, folder, sources) -> Coordinator:
    coord = coordinator(factory, bindings, mat, folder, sources)
    try:
        coord.start_up()
    finally:
        if coord.lease is not None:
            coord.lease.release()
        coord.driver.close()
    return coord


def refused(factory, bindings, mat, folder, sources) -> str:
    with pytest.raises(RecoveryError) as info:
        start(factory, bindings, mat, folder, sources)
    return str(info.value)


def kept(factory, mat, bindings):
    driver = factory()
    try:
        return driver.identities(mat, bindings)
    finally:
        driver.close()


@pytest.mark.parametrize("driver", DRIVERS)
def test_each_endpoint_keeps_the_view_record_and_start_up_refuses_another_view(driver, tmp_path, request):
    urls = {driver: request.getfixturevalue(URL_FIXTURES[driver])} if driver in URL_FIXTURES else {}
    if driver == "redis":
        from tests.support.redis_support import REDIS_URL

        urls["redis"] = REDIS_URL
    if driver == "webhook":
        from tests.support.webhook_support import Receiver

        receiver = Receiver(dedup=True)
        request.addfinalizer(receiver.close)
        urls["webhook"] = receiver.url
    config = SHIPPED[driver](tmp_path, urls)
    factory = lambda: load_driver(driver, config)
    tag = f"rec_{uuid.uuid4().hex[:8]}"
    mat = f"m_{tag}"
    bindings = make_bindings(tag)
    folder = str(tmp_path / "ck")
    sources = [str(tmp_path / "in" / b.collection.replace("/", "_")) for b in bindings]

    coord = start(factory, bindings, mat, folder, sources)
    records = kept(factory, mat, bindings)
    assert records is not None and len(records) == len(bindings)
    for b, src, rec in zip(bindings, sources, records):
        assert rec["materialization"] == mat and rec["checkpoint_id"] == coord.checkpoint_id
        assert rec["collection"] == b.collection and rec["key"] == list(b.key) and rec["source"] == src
        assert rec["created_at_batch"] == 0 and isinstance(rec["resolved"], str) and rec["resolved"]

    # the same checkpoint, no batch logged yet: only the endpoint can tell that these changed
    moved = [sources[0] + "_moved", *sources[1:]]
    assert f"read from {sources[0]} since batch 0, not from {moved[0]}" in refused(
        factory, bindings, mat, folder, moved
    )
    rekeyed = (*bindings[:2], dataclasses.replace(bindings[2], key=("/n",)), *bindings[3:])
    assert "is keyed by ['/k'] since batch 0, not ['/n']" in refused(factory, rekeyed, mat, folder, sources)
    # another view (its own name and checkpoint) on the same resources
    if driver in PER_MATERIALIZATION:  # its resources are its own: both views stand apart
        theirs = start(factory, bindings, f"other_{tag}", str(tmp_path / "ck2"), sources)
        assert [r["checkpoint_id"] for r in kept(factory, f"other_{tag}", bindings)] == [theirs.checkpoint_id] * 3
    else:
        other = refused(factory, bindings, f"other_{tag}", str(tmp_path / "ck2"), sources)
        assert mat in other and "Nothing was changed" in other
    assert kept(factory, mat, bindings) == records  # every refusal left the records as they were

    start(factory, bindings, mat, folder, sources)  # the same view starts again: the records stay
    assert kept(factory, mat, bindings) == records

    driver_ = factory()
    try:
        driver_.drop(mat, bindings)  # what `tidemark reset` does
    finally:
        driver_.close()
    assert kept(factory, mat, bindings) in ([None] * len(bindings), None)
    assert os.path.isdir(folder)
