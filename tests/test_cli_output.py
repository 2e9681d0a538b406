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


def _cli(*args) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "tidemark", *args], capture_output=True, text=True, timeout=120)


def test_version_and_short_help():
    from importlib.metadata import version

    assert _cli("--version").stdout.strip() == f"tidemark {version('tidemark')}"
    assert "Exactly-once materialized views" in _cli("-h").stdout
    assert "[OPTIONS] {spec}" in _cli("run", "-h").stdout


def test_usage_errors_off_a_terminal_are_plain_lines():
    done = _cli("run")
    assert done.returncode == 2
    assert "Error: Missing argument" in done.stderr
    assert not any(ch in done.stderr for ch in "╭│╰\x1b"), done.stderr


def test_an_abbreviated_strategy_gets_its_full_name_and_json_errors_read_well():
    from tidemark.collection.keywords import closest
    from tidemark.collection.validate import parse_document
    from tidemark.errors import DocumentError

    assert closest("max", ("minimize", "maximize", "merge")) == "maximize"
    assert closest("min", ("minimize", "maximize", "merge")) == "minimize"
    try:
        parse_document('{"a": "x')
    except DocumentError as exc:
        assert "Unterminated string starting at column 7" in str(exc) and "at at" not in str(exc)
    else:  # pragma: no cover
        raise AssertionError("parsed")


def test_query_reads_a_table_view_in_key_order(tmp_path):
    import json
    import sqlite3

    from tests.support.helpers import tiny_spec

    spec_path = tiny_spec(tmp_path)
    with sqlite3.connect(tmp_path / "v.db") as con:
        con.execute("CREATE TABLE t (id TEXT PRIMARY KEY, flow_document TEXT NOT NULL)")
        con.executemany("INSERT INTO t VALUES (?, ?)", [(k, json.dumps({"id": k})) for k in "cab"])
    assert _cli("query", spec_path, "--view", "t").stdout.splitlines() == [f'{{"id":"{k}"}}' for k in "abc"]
    assert _cli("query", spec_path, "--view", "m", "--key", '"b"').stdout.splitlines() == ['{"id":"b"}']
    missing = _cli("query", spec_path, "--view", "nope")
    assert missing.returncode == 1 and "'nope' is not a binding of the spec (bindings: m/t)" in missing.stderr
    assert "Traceback" not in missing.stderr


def write_table_view_spec(tmp_path):
    """A spec of one SQLite table view ``t`` keyed by ``/customer`` (its source folder: ``data``)."""
    spec = tmp_path / "spec.yaml"
    coll = {
        "key": ["/customer"],
        "schema": {"type": "object", "required": ["customer"], "properties": {"customer": {"type": "string"}}},
        "source": {"path": "data"},
    }
    view = {
        "endpoint": {"sqlite": {"path": "views.db"}},
        "bindings": [{"source": "orders", "resource": {"table": "t"}}],
    }
    spec.write_text(
        yaml.safe_dump({"collections": {"orders": coll}, "materializations": {"v": view}, "checkpoint": "chk"})
    )
    return spec


BLOCK_ROCKSDICT = """
import sys, importlib.abc
class Blocked(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path, target=None):
        if name.split(".")[0] == "rocksdict":
            raise ImportError("No module named 'rocksdict'")
sys.meta_path.insert(0, Blocked())
from tidemark.cli import main
main()
"""


def test_query_of_a_table_view_needs_no_other_endpoints_library(tmp_path):
    """Installed with one endpoint's extra (here: without the store's rocksdict), ``query`` of
    a table view imports only that endpoint: no ImportError of another one."""
    import sqlite3

    with sqlite3.connect(tmp_path / "views.db") as con:
        con.execute("CREATE TABLE t (customer TEXT PRIMARY KEY, flow_document TEXT NOT NULL)")
        con.execute("INSERT INTO t VALUES ('c1', '{\"customer\": \"c1\"}')")
    spec = write_table_view_spec(tmp_path)
    done = subprocess.run(
        [sys.executable, "-c", BLOCK_ROCKSDICT, "query", str(spec), "--view", "t"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert "rocksdict" not in done.stderr, done.stderr
    assert done.returncode == 0 and '"c1"' in done.stdout, done.stderr


def test_run_reads_its_spec_once(tmp_path, monkeypatch):
    """The spec edited after ``run`` began (here: while Spark starts) changes nothing of that
    run: the endpoint check, the leases and the run all use the one reading."""
    from typer.testing import CliRunner

    import tidemark.spark.runner
    import tidemark.spark.session
    from tidemark.cli import app
    from tidemark.spec import TidemarkSpec, load_spec

    (tmp_path / "data").mkdir()
    spec = write_table_view_spec(tmp_path)
    seen = []

    class FakeSpark:
        class sparkContext:
            @staticmethod
            def setLogLevel(level):
                pass

    def starting_spark(*args, **kwargs):
        spec.write_text("collections: {broken")  # the edit lands while Spark starts
        return FakeSpark()

    def run_spec(given, **kwargs):
        seen.append(given)
        assert load_spec(given) is given  # a spec already read is not read again

    monkeypatch.setattr(tidemark.spark.session, "local_session", starting_spark)
    monkeypatch.setattr(tidemark.spark.runner, "run_spec", run_spec)
    done = CliRunner().invoke(app, ["run", str(spec), "--available-now"])
    assert done.exit_code == 0, done.output
    assert len(seen) == 1 and isinstance(seen[0], TidemarkSpec) and list(seen[0].materializations) == ["v"]
