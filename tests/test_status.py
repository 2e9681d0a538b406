"""`tidemark status` read from a checkpoint folder built by hand (no Spark): input waiting by
file and batch, totals, a torn newest entry left in place, and the 80-column rendering."""

from __future__ import annotations

import json
import os

from tidemark.protocol.messages import KEY_SPACE_MAX
from tidemark.runtime.recovery_log import LogEntry, RecoveryLog
from tidemark.status import status_of_checkpoint
from tidemark.status_render import render

HALF = KEY_SPACE_MAX // 2


def _spark_batch(chk, batch, files):
    """What Spark writes for batch ``batch`` of a file source: offsets/N and sources/0/N."""
    for sub in ("offsets", "sources/0"):
        os.makedirs(os.path.join(chk, "spark", sub), exist_ok=True)
    with open(os.path.join(chk, "spark", "offsets", str(batch)), "w") as f:
        f.write('v1\n{"batchWatermarkMs":0}\n{"logOffset":%d}\n' % batch)
    with open(os.path.join(chk, "spark", "sources", "0", str(batch)), "w") as f:
        f.write(
            "v1\n"
            + "".join(json.dumps({"path": f"file://{p}", "timestamp": 0, "batchId": batch}) + "\n" for p in files)
        )


def test_status_from_a_checkpoint_folder_alone(tmp_path):
    data = tmp_path / ("a-rather-long-folder-name-" * 2) / "data"
    data.mkdir(parents=True)
    files = []
    for i in range(4):
        p = data / f"part-{i}.json"
        p.write_text('{"id": "x"}\n' * (i + 1))
        files.append(str(p))
    (data / "_SUCCESS").write_text("")  # not data, as for Spark
    chk = str(tmp_path / "chk")
    log = RecoveryLog(chk, "orders_1234abcd")
    layout = [[0, HALF], [HALF + 1, KEY_SPACE_MAX]]
    for b in (0, 1):
        counts = {
            "documents": 10 + b,
            "stored": 5,
            "deleted": 1,
            "invalid": b,
            "endpoint": "postgres",
            "committed_at": 1_790_000_000.0 + b,
            "seconds": 1.5,
            "totals": {"batches": b + 1, "documents": 10 + 21 * b, "invalid": b},
        }
        log.append(LogEntry(b, {"batch_id": b}, None, layout, "v", counts))
        _spark_batch(chk, b, files[b : b + 1])
    _spark_batch(chk, 2, files[2:3])  # planned, not committed (in progress, or failed)

    st = status_of_checkpoint(chk)
    assert (st.name, st.endpoint, st.last_batch, st.planned_batch) == ("orders_1234abcd", "postgres", 1, 2)
    assert st.committed_at == 1_790_000_001.0 and st.totals == {"batches": 2, "documents": 31, "invalid": 1}
    # part-2 (planned in the uncommitted batch) and part-3 (never planned) are waiting
    assert (st.input.kind, st.input.files_waiting, st.input.guessed) == ("files", 2, True)
    assert st.input.bytes_waiting == os.path.getsize(files[2]) + os.path.getsize(files[3])
    assert st.batches_waiting == 1 and st.behind is True
    assert [(s.place, s.batch_id) for s in st.shards] == [("00000000-7fffffff", 1), ("80000000-ffffffff", 1)]

    lines = render(st, 80, now=1_790_000_061.0)
    assert all(len(ln) <= 80 for ln in lines), lines
    assert lines[0] == "orders_1234abcd (postgres): behind: 2 file(s) waiting, 1 planned batch(es) not"
    assert "  last commit  batch 1 at 2026-09-21 14:13:21 UTC (60 s ago)" in lines
    assert "  last batch   11 documents, 5 stored, 1 deleted, 1 quarantined, took 1.5 s" in lines
    assert "  since start  2 batches, 31 documents, 1 quarantined" in lines
    # a long path is broken after a "/", and joins back to itself
    i = next(i for i, ln in enumerate(lines) if ln.startswith("  read from"))
    parts = [lines[i][15:]]
    for ln in lines[i + 1 :]:
        if not ln.startswith(" " * 15) or ln.strip().startswith("("):
            break
        parts.append(ln[15:])
    assert "".join(parts) == str(data) and len(parts) > 1, lines
    assert all(p.endswith("/") for p in parts[:-1]), parts
    json.dumps(st.as_json())  # serialisable

    # a torn newest entry: reported, the last whole one is shown, nothing is moved
    torn = os.path.join(chk, "tidemark", "log", "2.json")
    with open(torn, "w") as f:
        f.write('{"entry": {"batch_id": 2')
    st = status_of_checkpoint(chk)
    assert st.last_batch == 1 and any("batch 2) is torn" in n for n in st.notes)
    assert os.path.exists(torn)


def test_a_folder_that_is_not_a_checkpoint_is_named(tmp_path):
    import pytest

    from tidemark.errors import SpecError

    with pytest.raises(SpecError, match="is not a tidemark checkpoint folder"):
        status_of_checkpoint(str(tmp_path))
