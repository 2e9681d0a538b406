"""``tidemark.materialize`` on a DataFrame: a stream runs until stopped, a session that sets no
shuffle partitions gets the CLI's, a file stream is ordered by file and position as a spec's
file source is, Kafka's partition/offset columns define the order, and a source without a
defined order is refused where reductions depend on it (unless ``order="any"``)."""

from __future__ import annotations

import json
import logging
import os
import random
import sqlite3
import time

import pytest

from tests.support.helpers import sqlite_view

pytestmark = pytest.mark.spark

SCHEMA = {
    "type": "object",
    "required": ["id"],
    "reduce": {"strategy": "merge"},
    "properties": {
        "id": {"type": "string"},
        "n": {"type": "integer", "reduce": {"strategy": "sum"}},
        "city": {"type": "string"},
    },
}


def _view(db, table):
    return sqlite_view(db, table, "id")


def test_a_stream_runs_until_stopped_with_the_cli_shuffle_partitions(spark, tmp_path, caplog):
    import tidemark
    from tidemark.spark.session import SHUFFLE_KEY, SHUFFLE_PARTITIONS

    data = tmp_path / "data"
    data.mkdir()
    (data / "1.json").write_text(
        "".join(json.dumps({"id": f"k{i % 3}", "n": i, "city": "Oslo"}) + "\n" for i in range(9))
    )
    db = tmp_path / "v.db"
    spark.conf.unset(SHUFFLE_KEY)  # as in a plain SparkSession
    try:
        assert spark.conf.get(SHUFFLE_KEY, None) is None
        reports = []
        with caplog.at_level(logging.WARNING, logger="tidemark"):
            run = tidemark.materialize(
                spark.readStream.format("text").load(str(data)),
                collection={"key": ["/id"], "schema": SCHEMA},
                endpoint={"sqlite": {"path": str(db)}},
                resource={"table": "t"},
                checkpoint=str(tmp_path / "chk"),
                spark=spark,
                on_batch=reports.append,
            )
        try:
            assert spark.conf.get(SHUFFLE_KEY, None) is None  # the caller's session is left as it was
            deadline = time.monotonic() + 60
            while not reports and time.monotonic() < deadline and run.isActive:
                run.await_termination(0.2)
            assert reports and run.isActive  # the default trigger: it keeps running for more input
        finally:
            run.stop()
    finally:
        spark.conf.set(SHUFFLE_KEY, str(SHUFFLE_PARTITIONS))
    offsets = (tmp_path / "chk" / "spark" / "offsets" / "0").read_text().splitlines()
    assert json.loads(offsets[1])["conf"][SHUFFLE_KEY] == str(SHUFFLE_PARTITIONS)
    assert {k: d["n"] for k, d in _view(db, "t").items()} == {"k0": 9, "k1": 12, "k2": 15}
    # a text stream over files is ordered by file and position (Spark's _metadata): no warning
    assert not [r for r in caplog.records if "source order" in r.getMessage()]


def test_a_batch_of_one_file_is_read_in_a_split_per_core_in_tidemarks_session(spark, tmp_path):
    """Spark counts each file as 4 MiB more when it splits a batch (a file of a few MiB: one
    task, one core); tidemark's sessions (``local_session``) read such a file in a split per core."""
    from tidemark.spark.session import OPEN_COST, OPEN_COST_KEY

    data = tmp_path / "data"
    data.mkdir()
    (data / "1.json").write_text("".join(json.dumps({"id": f"k{i}", "pad": "x" * 90}) + "\n" for i in range(8000)))
    seen = []
    query = (
        spark.readStream.format("text")
        .load(str(data))
        .writeStream.foreachBatch(lambda df, _: seen.append(df.rdd.getNumPartitions()))
        .option("checkpointLocation", str(tmp_path / "chk"))
        .trigger(availableNow=True)
        .start()
    )
    query.awaitTermination()
    assert spark.conf.get(OPEN_COST_KEY) == str(OPEN_COST)
    assert seen == [spark.sparkContext.defaultParallelism]


