"""A full disk under the checkpoint is one line, not a traceback: it names the folder and the
space free there, nothing of the batch commits, and the run after space is freed is exact.
The checkpoint lives on a small tmpfs this test mounts (skipped where mounting is not
permitted); another case feeds Spark's own wrapped failure to the same mapping."""

from __future__ import annotations

import json
import os
import shutil
import sqlite3
import subprocess
import sys

import pytest
import yaml

from tests.support.helpers import skip_unless_required, sqlite_view, write_input

pytestmark = pytest.mark.spark


@pytest.fixture
def small_disk(tmp_path):
    mount = tmp_path / "disk"
    mount.mkdir()
    done = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=4m", "tmpfs", str(mount)], capture_output=True)
    if done.returncode != 0:  # (a machine without the privilege: CI, with TIDEMARK_REQUIRE_ALL, fails)
        skip_unless_required(f"cannot mount a tmpfs here: {done.stderr.decode().strip()}")
    try:
        yield mount
    finally:
        subprocess.run(["umount", "-l", str(mount)], check=False)


def run(spec) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "tidemark", "run", str(spec), "--available-now", "--no-spark-ui"],
        capture_output=True,
        text=True,
        timeout=600,
        env={**os.environ, "COLUMNS": "1000"},
    )


def sums_spec(tmp_path, checkpoint, options=None):
    """``tmp_path/spec.yaml``: sums per customer from ``tmp_path/data`` into SQLite ``v.db``
    table ``t``, the checkpoint at ``checkpoint``."""
    source: dict = {"path": "data"}
    if options:
        source["options"] = options
    spec = tmp_path / "spec.yaml"
    spec.write_text(
        yaml.safe_dump(
            {
                "collections": {
                    "orders": {
                        "key": ["/customer"],
                        "schema": {
                            "type": "object",
                            "required": ["customer"],
                            "reduce": {"strategy": "merge"},
                            "properties": {
                                "customer": {"type": "string"},
                                "amount": {"type": "integer", "reduce": {"strategy": "sum"}},
                            },
                        },
                        "source": source,
                    }
                },
                "materializations": {
                    "v": {
                        "endpoint": {"sqlite": {"path": "v.db"}},
                        "bindings": [{"source": "orders", "resource": {"table": "t"}}],
                    }
                },
                "checkpoint": str(checkpoint),
            }
        )
    )
    return spec


def test_a_full_disk_is_one_line_and_the_run_after_freeing_it_is_exact(tmp_path, small_disk):
    data = tmp_path / "data"
    data.mkdir()
    write_input(data, 0, [json.dumps({"customer": f"c{i % 5}", "amount": i}) for i in range(50)])
    spec = sums_spec(tmp_path, small_disk / "chk")
    filler = small_disk / "filler"
    fd = os.open(filler, os.O_WRONLY | os.O_CREAT)
    try:  # fill the disk to the last byte
        for size in (65536, 1):
            try:
                while True:
                    os.write(fd, b"\0" * size)
            except OSError:
                pass
    finally:
        os.close(fd)
    failed = run(spec)
    assert failed.returncode == 1
    lines = [x for x in failed.stderr.splitlines() if x.strip()]
    assert lines[-1].startswith("error: the disk is full at ") and str(small_disk / "chk") in lines[-1], failed.stderr
    assert "MiB free" in lines[-1] and "nothing of the batch in progress was committed" in lines[-1]
    assert "Traceback" not in failed.stderr
    with sqlite3.connect(tmp_path / "v.db") as con:
        assert (
            not con.execute("SELECT name FROM sqlite_master WHERE name = 't'").fetchall()
            or not con.execute("SELECT * FROM t").fetchall()
        )
    filler.unlink()
    done = run(spec)
    assert done.returncode == 0, done.stderr
    view = {k: d["amount"] for k, d in sqlite_view(tmp_path / "v.db", "t").items()}
    assert view == {f"c{j}": sum(i for i in range(50) if i % 5 == j) for j in range(5)}


