"""Shared fixtures: one SparkSession per test session, service URLs from the environment."""

from __future__ import annotations

import os
import sys

import pytest

os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")

POSTGRES_URL = os.environ.get("TIDEMARK_TEST_POSTGRES_URL", "postgresql://postgres@127.0.0.1:5432/test")

#: The tests' driver JVMs start in about half the time: only the client compiler (tests run
#: short jobs), the serial collector, and the classes of a Spark start-up mapped from an
#: AppCDS archive made once per machine (:func:`spark_class_archive`). Every Spark the tests
#: start (``tidemark`` subprocesses, the chaos harness) inherits it through
#: ``SPARK_SUBMIT_OPTS``; the session fixture's long-lived JVM takes only the archive.
#: ``TIDEMARK_TEST_FAST_JVM=0`` turns it off.
FAST_JVM = "-XX:TieredStopAtLevel=1 -XX:+UseSerialGC -Xlog:disable -Xlog:all=error:stderr"


def cds_archive() -> str:
    """Where the JVM's class-data-sharing archive for this Python + PySpark lives."""
    import hashlib
    import tempfile

    import pyspark

    tag = hashlib.sha1(f"{sys.executable}|{pyspark.__version__}|{pyspark.__file__}".encode()).hexdigest()[:12]
    return os.path.join(tempfile.gettempdir(), f"tidemark-tests-{os.getuid()}-{tag}.jsa")


def spark_class_archive() -> str:
    """The archive, made by one local Spark start-up and a small job if it is missing (~15 s,
    once per machine); "" if it cannot be made (the JVMs then start without it)."""
    import subprocess

    archive = cds_archive()
    if os.path.exists(archive):
        return archive
    partial = f"{archive}.{os.getpid()}.partial"
    job = (
        "from pyspark.sql import SparkSession\n"
        "s = SparkSession.builder.master('local[2]').config('spark.ui.enabled', 'false').getOrCreate()\n"
        "s.range(1000).selectExpr('id % 7 AS k').groupBy('k').count().collect()\n"
        "s.stop()\n"
    )
    env = {**os.environ, "SPARK_SUBMIT_OPTS": f"-XX:ArchiveClassesAtExit={partial} {FAST_JVM}"}
    try:
        subprocess.run([sys.executable, "-c", job], env=env, capture_output=True, timeout=300, check=True)
        os.replace(partial, archive)
    except (OSError, subprocess.SubprocessError):
        return ""
    return archive


def pytest_configure(config):
    if hasattr(config, "workerinput") or os.environ.get("TIDEMARK_TEST_FAST_JVM", "1") == "0":
        return  # xdist workers inherit the controller's environment
    if "SPARK_SUBMIT_OPTS" not in os.environ:
        archive = spark_class_archive()
        shared = f" -XX:SharedArchiveFile={archive} -Xshare:auto" if archive else ""
        os.environ["SPARK_SUBMIT_OPTS"] = FAST_JVM + shared


#: files that run longest (the crash matrices, the conformance kit): collected first, so that with
#: ``--dist loadfile`` the two workers start on them and finish together (the tree mirrors the
#: package, which spreads them through the alphabet)
LONG_FILES = ("test_crash_sqlite.py", "test_crash_postgres.py", "test_conformance.py", "test_crash_")


def pytest_collection_modifyitems(config, items):
    def long_first(item) -> int:
        name = item.nodeid.split("::", 1)[0].rsplit("/", 1)[-1]
        return next((i for i, prefix in enumerate(LONG_FILES) if name.startswith(prefix)), len(LONG_FILES))

    items.sort(key=long_first)  # stable: the order within each group stays


@pytest.fixture(scope="session")
def spark():
    from tidemark.spark.session import local_session

    # the session's JVM runs the whole worker's tests: its classes from the archive, but both
    # compilers and the default collector (the client compiler alone slows long sessions)
    submit = os.environ.get("SPARK_SUBMIT_OPTS")
    if submit is not None:
        os.environ["SPARK_SUBMIT_OPTS"] = " ".join(o for o in submit.split() if o not in FAST_JVM.split())
    try:
        session = local_session("tidemark-tests")
    finally:
        if submit is not None:
            os.environ["SPARK_SUBMIT_OPTS"] = submit
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
