"""Kill the driver inside a request: after it did the work, before the runtime reads the reply.

In-process drivers are wrapped in :class:`~tidemark.testing.faulty.FaultyDriver`, which
crashes the session right after the inner driver handled the request (``when="after"``).

An external program (``command:``) is killed for real.  The kit stops it (SIGSTOP) before
the request is written, then lets it run in short steps (SIGCONT, a few microseconds,
SIGSTOP).  After every step in which the program used the CPU, the kit looks at the
endpoint through another program of the same driver (``dump`` of both bindings and
``list_checkpoints``).  As soon as the endpoint shows any effect of the request — or the
reply arrived — the program gets SIGKILL.  The endpoint cannot change while the program is
stopped, so a driver that commits in two endpoint transactions (data, then checkpoint) is
killed between them, however short the gap.  A program whose endpoint cannot be read while
it is stopped (the observer blocks) is let run and killed right after its reply.
"""

from __future__ import annotations

import os
import signal
import subprocess
import threading
import time
from typing import Any, Callable, Optional

from tidemark.testing.workload import APPENDS, SUMS, canon

STEP = 50e-6  # seconds a stopped program runs per step
FREEZE_LIMIT = 60.0  # seconds of stepping before the kit lets the program run to its reply
LOOK_TIMEOUT = 10.0  # seconds an observation may take before the kit stops stepping


def is_process_driver(driver) -> bool:
    from tidemark.drivers.command import CommandDriver

    return isinstance(driver, CommandDriver)


def crashing(driver, request: str):
    """``driver`` wrapped so that its session dies right after the inner driver handled ``request``."""
    from tidemark.testing.faulty import FaultyDriver

    return FaultyDriver(driver, "crash", at_event=1, on=request, when="after")


def program_of(transactor) -> Any:
    """The running program behind a session of an external driver, or None."""
    program = getattr(transactor, "program", None)
    return program if program is not None and hasattr(program, "proc") else None


def drop(transactor) -> None:
    """A session dropped without close: its program gets end of input (and is killed if it lingers)."""
    program = program_of(transactor)
    if program is None:
        return
    if program.broken is None:
        program.broken = "was dropped without close (the kit's runtime crashed)"
    try:
        program.proc.stdin.close()
    except (OSError, ValueError):
        pass
    try:
        program.proc.wait(2.0)
    except subprocess.TimeoutExpired:
        program.proc.kill()
        program.proc.wait(5.0)


def kill_inside(kit, shard, call: Callable[[], Any], what: str, events) -> None:
    """Kill the driver inside the request ``call`` sends (``what``: its name); then the
    runtime dies too (:class:`~tidemark.testing.kit.runtime.KitCrash`)."""
    from tidemark.testing.faulty import SimulatedCrash

    batch = shard.task.batch_id
    program = program_of(shard.transactor)
    if program is None:
        try:
            call()
        except SimulatedCrash:
            pass
        how: Optional[str] = (
            f"the driver completed {what} of batch {batch} on range {shard.range.name} (the kit crashed it "
            "before the reply reached the runtime)"
        )
    else:
        kit.tracker(
            f"{what} of batch {batch} on range {shard.range.name} (the kit steps the program to kill it "
            "once the endpoint shows the request's effect)"
        )
        how = _kill_program(kit, program, call, what, batch, shard.range.name)
    if what == "StartCommit" and how is not None:
        kit.started.add(batch)
        if kit.store_authoritative:
            kit.observed[(shard.range.key_begin, shard.range.key_end)] = (batch, how)
    shard.dead = True
    kit.die(events)


