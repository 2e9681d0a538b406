"""The one-job plan: a compiled collection's batches read, combine and reach the shards in
one Spark job, planned from the first batch's analyzed plan (``PlanRebind.java``)."""

from __future__ import annotations

import pytest

from tests.support.helpers import compiled_oracle as oracle
from tests.support.helpers import compiled_spec as write_spec
from tests.support.helpers import sqlite_view
from tests.support.helpers import write_compiled_orders as write_stream

pytestmark = pytest.mark.spark


@pytest.fixture(autouse=True)
def _on_spark(monkeypatch):
    """Small batches run their shards in the driver (tests/spark/test_small_batches.py):
    these tests hold the one-job path to Spark's executors."""
    monkeypatch.setenv("TIDEMARK_SMALL_BATCH_KEYS", "0")


def _rebinds(spark) -> bool:
    """The session can rebind plans: tidemark's jar was built for this Spark's major.minor."""
    from tidemark.spark import jvm

    return jvm.shipped_jar(spark.version) is not None


def _run(spark, spec):
    from tidemark.spark.runner import run_spec

    reports = []
    runs = run_spec(spec, spark=spark, on_batch=reports.append)
    plans = list(runs[0].materializer.one_job_plans.values())
    return reports, plans


@pytest.mark.parametrize("rebind", ["1", "0"])
def test_later_batches_reuse_the_first_batch_plan_and_the_view_is_exact(spark, tmp_path, monkeypatch, rebind):
    """A stream with a nullable property (absent, null or a value) and an object of members of
    several types: every batch in one job, no Load (SQLite reduces it), the view the fold's."""
    monkeypatch.setenv("TIDEMARK_PLAN_REBIND", rebind)
    data, db = tmp_path / "data", tmp_path / "views.db"
    files = write_stream(data, files=4, per_file=120, customers=30, seed=41, nullable=True)
    spec = write_spec(tmp_path, data, db, nullable=True)

    reports, plans = _run(spark, spec)
    assert [r.batch_id for r in reports] == [0, 1, 2, 3]
    # (the nullable objects' members are carried by the jar's scan; without it, the checked plan)
    assert {r.path for r in reports} == ({"one job"} if _rebinds(spark) else {"checked"})
    assert sum(r.loaded for r in reports) == 0
    assert sum(r.documents for r in reports) == 480  # counted by the shards from the combined rows
    assert sqlite_view(db) == oracle(files)
    assert len(plans) == 1 and plans[0].ok
    assert plans[0].rebound == (3 if rebind == "1" and _rebinds(spark) else 0)
    assert plans[0].finished == plans[0].rebound  # the rows of the settled combine: from its template too


def test_a_batch_with_an_invalid_document_after_rebound_ones_takes_the_checked_plan(spark, tmp_path):
    data, db = tmp_path / "data", tmp_path / "views.db"
    files = write_stream(data, files=3, per_file=60, customers=12, seed=42)
    spec = write_spec(tmp_path, data, db, on_invalid="quarantine")
    with open(files[2]) as f:
        lines = f.readlines()
    lines[4] = '{"customer": "c0003", "amount": "lots"}\n'
    with open(files[2], "w") as f:
        f.writelines(lines)

    reports, plans = _run(spark, spec)
    assert [(r.batch_id, r.path, r.invalid) for r in reports] == [
        (0, "one job", 0),
        (1, "one job", 0),
        (2, "checked", 1),
    ]
    assert plans[0].rebound == (
        2 if _rebinds(spark) else 0
    )  # batches 1 and 2 (whose shards then committed nothing on it)
    assert sqlite_view(db) == oracle(files, skip={(2, 4)})


def test_two_bindings_run_as_one_job_each_exact(spark, tmp_path):
    from tests.support.helpers import compiled_two_bindings_spec

    a = write_stream(tmp_path / "a", files=2, per_file=80, customers=20, seed=51)
    b = write_stream(tmp_path / "b", files=2, per_file=80, customers=20, seed=52)
    db = tmp_path / "views.db"
    path = compiled_two_bindings_spec(tmp_path, db)

    reports, plans = _run(spark, str(path))
    assert {r.path for r in reports} == {"one job"}
    assert plans[0].rebound == 0  # two bindings: the plan is built for every batch
    assert sqlite_view(db, "customers") == oracle(a)
    assert sqlite_view(db, "returns") == oracle(b)


