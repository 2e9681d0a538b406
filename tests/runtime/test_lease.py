"""One live run per checkpoint (tidemark.runtime.lease): real processes, no Spark."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap

import pytest

from tests.support.paths import REPO, SUPPORT
from tidemark.errors import RecoveryError
from tidemark.runtime.lease import LEASE_FILE, Lease

HOLDER = textwrap.dedent("""
    import sys, time
    sys.path.insert(0, sys.argv[1])
    from tidemark.runtime.lease import Lease
    lease = Lease(sys.argv[2], "m", ttl=float(sys.argv[3]))
    lease.acquire()
    lease.keep()
    print("held", flush=True)
    sys.stdin.readline()   # hold until told (or killed)
    lease.release()
    print("released", flush=True)
""")


def _holder(tmp_path, ttl=30.0):
    root = REPO
    p = subprocess.Popen(
        [sys.executable, "-c", HOLDER, root, str(tmp_path / "chk"), str(ttl)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    assert p.stdout.readline().strip() == "held"
    return p


def test_a_second_run_is_refused_at_once_naming_the_holder(tmp_path):
    p = _holder(tmp_path)
    try:
        with pytest.raises(RecoveryError) as err:
            Lease(str(tmp_path / "chk"), "m").acquire()
        msg = str(err.value)
        assert "in use by another run" in msg and f"pid {p.pid}" in msg and "running since" in msg
    finally:
        p.stdin.write("\n")
        p.stdin.flush()
        assert p.stdout.readline().strip() == "released"
        p.wait()
    lease = Lease(str(tmp_path / "chk"), "m")
    lease.acquire()  # given back: the next run starts without waiting
    lease.release()


def test_a_run_killed_on_this_host_is_taken_over_at_once(tmp_path):
    p = _holder(tmp_path)
    os.kill(p.pid, signal.SIGKILL)
    p.wait()
    assert (tmp_path / "chk" / LEASE_FILE).exists()  # the dead run's lease is still there
    lease = Lease(str(tmp_path / "chk"), "m")
    lease.acquire()
    assert json.loads((tmp_path / "chk" / LEASE_FILE).read_text())["pid"] == os.getpid()
    lease.release()


def test_a_lease_of_another_host_holds_until_it_expires(tmp_path):
    chk = tmp_path / "chk"
    chk.mkdir()
    import time

    body = {
        "token": "x",
        "materialization": "m",
        "host": "elsewhere",
        "pid": 1,
        "since": time.time(),
        "renewed": time.time(),
        "ttl": 30,
    }
    (chk / LEASE_FILE).write_text(json.dumps(body))
    with pytest.raises(RecoveryError, match="host elsewhere.*expires at"):
        Lease(str(chk), "m").acquire()
    body["renewed"] = time.time() - 31  # it stopped renewing 31 s ago
    (chk / LEASE_FILE).write_text(json.dumps(body))
    lease = Lease(str(chk), "m")
    lease.acquire()
    lease.release()


def test_a_run_whose_lease_was_taken_stops_committing(tmp_path):
    lease = Lease(str(tmp_path / "chk"), "m")
    lease.acquire()
    body = json.loads((tmp_path / "chk" / LEASE_FILE).read_text())
    body.update(token="other", host="elsewhere")
    (tmp_path / "chk" / LEASE_FILE).write_text(json.dumps(body))
    assert lease.renew() is False and lease.lost
    with pytest.raises(RecoveryError, match="lost its lease"):
        lease.check()
    lease.release()
    assert (tmp_path / "chk" / LEASE_FILE).exists()  # the other run's lease is left alone


def test_a_refused_first_run_leaves_no_checkpoint_folder(tmp_path):
    lease = Lease(str(tmp_path / "chk"), "m")
    lease.acquire()
    lease.release()
    assert not (tmp_path / "chk").exists()


def test_reset_of_a_running_view_is_refused_and_changes_nothing(tmp_path):
    import yaml

    from tidemark.ops_reset import reset_spec

    spec = {
        "collections": {
            "o": {
                "key": ["/id"],
                "schema": {"type": "object", "required": ["id"], "properties": {"id": {"type": "string"}}},
            }
        },
        "materializations": {
            "m": {"endpoint": {"sqlite": {"path": "v.db"}}, "bindings": [{"source": "o", "resource": {"table": "t"}}]}
        },
        "checkpoint": "chk",
    }
    (tmp_path / "spec.yaml").write_text(yaml.safe_dump(spec))
    (tmp_path / "chk").mkdir()
    root = REPO
    p = subprocess.Popen(
        [sys.executable, "-c", HOLDER, root, str(tmp_path / "chk" / "m"), "30"],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert p.stdout.readline().strip() == "held"
        with pytest.raises(RecoveryError, match="in use by another run"):
            reset_spec(str(tmp_path / "spec.yaml"))
        assert (tmp_path / "chk" / "m" / LEASE_FILE).exists()
    finally:
        p.stdin.write("\n")
        p.stdin.flush()
        p.wait()
    reset_spec(str(tmp_path / "spec.yaml"))
    assert not (tmp_path / "chk" / "m").exists()


def test_a_refused_first_run_leaves_none_of_the_folders_it_made(tmp_path):
    lease = Lease(str(tmp_path / "a" / "b" / "chk"), "m")
    lease.acquire()
    lease.release()
    assert not (tmp_path / "a").exists()


def test_a_later_lease_of_this_process_takes_it_over_and_the_earlier_stops_renewing(tmp_path, caplog):
    """``tidemark run`` takes the lease before Spark starts; its coordinator takes it over in
    the same process: the earlier lease stops renewing, loses nothing, logs nothing."""
    first = Lease(str(tmp_path / "chk"), "m", ttl=0.3)
    first.acquire()
    first.keep()
    second = Lease(str(tmp_path / "chk"), "m", ttl=0.3)
    second.acquire()
    first._thread.join(timeout=5)
    assert not first._thread.is_alive() and not first.held and not first.lost
    assert second.renew() and json.loads((tmp_path / "chk" / LEASE_FILE).read_text())["token"] == second.token
    first.release()  # handed over: not its to give back
    assert (tmp_path / "chk" / LEASE_FILE).exists()
    second.release()
    assert not (tmp_path / "chk").exists()  # the folder the first acquire made goes with the last release
    assert not [r for r in caplog.records if "taken by another run" in r.getMessage()]


def test_tidemark_run_refuses_a_second_run_before_spark_starts(tmp_path):
    from tests.support.helpers import tiny_spec

    tiny_spec(tmp_path, materialization="chk", checkpoint=".")
    holder = _holder(tmp_path)  # the lease of materialization chk's checkpoint: ./chk
    try:
        done = subprocess.run(
            [sys.executable, "-m", "tidemark", "run", str(tmp_path / "spec.yaml"), "--available-now"],
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert done.returncode == 1
        assert "is in use by another run" in done.stderr.splitlines()[0], done.stderr
        assert "starting Spark" not in done.stderr
    finally:
        holder.stdin.write("\n")
        holder.stdin.flush()
        assert holder.wait(timeout=30) == 0


def test_a_run_asked_to_stop_hears_it_within_a_second_and_a_dead_askers_request_is_ignored(tmp_path):
    import threading

    from tidemark.runtime.lease import STOP_FILE, clear_stop, request_stop, stop_request

    chk = str(tmp_path / "chk")
    lease = Lease(chk, "m")
    lease.acquire()
    heard: list = []
    told = threading.Event()
    lease.keep(on_stop=lambda request: (heard.append(request), told.set()))
    try:
        request_stop(chk, by="rebuild 1234")
        assert told.wait(5), "the lease thread did not hear the request"
        assert heard[0]["by"] == "rebuild 1234" and heard[0]["pid"] == os.getpid()
        assert stop_request(chk)["by"] == "rebuild 1234"
        clear_stop(chk)
        assert stop_request(chk) is None and not os.path.exists(os.path.join(chk, STOP_FILE))
        # a request whose process died on this host is stale
        gone = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
        with open(os.path.join(chk, STOP_FILE), "w") as f:
            json.dump({"by": "rebuild 5678", "host": os.uname().nodename, "pid": int(gone.stdout), "at": 0}, f)
        assert stop_request(chk) is None
    finally:
        lease.release()
