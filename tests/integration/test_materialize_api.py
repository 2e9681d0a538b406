"""``tidemark.materialize`` on a DataFrame: a stream runs until stopped, a session that sets no
shuffle partitions gets the CLI's, a source without a defined order is warned about, and
Kafka's partition/offset columns define the order."""

from __future__ import annotations

import json
import logging
import random
import sqlite3
import time

import pytest

pytestmark = pytest.mark.spark

SCHEMA = {"type": "object", "required": ["id"], "reduce": {"strategy": "merge"},
          "properties": {"id": {"type": "string"}, "n": {"type": "integer", "reduce": {"strategy": "sum"}},
                         "city": {"type": "string"}}}


def _view(db, table):
    con = sqlite3.connect(db)
    try:
        return {k: json.loads(d) for k, d in con.execute(f'SELECT "id", "flow_document" FROM "{table}"')}
    finally:
        con.close()


def test_a_stream_runs_until_stopped_with_the_cli_shuffle_partitions(spark, tmp_path, caplog):
    import tidemark
    from tidemark.spark.session import SHUFFLE_KEY, SHUFFLE_PARTITIONS

    data = tmp_path / "data"
    data.mkdir()
    (data / "1.json").write_text("".join(json.dumps({"id": f"k{i % 3}", "n": i, "city": "Oslo"}) + "\n"
                                         for i in range(9)))
    db = tmp_path / "v.db"
    spark.conf.unset(SHUFFLE_KEY)  # as in a plain SparkSession
    try:
        assert spark.conf.get(SHUFFLE_KEY, None) is None
        reports = []
        with caplog.at_level(logging.WARNING, logger="tidemark"):
            run = tidemark.materialize(
                spark.readStream.format("text").load(str(data)), collection={"key": ["/id"], "schema": SCHEMA},
                endpoint={"sqlite": {"path": str(db)}}, resource={"table": "t"}, checkpoint=str(tmp_path / "chk"),
                spark=spark, on_batch=reports.append)
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
    # a text stream has no defined order: the lastWriteWins property is named
    warned = [r.getMessage() for r in caplog.records if "depend on the source order" in r.getMessage()]
    assert len(warned) == 1 and "/city (lastWriteWins)" in warned[0] and "/n" not in warned[0]


def test_kafka_partition_and_offset_columns_define_the_order(spark, tmp_path, caplog):
    """Rows carrying Kafka's partition/offset are reduced in offset order, however the batch
    hands them over; no warning."""
    import tidemark
    from pyspark.sql import functions as F

    rng = random.Random(3)
    records = [{"id": f"k{i % 4}", "n": 1, "city": f"c{i}", "_p": i % 4, "_o": i} for i in range(40)]
    shuffled = list(records)
    rng.shuffle(shuffled)
    data = tmp_path / "data"
    data.mkdir()
    for j in range(4):
        (data / f"{j}.json").write_text("".join(json.dumps(r) + "\n" for r in shuffled[j::4]))
    df = spark.readStream.format("text").load(str(data)).select(
        "value", F.lit("orders").alias("topic"),
        F.get_json_object("value", "$._p").cast("int").alias("partition"),
        F.get_json_object("value", "$._o").cast("long").alias("offset"))
    db = tmp_path / "v.db"
    with caplog.at_level(logging.WARNING, logger="tidemark"):
        tidemark.materialize(df, collection={"key": ["/id"], "schema": SCHEMA}, endpoint={"sqlite": {"path": str(db)}},
                             resource={"table": "t"}, checkpoint=str(tmp_path / "chk"), spark=spark,
                             available_now=True).await_termination()
    last = {r["id"]: r["city"] for r in records}  # by offset
    assert {k: d["city"] for k, d in _view(db, "t").items()} == last
    assert not [r for r in caplog.records if "depend on the source order" in r.getMessage()]