def test_without_the_spark_internals_the_public_api_plans_every_batch_exact(spark, tmp_path, monkeypatch):
    """``TIDEMARK_SPARK_INTERNALS=0`` (as on a Spark version outside ``internals.TESTED``):
    routing and the union of bindings through PySpark's public API, the checked plan."""
    from tests.support.helpers import compiled_two_bindings_spec
    from tidemark.spark import internals

    monkeypatch.setenv(internals.ENV, "0")
    assert not internals.supported(spark)
    a = write_stream(tmp_path / "a", files=2, per_file=80, customers=20, seed=61)
    b = write_stream(tmp_path / "b", files=2, per_file=80, customers=20, seed=62)
    db = tmp_path / "views.db"
    reports, plans = _run(spark, str(compiled_two_bindings_spec(tmp_path, db)))
    assert {r.path for r in reports} == {"checked"}
    assert plans == []
    assert sqlite_view(db, "customers") == oracle(a)
    assert sqlite_view(db, "returns") == oracle(b)


def test_the_internals_are_used_only_on_a_tested_spark(spark):
    from types import SimpleNamespace

    from tidemark.spark import internals

    assert internals.supported(spark)
    assert internals.minor(spark.version) in internals.TESTED
    assert not internals.supported(SimpleNamespace(version="9.1.0", _jsparkSession=object()))
    assert not internals.supported(SimpleNamespace(version=spark.version))  # Spark Connect: no py4j session


# (the jar with adaptive execution, the default, is every other test's)
@pytest.mark.parametrize("jar,adaptive", [("1", "false"), ("0", "true")], ids=["jar-not-adaptive", "walk-adaptive"])
def test_the_settled_combine_with_and_without_the_jar_and_adaptive_execution_exact(
    spark, tmp_path, monkeypatch, jar, adaptive
):
    """A batch's combine is settled (its map side run, its keys bounded) by ``Settled.java`` in one
    py4j call, or without tidemark's jar by a walk of the plan; with adaptive execution the map
    stages run when the plan's RDD is made, without it they are submitted: every way, each batch
    picks its path by its own keys (``small_batch_keys`` 25: 10 in the driver, 55 on the
    executors), and the view is exact."""
    monkeypatch.setenv("TIDEMARK_JVM_CHECKS", jar)
    monkeypatch.setenv("TIDEMARK_SMALL_BATCH_KEYS", "25")
    data, db = tmp_path / "data", tmp_path / "views.db"
    files = write_stream(data, files=1, per_file=40, customers=10, seed=81)
    files += write_stream(data, files=1, per_file=200, customers=60, seed=82, start=1)
    spec = write_spec(tmp_path, data, db, options={"endpoint_reduce": False})
    before = spark.conf.get("spark.sql.adaptive.enabled")
    spark.conf.set("spark.sql.adaptive.enabled", adaptive)
    try:
        reports, _plans = _run(spark, spec)
    finally:
        spark.conf.set("spark.sql.adaptive.enabled", before)
    assert [r.path for r in reports] == ["driver", "one job"]
    assert [r.keys for r in reports] == [10, 55]  # (of the 60 customers, 55 are drawn)
    assert sqlite_view(db) == oracle(files)


def test_a_run_started_from_another_thread_reaches_the_jar_and_rebinds(spark, tmp_path):
    """The jar is added to the session from one thread; a stream started from another Python
    thread has JVM threads of its own, which py4j's class lookup must be shown the jar in."""
    import threading

    data, db = tmp_path / "data", tmp_path / "views.db"
    files = write_stream(data, files=3, per_file=60, customers=12, seed=83)
    spec = write_spec(tmp_path, data, db)
    out: dict = {}
    runner = threading.Thread(target=lambda: out.update(run=_run(spark, spec)))
    runner.start()
    runner.join(300)
    reports, plans = out["run"]
    assert [r.batch_id for r in reports] == [0, 1, 2]
    assert (plans[0].rebound, plans[0].finished) == ((2, 2) if _rebinds(spark) else (0, 0))
    assert sqlite_view(db) == oracle(files)