def test_kafka_partition_and_offset_columns_define_the_order(spark, tmp_path, caplog):
    """Rows carrying Kafka's partition/offset are reduced in offset order, however the batch
    hands them over; no warning."""
    from pyspark.sql import functions as F

    import tidemark

    draw = random.Random(3)
    records = [{"id": f"k{i % 4}", "n": 1, "city": f"c{i}", "_p": i % 4, "_o": i} for i in range(40)]
    shuffled = list(records)
    draw.shuffle(shuffled)
    data = tmp_path / "data"
    data.mkdir()
    for j in range(4):
        (data / f"{j}.json").write_text("".join(json.dumps(r) + "\n" for r in shuffled[j::4]))
    df = (
        spark.readStream.format("text")
        .load(str(data))
        .select(
            "value",
            F.lit("orders").alias("topic"),
            F.get_json_object("value", "$._p").cast("int").alias("partition"),
            F.get_json_object("value", "$._o").cast("long").alias("offset"),
        )
    )
    db = tmp_path / "v.db"
    with caplog.at_level(logging.WARNING, logger="tidemark"):
        tidemark.materialize(
            df,
            collection={"key": ["/id"], "schema": SCHEMA},
            endpoint={"sqlite": {"path": str(db)}},
            resource={"table": "t"},
            checkpoint=str(tmp_path / "chk"),
            spark=spark,
            available_now=True,
        ).await_termination()
    last = {r["id"]: r["city"] for r in records}  # by offset
    assert {k: d["city"] for k, d in _view(db, "t").items()} == last
    assert not [r for r in caplog.records if "depend on the source order" in r.getMessage()]


def test_a_file_stream_is_reduced_in_file_order_like_a_spec_and_says_nothing(spark, tmp_path, caplog):
    """``spark.readStream.text(dir)`` over several files: every customer's lastWriteWins
    ``status`` is the last one of the files in order (path, then line), as a spec's file source
    gives, however Spark splits the batch; nothing is logged about the order."""
    import tidemark

    draw = random.Random(7)
    data = tmp_path / "data"
    data.mkdir()
    rows_by_file = []
    for f in range(6):
        rows = [{"id": f"c{draw.randrange(100)}", "n": 1, "city": f"city-{f}-{i}"} for i in range(400)]
        rows_by_file.append(rows)
        (data / f"part-{f:02d}.json").write_text("".join(json.dumps(r) + "\n" for r in rows))
    expected = {}
    for rows in rows_by_file:  # files in path order, lines in file order
        for r in rows:
            expected[r["id"]] = r["city"]
    db = tmp_path / "v.db"
    with caplog.at_level(logging.WARNING, logger="tidemark"):
        tidemark.materialize(
            spark.readStream.text(str(data)),
            collection={"key": ["/id"], "schema": SCHEMA},
            endpoint={"sqlite": {"path": str(db)}},
            resource={"table": "t"},
            checkpoint=str(tmp_path / "chk"),
            spark=spark,
            available_now=True,
        ).await_termination()
    got = {k: d["city"] for k, d in _view(db, "t").items()}
    assert got == expected
    assert not [r for r in caplog.records if "source order" in r.getMessage()]


def test_a_source_without_an_order_is_refused_where_the_reductions_need_one(spark, tmp_path):
    """A rate stream has no order within a batch: a lastWriteWins field is refused before
    anything starts, naming the field and the fixes; ``order="any"`` runs it."""
    import tidemark
    from tidemark.errors import SpecError

    schema = {
        "type": "object",
        "required": ["value"],
        "reduce": {"strategy": "merge"},
        "properties": {"value": {"type": "integer"}, "timestamp": {"type": "string"}},
    }
    df = spark.readStream.format("rate").option("rowsPerSecond", 5).load()
    db = tmp_path / "v.db"
    with pytest.raises(SpecError) as err:
        tidemark.materialize(
            df,
            collection={"key": ["/value"], "schema": schema},
            endpoint={"sqlite": {"path": str(db)}},
            resource={"table": "t"},
            checkpoint=str(tmp_path / "chk"),
            spark=spark,
            available_now=True,
        )
    msg = str(err.value)
    assert "/timestamp (lastWriteWins)" in msg and 'order="any"' in msg and "order: /updated_at" in msg
    assert not db.exists() and not (tmp_path / "chk").exists()  # refused before anything was written
    with pytest.raises(SpecError, match="the only value"):
        tidemark.materialize(
            df,
            collection={"key": ["/value"], "schema": schema},
            endpoint={"sqlite": {"path": str(db)}},
            resource={"table": "t"},
            checkpoint=str(tmp_path / "chk"),
            spark=spark,
            order="sorted",
        )
    writer = tidemark.materialize(
        df,
        collection={"key": ["/value"], "schema": schema},
        endpoint={"sqlite": {"path": str(db)}},
        resource={"table": "t"},
        checkpoint=str(tmp_path / "chk"),
        spark=spark,
        order="any",
        start=False,
    )
    assert writer is not None


