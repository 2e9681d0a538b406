"""End to end on local Spark: JSON files -> a ``nats`` view on a private JetStream server,
compared with an independent oracle: read-committed, as a plain consumer keeping the last
message per key, and with every message of a committed batch stored once."""

from __future__ import annotations

import shutil

import pytest

pytest.importorskip("nats", reason="pip install -e '.[test,nats]'")
pytest.importorskip("rocksdict")

from tests.support.helpers import assert_verified, normalize, oracle_orders, write_orders
from tests.support.nats_helpers import committed_copies, committed_view, nats_spec, raw_last_per_key
from tests.support.nats_server import private_nats_server

pytestmark = pytest.mark.spark


def run(spark, spec_path):
    from tidemark.spark.runner import run_spec

    reports = []
    run_spec(spec_path, spark=spark, on_batch=reports.append)
    return reports


@pytest.mark.parametrize("shards", [pytest.param(1, marks=pytest.mark.slow), 4])
def test_several_batches_restart_resume_and_rebuild_the_state_store(spark, tmp_path, private_nats_server, shards):
    url = private_nats_server.url
    data = tmp_path / "data"
    write_orders(data, files=3, per_file=200, customers=60, seed=130 + shards, deletes=0.05)
    spec = nats_spec(tmp_path, data, shards, url, max_batch=100)
    reports = run(spark, spec)
    assert [r.batch_id for r in reports] == [0, 1, 2] and all(r.shards == shards for r in reports)
    expected = oracle_orders(data)
    assert normalize(committed_view(url)) == expected
    assert normalize(raw_last_per_key(url)) == expected

    # The machine loses its local state store: the next Open rebuilds it from the stream.
    shutil.rmtree(tmp_path / "state")
    write_orders(data, files=2, per_file=200, customers=60, seed=140 + shards, start=3, deletes=0.05)
    reports = run(spark, spec)
    assert [r.batch_id for r in reports] == [3, 4]
    assert sum(r.loaded for r in reports) > 0  # existing keys were loaded (from the rebuilt store) and reduced
    expected = oracle_orders(data)
    assert normalize(committed_view(url)) == expected
    assert normalize(raw_last_per_key(url)) == expected
    copies = committed_copies(url)
    assert copies and set(copies.values()) == {1}
    assert_verified(spec)
    from tidemark.drivers.nats import NatsDriver

    with NatsDriver({"url": url, "state": str(tmp_path / "state"), "stream": "ORDERS"}) as driver:
        rows = driver.checkpoints("view")
    assert len(rows) == shards and all(r.runtime_checkpoint["batch_id"] == 4 for r in rows)
