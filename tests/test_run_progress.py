"""``tidemark run`` is never silent for long: what it found before Spark starts, and a line
every 10 s for a batch that runs longer (here one stalled 12 s inside its commit)."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from tests.support.helpers import tiny_spec, write_input
from tidemark import faults

pytestmark = [pytest.mark.spark, pytest.mark.slow]


def test_a_long_batch_says_it_is_in_progress(tmp_path):
    spec = tiny_spec(tmp_path)
    write_input(tmp_path / "data", 0, [json.dumps({"id": f"k{i}"}) for i in range(5)])
    done = subprocess.run(
        [sys.executable, "-m", "tidemark", "run", spec, "--available-now", "--no-spark-ui"],
        capture_output=True,
        text=True,
        timeout=600,
        env={**os.environ, faults.ENV: "before_endpoint_commit:stall=12", "COLUMNS": "1000"},
    )
    assert done.returncode == 0, done.stderr
    err = done.stderr
    assert "m: endpoint sqlite ready, 1 file(s) waiting" in err
    assert "starting Spark" in err
    assert "m batch 0: in progress for 1" in err, err  # 10 s (or 11 s)
    assert err.index("starting Spark") < err.index("m batch 0: in progress")
