"""Shared fixtures: one SparkSession per test session, service URLs from the environment."""

from __future__ import annotations

import os
import sys

import pytest

os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")

POSTGRES_URL = os.environ.get("TIDEMARK_TEST_POSTGRES_URL", "postgresql://postgres@127.0.0.1:5432/test")


@pytest.fixture(scope="session")
def spark():
    from tidemark.spark.session import local_session

    session = local_session("tidemark-tests")
    yield session
    session.stop()


@pytest.fixture
def checkpoint_dir(tmp_path):
    path = tmp_path / "checkpoint"
    path.mkdir()
    return path


@pytest.fixture(scope="session")
def postgres_url():
    try:
        import psycopg
    except ImportError:  # pragma: no cover
        pytest.fail("psycopg is not installed: pip install -e '.[dev]'")
    try:
        with psycopg.connect(POSTGRES_URL, connect_timeout=5):
            pass
    except psycopg.OperationalError as exc:  # pragma: no cover
        pytest.fail(f"PostgreSQL is not reachable at TIDEMARK_TEST_POSTGRES_URL: {exc}")
    return POSTGRES_URL


@pytest.fixture
def pg_schema(postgres_url):
    """A fresh PostgreSQL schema name for one test, dropped afterwards."""
    import uuid

    import psycopg

    name = f"tm_test_{uuid.uuid4().hex[:10]}"
    yield name
    with psycopg.connect(postgres_url, autocommit=True) as con:
        con.execute(f'DROP SCHEMA IF EXISTS "{name}" CASCADE')
