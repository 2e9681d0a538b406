"""SparkSession helpers."""

from __future__ import annotations

import os
import sys


def local_session(app_name: str = "tidemark", master: str = "local[2]", shuffle_partitions: int = 4, **conf):
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
        .config("spark.sql.shuffle.partitions", str(shuffle_partitions))
        .config("spark.sql.execution.arrow.pyspark.enabled", "true")
        .config("spark.sql.streaming.forceDeleteTempCheckpointLocation", "true")
        .config("spark.driver.memory", os.environ.get("TIDEMARK_DRIVER_MEMORY", "2g"))
        .config("spark.sql.session.timeZone", "UTC")
        .config("spark.python.worker.reuse", "true")
    )
    for k, v in conf.items():
        builder = builder.config(k, str(v))
    session = builder.getOrCreate()
    session.sparkContext.setLogLevel("ERROR")
    return session


def built_once(spark, key, build):
    """``build()``, called once per ``key`` for as long as ``spark``'s SparkContext lives:
    for Column expressions that every batch uses (they name columns only, and each is a
    JVM object that cost a py4j round trip or more to build)."""
    cache = spark.sparkContext.__dict__.setdefault("_tidemark_columns", {})
    value = cache.get(key)
    if value is None:
        value = cache[key] = build()
    return value
