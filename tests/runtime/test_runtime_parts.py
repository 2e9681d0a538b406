"""Recovery log, merge patches, spill buffers and fault points."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest
from hypothesis import given
from hypothesis import strategies as st

from tidemark.errors import RecoveryError
from tidemark.protocol.messages import KEY_SPACE_MAX, Range, StateUpdate
from tidemark.runtime.merge_patch import apply_update, merge_patch
from tidemark.runtime.recovery_log import LogEntry, RecoveryLog
from tidemark.runtime.spill import LoadedIndex, SpillBuffer


def entry(n, state=None):
    return LogEntry(n, {"batch_id": n}, state, [[0, KEY_SPACE_MAX]], "v1", {})


def test_recovery_log_appends_compacts_and_refuses_going_back(tmp_path):
    log = RecoveryLog(str(tmp_path), "m", keep=3)
    assert log.last() is None
    for n in range(6):
        log.append(entry(n, {"n": n}))
    assert log.last().batch_id == 5 and log.last().driver_checkpoint == {"n": 5}
    assert sorted(os.listdir(tmp_path / "tidemark" / "log")) == ["3.json", "4.json", "5.json"]
    with pytest.raises(RecoveryError, match="already holds batch 5"):
        log.append(entry(5))
    # the checkpoint id is stable across instances
    assert RecoveryLog(str(tmp_path), "m").checkpoint_id == log.checkpoint_id
    assert not [n for n in os.listdir(tmp_path / "tidemark" / "log") if ".tmp-" in n]


def test_recovery_log_refuses_another_materialization(tmp_path):
    RecoveryLog(str(tmp_path), "a")
    with pytest.raises(RecoveryError, match="belongs to materialization 'a'"):
        RecoveryLog(str(tmp_path), "b")


def test_intent_is_kept_per_batch(tmp_path):
    log = RecoveryLog(str(tmp_path), "m")
    assert log.intent(7) is None
    log.write_intent(7, [[0, 10], [11, KEY_SPACE_MAX]])
    assert log.intent(7) == [[0, 10], [11, KEY_SPACE_MAX]]


def test_merge_patch_rfc7396_examples():
    assert merge_patch({"a": "b"}, {"a": "c"}) == {"a": "c"}
    assert merge_patch({"a": "b"}, {"b": "c"}) == {"a": "b", "b": "c"}
    assert merge_patch({"a": "b"}, {"a": None}) == {}
    assert merge_patch({"a": {"b": "c"}}, {"a": {"b": "d", "c": None}}) == {"a": {"b": "d"}}
    assert merge_patch({"a": [1]}, {"a": [2]}) == {"a": [2]}
    assert merge_patch(None, {"a": 1}) == {"a": 1}
    assert merge_patch({"a": 1}, ["x"]) == ["x"]
    assert apply_update({"a": 1}, StateUpdate({"b": 2}, merge_patch=False)) == {"b": 2}
    assert apply_update({"a": 1}, None) == {"a": 1}


json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(max_size=5),
    lambda c: st.dictionaries(st.text(max_size=3), c, max_size=3),
    max_leaves=10,
)


@given(json_values, st.dictionaries(st.text(max_size=3), json_values, max_size=3))
def test_merge_patch_is_idempotent(target, patch):
    once = merge_patch(target, patch)
    assert merge_patch(once, patch) == once


def test_spill_buffer_keeps_order_and_bounds_memory(tmp_path):
    buf = SpillBuffer(budget_bytes=2_000, directory=str(tmp_path))
    items = [(i % 3, f'["k{i}"]', '{"n":%d}' % i) for i in range(1000)]
    for it in items:
        buf.append(it)
    assert buf.spilled_chunks > 5
    assert buf._mem_bytes <= 2_000 + 200
    assert list(buf) == items
    assert list(buf) == items  # iterable twice
    buf.close()


def test_loaded_index_moves_to_disk_above_budget(tmp_path):
    idx = LoadedIndex(max_docs=10, directory=str(tmp_path))
    for i in range(50):
        idx.put(0, (f"k{i}", i), {"n": i})
    assert idx.on_disk
    assert idx.get(0, ("k7", 7)) == {"n": 7}
    assert idx.get(1, ("k7", 7)) is None
    assert (0, ("k49", 49)) in idx
    idx.close()


def test_ranges_split_the_key_space_evenly():
    for n in (1, 2, 3, 4, 7):
        rs = Range.split(n)
        assert rs[0].key_begin == 0 and rs[-1].key_end == KEY_SPACE_MAX
        assert all(a.key_end + 1 == b.key_begin for a, b in zip(rs, rs[1:]))


def test_fault_point_kill_once_marker(tmp_path):
    marker = tmp_path / "m"
    code = "from tidemark.faults import fault_point\nfor _ in range(3): fault_point('x')\nprint('survived')"
    env = {**os.environ, "TIDEMARK_FAULTS": f"x:kill@2!once={marker}"}
    first = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True)
    assert first.returncode == -9 and marker.exists()
    second = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True)
    assert second.returncode == 0 and "survived" in second.stdout


def test_fault_point_raise_and_disarmed(monkeypatch):
    from tidemark import faults

    monkeypatch.delenv("TIDEMARK_FAULTS", raising=False)
    faults.rearm()
    faults.fault_point("anything")  # disarmed: nothing happens
    monkeypatch.setenv("TIDEMARK_FAULTS", "p:raise")
    faults.rearm()
    with pytest.raises(faults.InjectedFault, match="injected fault at p"):
        faults.fault_point("p")
    monkeypatch.delenv("TIDEMARK_FAULTS")
    faults.rearm()


def test_fault_point_orphan_kills_the_driver_group_and_spares_the_worker():
    """``orphan``: the pinned group (driver, JVM) dies; the worker, in a group of its own as
    PySpark's daemon puts it, goes on and ignores the SIGHUP the daemon would send. The
    worker holds the driver's stdout, so ``run`` returns when the worker is done too."""
    worker = (
        "import os, signal\nfrom tidemark.faults import fault_point\nfault_point('x')\n"
        "os.kill(os.getpid(), signal.SIGHUP)\nprint('worker survived')"
    )
    driver = (
        "import os, subprocess, sys, time\n"
        f"subprocess.Popen([sys.executable, '-c', {worker!r}], start_new_session=True,\n"
        "                 env={**os.environ, 'TIDEMARK_FAULT_PGID': str(os.getpgrp())})\n"
        "time.sleep(60)"
    )
    env = {**os.environ, "TIDEMARK_FAULTS": "x:orphan"}
    proc = subprocess.run(
        [sys.executable, "-c", driver], env=env, capture_output=True, text=True, timeout=60, start_new_session=True
    )
    assert proc.returncode == -9, proc.stderr
    assert proc.stdout == "worker survived\n", proc.stderr


