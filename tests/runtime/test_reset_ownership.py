"""``tidemark reset`` drops only what the named materialization owns.

A second view pointed at another view's table is refused with the owner's real batch and no
advice to reset (the first-week trial: that advice dropped the other view's table), and its
reset is refused too, naming the owner; a table made by hand is not dropped either.  A view
whose table was dropped is reported by ``check`` and ``status``, not only by ``run``."""

from __future__ import annotations

import json
import os
import sqlite3
import subprocess
import sys

import pytest
import yaml

import tidemark
from tests.support.helpers import sqlite_view, write_input
from tidemark.errors import RecoveryError

pytestmark = pytest.mark.spark

SCHEMA = {
    "type": "object",
    "required": ["customer"],
    "reduce": {"strategy": "merge"},
    "properties": {"customer": {"type": "string"}, "amount": {"type": "integer", "reduce": {"strategy": "sum"}}},
}


def write_spec(tmp_path, name, materialization, table, checkpoint) -> str:
    path = tmp_path / name
    path.write_text(
        yaml.safe_dump(
            {
                "collections": {
                    "orders": {
                        "key": ["/customer"],
                        "schema": SCHEMA,
                        "source": {"path": "data", "options": {"maxFilesPerTrigger": 1}},
                    }
                },
                "materializations": {
                    materialization: {
                        "endpoint": {"sqlite": {"path": "views.db"}},
                        "bindings": [{"source": "orders", "resource": {"table": table}}],
                    }
                },
                "checkpoint": checkpoint,
            }
        )
    )
    return str(path)


def cli(*args) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "tidemark", *args],
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "COLUMNS": "1000"},
    )


def view(tmp_path, table="e_totals") -> dict:
    return {c: d["amount"] for c, d in sqlite_view(tmp_path / "views.db", table).items()}


@pytest.fixture
def owner(spark, tmp_path):
    """View ``e_totals`` at batch 2, and the answer it holds."""
    from tidemark.spark.runner import run_spec

    (tmp_path / "data").mkdir()
    want: dict = {}
    for i in range(3):
        docs = [{"customer": f"c{j}", "amount": i + j} for j in range(4)]
        for d in docs:
            want[d["customer"]] = want.get(d["customer"], 0) + d["amount"]
        write_input(tmp_path / "data", i, [json.dumps(d) for d in docs])
    spec = write_spec(tmp_path, "owner.yaml", "e_totals", "e_totals", ".tidemark/owner")
    run_spec(spec, spark=spark)
    assert view(tmp_path) == want
    return spec, want


def test_another_views_table_is_refused_and_never_dropped(owner, tmp_path):
    _, want = owner
    other = write_spec(tmp_path, "other.yaml", "other_view", "e_totals", ".tidemark/other")
    checked = cli("check", other)
    assert checked.returncode != 0
    first = checked.stderr.strip().splitlines()[0]
    assert "holds the view of materialization 'e_totals'" in first and "batch 2" in first, first
    assert "batch -1" not in first and "reset SPEC -m other_view" not in first
    assert "tidemark reset SPEC -m e_totals" in first

    reset = cli("reset", other, "-m", "other_view", "--yes")
    assert reset.returncode != 0
    first = reset.stderr.strip().splitlines()[0]
    assert "holds the view of materialization 'e_totals' (batch 2)" in first, reset.stderr
    assert "reset drops only what the named view owns" in first and "Nothing was changed" in first
    assert "dropped" not in reset.stdout
    with pytest.raises(RecoveryError, match="holds the view of materialization 'e_totals'"):
        tidemark.reset(other, materialization="other_view")
    assert view(tmp_path) == want  # the owner's table is intact
    assert "up to date" in cli("status", os.path.join(tmp_path, "owner.yaml")).stdout


def test_a_table_made_by_hand_is_not_dropped(owner, tmp_path):
    with sqlite3.connect(tmp_path / "views.db") as con:
        con.execute('CREATE TABLE "mine" (customer TEXT PRIMARY KEY, flow_document TEXT NOT NULL)')
        con.execute('INSERT INTO mine VALUES (\'x\', \'{"customer": "x", "amount": 7}\')')
    spec = write_spec(tmp_path, "hand.yaml", "hand_view", "mine", ".tidemark/hand")
    reset = cli("reset", spec, "-m", "hand_view", "--yes")
    assert reset.returncode != 0
    assert "exists but keeps no record of this view" in reset.stderr.strip().splitlines()[0], reset.stderr
    assert view(tmp_path, "mine") == {"x": 7}