def test_spark_s_wrapped_failures_map_to_one_line(tmp_path):
    from tidemark.errors import infrastructure_error

    wrapped = RuntimeError(
        "[STREAM_FAILED] Query [id = 1] terminated with exception: Job aborted.\n"
        "Caused by: java.io.IOException: No space left on device\n\tat java.base/java.io.FileOutputStream.writeBytes"
    )
    err = infrastructure_error(wrapped, [str(tmp_path / "chk" / "v")])
    assert str(err).startswith(f"the disk is full at {tmp_path / 'chk' / 'v'} (") and "\n" not in str(err)
    oom = infrastructure_error(RuntimeError("java.lang.OutOfMemoryError: Java heap space"), [])
    assert str(oom).startswith("Spark ran out of memory: give it more (--conf spark.driver.memory=4g")
    assert infrastructure_error(RuntimeError("something else"), []) is None


@pytest.mark.slow  # the run above is its quicker sibling
@pytest.mark.parametrize("mishap", ["full", "read-only", "vanished"])
def test_a_disk_that_fills_during_a_run_fails_inside_spark_s_own_write_as_one_line(tmp_path, small_disk, mishap):
    """Batch 0 commits; while its ``foreachBatch`` has not returned yet, the disk fills (or is
    remounted read-only), so Spark's own write of its commit log fails (inside Spark): one line
    naming the folder and what to do; the run after the disk is mended is exact."""
    import threading

    data = tmp_path / "data"
    data.mkdir()
    for f in range(2):
        write_input(data, f, [json.dumps({"customer": f"c{i % 5}", "amount": i + 100 * f}) for i in range(50)])
    spec = sums_spec(tmp_path, small_disk / "chk", {"maxFilesPerTrigger": 1})
    stalled, filler = tmp_path / "stalled", small_disk / "filler"

    def fill_when_stalled() -> None:
        while not stalled.exists() and not done.wait(0.05):  # the stall after batch 0's log entry has begun
            pass
        if mishap == "read-only":
            subprocess.run(["mount", "-o", "remount,ro", str(small_disk)], check=True)
            return
        if mishap == "vanished":
            shutil.move(str(small_disk / "chk"), str(tmp_path / "chk-aside"))
            return
        fd = os.open(filler, os.O_WRONLY | os.O_CREAT)
        try:  # fill the disk to the last byte
            for size in (65536, 1):
                try:
                    while True:
                        os.write(fd, b"\0" * size)
                except OSError:
                    pass
        finally:
            os.close(fd)

    done = threading.Event()
    filling = threading.Thread(target=fill_when_stalled)
    filling.start()
    try:
        failed = subprocess.run(
            [sys.executable, "-m", "tidemark", "run", str(spec), "--available-now", "--no-spark-ui"],
            capture_output=True,
            text=True,
            timeout=600,
            env={**os.environ, "COLUMNS": "1000", "TIDEMARK_FAULTS": f"after_recovery_log:stall=3!once={stalled}"},
        )
    finally:
        done.set()
        filling.join()
    assert stalled.exists()
    assert failed.returncode == 1, failed.stderr
    lines = [x for x in failed.stderr.splitlines() if x.strip()]
    what = {"full": "the disk is full at ", "read-only": "the file system is read-only at "}.get(
        mishap, "the checkpoint folder "
    )
    assert lines[-1].startswith(f"error: {what}") and str(small_disk / "chk") in lines[-1], failed.stderr
    assert "Traceback" not in failed.stderr and "java.io.IOException" not in failed.stderr
    if mishap == "vanished":  # put back where it was
        assert "is gone (deleted or moved while the run ran)" in lines[-1]
        shutil.rmtree(small_disk / "chk", ignore_errors=True)  # what Spark may have made again
        shutil.move(str(tmp_path / "chk-aside"), str(small_disk / "chk"))
    # batch 0 reached the recovery log; Spark's commit of it is what the mishap refused
    assert (small_disk / "chk" / "v" / "tidemark" / "log" / "0.json").exists()
    assert not (small_disk / "chk" / "v" / "spark" / "commits" / "0").exists()
    if mishap == "read-only":
        subprocess.run(["mount", "-o", "remount,rw", str(small_disk)], check=True)
    elif mishap == "full":
        filler.unlink()
    again = run(spec)
    assert again.returncode == 0, again.stderr
    view = {k: d["amount"] for k, d in sqlite_view(tmp_path / "v.db", "t").items()}
    assert view == {f"c{j}": sum(i + 100 * f for f in range(2) for i in range(50) if i % 5 == j) for j in range(5)}
