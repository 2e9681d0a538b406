"""The kit's report: every failure carries its scenario and a hint, and the rich table keeps
``[scenario]`` prefixes (they are escaped, not read as markup)."""

from __future__ import annotations

from rich.console import Console

from tidemark.errors import RecoveryError
from tidemark.testing.kit.report import Recorder, build_report, classify


def _report():
    rec = Recorder()
    rec.start("zombie-split")
    rec.fail("fencing", "a session of the old layout committed", "bump every overlapping range", cause=True)
    rec.fail("no-duplicates", "8 delta-update rows are extra")
    rec.start("steady")
    rec.fail("deletes-applied", 'key ["a"] was deleted but is still in the view')
    return build_report(rec, "toy", "store-authoritative", ["zombie-split", "steady"], 0, True)


def test_failures_name_scenario_and_hint_and_consequences_point_at_the_cause():
    report = _report()
    assert report.failed == ["no-duplicates", "fencing", "deletes-applied"]
    fencing = report.properties["fencing"].failures[0]
    assert fencing.startswith("[zombie-split] ") and "(fix: bump every overlapping range)" in fencing
    dup = report.properties["no-duplicates"].failures[0]
    assert "probably a consequence of the fencing failure" in dup
    deletes = report.properties["deletes-applied"].failures[0]  # another scenario: its own hint
    assert "consequence" not in deletes and "fix: Store.deletes" in deletes


def test_the_table_keeps_scenario_prefixes():
    console = Console(record=True, width=250)
    _report().render(console)
    text = console.export_text()
    assert "[zombie-split] a session of the old layout committed" in text
    assert '[steady] key ["a"] was deleted' in text


def test_runtime_refusals_map_to_properties():
    prop, hint = classify(
        RecoveryError("range 00000000-ffffffff of endpoint 'x' holds batch 3, older than the recovery log's batch 4")
    )
    assert prop == "checkpoints-monotonic" and hint
    prop, _ = classify(RecoveryError("range r of endpoint 'x' is written by another tidemark checkpoint (id 1)"))
    assert prop == "range-isolation"
    assert classify(ValueError("boom"))[0] == "protocol"
