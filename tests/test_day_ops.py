"""Day-to-day operation of `tidemark run` as a real process: the metrics endpoint scraped
while it runs, `tidemark status` (80 columns, --json, --checkpoint), Ctrl-C in the middle
of a batch, and a batch of many invalid documents reported at once."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
import urllib.request

import pytest

from tests.support.day_ops import ENV, _group_alive, _only, wait_for
from tests.support.helpers import normalize, oracle_orders, orders_spec, sqlite_view, write_orders
from tests.support.metrics_scrape import scrape

pytestmark = pytest.mark.spark


def tidemark(*args, env=None, timeout=300):
    return subprocess.run(
        [sys.executable, "-m", "tidemark", *args], capture_output=True, text=True, env=env or ENV, timeout=timeout
    )


def status_lines(*args) -> list[str]:
    done = tidemark("status", *args)
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    too_long = [ln for ln in lines if len(ln) > 80]
    assert not too_long, too_long
    return lines


def log_entries(chk) -> list[dict]:
    folder = os.path.join(chk, "tidemark", "log")
    return [
        json.load(open(os.path.join(folder, n)))["entry"] for n in sorted(os.listdir(folder), key=lambda n: int(n[:-5]))
    ]


@pytest.mark.slow  # CI runs it after the default suite (-m slow)
def test_metrics_status_and_ctrl_c_on_a_live_run_then_every_invalid_document_at_once(tmp_path):
    data, db = tmp_path / "data", tmp_path / "views.db"
    files = write_orders(data, files=2, per_file=100, customers=20, seed=5)
    spec = orders_spec(tmp_path, data_dir=data, db_path=db, shards=2, max_files=1)
    chk = os.path.join(tmp_path, "checkpoints", "view")
    err = open(tmp_path / "run.err", "w+")
    # batch 2 is held for a few seconds just before its commit, so that Ctrl-C lands inside it
    env = {**ENV, "TIDEMARK_FAULTS": "before_recovery_log:stall=3@3"}
    t0 = time.time()
    proc = subprocess.Popen(
        [sys.executable, "-m", "tidemark", "run", spec, "--master", "local[2]", "--metrics-port", "0"],
        stdout=subprocess.DEVNULL,
        stderr=err,
        env=env,
        start_new_session=True,
    )  # its own group: Ctrl-C in a terminal signals the group
    try:

        def stderr():
            err.seek(0)
            return err.read()

        url = wait_for(
            "the metrics URL", lambda: (re.findall(r"metrics: (http://\S+/metrics)", stderr()) or [None])[0], proc=proc
        )
        m = '{materialization="view"}'
        got = wait_for(
            "2 committed batches in the metrics",
            lambda: (lambda g: g if g.get(("tidemark_batches_committed_total", m)) == 2 else None)(scrape(url)),
            proc=proc,
        )
        entries = log_entries(chk)
        assert [e["batch_id"] for e in entries] == [0, 1]
        assert got[("tidemark_documents_read_total", m)] == 200
        assert got[("tidemark_documents_stored_total", m)] == sum(e["counts"]["stored"] for e in entries)
        assert got[("tidemark_documents_quarantined_total", m)] == 0
        assert got[("tidemark_last_batch_id", m)] == 1
        assert got[("tidemark_input_files_waiting", m)] == 0
        assert t0 <= got[("tidemark_last_commit_timestamp_seconds", m)] <= time.time()
        assert abs(got[("tidemark_last_commit_timestamp_seconds", m)] - entries[1]["counts"]["committed_at"]) < 5
        for phase in ("plan", "shards", "recovery_log", "total"):
            assert got[("tidemark_last_batch_duration_seconds", f'{{materialization="view",phase="{phase}"}}')] >= 0

        # not behind: what `status` says while the run waits for input
        lines = status_lines(spec)
        assert lines[0] == "view (sqlite): up to date: no input waiting", lines
        assert any(re.match(r"  last commit +batch 1 at \d{4}-\d\d-\d\d \d\d:\d\d:\d\d UTC", ln) for ln in lines), lines
        assert any(re.match(r"  since start +2 batches, 200 documents, 0 quarantined", ln) for ln in lines), lines
        shard_rows = [ln.split() for ln in lines if re.search(r"[0-9a-f]{8}-[0-9a-f]{8}", ln)]
        assert [r[-1] for r in shard_rows] == ["1", "1"] and all(r[-2].isdigit() for r in shard_rows), lines

        # Ctrl-C while batch 2 runs
        files += write_orders(data, files=1, per_file=100, customers=20, seed=6, start=2)
        wait_for(
            "batch 2 to start", lambda: os.path.exists(os.path.join(chk, "tidemark", "intent", "2.json")), proc=proc
        )
        os.killpg(proc.pid, signal.SIGINT)
        assert proc.wait(timeout=120) == 130
        # PySpark starts its JVM with SIGINT ignored: it ends when it sees its Python gone. Until
        # then its stream thread may still plan a batch from new input; wait before adding any.
        wait_for("the run's JVM to exit", lambda: not _group_alive(proc.pid))
        text = stderr()
        # the batch in progress finished and committed; then one line
        after = text[text.rindex("view batch 1:") :].splitlines()[1:]
        assert len(after) == 3, text[-3000:]
        assert after[0].startswith("stopping: the batch in progress finishes and commits"), text[-3000:]  # at once
        assert after[1].startswith("view batch 2: 100 docs"), text[-3000:]
        assert after[2] == "interrupted: stopped; committed this run: view batch 2; run again to go on from there"
        assert "Traceback" not in text and "py4j" not in text and "ERROR" not in text, text[-3000:]
        assert "Exception" not in text, text[-3000:]  # e.g. the JVM's RpcEnvStoppedException, after the prompt
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
        err.close()

    # the view holds whole batches only: exactly the files of the committed ones
    last = log_entries(chk)[-1]["batch_id"]
    assert last == 2
    committed = [os.path.basename(f) for f in files[: last + 1]]
    assert normalize(sqlite_view(db)) == oracle_orders(_only(data, committed, tmp_path / "oracle"))

    # one more file (not run yet): behind, by the spec and by the checkpoint folder alone
    files += write_orders(data, files=1, per_file=30, customers=20, seed=7, start=3)
    waiting = 3 - last
    lines = status_lines(spec)
    assert lines[0].startswith(f"view (sqlite): behind: {waiting} file(s) waiting"), lines
    from_chk = status_lines("--checkpoint", chk)
    assert from_chk[0].startswith(f"view (sqlite): behind: {waiting} file(s) waiting"), from_chk
    assert any("(the folders of the files read so far)" in ln for ln in from_chk), from_chk
    done = tidemark("status", spec, "--json")
    (st,) = json.loads(done.stdout)
    assert st["behind"] is True and st["input"]["files_waiting"] == waiting and st["last_batch"] == last
    assert st["totals"]["documents"] == 100 * (last + 1) and st["totals"]["batches"] == last + 1
    assert st["last_counts"]["documents"] == 100 and st["endpoint"] == "sqlite"
    assert [s["batch_id"] for s in st["shards"]] == [last, last] and len(st["layout"]) == 2

    # a file of 25 invalid documents among valid ones: the run commits up to it, then names
    # them all (the first 20), first line first, with the count and the way on
    lines_of_bad = []
    with open(files[3]) as f:
        good = f.read().splitlines()
    with open(files[3], "w") as f:
        for i, line in enumerate(good):
            f.write((json.dumps({"customer": f"bad{i}", "amount": "many"}) if i % 30 != 0 and i < 26 else line) + "\n")
            if i % 30 != 0 and i < 26:
                lines_of_bad.append(i + 1)
    os.utime(files[3], (1_700_000_030, 1_700_000_030))
    assert len(lines_of_bad) == 25
    failed = tidemark("run", spec, "--available-now", "--master", "local[2]")
    assert failed.returncode == 1
    errors = failed.stderr[failed.stderr.index("error: ") :].splitlines()
    where = f"{files[3]}:{lines_of_bad[0]} key ('bad1',): document violates its schema: /amount: 'many' is not of type"
    assert errors[0].startswith(f"error: {where}"), failed.stderr[-3000:]
    shown = [ln for ln in errors if re.match(rf"(error: )?\s*{re.escape(files[3])}:\d+ ", ln)]
    assert [int(re.search(r":(\d+) ", ln).group(1)) for ln in shown] == lines_of_bad[:20]
    assert errors[len(shown)].strip().startswith("25 invalid document(s) in this batch (the first 20 above)")
    assert "on_invalid: quarantine" in errors[len(shown)]
    assert "Traceback" not in failed.stderr and "py4j" not in failed.stderr
    assert failed.stderr.count(where) == 1  # once, not per retry or per task
    assert normalize(sqlite_view(db)) == oracle_orders(
        _only(data, [os.path.basename(f) for f in files[:3]], tmp_path / "oracle3")
    )
