"""The shipped drivers the conformance kit runs on, and their URL fixtures."""

from __future__ import annotations

import uuid

# Every shipped driver, by registry name: the config it gets here.  A new driver adds one line.
SHIPPED = {
    "sqlite": lambda tmp, urls: {"path": str(tmp / "views.db")},
    "postgres": lambda tmp, urls: {"url": urls["postgres"], "schema": f"kit_{uuid.uuid4().hex[:10]}"},
    "mysql": lambda tmp, urls: {"url": urls["mysql"], "schema": f"kit_{uuid.uuid4().hex[:10]}"},
    "delta": lambda tmp, urls: {"path": str(tmp / "lake")},
    "iceberg": lambda tmp, urls: {
        "catalog": {"uri": f"sqlite:///{tmp / 'catalog.db'}", "warehouse": str(tmp / "wh")},
        "namespace": "kit",
    },
    "store": lambda tmp, urls: {"path": str(tmp / "store")},
    "store-changelog": lambda tmp, urls: {
        "path": str(tmp / "store"),
        "changelog": str(tmp / "changelog"),
        "snapshot_every": 2,
        "max_uncommitted_bytes": 300,
    },  # restore + spill
    "kafka": lambda tmp, urls: {
        "bootstrap_servers": urls["kafka"],
        "state": str(tmp / "state"),
        "progress_topic": f"kit-progress-{uuid.uuid4().hex[:8]}",
    },  # Loads via the store
    "redis": lambda tmp, urls: {"url": urls["redis"], "namespace": f"tm_kit_{uuid.uuid4().hex[:10]}:"},
    "redis-at-least-once": lambda tmp, urls: {"url": urls["redis"], "mode": "at-least-once"},
    # the kit reads the standard binding from the state store, the delta rows from the receiver
    "webhook": lambda tmp, urls: {"url": urls["webhook"], "state": str(tmp / "state"), "chunk_docs": 50},
    # atomic batch publish (chunked batches: tests/drivers/nats/test_nats_crash.py, test_nats_channel.py)
    "nats": lambda tmp, urls: {
        "url": urls["nats"],
        "state": str(tmp / "state"),
        "stream": f"KIT{uuid.uuid4().hex[:8]}",
    },
}


# driver -> the fixture that gives its URL
URL_FIXTURES = {"postgres": "postgres_url", "mysql": "mysql_url", "kafka": "kafka_bootstrap", "nats": "nats_url"}