def test_armed_names_only_points_armed_by_name(monkeypatch):
    from tidemark import faults

    monkeypatch.setenv("TIDEMARK_FAULTS", "mid_stream:orphan@1")
    monkeypatch.setenv("TIDEMARK_FAULT_RANDOM", "1:0.5")
    faults.rearm()
    assert faults.armed("mid_stream") and not faults.armed("mid_load")
    monkeypatch.delenv("TIDEMARK_FAULTS")
    faults.rearm()
    assert not faults.armed("mid_stream")  # a random kill never arms the per-row point
    monkeypatch.delenv("TIDEMARK_FAULT_RANDOM")
    faults.rearm()


def test_rearm_after_the_random_variable_is_gone_disarms_random_kills():
    """In-process rearm (tests do it) must forget a random kill whose variable was removed;
    it used to keep it, and a later test's fault point killed the test process."""
    code = (
        "import os\nfrom tidemark import faults\nfaults.rearm(); faults._points()\n"
        "del os.environ['TIDEMARK_FAULT_RANDOM']\nfaults.rearm()\n"
        "for _ in range(200): faults.fault_point('before_endpoint_commit')\nprint('survived')"
    )
    env = {**os.environ, "TIDEMARK_FAULT_RANDOM": "1:1.0"}
    env.pop("TIDEMARK_FAULTS", None)
    proc = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0 and proc.stdout == "survived\n", proc.stderr
