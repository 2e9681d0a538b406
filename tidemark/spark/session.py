"""SparkSession helpers."""

from __future__ import annotations

import os
import sys

from tidemark.options import process_options

# Shuffle partitions of tidemark's sessions (Spark's default, 200, makes a small batch
# schedule 200 tasks per shuffle).  :func:`tidemark.materialize` gives a query on a session
# that does not set ``spark.sql.shuffle.partitions`` this value too (:func:`query_conf`).
SHUFFLE_PARTITIONS = 4
SHUFFLE_KEY = "spark.sql.shuffle.partitions"
#: Spark counts every file of a batch as this many bytes more when it splits the batch into
#: tasks; its default (4 MiB) reads a batch of one file of a few MiB in one task on one core
#: while the other cores wait.  At 256 KiB such a file is read in a split per core (a batch
#: under 512 KiB stays one task); on a batch of one 3.5 MiB file of 25k documents on two
#: cores the combine's job took 9 % less time.  Set in the sessions tidemark makes
#: (:func:`local_session`: ``tidemark run``, the quickstart); a session of your own reads the
#: relation's settings of the session that made the stream's DataFrame, so set it there.
OPEN_COST_KEY = "spark.sql.files.openCostInBytes"
OPEN_COST = 256 * 1024
LOG4J2 = os.path.join(os.path.dirname(os.path.abspath(__file__)), "log4j2.properties")


def local_session(
    app_name: str = "tidemark", master: str = "local[2]", shuffle_partitions: int = SHUFFLE_PARTITIONS, **conf
):
    """A local SparkSession suitable for tests, the quickstart and the CLI."""
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    from pyspark.sql import SparkSession

    builder = (
        SparkSession.builder.master(master)
        .appName(app_name)
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config(SHUFFLE_KEY, str(shuffle_partitions))
        .config(OPEN_COST_KEY, str(OPEN_COST))
        .config("spark.sql.execution.arrow.pyspark.enabled", "true")
        .config("spark.sql.streaming.forceDeleteTempCheckpointLocation", "true")
        .config("spark.driver.memory", process_options().driver_memory)
        .config("spark.sql.session.timeZone", "UTC")
        .config("spark.python.worker.reuse", "true")
        # PySpark's call-site capture for error messages costs several py4j round trips per
        # Column function called: building the event stream's combine took 15,000 calls and
        # 4.3 s of the first batch with it, 2.1 s without
        .config("spark.python.sql.dataFrameDebugging.enabled", "false")
    )
    if "spark.driver.extraJavaOptions" not in conf and not process_options().spark_log_defaults:
        # Spark's start-up lines (log4j profile, native-hadoop warning) and its own copy of a
        # failed query's stacks off; TIDEMARK_SPARK_LOG_DEFAULTS=1 keeps Spark's logging
        builder = builder.config("spark.driver.extraJavaOptions", f"-Dlog4j2.configurationFile=file:{LOG4J2}")
    for k, v in conf.items():
        builder = builder.config(k, str(v))
    session = builder.getOrCreate()
    session.sparkContext.setLogLevel("ERROR")
    return session


def quiet_failed_queries(spark) -> None:
    """Turn off Spark's own log of a failed streaming query (``ERROR MicroBatchExecution …``
    with every frame of the JVM and Python stacks, ~100 lines): tidemark's error is what
    ``await_termination`` raises and what ``tidemark run`` prints.  On the session's JVM, so
    for its other streaming queries too; ``TIDEMARK_SPARK_LOG_DEFAULTS=1`` keeps Spark's logging."""
    if process_options().spark_log_defaults:
        return
    from tidemark.spark import internals

    internals.quiet_logger(spark, "org.apache.spark.sql.execution.streaming")


def built_once(spark, key, build):
    """``build()``, called once per ``key`` for as long as ``spark``'s SparkContext lives:
    for Column expressions that every batch uses (they name columns only, and each is a
    JVM object that cost a py4j round trip or more to build)."""
    cache = spark.sparkContext.__dict__.setdefault("_tidemark_columns", {})
    value = cache.get(key)
    if value is None:
        value = cache[key] = build()
    return value


def start_query(writer, spark):
    """``writer.start()``, with :data:`SHUFFLE_PARTITIONS` in the query's own session where
    ``spark`` leaves ``spark.sql.shuffle.partitions`` unset.  A query copies its session's
    settings when it starts (and keeps the shuffle partitions in its checkpoint from then
    on), so the setting is removed again at once: the caller's session is left as it was."""
    if spark.conf.get(SHUFFLE_KEY, None) is not None:
        return writer.start()
    spark.conf.set(SHUFFLE_KEY, str(SHUFFLE_PARTITIONS))
    try:
        return writer.start()
    finally:
        spark.conf.unset(SHUFFLE_KEY)


def end_jvm() -> None:
    """SIGKILL the Spark driver's JVM that PySpark started for this process, if any (``tidemark
    run`` on Ctrl-C, between batches: left to see its Python gone, the JVM prints its stream
    thread's RpcEnvStoppedException after the prompt is back)."""
    from tidemark.spark import internals

    internals.kill_driver_jvm()
