"""Per-endpoint specs and read-backs for the operator-action tests."""

from __future__ import annotations

from tests.support.helpers import normalize
from tidemark.drivers.registry import load_driver

NAME = "view"


def endpoint_of(kind: str, request, tmp, tag: str) -> tuple[dict, str]:
    """The spec's endpoint and the resource key that names a binding's resource."""
    if kind == "mysql":
        return {
            "mysql": {"url": request.getfixturevalue("mysql_url"), "schema": request.getfixturevalue("mysql_db")}
        }, "table"
    if kind == "iceberg":
        return {
            "iceberg": {
                "catalog": {"uri": f"sqlite:///{tmp / 'catalog.db'}", "warehouse": str(tmp / "wh")},
                "namespace": "ops",
            }
        }, "table"
    if kind == "store":
        return {"store": {"path": str(tmp / "store")}}, "name"
    if kind == "kafka":
        return {
            "kafka": {
                "bootstrap_servers": request.getfixturevalue("kafka_bootstrap"),
                "state": str(tmp / "state"),
                "progress_topic": f"{tag}-progress",
            }
        }, "topic"
    if kind == "nats":
        return {
            "nats": {"url": request.getfixturevalue("nats_url"), "state": str(tmp / "state"), "stream": tag.upper()}
        }, "subject"
    if kind == "redis":
        from tests.support.redis_support import REDIS_URL

        return {"redis": {"url": REDIS_URL, "namespace": f"{tag}:"}}, "prefix"
    if kind == "webhook":
        from tests.support.webhook_support import Receiver

        receiver = Receiver(dedup=True)
        request.addfinalizer(receiver.close)
        return {"webhook": {"url": receiver.url, "state": str(tmp / "state")}}, "name"
    raise AssertionError(kind)


def read(spec_path: str, name: str = NAME):
    """The view (customer -> document) and each binding's kept identity record, read through the
    endpoint's driver."""
    from tidemark.ops import bound
    from tidemark.spec import load_spec

    spec = load_spec(spec_path)
    mat = spec.materializations[name]
    bindings = bound(spec, mat)
    with load_driver(mat.driver_name, mat.driver_config) as driver:
        records = driver.identities(name, bindings)
        view = driver.dump(name, bindings[0]) if records and records[0] else {}
    return normalize({k[0]: doc for k, doc in view.items()}), records