def _kill_program(kit, program, call, what: str, batch: int, range_name: str) -> Optional[str]:
    pid = program.proc.pid
    observer = kit.factory()
    out: dict[str, Any] = {}

    def run() -> None:
        try:
            out["reply"] = call()
        except BaseException as exc:  # noqa: BLE001 - reported below, or the kill's own doing
            out["error"] = exc

    try:
        before = _look(kit, observer)  # also starts the observer's program before the freeze
        _signal(pid, signal.SIGSTOP)
        _wait_stopped(pid)
        thread = threading.Thread(target=run, daemon=True, name="tidemark-kit-request")
        thread.start()
        ran, seen, frozen = _cpu_ns(pid), None, True
        limit = time.monotonic() + FREEZE_LIMIT
        while thread.is_alive():
            now = _cpu_ns(pid)
            if now is None or now != ran:
                ran = now
                snap = _look_guarded(kit, observer)
                if snap is None:
                    frozen = False
                    break
                if snap != before:
                    seen = snap
                    break
            if time.monotonic() > limit:
                frozen = False
                break
            _step(pid)
        if not frozen:
            _signal(pid, signal.SIGCONT)
            thread.join(program.policy.reply_timeout)
        answered = "reply" in out
        error = out.get("error")
        _signal(pid, signal.SIGKILL)
        program.broken = f"was killed by the conformance kit inside {what}"
        try:
            program.proc.wait(10.0)
        except subprocess.TimeoutExpired:
            pass
        thread.join(30.0)
    finally:
        observer.close()
    if seen is not None:
        shown = [
            name for name, changed in (("data", seen[0] != before[0]), ("checkpoint", seen[1] != before[1])) if changed
        ]
        return (
            f"the endpoint showed the {' and the '.join(shown)} of batch {batch} while {what} ran on range "
            f"{range_name} (the kit killed the driver program at that moment, before its reply)"
        )
    if answered:
        return (
            f"the driver program answered {what} of batch {batch} on range {range_name} (the kit killed it "
            "before the runtime read the reply)"
        )
    if error is not None:
        raise error
    return None


def _look(kit, observer) -> tuple:
    mat = kit.materialization
    sums = observer.dump(mat, kit.bindings[SUMS])
    rows = observer.dump(mat, kit.bindings[APPENDS])
    data = (
        canon(sorted((repr(k), v) for k, v in sums.items())) if isinstance(sums, dict) else repr(sums),
        len(rows) if isinstance(rows, list) else repr(rows),
    )
    cps = observer.checkpoints(mat) if kit.store_authoritative else []
    return data, tuple(sorted((r.range.key_begin, r.range.key_end, canon(r.runtime_checkpoint)) for r in cps))


def _look_guarded(kit, observer) -> Optional[tuple]:
    """An observation, or None when it blocks (the stopped program holds what it needs)."""
    box: dict[str, Any] = {}

    def run() -> None:
        try:
            box["snap"] = _look(kit, observer)
        except BaseException as exc:  # noqa: BLE001
            box["error"] = exc

    t = threading.Thread(target=run, daemon=True, name="tidemark-kit-observer")
    t.start()
    t.join(LOOK_TIMEOUT)
    if t.is_alive():
        return None
    if "error" in box:
        raise box["error"]
    return box["snap"]


def _signal(pid: int, sig: int) -> None:
    try:
        os.kill(pid, sig)
    except ProcessLookupError:
        pass


def _state(pid: int) -> str:
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            stat = f.read().decode("ascii", "replace")
    except OSError:
        return "X"
    return stat[stat.rfind(")") + 2 :][:1]


def _wait_stopped(pid: int, timeout: float = 5.0) -> bool:
    """Wait until the stop took effect (a program inside a system call stops when it returns)."""
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        state = _state(pid)
        if state in ("T", "t"):
            return True
        if state in ("Z", "X", ""):
            return False
        time.sleep(0)
    return False


def _cpu_ns(pid: int) -> Optional[int]:
    """CPU time the program used so far (all its threads), or None when the kernel does not tell."""
    try:
        total = 0
        for tid in os.listdir(f"/proc/{pid}/task"):
            with open(f"/proc/{pid}/task/{tid}/schedstat", "rb") as f:
                total += int(f.read().split()[0])
        return total
    except (OSError, ValueError, IndexError):
        return None


def _step(pid: int) -> None:
    _signal(pid, signal.SIGCONT)
    end = time.perf_counter() + STEP
    while time.perf_counter() < end:
        pass
    _signal(pid, signal.SIGSTOP)
    _wait_stopped(pid)


__all__ = ["kill_inside", "drop", "program_of", "is_process_driver", "crashing"]
