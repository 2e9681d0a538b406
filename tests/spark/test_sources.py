"""Where a source's rows come from: Spark's hidden ``_metadata`` column is asked of the plan,
not tried (a failed resolution is logged by Spark at ERROR, with its stack, every time)."""

from __future__ import annotations

import pytest

from tidemark.spark.sources import has_file_metadata, source_order

pytestmark = pytest.mark.spark


def test_a_rate_source_is_not_a_file_source_and_asking_logs_nothing(spark, tmp_path, capfd):
    from pyspark.sql import functions as F

    rate = spark.readStream.format("rate").load()
    (tmp_path / "d").mkdir()
    text = spark.readStream.format("text").load(str(tmp_path / "d"))
    capfd.readouterr()
    assert has_file_metadata(rate) is False and has_file_metadata(rate.select("value")) is False
    assert source_order(rate.select(F.col("value").cast("string").alias("value"))) == ""
    assert has_file_metadata(text) is True
    assert has_file_metadata(text.filter("value != ''").select(F.col("value").alias("v"))) is True
    assert source_order(text) == "files"
    err = capfd.readouterr().err
    assert "UNRESOLVED_COLUMN" not in err and "ERROR" not in err, err
