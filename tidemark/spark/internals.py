"""Every use of PySpark's private handles, in one module, behind a Spark-version guard.

tidemark's fast paths talk to the JVM directly: the one-job plan (:class:`tidemark.spark.one_job.OneJobPlan`)
builds a batch's plan from prebuilt JVM column sequences and reuses the first batch's analyzed
plan (``jvm/PlanRebind.java``), and routing builds its columns once per session.  Those go
through py4j handles that are not PySpark's public API (``DataFrame._jdf``, ``Column._jc``,
``SparkSession._jsparkSession``, ``SparkContext._jvm`` and ``_gateway``, the ``classic.column``
helpers) and through classes of Spark's own (``org.apache.spark.sql.classic.Dataset``).  They
change between Spark releases without notice, so they are used only here, and only where
:func:`supported` says the session's Spark is one the suite has run on
(:data:`TESTED`: major.minor).  Anywhere else -- another Spark, Spark Connect, or
``TIDEMARK_SPARK_INTERNALS=0`` -- tidemark plans every batch with PySpark's public DataFrame
API: the same results (the suite runs both ways), a little more planning time per batch.
"""

from __future__ import annotations

import contextlib
import io
import logging
from typing import Optional

from tidemark.options import process_options

log = logging.getLogger(__name__)

# PySpark major.minor versions tested: 4.3 by the suite, 4.0.5, 4.1.4 and 4.2.1 by .ci/smoke-oldest-pyspark
TESTED = ("4.0", "4.1", "4.2", "4.3")
ENV = "TIDEMARK_SPARK_INTERNALS"

_said: set = set()


def minor(version: str) -> str:
    return ".".join(version.split(".")[:2])


def supported(spark) -> bool:
    """True if ``spark`` is a classic (py4j) session of a tested Spark version and the
    internals are not turned off (``TIDEMARK_SPARK_INTERNALS=0``)."""
    if not process_options().spark_internals:
        return False
    version = getattr(spark, "version", "")
    if minor(version) not in TESTED or not hasattr(spark, "_jsparkSession"):
        if version not in _said:
            _said.add(version)
            log.info("Spark %s is not one tidemark's fast planning was tested on: public API planning", version)
        return False
    return True


# -- handles --------------------------------------------------------------------------------


def jdf(df):
    """The JVM Dataset behind ``df``."""
    return df._jdf


def jcol(col):
    """The JVM Column behind ``col``."""
    return col._jc


def wrap(jdf_, spark):
    """A PySpark DataFrame of the JVM Dataset ``jdf_``."""
    from pyspark.sql import DataFrame

    return DataFrame(jdf_, spark)


def jseq(spark, cols):
    """A JVM ``Seq[Column]`` of ``cols`` (Columns or names), to pass to Dataset methods."""
    from pyspark.sql.classic.column import _to_java_column, _to_seq

    return _to_seq(spark.sparkContext, cols, _to_java_column)


def session_id(spark) -> int:
    """An id of ``spark``'s JVM session (a batch's ``df.sparkSession`` is a new Python object
    around the same JVM session)."""
    return spark._jsparkSession.hashCode()


def analyzed(jdf_):
    """The analyzed logical plan of the JVM Dataset ``jdf_``."""
    return jdf_.queryExecution().analyzed()


def of_plan(spark, plan):
    """A DataFrame of the analyzed logical plan ``plan``."""
    return wrap(spark._jvm.org.apache.spark.sql.classic.Dataset.ofRows(spark._jsparkSession, plan), spark)


def settle(spark, jdf_) -> tuple:
    """Run the map side of the JVM Dataset ``jdf_``'s shuffles (for a batch's combine: read,
    parse, prove and aggregate within each input split) and return ``(leaf, records)``: a
    logical plan over the rest of it (``LogicalRDD``: every use of it reads those shuffles'
    output, their map stage skipped) and the records the shuffles wrote (for the combine, each
    split's groups: at least the keys it combines to).  Adaptive execution runs the map stages
    when the plan's RDD is made; without it, they are submitted here.  One py4j call where the
    session has tidemark's jar (``jvm/Settled.java``), else one per plan node."""
    from tidemark.spark import jvm as tidemark_jvm

    if tidemark_jvm.available(spark):
        settled = jar_class(spark, "Settled")
        if settled is not None:
            leaf, records = settled.settle(jdf_)
            return leaf, int(records)
    jvm = spark._jvm
    execution = jdf_.queryExecution()
    plan = execution.executedPlan()
    adaptive = _class(plan) == "AdaptiveSparkPlanExec"
    if not adaptive:
        for ex in _exchanges(plan):
            jvm.org.apache.spark.util.ThreadUtils.awaitResult(
                ex.mapOutputStatisticsFuture(), jvm.scala.concurrent.duration.Duration.Inf()
            )
    rdd = execution.toRdd()
    records = sum(
        ex.metrics().apply("shuffleRecordsWritten").value()
        for ex in _exchanges(plan.executedPlan() if adaptive else plan)
    )
    # (not LogicalRDD.fromDataset, whose arguments changed between Spark releases)
    over = spark._jsparkSession.internalCreateDataFrame(rdd, jdf_.schema(), False)
    return analyzed(over), records


