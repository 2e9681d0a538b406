"""Rescale without a restart, on Spark: one running query (``run_spec`` with a batch per
input file) is asked for 4 shards after batch 1 and for 3 after batch 3 (``tidemark.scale``
from the ``on_batch`` callback, which runs between batches); it ends exact on SQLite,
PostgreSQL, Delta Lake and Iceberg, against a view computed independently from the input
files (and Iceberg's table holds one snapshot per batch across the layout changes)."""

from __future__ import annotations

import pytest

import tidemark
from tests.support.helpers import oracle_orders, write_orders
from tests.support.kafka_broker import kafka_bootstrap, kafka_broker
from tests.support.nats_server import private_nats_server
from tests.support.operator_specs import endpoint, write_spec

pytestmark = pytest.mark.spark


def run_rescaled_2_4_3(spark, spec: str) -> list:
    """One running query (a batch per file, 6 files) asked for 4 shards after batch 1 and for
    3 after batch 3; its batches' reports (asserted to run 2, 2, 4, 4, 3, 3 shards)."""
    from tidemark.spark.runner import run_spec

    asks = {1: 4, 3: 3}  # after batch N commits: scale to M
    reports = []

    def on_batch(report):
        reports.append(report)
        if report.batch_id in asks:
            tidemark.scale(spec, shards=asks[report.batch_id], materialization="view")

    runs = run_spec(spec, spark=spark, on_batch=on_batch)
    assert len(runs) == 1  # one query, never restarted
    assert [(r.batch_id, r.shards) for r in reports] == [(0, 2), (1, 2), (2, 4), (3, 4), (4, 3), (5, 3)]
    return reports


@pytest.mark.parametrize(
    "kind",
    [
        "sqlite",
        pytest.param("postgres", marks=pytest.mark.slow),
        pytest.param("delta", marks=pytest.mark.slow),
        pytest.param("iceberg", marks=pytest.mark.slow),
    ],
)
def test_live_rescale_2_4_3_in_one_running_query(spark, tmp_path, request, kind):
    if kind == "iceberg":
        pytest.importorskip("pyiceberg")
        from tests.support.iceberg_specs import Iceberg

        ep = Iceberg(tmp_path)
    else:
        ep = endpoint(request, tmp_path, kind)
    data = tmp_path / "data"
    write_orders(data, files=6, per_file=120, customers=60, seed=25, deletes=0.05)
    spec = write_spec(tmp_path, data, ep, shards=2)
    run_rescaled_2_4_3(spark, spec)
    assert ep.view() == oracle_orders(data)
    if kind == "iceberg":
        assert ep.batches() == [0, 1, 2, 3, 4, 5]
    hist = tidemark.layout_history(spec)
    assert [(r["first"], r["last"], r["shards"], r["by"]) for r in hist["ranges"]] == [
        (0, 1, 2, "configured"),
        (2, 3, 4, "scale"),
        (4, 5, 3, "scale"),
    ]
    assert hist["pending"] == [] and [r["done"]["batch_id"] for r in hist["requests"]] == [2, 4]


def test_the_auto_policy_scales_a_running_query_from_its_key_counts(spark, tmp_path, request):
    """``shards: {auto: ...}``: the first batch on ``min``; after two batches of ~50 keys
    (target 4 at 15 keys per shard) the query runs on 4 shards, exact."""
    import yaml

    from tidemark.spark.runner import run_spec

    ep = endpoint(request, tmp_path, "sqlite")
    data = tmp_path / "data"
    write_orders(data, files=4, per_file=120, customers=60, seed=26)
    spec = write_spec(tmp_path, data, ep)
    obj = yaml.safe_load(open(spec))
    obj["materializations"]["view"]["shards"] = {"auto": {"min": 1, "max": 4, "keys_per_shard": 15}}
    with open(spec, "w") as f:
        yaml.safe_dump(obj, f)
    reports = []
    run_spec(spec, spark=spark, on_batch=reports.append)
    assert [(r.batch_id, r.shards) for r in reports] == [(0, 1), (1, 1), (2, 4), (3, 4)]
    assert all(r.keys > 45 for r in reports)
    assert ep.view() == oracle_orders(data)
    assert [r["by"] for r in tidemark.layout_history(spec)["ranges"]] == ["auto", "auto"]


@pytest.mark.slow
@pytest.mark.parametrize("kind", ["store", "kafka", "nats"])
def test_live_rescale_2_4_3_on_the_store_kafka_and_nats(spark, tmp_path, request, kind):
    """The same live 2 -> 4 -> 3 on the endpoints whose Loads come from a local store per range:
    each new range inherits (splits, merges) its keys' state, and the view ends exact."""
    import uuid

    from tests.support.helpers import kafka_spec, kafka_view, normalize, store_spec, store_view

    data = tmp_path / "data"
    write_orders(data, files=6, per_file=120, customers=60, seed=26, deletes=0.05)
    if kind == "store":
        spec = store_spec(tmp_path, data, 2)

        def view():
            return store_view(spec)
    elif kind == "kafka":
        from tests.support.kafka_broker import confluent_kafka_or_skip

        confluent_kafka_or_skip()
        bootstrap, topic = request.getfixturevalue("kafka_bootstrap"), f"customers-{uuid.uuid4().hex[:8]}"
        spec = kafka_spec(tmp_path, data, 2, bootstrap, topic=topic, progress_topic=f"progress-{topic}")

        def view():
            return kafka_view(bootstrap, topic)
    else:
        from tests.support.nats_helpers import committed_view, nats_spec

        url = request.getfixturevalue("private_nats_server").url
        spec = nats_spec(tmp_path, data, 2, url)

        def view():
            return committed_view(url)

    reports = run_rescaled_2_4_3(spark, spec)
    assert sum(r.loaded for r in reports) > 0  # later batches loaded keys from the inherited local state
    assert normalize(view()) == oracle_orders(data)