def test_a_dropped_table_is_reported_by_check_and_status(owner, tmp_path):
    spec, _ = owner
    with sqlite3.connect(tmp_path / "views.db") as con:
        con.execute('DROP TABLE "e_totals"')
    checked = cli("check", spec)
    assert checked.returncode != 0
    first = checked.stderr.strip().splitlines()[0]
    assert "e_totals held the view up to batch 2" in first and "no longer exists" in first, checked.stderr
    status = cli("status", spec)
    assert status.returncode == 0
    assert "broken: materialization 'e_totals': e_totals held the view up to batch 2" in " ".join(
        status.stdout.split()
    ), status.stdout
    assert "up to date" not in status.stdout
    # its own reset still starts it over on purpose
    done = cli("reset", spec, "-m", "e_totals", "--yes")
    assert done.returncode == 0, done.stderr


def test_a_view_of_the_same_name_in_another_spec_never_touches_this_ones_progress(owner, tmp_path):
    """The first-hour trial: a second spec (its own checkpoint folder) names its view like the
    production one, in one database, over a table of its own.  Its run is refused naming both
    checkpoints without advice to reset; its reset is refused too, and the production view
    keeps its rows and its progress and runs on."""
    spec, want = owner
    progress = sqlite_rows(tmp_path / "views.db", "SELECT * FROM tidemark_checkpoints")
    other = write_spec(tmp_path, "other.yaml", "e_totals", "e_totals_copy", ".tidemark/second")
    ran = cli("run", other, "--available-now")
    assert ran.returncode != 0
    first = ran.stderr.strip().splitlines()[0]
    assert "another tidemark checkpoint" in first and "A view belongs to its checkpoint" in first, ran.stderr
    assert os.path.join(str(tmp_path), ".tidemark", "owner", "e_totals") in first  # the other folder, named
    assert "tidemark reset" not in ran.stderr

    reset = cli("reset", other, "-m", "e_totals", "--yes")
    assert reset.returncode != 0, reset.stdout
    first = reset.stderr.strip().splitlines()[0]
    assert "reset would change another job's view" in first and "Nothing was changed" in first, reset.stderr
    assert "deleted" not in reset.stdout and "tidemark reset" not in reset.stderr
    with pytest.raises(RecoveryError, match="A view belongs to its checkpoint"):
        tidemark.reset(other, materialization="e_totals")

    assert view(tmp_path) == want
    assert sqlite_rows(tmp_path / "views.db", "SELECT * FROM tidemark_checkpoints") == progress
    assert "up to date" in cli("status", spec).stdout
    # its own reset still starts it over
    assert cli("reset", spec, "-m", "e_totals", "--yes").returncode == 0
    assert not sqlite_rows(tmp_path / "views.db", "SELECT * FROM tidemark_checkpoints")


def sqlite_rows(path, query) -> list:
    with sqlite3.connect(path) as con:
        return sorted(con.execute(query).fetchall())


def test_a_rebuild_from_another_spec_of_the_same_name_changes_nothing(owner, tmp_path):
    """A second spec's view of the same name, with a checkpoint of its own (it ran before,
    elsewhere), asks for a rebuild here: refused before anything is built, naming both
    checkpoints; its --abandon has nothing to abandon; the production view is untouched."""
    from tidemark.runtime.recovery_log import RecoveryLog

    spec, want = owner
    progress = sqlite_rows(tmp_path / "views.db", "SELECT * FROM tidemark_checkpoints")
    other = write_spec(tmp_path, "other.yaml", "e_totals", "e_totals_copy", ".tidemark/second")
    RecoveryLog(str(tmp_path / ".tidemark" / "second" / "e_totals"), "e_totals", create=True)
    rebuilt = cli("rebuild", other, "-m", "e_totals")
    assert rebuilt.returncode != 0
    first = rebuilt.stderr.strip().splitlines()[0]
    assert "this rebuild would change another job's view" in first and "Nothing was changed" in first, rebuilt.stderr
    assert "tidemark reset" not in rebuilt.stderr
    abandoned = cli("rebuild", other, "-m", "e_totals", "--abandon")
    assert "no rebuild in progress" in abandoned.stdout + abandoned.stderr
    assert view(tmp_path) == want
    assert sqlite_rows(tmp_path / "views.db", "SELECT * FROM tidemark_checkpoints") == progress
    names = {r[0] for r in sqlite_rows(tmp_path / "views.db", "SELECT name FROM sqlite_master WHERE type='table'")}
    assert not any("rebuild" in n for n in names), names  # no shadow was made
