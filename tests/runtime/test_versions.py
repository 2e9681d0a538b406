"""Format numbers on what tidemark keeps: a newer one is refused in one line naming it and what
to run, before anything changes; a record without one (an older release's) reads as before."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from tests.support.helpers import tiny_spec
from tidemark.errors import RecoveryError
from tidemark.protocol.messages import KEY_SPACE_MAX, Range
from tidemark.runtime.recovery_log import LogEntry, RecoveryLog
from tidemark.runtime.shard import ShardTask, check_opened
from tidemark.runtime.versions import FORMAT
from tidemark.runtime.view_identity import check_endpoint_records, endpoint_record

NEWER = FORMAT + 1
REFUSAL = rf"is in tidemark format {NEWER}, and this release reads formats 1 to {FORMAT}: run the tidemark release"


def entry(n):
    return LogEntry(n, {"batch_id": n}, None, [[0, KEY_SPACE_MAX]], "v1", {}, [["t"]])


def reseal(sealed: dict, **members) -> None:
    """A log entry with ``members`` set (None: removed), sealed again as a release writes it."""
    from tidemark.runtime.recovery_log import _digest

    for k, v in members.items():
        if v is None:
            sealed["entry"].pop(k)
        else:
            sealed["entry"][k] = v
    sealed["sha256"] = _digest(sealed["entry"])


def rewrite(path, change):
    obj = json.loads(path.read_text())
    change(obj)
    path.write_text(json.dumps(obj))


def test_the_checkpoint_folder_and_the_log_carry_their_format(tmp_path):
    log = RecoveryLog(str(tmp_path), "m")
    log.append(entry(0))
    log.write_intent(1, [[0, KEY_SPACE_MAX]])
    root = tmp_path / "tidemark"
    assert json.loads((root / "meta.json").read_text())["format"] == FORMAT
    assert json.loads((root / "log" / "0.json").read_text())["entry"]["format"] == FORMAT
    assert json.loads((root / "intent" / "1.json").read_text())["format"] == FORMAT


@pytest.mark.parametrize("part", ["meta", "entry", "intent"])
def test_a_newer_format_in_the_checkpoint_folder_is_refused_naming_it(tmp_path, part):
    log = RecoveryLog(str(tmp_path), "m")
    log.append(entry(0))
    log.write_intent(1, [[0, KEY_SPACE_MAX]])
    root = tmp_path / "tidemark"
    before = {p: p.read_bytes() for p in root.rglob("*.json")}
    if part == "meta":
        rewrite(root / "meta.json", lambda o: o.update(format=NEWER))
        with pytest.raises(RecoveryError, match=f"checkpoint folder {tmp_path} .*{REFUSAL}"):
            RecoveryLog(str(tmp_path), "m")
    elif part == "entry":
        rewrite(root / "log" / "0.json", lambda o: reseal(o, format=NEWER))
        with pytest.raises(RecoveryError, match=f"recovery log entry .*0.json {REFUSAL}"):
            RecoveryLog(str(tmp_path), "m").last()
    else:
        rewrite(root / "intent" / "1.json", lambda o: o.update(format=NEWER))
        with pytest.raises(RecoveryError, match=f"the layout record .*1.json {REFUSAL}"):
            RecoveryLog(str(tmp_path), "m").intent(1)
    # nothing was set aside or rewritten (a torn entry would have been)
    after = {p: p.read_bytes() for p in root.rglob("*.json")}
    assert after.keys() == before.keys() and list(root.rglob("*.torn*")) == []


def test_records_without_a_format_are_an_older_release_and_read_as_before(tmp_path):
    log = RecoveryLog(str(tmp_path), "m")
    log.append(entry(0))
    root = tmp_path / "tidemark"
    rewrite(root / "meta.json", lambda o: o.pop("format"))

    rewrite(root / "log" / "0.json", lambda o: reseal(o, format=None))  # as an older release wrote it
    again = RecoveryLog(str(tmp_path), "m")
    assert again.last().batch_id == 0 and again.checkpoint_id == log.checkpoint_id


def task(cp_id="c1"):
    return ShardTask("m", "v1", "sqlite", {}, (), (), cp_id, 3, (Range(),), None, {"batch_id": 3}, committed_batch=2)


def test_a_newer_runtime_checkpoint_in_the_endpoint_is_refused_at_open():
    with pytest.raises(
        RecoveryError, match=f"range 00000000-ffffffff of endpoint 'sqlite': its committed runtime checkpoint {REFUSAL}"
    ):
        check_opened(task(), Range(), {"checkpoint_id": "c1", "batch_id": 2, "format": NEWER}, True)
    assert check_opened(task(), Range(), {"checkpoint_id": "c1", "batch_id": 2}, True) is False  # older: fine


def test_a_newer_view_identity_record_is_refused():
    current = {"collection": "o", "key": ["/id"], "key_types": ["string"], "resource": ["t"]}
    kept = endpoint_record(current, "m", "c1", 0)
    assert kept["format"] == FORMAT
    check_endpoint_records("m", "sqlite", [kept], [current], "c1")
    with pytest.raises(RecoveryError, match=f"the view-identity record kept with .* {REFUSAL}"):
        check_endpoint_records("m", "sqlite", [{**kept, "format": NEWER}], [current], "c1")


def test_the_cli_says_it_in_one_line(tmp_path):
    spec = tiny_spec(tmp_path)
    folder = tmp_path / ".tidemark" / "checkpoints" / "m"  # a spec's default checkpoint folder
    RecoveryLog(str(folder), "m")
    rewrite(folder / "tidemark" / "meta.json", lambda o: o.update(format=NEWER))
    proc = subprocess.run(
        [sys.executable, "-m", "tidemark", "status", spec],
        capture_output=True,
        text=True,
        env={**os.environ, "NO_COLOR": "1"},
        timeout=120,
    )
    assert proc.returncode == 1, proc.stdout + proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: ") and f"tidemark format {NEWER}" in lines[0], lines
