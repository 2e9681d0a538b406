"""Named fault points, armed from the environment; free when disarmed.

``TIDEMARK_FAULTS="after_endpoint_commit:kill@2,mid_load:raise"`` arms points:

* ``NAME:kill``   — SIGKILL this process the first time the point is reached
* ``NAME:kill@N`` — ... the N-th time (1-based) in this process
* ``NAME:orphan`` — SIGKILL the driver's process group (the driver and Spark's JVM) but
  not this process, which goes on as an orphaned executor worker. PySpark's workers are in
  the worker daemon's process group, and the daemon sends them SIGHUP once it sees its JVM
  gone; a worker that is quick enough still runs on for a moment. This action ignores
  that SIGHUP, so the moment lasts until the worker is done.
* ``NAME:raise``  — raise :class:`InjectedFault` (an executor task fails; Spark retries)
* ``NAME:stall=SECONDS`` — sleep (simulates a slow endpoint / a zombie)
* ``NAME:...!once=PATH`` — fire only if ``PATH`` does not exist, then create it (holding
  ``NAME PID``), so a restarted process is not killed again at the same point.

``TIDEMARK_FAULT_RANDOM="SEED:P"`` kills at any point with probability P.

Points used by tidemark (see docs/guarantees.md): ``plan``, ``open``, ``mid_load``,
``after_load``, ``mid_store``, ``after_store``, ``before_endpoint_commit``,
``after_endpoint_commit``, ``before_recovery_log``, ``after_recovery_log``,
``mid_apply``, ``after_apply``, ``before_spark_commit``; the webhook's
``webhook_after_chunk`` and ``webhook_after_post``; Iceberg's ``iceberg_after_commit``
(after a table's snapshot commits, before the coordinator's apply returns); ``tidemark adopt``'s
``adopt_recorded`` (its rows and intent written, before Spark) and ``adopt_before_done`` (batch 0
committed everywhere, before the adopt record says so); and ``mid_stream``, reached at
every row a shard task reads from Spark, only when armed by name (a random kill never
picks it: it would fire at almost every row).
"""

from __future__ import annotations

import os
import random
import signal
import time
from contextlib import contextmanager
from typing import Callable, Iterator

from tidemark.options import FAULT_ENV, fault_settings

ENV = FAULT_ENV["armed"]
ENV_RANDOM = FAULT_ENV["random"]
ENV_PGID = FAULT_ENV["pgid"]


class InjectedFault(RuntimeError):
    """Raised by a fault point armed with ``raise``."""


_armed: dict[str, list[tuple[str, str]]] | None = None
_counts: dict[str, int] = {}
_draw: random.Random | None = None
_p: float = 0.0


def _parse() -> dict[str, list[tuple[str, str]]]:
    global _draw, _p
    _draw, _p = None, 0.0  # a random kill is armed only while its variable is set
    settings = fault_settings()
    spec = settings.armed
    out: dict[str, list[tuple[str, str]]] = {}
    for item in filter(None, (s.strip() for s in spec.split(","))):
        name, _, action = item.partition(":")
        out.setdefault(name, []).append((action or "kill", item))
    rnd = settings.random
    if rnd:
        seed, _, p = rnd.partition(":")
        _draw = random.Random(f"{seed}:{os.getpid()}")
        _p = float(p or 0.05)
    return out


def _kill() -> None:
    """SIGKILL this process, or its whole process group with TIDEMARK_FAULT_SCOPE=group
    (a crash of the machine: Spark's JVM, its Python workers and the driver process)."""
    settings = fault_settings()
    if settings.scope == "group":
        # PySpark's worker daemon puts its workers in a process group of their own, so an
        # executor-side point must use the group the driver pinned (see pin_group).
        os.killpg(int(settings.pgid or os.getpgrp()), signal.SIGKILL)
    os.kill(os.getpid(), signal.SIGKILL)


def _orphan() -> None:
    """SIGKILL the pinned group (the driver and the JVM), sparing this process."""
    signal.signal(signal.SIGHUP, signal.SIG_IGN)
    pgid = int(fault_settings().pgid or os.getpgrp())
    if pgid == os.getpgrp():
        _kill()  # this process is in that group: it cannot outlive it
    os.killpg(pgid, signal.SIGKILL)


def pin_group() -> None:
    """Record this process's group for executor-side kills; call before Spark starts so the
    JVM and its Python workers inherit it. Does nothing unless faults are armed."""
    settings = fault_settings()
    if (settings.armed or settings.random) and not settings.pgid:
        os.environ[ENV_PGID] = str(os.getpgrp())


def _points() -> dict[str, list[tuple[str, str]]]:
    """The armed points, parsed from the environment on first use."""
    global _armed
    if _armed is None:
        _armed = _parse()
    return _armed


def rearm() -> None:
    """Re-read the environment (tests that change it in-process)."""
    global _armed
    _armed = None
    _counts.clear()


_hooks: dict[str, Callable[[str], None]] = {}
PER_ROW = frozenset({"mid_stream"})  # points reached per row: never a random kill


def armed(name: str) -> bool:
    """True if ``name`` is armed by name (or hooked): for points inside a hot loop, which
    check once and then call :func:`fault_point` per row only when armed."""
    return name in _points() or name in _hooks


@contextmanager
def hooked(name: str, fn: Callable[[str], None]) -> Iterator[None]:
    """In-process tests: call ``fn(name)`` whenever this process reaches the point (e.g. to
    hold one task attempt at ``before_endpoint_commit`` until a racing attempt is done)."""
    _hooks[name] = fn
    try:
        yield
    finally:
        _hooks.pop(name, None)


def fault_point(name: str) -> None:
    """Mark a named point. Does nothing unless armed."""
    if _hooks:
        hook = _hooks.get(name)
        if hook is not None:
            hook(name)
    points = _points()
    if not points and _draw is None:
        return
    if _draw is not None and name not in PER_ROW and _draw.random() < _p:
        _kill()
    actions = points.get(name)
    if not actions:
        return
    _counts[name] = _counts.get(name, 0) + 1
    for action, _raw in actions:
        once = None
        if "!once=" in action:
            action, _, once = action.partition("!once=")
        nth = 1
        if "@" in action:
            action, _, n = action.partition("@")
            nth = int(n)
        if _counts[name] != nth:
            continue
        if once:
            try:  # atomic: of two processes that reach the point together, one fires
                fd = os.open(once, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
            except FileExistsError:
                continue
            with os.fdopen(fd, "w") as f:
                f.write(f"{name} {os.getpid()}\n")  # the pid: a test may kill this process's machine
        if action == "kill":
            _kill()
        elif action == "orphan":
            _orphan()
        elif action == "raise":
            raise InjectedFault(f"injected fault at {name}")
        elif action.startswith("stall="):
            time.sleep(float(action.split("=", 1)[1]))
