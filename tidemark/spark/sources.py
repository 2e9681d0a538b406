"""Streaming sources for collections, and the columns the plan expects of them.

Every source becomes a streaming DataFrame with a string ``value`` (one JSON document)
and ``_file`` / ``_block`` (source order; ``_row`` is added per batch, where Spark
allows ``monotonically_increasing_id``). Sources that cannot replay a batch with the
same input are refused: exactly-once needs a batch that Spark re-runs to be identical.
"""

from __future__ import annotations

import os
from typing import Optional

from tidemark.errors import SpecError
from tidemark.spec import FILE_FORMATS  # (the spec checks the format when it is loaded)

# Spark sources whose batches cannot be re-read after a crash.
NON_REPLAYABLE = ("TextSocket", "socket", "MemoryStream")


# Spark's file source ignores a new file more than ``maxFileAge`` (default 7 days) older
# than the newest file it has seen: a backfilled or copied file (``cp -p``, ``rsync -t``)
# would be skipped without a word. Unless the spec says otherwise, every file is read.
MAX_FILE_AGE = "36500d"


def read_collection(
    spark,
    collection_spec,
    binding: int,
    *,
    file: str | None = None,
    base_dir: str = ".",
    mtime: bool = False,
    checkpoint: str | None = None,
):
    """A streaming DataFrame of one collection's source (JSON lines files, a log); ``mtime``: with
    each file's modification time as ``_mtime`` too (``tidemark adopt``); ``checkpoint``: the
    view's folder, where a log source keeps where the view began."""
    from pyspark.sql import functions as F

    src = collection_spec.source
    where = f"collections.{collection_spec.name}.source"
    if src is not None and src.log:  # a Kafka topic, a NATS stream (tidemark.spark.logsource)
        from tidemark.sources.origin import origin_path
        from tidemark.spark.logsource import read_log

        origin = origin_path(checkpoint, binding) if checkpoint else None
        df = read_log(spark, src.log, src.log_config, collection_spec.key, origin)
        return _selected(
            spark, df.select("value", "_file", "_block", F.lit(binding).alias("_binding")), collection_spec, file, where
        )
    if src is None or not src.path:
        raise SpecError(
            "has no source path; materialize a DataFrame with tidemark.materialize(df, ...) instead",
            file=file,
            path=where,
        )
    fmt = (src.format or "json").lower()
    if fmt not in FILE_FORMATS:
        raise SpecError(
            f"format {fmt!r} is not supported by the spec runner (supported: {', '.join(FILE_FORMATS)}); "
            "read other sources yourself and call tidemark.materialize(df, ...)",
            file=file,
            path=where + ".format",
        )
    path = src.path if "://" in src.path or os.path.isabs(src.path) else os.path.join(base_dir, src.path)
    options = {k: str(v) for k, v in (src.options or {}).items()}
    if not any(k.lower() == "maxfileage" for k in options):
        options["maxFileAge"] = MAX_FILE_AGE
    reader = spark.readStream.format("text").options(**options)
    df = reader.load(path)
    df = df.select(
        F.col("value"),
        F.col("_metadata.file_path").alias("_file"),
        F.col("_metadata.file_block_start").alias("_block"),
        F.lit(binding).alias("_binding"),
        *([F.col("_metadata.file_modification_time").alias("_mtime")] if mtime else []),
    )
    return _selected(spark, df, collection_spec, file, where)


def _selected(spark, df, collection_spec, file, where: str):
    """``df`` through the source's ``select:`` expressions, where it has them."""
    src = collection_spec.source
    if src.select:  # Spark SQL over the documents (tidemark.spark.select)
        from tidemark.spark.select import apply_select, check_select

        check_select(spark, collection_spec, src.select, file=file, path=where + ".select")
        df = apply_select(df, collection_spec, src.select)
    return df


KAFKA_ORDER = ("partition", "offset")  # with ``topic`` (optional): Kafka's columns that define the order


def _with_file_order(df, mtime: bool = False):
    """``df`` with ``_file`` / ``_block`` from Spark's hidden ``_metadata`` column, where its
    rows still come straight from a file scan (``spark.readStream.text(dir)`` and projections
    of it); None where ``_metadata`` does not resolve (not a file source, or no longer one)."""
    from pyspark.errors import AnalysisException
    from pyspark.sql import functions as F

    if "_metadata" in df.columns:  # a column of the user's own with that name
        return None
    if has_file_metadata(df) is False:  # asked of the plan: a failed analysis is logged at ERROR
        return None
    try:
        return df.select(
            "*",
            F.col("_metadata.file_path").alias("_file"),
            F.col("_metadata.file_block_start").alias("_block"),
            *([F.col("_metadata.file_modification_time").alias("_mtime")] if mtime else []),
        )
    except AnalysisException:
        return None


