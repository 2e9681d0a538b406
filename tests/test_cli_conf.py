"""``tidemark run --conf KEY=VALUE`` and ``--spark-ui``: settings for the SparkSession,
and a malformed one refused before anything starts."""

from __future__ import annotations

import subprocess
import sys

import pytest

from tidemark.cli_spark import _spark_conf
from tidemark.errors import TidemarkError


def test_conf_pairs_and_the_ui_flag():
    assert _spark_conf(["spark.executor.memory=4g", "spark.sql.shuffle.partitions=8"], False) == {
        "spark.ui.enabled": "false",
        "spark.executor.memory": "4g",
        "spark.sql.shuffle.partitions": "8",
    }
    assert _spark_conf([], True) == {"spark.ui.enabled": "true"}  # the default: the UI is on
    assert _spark_conf(["spark.ui.enabled=false"], True) == {"spark.ui.enabled": "false"}  # --conf wins
    assert _spark_conf(["spark.x=a=b"], False)["spark.x"] == "a=b"  # only the first '=' splits


@pytest.mark.parametrize("pair", ["spark.executor.memory", "executor.memory=4g", "=4g"])
def test_a_malformed_conf_is_refused(pair):
    with pytest.raises(TidemarkError, match="--conf takes KEY=VALUE"):
        _spark_conf([pair], False)


def test_the_cli_refuses_it_before_spark_starts(tmp_path):
    import yaml

    spec = tmp_path / "spec.yaml"
    spec.write_text(
        yaml.safe_dump(
            {
                "collections": {
                    "c": {
                        "key": ["/k"],
                        "schema": {"type": "object", "properties": {"k": {"type": "string"}}, "required": ["k"]},
                        "source": {"format": "json", "path": str(tmp_path)},
                    }
                },
                "materializations": {
                    "v": {
                        "endpoint": {"sqlite": {"path": str(tmp_path / "v.db")}},
                        "bindings": [{"source": "c", "resource": {"table": "t"}}],
                    }
                },
            }
        )
    )
    proc = subprocess.run(
        [sys.executable, "-m", "tidemark", "run", str(spec), "--conf", "memory=4g"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 1
    first = (proc.stdout + proc.stderr).strip().splitlines()[0]
    assert first.startswith("error: --conf takes KEY=VALUE"), proc.stdout + proc.stderr
