"""Each key goes to the shard whose range holds its hash, and each shard's rows to its own
partition, for any number of shards (the expressions the plan uses, run on Spark)."""

from __future__ import annotations

import random

import pytest

from tidemark.protocol.messages import KEY_SPACE_MAX, Range
from tidemark.spark.route import _partition_expr, _shard_expr

pytestmark = pytest.mark.spark


def expected(ranges, h):
    return next((i for i, r in enumerate(ranges) if r.contains(h)), -1)


def hashes(ranges, seed):
    draw = random.Random(seed)
    out = {0, KEY_SPACE_MAX, -1, KEY_SPACE_MAX + 1}
    for r in ranges:  # both ends of every range and their neighbours
        out |= {r.key_begin, r.key_end, max(0, r.key_begin - 1), min(KEY_SPACE_MAX, r.key_end + 1)}
    out |= {draw.randrange(KEY_SPACE_MAX + 1) for _ in range(300)}
    return sorted(out)


def assign(spark, ranges, hs):
    from pyspark.sql import functions as F

    df = spark.createDataFrame([(h,) for h in hs], "key_hash long")
    rows = df.select("key_hash", _shard_expr(F.col("key_hash"), ranges).alias("shard")).collect()
    return {r["key_hash"]: r["shard"] for r in rows}


@pytest.mark.parametrize("n", [1, 2, 3, 7, 64, 200, 256])
def test_even_layouts_match_the_ranges(spark, n):
    ranges = Range.split(n)
    hs = hashes(ranges, n)
    got = assign(spark, ranges, hs)
    assert got == {h: expected(ranges, h) for h in hs}


def test_an_uneven_layout_matches_its_ranges(spark):
    ranges = [Range(0, 99), Range(100, 0x7FFFFFFF), Range(0x80000000, 0x80000000), Range(0x80000001, KEY_SPACE_MAX)]
    hs = hashes(ranges, 1)
    assert assign(spark, ranges, hs) == {h: expected(ranges, h) for h in hs}


@pytest.mark.parametrize("n", [1, 2, 5, 200])
def test_every_shard_lands_in_its_own_partition(spark, n):
    from pyspark.sql import functions as F

    df = spark.createDataFrame([(s,) for s in range(-1, n)], "shard int")
    parts = (
        df.withColumn("_p", _partition_expr(F.col("shard"), n))
        .repartition(n, "_p")
        .rdd.mapPartitionsWithIndex(lambda i, rows: [(i, r["shard"]) for r in rows])
        .collect()
    )
    where = dict((shard, i) for i, shard in parts)
    assert {s: where[s] for s in range(n)} == {s: s for s in range(n)}
    assert where[-1] == 0  # no range: partition 0, whose reader refuses it
