"""End to end on local Spark: JSON files → Redis, compared with an independent oracle read
straight from Redis; one shard, then two (the new ranges inherit the checkpoint); and the
at-least-once mode, whose start-up warns about the sum and append reductions."""

from __future__ import annotations

import logging

import pytest

pytest.importorskip("redis")

from tests.support.helpers import assert_verified, normalize, oracle_orders, write_orders
from tests.support.redis_support import redis_ns, redis_spec, redis_url, redis_view
from tests.support.webhook_support import add_delta_binding, delta_rows, expected_delta_rows
from tidemark.drivers.registry import load_driver
from tidemark.protocol.messages import BindingSpec

pytestmark = pytest.mark.spark


def run(spark, spec_path):
    from tidemark.spark.runner import run_spec

    reports = []
    run_spec(spec_path, spark=spark, on_batch=reports.append)
    return reports


def test_one_shard_then_two_is_exact(spark, tmp_path, redis_url, redis_ns):
    data, prefix = tmp_path / "data", redis_ns + "customers:"
    write_orders(data, files=2, per_file=200, customers=60, seed=131, deletes=0.05)
    spec = redis_spec(tmp_path, data, url=redis_url, prefix=prefix, namespace=redis_ns, shards=1)
    add_delta_binding(spec, {"prefix": redis_ns + "order_log:"})
    assert [r.batch_id for r in run(spark, spec)] == [0, 1]
    assert normalize(redis_view(redis_url, prefix)) == oracle_orders(data)

    write_orders(data, files=2, per_file=200, customers=60, seed=132, start=2, deletes=0.05)
    spec = redis_spec(tmp_path, data, url=redis_url, prefix=prefix, namespace=redis_ns, shards=2)
    add_delta_binding(spec, {"prefix": redis_ns + "order_log:"})
    reports = run(spark, spec)
    assert [r.batch_id for r in reports] == [2, 3] and all(r.shards == 2 for r in reports)
    assert sum(r.loaded for r in reports) > 0  # existing keys were loaded from Redis and reduced
    assert normalize(redis_view(redis_url, prefix)) == oracle_orders(data)
    driver = load_driver("redis", {"url": redis_url, "namespace": redis_ns})
    log = BindingSpec({"prefix": redis_ns + "order_log:"}, "orders", ("/customer",), (), delta_updates=True)
    assert delta_rows(driver.dump("view", log)) == expected_delta_rows(data)  # each batch's deltas, once
    rows = {r.range.name: r.runtime_checkpoint["batch_id"] for r in driver.checkpoints("view")}
    assert rows == {"00000000-ffffffff": 1, "00000000-7fffffff": 3, "80000000-ffffffff": 3}
    driver.close()
    assert_verified(spec)


def test_at_least_once_mode_is_exact_without_crashes_and_warns_about_sums(spark, tmp_path, redis_url, redis_ns, caplog):
    data, prefix = tmp_path / "data", redis_ns + "customers:"
    write_orders(data, files=2, per_file=150, customers=40, seed=133, deletes=0.05)
    spec = redis_spec(tmp_path, data, url=redis_url, prefix=prefix, namespace=redis_ns, shards=2, mode="at-least-once")
    with caplog.at_level(logging.WARNING, logger="tidemark"):
        run(spark, spec)
    assert "uses sum, append reductions, which an at-least-once endpoint (redis) may apply twice" in caplog.text
    assert normalize(redis_view(redis_url, prefix)) == oracle_orders(data)
    assert_verified(spec)
