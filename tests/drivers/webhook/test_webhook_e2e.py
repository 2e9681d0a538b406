"""End to end on local Spark: JSON files → an HTTP receiver, one shard then two.  Every
batch delivers each changed customer's full document once, and a receiver that keeps the
latest document per customer ends up with the oracle's view; the local state store too."""

from __future__ import annotations

import pytest

pytest.importorskip("urllib3")
pytest.importorskip("rocksdict")

from tests.support.helpers import normalize, oracle_orders, write_orders
from tests.support.webhook_support import (
    add_delta_binding,
    applied_per_batch,
    applied_view,
    dedup_receiver,
    delta_rows,
    expected_delta_rows,
    expected_per_batch,
    webhook_spec,
)
from tidemark.drivers.registry import load_driver
from tidemark.protocol.messages import BindingSpec

pytestmark = pytest.mark.spark


def run(spark, spec_path):
    from tidemark.spark.runner import run_spec

    reports = []
    run_spec(spec_path, spark=spark, on_batch=reports.append)
    return reports


def test_one_shard_then_two_delivers_every_document_once(spark, tmp_path, dedup_receiver):
    data = tmp_path / "data"
    write_orders(data, files=2, per_file=200, customers=60, seed=141, deletes=0.05)
    spec = webhook_spec(tmp_path, data, url=dedup_receiver.url, shards=1, chunk_docs=25)
    add_delta_binding(spec, {"name": "order_log"})
    assert [r.batch_id for r in run(spark, spec)] == [0, 1]
    assert normalize(applied_view(dedup_receiver)) == oracle_orders(data)

    write_orders(data, files=2, per_file=200, customers=60, seed=142, start=2, deletes=0.05)
    spec = webhook_spec(tmp_path, data, url=dedup_receiver.url, shards=2, chunk_docs=25)
    add_delta_binding(spec, {"name": "order_log"})
    reports = run(spark, spec)
    assert [r.batch_id for r in reports] == [2, 3] and sum(r.loaded for r in reports) > 0
    expected = oracle_orders(data)
    assert normalize(applied_view(dedup_receiver)) == expected
    per_batch = applied_per_batch(dedup_receiver)
    assert set(per_batch) == expected_per_batch(data) and set(per_batch.values()) == {1}
    assert all(r["outcome"] == "applied" for r in dedup_receiver.requests)  # no crash: no resend
    assert delta_rows(dedup_receiver.documents("view", "order_log")) == expected_delta_rows(data)
    driver = load_driver("webhook", {"url": dedup_receiver.url, "state": str(tmp_path / "webhook-state")})
    binding = BindingSpec({"name": "customers"}, "orders", ("/customer",), ())
    assert normalize({k[0]: d for k, d in driver.dump("view", binding).items()}) == expected
    driver.close()
