"""CPU time of a run, part by part: the JVM, this Python process (the Spark driver's
Python: tidemark's driver-side sessions, the hand-written job's ``executemany``),
PostgreSQL or MariaDB (the server and every backend, the ended ones included), and the
rest of the machine (Spark's Python workers among it).

A server's CPU time so far is the sum, over its live processes, of their own user and
system time plus that of their reaped children (``/proc/<pid>/stat`` fields 14–17): a
backend that ended was reaped by the server, whose ``cutime`` holds it.  The JVM is its own
process only: Spark's Python workers can end without being reaped inside its tree, which
would make a tree's total go down.  Linux only.

    meter = CpuMeter(jvm_pid)
    ... the run ...
    print(meter.line(wall))
"""

from __future__ import annotations

import os
from typing import Optional

TICK = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100
SERVERS = ("postgres", "mariadbd", "mysqld")


def _stat(pid: int) -> Optional[tuple[str, int, float, float]]:
    """(comm, ppid, own seconds, reaped children's seconds) of a live process."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            text = f.read()
    except OSError:
        return None
    comm = text[text.index("(") + 1 : text.rindex(")")]
    rest = text[text.rindex(")") + 2 :].split()
    # rest[0] is field 3 (state): utime is field 14, stime 15, cutime 16, cstime 17
    return comm, int(rest[1]), (int(rest[11]) + int(rest[12])) / TICK, (int(rest[13]) + int(rest[14])) / TICK


def _processes() -> dict[int, tuple[str, int, float, float]]:
    out = {}
    for name in os.listdir("/proc"):
        if name.isdigit():
            s = _stat(int(name))
            if s is not None:
                out[int(name)] = s
    return out


def _machine_busy() -> float:
    """Seconds of CPU the whole machine has been busy (every core), from /proc/stat."""
    with open("/proc/stat") as f:
        v = [int(x) for x in f.readline().split()[1:]]
    return (sum(v) - v[3] - v[4]) / TICK


def _tree(procs: dict, root: int) -> set[int]:
    kids: dict[int, list[int]] = {}
    for pid, (_, ppid, _, _) in procs.items():
        kids.setdefault(ppid, []).append(pid)
    out, todo = set(), [root]
    while todo:
        p = todo.pop()
        if p in procs and p not in out:
            out.add(p)
            todo += kids.get(p, [])
    return out


def _servers(procs: dict) -> dict[str, set[int]]:
    """Each database server's process tree, by its name (the root: a server process whose
    parent is not one)."""
    out: dict[str, set[int]] = {}
    for pid, (comm, ppid, _, _) in procs.items():
        if comm in SERVERS and procs.get(ppid, ("",))[0] not in SERVERS:
            out.setdefault(comm, set()).update(_tree(procs, pid))
    return out


class CpuMeter:
    """CPU seconds of each part from construction to :meth:`parts`."""

    def __init__(self, jvm_pid: Optional[int] = None):
        self.jvm_pid = jvm_pid
        self.start = self._now()

    def _now(self) -> dict[str, float]:
        procs = _processes()
        total = lambda pids: sum(procs[p][2] + procs[p][3] for p in pids)
        times = os.times()
        parts = {"driver Python": times.user + times.system}
        if self.jvm_pid and self.jvm_pid in procs:
            parts["JVM"] = procs[self.jvm_pid][2]
        for name, pids in _servers(procs).items():
            parts[name] = total(pids)
        parts["machine"] = _machine_busy()
        return parts

    def parts(self) -> dict[str, float]:
        end = self._now()
        out = {k: end[k] - self.start.get(k, 0.0) for k in end}
        out["rest (Python workers, other)"] = out["machine"] - sum(v for k, v in out.items() if k != "machine")
        return out

    def line(self, wall: float, cores: Optional[int] = None) -> str:
        cores = cores or os.cpu_count() or 1
        p = self.parts()
        shown = ", ".join(f"{k} {v:.1f}" for k, v in p.items() if k != "machine" and (k not in SERVERS or v >= 0.05))
        return f"cpu (s): {shown}; machine busy {p['machine']:.1f} of {cores * wall:.1f} core-s ({p['machine'] / (cores * wall):.0%})"


def jvm_pid(spark) -> Optional[int]:
    """The pid of the JVM a local SparkSession's Python started (None if it did not start one)."""
    proc = getattr(spark.sparkContext._gateway, "proc", None)
    return proc.pid if proc is not None else None
