"""Shared fixtures: one SparkSession per test session, service URLs from the environment."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

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


#: seconds each test file took (the longest ones; ``--durations=0`` of a run, summed per file),
#: in the default run and in the marker run (``-m "chaos_full or cluster or slow"``): the files
#: are collected longest first, so that with ``--dist loadfile`` (and ``--no-loadscope-reorder``,
#: which keeps this order) the two workers start on the long files and finish together instead
#: of one worker running the last long file alone
DURATIONS = json.loads((Path(__file__).parent / "durations.json").read_text(encoding="utf-8"))
UNMEASURED = 3.0  # seconds assumed for a file not in it


def pytest_collection_modifyitems(config, items):
    markers = config.getoption("markexpr") or ""
    table = DURATIONS["marker" if "slow" in markers and "not slow" not in markers else "default"]

    def longest_first(item) -> float:
        return -table.get(item.nodeid.split("::", 1)[0], UNMEASURED)

    items.sort(key=longest_first)  # stable: the order within each file stays


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
