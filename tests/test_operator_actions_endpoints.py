"""The operator actions of ``test_operator_actions.py`` on the other endpoints, with real Spark
(the session's local[2]) and one view per endpoint: after a first run, each mistake is refused
before anything is written — a renamed resource, a moved source folder, another key,
another materialization on the view's resource, the whole checkpoint folder deleted — and then the
view, restored as it was, runs on over more input and ends exact (compared with an answer
computed from the input files).  SQLite, PostgreSQL and Delta run the same scenarios one by
one in ``test_operator_actions.py``."""

from __future__ import annotations

import shutil
import uuid

import pytest
import yaml

from tests.support.helpers import ORDERS_SCHEMA, oracle_orders, write_orders
from tests.support.kafka_broker import kafka_bootstrap, kafka_broker
from tests.support.mysql_support import mysql_db, mysql_url
from tests.support.nats_server import nats_server, nats_url
from tests.support.operator_endpoints import NAME, endpoint_of, read
from tidemark.errors import RecoveryError

pytestmark = [pytest.mark.spark, pytest.mark.slow]


def write_spec(folder, data, endpoint: dict, resource: dict, name: str = NAME, key=("/customer",)) -> str:
    spec = {
        "collections": {
            "orders": {
                "key": list(key),
                "schema": ORDERS_SCHEMA,
                "source": {"format": "json", "path": str(data), "options": {"maxFilesPerTrigger": 1}},
            }
        },
        "materializations": {
            name: {"endpoint": endpoint, "shards": 2, "bindings": [{"source": "orders", "resource": resource}]}
        },
        "checkpoint": str(folder / "checkpoints"),
    }
    folder.mkdir(exist_ok=True)
    path = folder / "spec.yaml"
    path.write_text(yaml.safe_dump(spec))
    return str(path)


def run(spark, spec):
    from tidemark.spark.runner import run_spec

    return run_spec(spec, spark=spark)


@pytest.mark.parametrize("kind", ["mysql", "iceberg", "store", "kafka", "nats", "redis", "webhook"])
def test_each_mistake_is_refused_then_the_view_runs_on_exact(spark, tmp_path, request, kind):
    tag = f"ops{uuid.uuid4().hex[:8]}"
    endpoint, key = endpoint_of(kind, request, tmp_path, tag)
    resource = {key: f"{tag}_customers"}
    data, home = tmp_path / "data", tmp_path / "job"
    write_orders(data, files=2, per_file=80, customers=40, seed=31)
    spec = write_spec(home, data, endpoint, resource)
    run(spark, spec)
    expected = oracle_orders(data)
    view, records = read(spec)
    assert view == expected and records[0]["materialization"] == NAME
    write_orders(data, files=1, per_file=80, customers=40, seed=32, start=2)  # more input, waiting

    # a renamed resource: the new one would hold only later batches
    renamed = write_spec(tmp_path / "renamed", data, endpoint, {key: f"{tag}_customers_v2"})
    shutil.copytree(home / "checkpoints", tmp_path / "renamed" / "checkpoints")
    with pytest.raises(RecoveryError, match=rf"'{tag}_customers', now '{tag}_customers_v2'.*Nothing was changed"):
        run(spark, renamed)
    assert read(renamed)[1] == [None]  # not created, no record

    # the same files in another folder: Spark would read them all again
    shutil.copytree(data, tmp_path / "moved")
    moved = write_spec(tmp_path / "moved-job", tmp_path / "moved", endpoint, resource)
    shutil.copytree(home / "checkpoints", tmp_path / "moved-job" / "checkpoints")
    with pytest.raises(RecoveryError, match=r"read from .*data, now .*moved.*Nothing was changed"):
        run(spark, moved)

    # another key for the live view: old-key and new-key documents would stand side by side
    rekeyed = write_spec(tmp_path / "rekeyed", data, endpoint, resource, key=("/customer", "/city"))
    shutil.copytree(home / "checkpoints", tmp_path / "rekeyed" / "checkpoints")
    with pytest.raises(
        RecoveryError, match=r"keyed by \['/customer'\], now \['/customer', '/city'\].*Nothing was changed"
    ):
        run(spark, rekeyed)

    # another job (its own name and checkpoint) on this view's resource; per-materialization
    # endpoints (the store, the webhook's state) give it resources of its own instead
    if kind not in ("store", "webhook"):
        intruder = write_spec(tmp_path / "intruder", data, endpoint, resource, name="intruder")
        with pytest.raises(RecoveryError, match=r"'view'.*Nothing was changed"):
            run(spark, intruder)

    # the whole checkpoint folder gone (the original is kept aside, then put back)
    shutil.move(str(home / "checkpoints"), str(tmp_path / "kept-checkpoints"))
    with pytest.raises(RecoveryError, match=r"another tidemark checkpoint of 'view'.*Nothing was changed"):
        run(spark, spec)
    assert read(spec) == (expected, records)  # every refusal left the view and its record as they were

    shutil.rmtree(home / "checkpoints", ignore_errors=True)
    shutil.move(str(tmp_path / "kept-checkpoints"), str(home / "checkpoints"))
    run(spark, spec)
    assert read(spec) == (oracle_orders(data), records)