def has_file_metadata(df) -> Optional[bool]:
    """Whether Spark's hidden ``_metadata`` column resolves on ``df``, read off its analyzed
    plan (:func:`tidemark.spark.internals.metadata_columns`) instead of trying: Spark logs a
    failed resolution at ERROR with its stack, once per probe.  None where the plan cannot be
    read (Spark Connect, an untested Spark: the caller tries)."""
    from tidemark.spark.internals import metadata_columns

    names = metadata_columns(df)
    return None if names is None else "_metadata" in names


def source_order(df) -> str:
    """How :func:`prepare_dataframe` orders the rows of one key in a batch: ``"columns"``
    (the DataFrame's own ``_file`` / ``_block``), ``"files"`` (a file source: the file's path
    and position, from Spark's ``_metadata``, as a spec's file source is ordered), ``"kafka"``
    (topic, partition, offset) or ``""``: not defined (Spark may hand a batch's rows over in
    any order)."""
    from pyspark.sql.types import StringType

    cols = df.columns
    if "_file" in cols and "_block" in cols:
        return "columns"
    if all(c in cols for c in KAFKA_ORDER) and "value" in cols and isinstance(df.schema["value"].dataType, StringType):
        return "kafka"
    if "_file" not in cols and "_block" not in cols and _with_file_order(df) is not None:
        return "files"
    return ""


CORRUPT_RECORD = "_corrupt_record"  # Spark's JSON reader's column for a line it cannot parse (its default name)
TO_JSON_OPTIONS = {
    "timestampFormat": "yyyy-MM-dd'T'HH:mm:ss.SSSSSSXXX",
    "timestampNTZFormat": "yyyy-MM-dd'T'HH:mm:ss.SSSSSS",
}


def prepare_dataframe(df, binding: int = 0, source_name: str = "dataframe", mtime: bool = False):
    """Adapt any streaming DataFrame: a string ``value`` column, or every column as JSON.

    Source order (docs/reductions.md, "Source order"): the DataFrame's ``_file`` and
    ``_block`` columns where it has both; else Kafka's ``topic``, ``partition`` and ``offset``
    beside a string ``value``; else, for a file source, the file path and position that
    Spark's ``_metadata`` gives; else none (the order Spark hands a batch's rows over in)."""
    from pyspark.sql import functions as F
    from pyspark.sql.types import StringType

    check_replayable(df)
    order = source_order(df)
    cols = df.columns
    string_value = "value" in cols and isinstance(df.schema["value"].dataType, StringType)
    if string_value:
        value = F.col("value")
    else:
        # every column as JSON; timestamps keep their microseconds (Spark's default format cuts
        # them to milliseconds) as RFC 3339 date-times in the session's time zone
        corrupt = CORRUPT_RECORD if CORRUPT_RECORD in cols else None
        value = F.to_json(F.struct(*[F.col(c) for c in cols if c not in ("_file", "_block", corrupt)]), TO_JSON_OPTIONS)
        if corrupt is not None:  # spark.readStream.json(...): a line it could not parse is that line, as it is
            value = F.when(F.col(corrupt).isNotNull(), F.col(corrupt)).otherwise(value)
    if order == "files":
        df = _with_file_order(df, mtime)
        cols = df.columns
    file_col = F.col("_file") if "_file" in cols else F.lit(source_name)
    block_col = F.col("_block").cast("long") if "_block" in cols else F.lit(0).cast("long")
    if order == "kafka":
        topic = F.col("topic").cast("string") if "topic" in cols else F.lit(source_name)
        # one key's documents share a partition (Kafka's default partitioner): offsets order them
        file_col = F.concat(topic, F.lit("/"), F.lpad(F.col("partition").cast("string"), 10, "0"))
        block_col = F.col("offset").cast("long")
    extra = [F.col("_mtime")] if "_mtime" in df.columns and mtime else []  # a file source's (tidemark adopt)
    return df.select(
        value.alias("value"),
        file_col.alias("_file"),
        block_col.alias("_block"),
        F.lit(binding).alias("_binding"),
        *extra,
    )


def check_replayable(df) -> None:
    if not df.isStreaming:
        raise SpecError("tidemark.materialize needs a streaming DataFrame (spark.readStream...)")
    from tidemark.spark import internals

    try:
        plan = internals.logical_plan_text(df)
    except Exception:  # noqa: BLE001  # pragma: no cover - a session whose plan cannot be read
        return
    for marker in NON_REPLAYABLE:
        if marker in plan:
            raise SpecError(
                f"this streaming source ({marker}) cannot replay a batch after a crash, so exactly-once "
                "is impossible; use a replayable source (files, Kafka, Delta, rate)"
            )
