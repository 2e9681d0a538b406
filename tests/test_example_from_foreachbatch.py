"""examples/from_foreachbatch/compare.py: the hand-written upsert double-counts the batch
Spark re-runs after a failure, and tidemark does not; both against sums computed in Python.
And the way over: a hand-written job's table adopted by tidemark, newer input on top, exact."""

from __future__ import annotations

import importlib.util
import pathlib

import pytest

from tests.support.paths import REPO, SUPPORT

pytestmark = [pytest.mark.spark, pytest.mark.postgres]

EXAMPLE = pathlib.Path(REPO) / "examples" / "from_foreachbatch" / "compare.py"


def test_a_rerun_batch_is_counted_twice_by_hand_and_once_by_tidemark(spark, tmp_path, postgres_url):
    spec = importlib.util.spec_from_file_location("compare_example", EXAMPLE)
    example = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(example)

    out = example.compare(spark, postgres_url, str(tmp_path))

    assert out["customers"] == 100
    assert out["with_tidemark"] == 0
    assert out["by_hand"] > 50  # every customer batch 1 touched has its sums added twice
    assert out["adopted"] == 0  # the hand-written table adopted, the newer files reduced on top
