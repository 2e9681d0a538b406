"""The CLI's plain output off a terminal: one message, one line (greppable logs)."""

from __future__ import annotations

import os
import subprocess
import sys

import yaml


def test_check_output_is_not_wrapped_off_a_terminal(tmp_path):
    (tmp_path / "data").mkdir()
    table = "customers_with_a_rather_long_name_" + "x" * 40
    spec = {
        "collections": {
            "orders": {
                "key": ["/id"],
                "schema": {"type": "object", "required": ["id"], "properties": {"id": {"type": "string"}}},
                "source": {"path": "data"},
            }
        },
        "materializations": {
            "v": {
                "endpoint": {"sqlite": {"path": "v.db"}},
                "bindings": [{"source": "orders", "resource": {"table": table}}],
            }
        },
    }
    (tmp_path / "spec.yaml").write_text(yaml.safe_dump(spec))
    env = {k: v for k, v in os.environ.items() if k not in ("COLUMNS", "LINES")}
    done = subprocess.run(
        [sys.executable, "-m", "tidemark", "check", str(tmp_path / "spec.yaml")],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    line = next(x for x in done.stdout.splitlines() if "apply would:" in x)
    assert f"create table main.{table}" in line, done.stdout
    assert len(line) > 80