def test_a_failed_batch_shows_tidemark_s_error_without_spark_s_stacks(tmp_path):
    """From Python, in a fresh process with a session of the user's own: a document that
    violates the schema. ``await_termination`` raises tidemark's ``DocumentError``; Spark's
    own ~100-line log of the failed query (JVM and Python stacks) is not printed."""
    import subprocess
    import sys
    import textwrap

    (tmp_path / "data").mkdir()
    (tmp_path / "data" / "1.json").write_text('{"id": "a", "n": 1}\n{"id": "b", "n": "x"}\n')
    program = textwrap.dedent("""
        import sys
        from pyspark.sql import SparkSession
        import tidemark
        from tidemark.errors import DocumentError
        spark = (SparkSession.builder.master("local[1]").config("spark.ui.enabled", "false")
                 .config("spark.ui.showConsoleProgress", "false").getOrCreate())
        print("STARTED", file=sys.stderr, flush=True)
        try:
            tidemark.materialize(spark.readStream.text("data"), collection={"key": ["/id"], "schema": {
                "type": "object", "required": ["id"], "properties": {"id": {"type": "string"}, "n": {"type": "integer"}}}},
                endpoint={"sqlite": {"path": "v.db"}}, resource={"table": "t"}, checkpoint="chk", spark=spark,
                available_now=True).await_termination()
        except DocumentError as exc:
            print("RAISED", str(exc).splitlines()[0], file=sys.stderr, flush=True)
    """)
    env = dict(os.environ, PYSPARK_PYTHON=sys.executable, SPARK_LOCAL_IP="127.0.0.1")
    env.pop("TIDEMARK_SPARK_LOG_DEFAULTS", None)
    done = subprocess.run(
        [sys.executable, "-c", program], cwd=tmp_path, capture_output=True, text=True, env=env, timeout=300
    )
    after = done.stderr.split("STARTED", 1)[1]
    assert "RAISED" in after and "1.json:2" in after and "'x' is not of type 'integer'" in after, done.stderr
    assert "MicroBatchExecution" not in after and "Traceback" not in after and "py4j" not in after, after
    assert len(after.strip().splitlines()) <= 2, after


def test_a_line_spark_s_json_reader_could_not_parse_is_named_unparseable(spark, tmp_path):
    """``spark.readStream.json(dir)`` keeps a bad line in ``_corrupt_record``: tidemark reads it
    as that line (unparseable JSON, its file and line), not as a document that violates the
    schema."""
    import tidemark
    from tidemark.errors import DocumentError

    data = tmp_path / "data"
    data.mkdir()
    (data / "1.json").write_text('{"id": "a", "n": 1}\n{"id": "b", "n": \n')
    stream = spark.readStream.schema("id string, n long, _corrupt_record string").json(str(data))
    run = tidemark.materialize(
        stream,
        collection={"key": ["/id"], "schema": SCHEMA},
        endpoint={"sqlite": {"path": str(tmp_path / "v.db")}},
        resource={"table": "t"},
        checkpoint=str(tmp_path / "chk"),
        spark=spark,
        available_now=True,
    )
    with pytest.raises(DocumentError) as exc:
        run.await_termination()
    assert "unparseable JSON" in str(exc.value) and "violates its schema" not in str(exc.value)
