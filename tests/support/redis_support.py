"""Fixtures for the Redis tests: the server's URL and a namespace of one's own.

Redis on 127.0.0.1:6379 (override with ``TIDEMARK_TEST_REDIS_URL``).  Every test writes
under a fresh key namespace and deletes it afterwards; no test flushes a database, so
tests of other checkouts may share the server."""

from __future__ import annotations

import os
import uuid

import pytest

REDIS_URL = os.environ.get("TIDEMARK_TEST_REDIS_URL", "redis://127.0.0.1:6379/0")


@pytest.fixture(scope="session")
def redis_url():
    try:
        import redis
    except ImportError:  # pragma: no cover
        pytest.fail("redis-py is not installed: pip install -e '.[dev]'")
    try:
        redis.Redis.from_url(REDIS_URL, socket_connect_timeout=5).ping()
    except redis.exceptions.RedisError as exc:  # pragma: no cover
        pytest.fail(f"Redis is not reachable at TIDEMARK_TEST_REDIS_URL: {exc}")
    return REDIS_URL


@pytest.fixture
def redis_ns(redis_url):
    """A key namespace for one test (``tm_test_<hex>:``), deleted afterwards."""
    import redis

    ns = f"tm_test_{uuid.uuid4().hex[:10]}:"
    yield ns
    client = redis.Redis.from_url(redis_url)
    keys = list(client.scan_iter(match=ns + "*", count=1000))
    for i in range(0, len(keys), 1000):
        client.delete(*keys[i : i + 1000])
    client.close()


def redis_spec(tmp, data, *, url, prefix, shards=1, **config) -> str:
    """The orders spec (tests/support/helpers.py) into Redis: ``resource: {prefix: PREFIX}``."""
    import yaml

    from tests.support.helpers import orders_spec

    path = orders_spec(
        tmp, data_dir=data, db_path=None, shards=shards, max_files=1, endpoint={"redis": {"url": url, **config}}
    )
    with open(path) as f:
        spec = yaml.safe_load(f)
    spec["materializations"]["view"]["bindings"][0]["resource"] = {"prefix": prefix}
    with open(path, "w") as f:
        yaml.safe_dump(spec, f)
    return path


def redis_view(url, prefix) -> dict:
    """customer -> document, read straight from Redis (SCAN + MGET, no tidemark code)."""
    import json

    import redis

    client = redis.Redis.from_url(url)
    try:
        keys = list(client.scan_iter(match=prefix.replace("[", "\\[") + "\\[*", count=1000))
        out = {}
        for i in range(0, len(keys), 1000):
            part = keys[i : i + 1000]
            for k, v in zip(part, client.mget(part)):
                out[json.loads(k[len(prefix.encode()) :])[0]] = json.loads(v)
        return out
    finally:
        client.close()