def _class(node) -> str:
    return node.getClass().getSimpleName()


def _exchanges(plan) -> list:
    """The shuffle exchanges of a physical plan nearest its root (adaptive query stages opened)."""
    out, todo = [], [plan]
    while todo:
        node = todo.pop()
        name = _class(node)
        if name == "ShuffleExchangeExec":
            out.append(node)
        elif name.endswith("QueryStageExec"):  # adaptive execution's stages are leaves over their plans
            todo.append(node.plan())
        elif name == "AdaptiveSparkPlanExec":
            todo.append(node.executedPlan())
        else:
            children = node.children()
            todo.extend(children.apply(i) for i in range(children.size()))
    return out


def rebind(spark, template, leaf):
    """``PlanRebind.rebind``: the analyzed plan ``template[0]`` with its source leaf
    ``template[1]`` replaced by ``leaf`` (None when ``leaf`` is another kind of source)."""
    rebinding = jar_class(spark, "PlanRebind")
    return None if rebinding is None else rebinding.rebind(template[0], template[1], leaf)


def jar_class(spark, name: str):
    """The class ``tidemark.jvm.<name>`` of tidemark's jar, as py4j reaches it from this thread
    (None where the session has not the jar).  ``ADD JAR`` puts the jar in the session's class
    loader and makes it the context class loader of the JVM thread that ran it; py4j finds a
    class through its own thread's, so a thread of another Python thread (a stream started
    there, ``tidemark.materialize`` from a thread of the caller's) is given the session's."""
    from py4j.java_gateway import JavaClass

    found = getattr(spark._jvm.tidemark.jvm, name)
    if not isinstance(found, JavaClass):  # a JavaPackage: not visible from this thread
        loader = spark._jsparkSession.sharedState().jarClassLoader()
        spark._jvm.java.lang.Thread.currentThread().setContextClassLoader(loader)
        found = getattr(spark._jvm.tidemark.jvm, name)
    return found if isinstance(found, JavaClass) else None


# -- public-API forms where there is one ------------------------------------------------------


def logical_plan_text(df) -> str:
    """``df``'s logical plan as text (the handle where supported, else ``explain``'s output)."""
    if supported(df.sparkSession):
        return df._jdf.queryExecution().logical().toString()
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        df.explain(extended=True)
    return out.getvalue()


def metadata_columns(df) -> Optional[list[str]]:
    """The hidden metadata columns that resolve on ``df`` (its analyzed plan's metadata output,
    what the analyzer resolves ``_metadata`` from), or None where the handle is not supported
    (the caller then tries the public API)."""
    if not supported(df.sparkSession):
        return None
    it = analyzed(jdf(df)).metadataOutput().iterator()
    names = []
    while it.hasNext():
        names.append(it.next().name())
    return names


def quiet_logger(spark, name: str) -> None:
    """Turn Spark's log4j logger ``name`` off in ``spark``'s JVM (nothing where that cannot be
    reached: Spark Connect, another logging backend)."""
    try:
        jvm = spark.sparkContext._jvm
        jvm.org.apache.logging.log4j.core.config.Configurator.setLevel(name, jvm.org.apache.logging.log4j.Level.OFF)
    except Exception:  # noqa: BLE001 - Spark's logging stays as it is
        pass


def kill_driver_jvm() -> None:
    """SIGKILL the Spark driver's JVM that PySpark started for this process, if any."""
    try:
        from pyspark import SparkContext

        proc = getattr(SparkContext._gateway, "proc", None)
        if proc is not None:
            proc.kill()
            proc.wait(timeout=10)
    except Exception:  # noqa: BLE001 - the process is leaving anyway
        pass
