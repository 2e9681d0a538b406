"""Kafka topics as sources in tests: a producer of orders documents (some in aborted
transactions) and the spec that reads them (tests/sources/)."""

from __future__ import annotations

import json
import os
import random

import yaml

from tests.support.helpers import CITIES, ORDERS_SCHEMA


def caps_available_now() -> bool:
    """Whether ``max_records_per_batch`` splits a ``--available-now`` run into batches: PySpark
    4.2+ (read limits for Python sources); 4.0/4.1 read what is there in one batch."""
    import pyspark

    return tuple(int(x) for x in pyspark.__version__.split(".")[:2]) >= (4, 2)


def order_doc(draw: random.Random, customers: int, deletes: float = 0.0) -> dict:
    cust = f"c{draw.randrange(customers):04d}"
    if deletes and draw.random() < deletes:
        return {"customer": cust, "amount": 0, "_meta": {"op": "d"}}
    amount = draw.randrange(1, 1000)
    return {
        "customer": cust,
        "amount": amount,
        "orders": 1,
        "largest": amount,
        "city": draw.choice(CITIES),
        "items": [draw.choice("abcdef")],
        "flags": {"big": True} if amount > 900 else {},
    }


def produce_orders(
    bootstrap: str,
    topic: str,
    *,
    transactions: int,
    per_transaction: int,
    customers: int,
    seed: int,
    abort_every: int = 0,
    deletes: float = 0.0,
    tombstones: float = 0.0,
    producer_id: str = "orders-producer",
) -> list[dict]:
    """Write keyed JSON orders documents to ``topic`` in transactions (every
    ``abort_every``-th aborted) and return the committed ones as documents in write order
    (a tombstone as the deletion document it stands for): one key's records share a
    partition (the key's hash), so their order is the write order."""
    from confluent_kafka import Producer

    draw = random.Random(seed)
    producer = Producer({"bootstrap.servers": bootstrap, "transactional.id": f"{producer_id}-{seed}", "linger.ms": 5})
    producer.init_transactions(30)
    committed: list[dict] = []
    for t in range(transactions):
        docs = []
        producer.begin_transaction()
        for _ in range(per_transaction):
            doc = order_doc(draw, customers, deletes)
            key = json.dumps([doc["customer"]]).encode()
            if tombstones and draw.random() < tombstones:
                producer.produce(topic, key=key, value=None)
                docs.append({"customer": doc["customer"], "_meta": {"op": "d"}})
            else:
                producer.produce(topic, key=key, value=json.dumps(doc).encode())
                docs.append(doc)
        if abort_every and t % abort_every == abort_every - 1:
            producer.abort_transaction(30)
        else:
            producer.commit_transaction(30)
            committed += docs
    return committed


def create_topic(bootstrap: str, topic: str, partitions: int = 3) -> None:
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient({"bootstrap.servers": bootstrap})
    for fut in admin.create_topics([NewTopic(topic, partitions, 1)]).values():
        fut.result(30)


def kafka_source_spec(tmp, *, bootstrap: str, topic: str, endpoint: dict, shards: int = 1, name="view", **source):
    """A spec: the orders collection read from ``topic`` into ``endpoint``'s ``customers``."""
    spec = {
        "collections": {
            "orders": {
                "key": ["/customer"],
                "schema": {**ORDERS_SCHEMA, "required": ["customer"]},  # a tombstone's document: the key
                "source": {"kafka": {"bootstrap_servers": bootstrap, "topic": topic, **source}},
            }
        },
        "materializations": {
            name: {
                "endpoint": endpoint,
                "shards": shards,
                "bindings": [{"source": "orders", "resource": {"table": "customers"}}],
            }
        },
        "checkpoint": str(os.path.join(tmp, "checkpoints")),
    }
    path = os.path.join(tmp, "spec.yaml")
    with open(path, "w") as f:
        yaml.safe_dump(spec, f)
    return path


def publish_orders(
    url: str, stream: str, *, messages: int, customers: int, seed: int, deletes: float = 0.0
) -> list[dict]:
    """Publish ``messages`` orders documents to JetStream stream ``stream`` (created if
    missing, subjects ``<stream>.<customer>``); return them in stream order."""
    import asyncio

    import nats

    draw = random.Random(seed)
    docs = [order_doc(draw, customers, deletes) for _ in range(messages)]

    async def go():
        nc = await nats.connect(url, connect_timeout=10)
        try:
            js = nc.jetstream(timeout=10)
            try:
                await js.stream_info(stream)
            except nats.js.errors.NotFoundError:
                await js.add_stream(name=stream, subjects=[f"{stream}.>"])
            for doc in docs:
                await js.publish(f"{stream}.{doc['customer']}", json.dumps(doc).encode())
        finally:
            await nc.close()

    asyncio.run(go())
    return docs


def nats_source_spec(tmp, *, url: str, stream: str, endpoint: dict, shards: int = 1, **source) -> str:
    """A spec: the orders collection read from JetStream ``stream`` into ``endpoint``'s ``customers``."""
    spec = {
        "collections": {
            "orders": {
                "key": ["/customer"],
                "schema": ORDERS_SCHEMA,
                "source": {"nats": {"url": url, "stream": stream, **source}},
            }
        },
        "materializations": {
            "view": {
                "endpoint": endpoint,
                "shards": shards,
                "bindings": [{"source": "orders", "resource": {"table": "customers"}}],
            }
        },
        "checkpoint": str(os.path.join(tmp, "checkpoints")),
    }
    path = os.path.join(tmp, "spec.yaml")
    with open(path, "w") as f:
        yaml.safe_dump(spec, f)
    return path
