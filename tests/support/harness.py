"""Run ``tidemark run`` as a real subprocess, SIGKILL it at armed fault points, restart.

Used by the chaos tests and by ``python -m tests.support.harness`` for long runs.
"""

from __future__ import annotations

import os
import select
import signal
import subprocess
import sys
import time
import uuid
from dataclasses import dataclass, field
from typing import Callable

from tests.support.paths import REPO, SUPPORT

KILLED = -signal.SIGKILL
ROOT = REPO  # the repository
# Attempts are short-lived JVMs on small batches: the C1 compiler alone gets them through
# sooner than tiered C1+C2 (the SQLite every-point test: 119 s -> 94 s on 2 cores).
# TIDEMARK_CHAOS_JAVA replaces these options ("" for the JVM's defaults).
CHAOS_JAVA = "-XX:TieredStopAtLevel=1"


def _cds_archive() -> str:
    """Where the JVM's class-data-sharing archive lives (the one the tests' conftest makes)."""
    from tests.conftest import cds_archive

    return cds_archive()


def java_options() -> tuple[str, str | None]:
    """``JAVA_TOOL_OPTIONS`` for an attempt, and the archive it dumps (if any).

    Every attempt starts a JVM, and class loading is most of its start-up: the first clean
    run dumps the classes it loaded into an AppCDS archive, later attempts map it (about
    2.5 s less per attempt on 2 cores). A missing or stale archive is only a warning to the
    JVM. ``TIDEMARK_CHAOS_CDS=0`` turns this off. :data:`CHAOS_JAVA` is added.
    """
    extra = os.environ.get("TIDEMARK_CHAOS_JAVA", CHAOS_JAVA)
    if os.environ.get("TIDEMARK_CHAOS_CDS", "1") == "0":
        return extra, None
    archive = _cds_archive()
    if os.path.exists(archive):
        return f"-XX:SharedArchiveFile={archive} -Xshare:auto {extra}".strip(), None
    partial = f"{archive}.{os.getpid()}.partial"
    return f"-XX:ArchiveClassesAtExit={partial} {extra}".strip(), partial


@dataclass
class RunOutcome:
    attempts: int = 0
    kills: int = 0
    returncodes: list = field(default_factory=list)
    stderr_tail: str = ""


def run_until_done(
    spec_path: str,
    *,
    faults: str = "",
    random_points: tuple[int, float] | None = None,
    kill_after: Callable[[int], float | None] | None = None,
    max_attempts: int = 10,
    timeout: float = 300,
    extra_env: dict | None = None,
    master: str = "local[2]",
    random_attempts: int | None = None,
    await_orphans: bool = False,
    plain: bool = False,
) -> RunOutcome:
    """Run ``tidemark run SPEC --available-now`` until it exits 0, restarting after kills.

    ``faults`` arms points (see tidemark.faults) in every attempt; use ``!once=PATH``
    markers so a restarted process does not die at the same point forever.
    ``random_points=(seed, p)`` kills at any named point with probability ``p`` (in the first
    ``random_attempts`` attempts only, if given: with enough input an attempt meets so many
    points that it would rarely finish).
    ``kill_after(attempt)`` returns seconds after which the harness SIGKILLs the attempt's
    whole process group (a kill at a random moment), or None to let it run.
    ``await_orphans``: before a restart, wait until no process of the killed attempt is
    left (PySpark's workers are in a process group of their own and may outlive the kill),
    so whatever an orphaned worker does happens before the next attempt's Open.
    ``plain``: run the commit path without Spark (:mod:`tests.support.plain`; a Python start-up
    per attempt instead of a JVM's), for fault-point matrices where Spark adds nothing.
    """
    out = RunOutcome()
    env = dict(os.environ)
    env.update(
        {
            "PYSPARK_PYTHON": sys.executable,
            "PYSPARK_DRIVER_PYTHON": sys.executable,
            "SPARK_LOCAL_IP": "127.0.0.1",
            "TIDEMARK_FAULT_SCOPE": "group",
            "TIDEMARK_DRIVER_MEMORY": "1g",
            "TIDEMARK_CHAOS_RUN": uuid.uuid4().hex,  # marks every process of this run
        }
    )
    env.update(extra_env or {})
    for attempt in range(max_attempts):
        run_env = dict(env)
        java, dumping = java_options() if not plain else ("", None)
        if java:
            run_env["JAVA_TOOL_OPTIONS"] = (run_env.get("JAVA_TOOL_OPTIONS", "") + " " + java).strip()
        if faults:
            run_env["TIDEMARK_FAULTS"] = faults
        if random_points and (random_attempts is None or attempt < random_attempts):
            seed, p = random_points
            run_env["TIDEMARK_FAULT_RANDOM"] = f"{seed}-{attempt}:{p}"
        argv = (
            [sys.executable, "-m", "tests.support.plain", spec_path]
            if plain
            else [
                sys.executable,
                "-m",
                "tidemark",
                "run",
                spec_path,
                "--available-now",
                "--master",
                master,
                "--no-spark-ui",
            ]
        )
        proc = subprocess.Popen(
            argv,
            cwd=ROOT if plain else None,
            env=run_env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            start_new_session=True,  # its own process group: a kill takes Spark's JVM and workers too
        )
        t0 = time.monotonic()
        delay = kill_after(attempt) if kill_after else None
        try:
            if delay is not None:
                try:
                    _stdout, stderr = proc.communicate(timeout=delay)
                except subprocess.TimeoutExpired:
                    os.killpg(proc.pid, signal.SIGKILL)
                    _stdout, stderr = proc.communicate()
            else:
                _stdout, stderr = proc.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            _stdout, stderr = proc.communicate()
            raise AssertionError(f"tidemark run did not finish in {timeout}s:\n{stderr[-3000:]}")
        finally:
            try:
                os.killpg(proc.pid, signal.SIGKILL)  # leave no JVM behind
            except ProcessLookupError:
                pass
        out.attempts += 1
        out.returncodes.append(proc.returncode)
        print(f"[chaos] attempt {attempt}: exit {proc.returncode} after {time.monotonic() - t0:.1f}s", flush=True)
        out.stderr_tail = stderr[-3000:]
        if dumping and os.path.exists(dumping):
            if proc.returncode == 0:
                os.replace(dumping, _cds_archive())  # atomic: a reader sees a whole archive or none
            else:
                os.unlink(dumping)
        if proc.returncode == 0:
            return out
        if proc.returncode == KILLED:
            out.kills += 1
            if await_orphans:
                _await_gone(env["TIDEMARK_CHAOS_RUN"], timeout)
            continue
        raise AssertionError(f"tidemark run failed with {proc.returncode}:\n{stderr[-3000:]}")
    raise AssertionError(f"not done after {max_attempts} attempts; last stderr:\n{out.stderr_tail}")


def _marked(token: str) -> list[int]:
    """Processes whose environment holds ``TIDEMARK_CHAOS_RUN=token``."""
    needle = f"TIDEMARK_CHAOS_RUN={token}".encode()
    pids = []
    for name in os.listdir("/proc"):
        if name.isdigit():
            try:
                with open(f"/proc/{name}/environ", "rb") as f:
                    if needle in f.read().split(b"\0"):
                        pids.append(int(name))
            except OSError:
                pass  # gone, or not ours to read
    return pids


def _await_gone(token: str, timeout: float) -> None:
    """Wait until no process of the run is left. They are not our children, so each is
    awaited through a pidfd (readable when the process exits); then /proc is read again."""
    deadline = time.monotonic() + timeout
    while left := _marked(token):
        for pid in left:
            try:
                fd = os.pidfd_open(pid)
            except ProcessLookupError:
                continue
            try:
                if not select.select([fd], [], [], max(0.0, deadline - time.monotonic()))[0]:
                    raise AssertionError(f"process {pid} of a killed attempt still runs after {timeout}s")
            finally:
                os.close(fd)


def arm_in_sequence(points: list[str], marker_dir, nth: int = 1) -> str:
    """TIDEMARK_FAULTS that kill once at each point, in whatever order the run reaches them:
    every attempt dies at the first point whose ``!once`` marker is not yet written."""
    return ",".join(f"{p}:kill@{nth}!once={os.path.join(marker_dir, 'fired-' + p)}" for p in points)


def fired(marker_dir) -> set[str]:
    return {n[len("fired-") :] for n in os.listdir(marker_dir) if n.startswith("fired-")}


# ---------------------------------------------------------------- long runs


def long_run(argv: list[str] | None = None) -> int:
    """``python -m tests.support.harness --kills 200``: keep writing input and killing
    ``tidemark run`` (at random named points and at random moments) until N kills, then
    compare the view with the oracle. Prints a summary; exits 1 on any difference."""
    import argparse
    import json
    import random
    import tempfile

    from tests.support.helpers import normalize, oracle_orders, orders_spec, sqlite_view, write_orders

    ap = argparse.ArgumentParser(prog="python -m tests.support.harness")
    ap.add_argument("--kills", type=int, default=20)
    ap.add_argument("--shards", type=int, default=4)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--files-per-round", type=int, default=4)
    ap.add_argument("--per-file", type=int, default=300)
    ap.add_argument("--dir", default=None, help="work directory (default: a new temp dir)")
    ap.add_argument(
        "--resume",
        action="store_true",
        help="continue in --dir: keep its input, view and checkpoints, append new files after them",
    )
    ap.add_argument("--kill-min", type=float, default=3.0, help="earliest random kill, seconds after start")
    ap.add_argument(
        "--kill-max",
        type=float,
        default=15.0,
        help="latest random kill (an attempt takes ~4 s to start Spark, ~2-3 s per batch after)",
    )
    args = ap.parse_args(argv)

    draw = random.Random(args.seed)
    work = args.dir or tempfile.mkdtemp(prefix="tidemark-chaos-")
    os.makedirs(work, exist_ok=True)
    data, db = os.path.join(work, "data"), os.path.join(work, "views.db")
    spec = orders_spec(work, data_dir=data, db_path=db, shards=args.shards, max_files=1)
    started = time.time()
    kills = attempts = rounds = files = docs = 0
    if args.resume and os.path.isdir(data):
        names = sorted(n for n in os.listdir(data) if n.startswith("orders-") and n.endswith(".json"))
        files = len(names)
        for n in names:
            with open(os.path.join(data, n)) as f:
                docs += sum(1 for _ in f)
        print(f"resuming in {work}: {files} files, {docs} documents already written", flush=True)
    while kills < args.kills:
        write_orders(
            data,
            files=args.files_per_round,
            per_file=args.per_file,
            customers=200,
            seed=draw.randrange(1 << 30),
            start=files,
            deletes=0.03,
        )
        files += args.files_per_round
        docs += args.files_per_round * args.per_file
        outcome = run_until_done(
            spec,
            random_points=(draw.randrange(1 << 30), 0.02),
            kill_after=lambda a: draw.uniform(args.kill_min, args.kill_max) if a < 6 else None,
            random_attempts=6,
            max_attempts=12,
        )
        kills += outcome.kills
        attempts += outcome.attempts
        rounds += 1
        view, expected = normalize(sqlite_view(db)), oracle_orders(data)
        lost = sorted(set(expected) - set(view))
        extra = sorted(set(view) - set(expected))
        wrong = sorted(k for k in set(view) & set(expected) if view[k] != expected[k])
        summary = {
            "round": rounds,
            "kills": kills,
            "attempts": attempts,
            "files": files,
            "documents": docs,
            "keys": len(expected),
            "lost_keys": len(lost),
            "extra_keys": len(extra),
            "wrong_docs": len(wrong),
            "amount_view": sum(d["amount"] for d in view.values()),
            "amount_oracle": sum(d["amount"] for d in expected.values()),
            "elapsed_s": round(time.time() - started, 1),
        }
        print(json.dumps(summary), flush=True)
        if lost or extra or wrong:
            print(f"DIFFERENCE: lost {lost[:5]} extra {extra[:5]} wrong {wrong[:5]}", flush=True)
            return 1
    print(f"OK: {kills} kills over {attempts} attempts, {docs} documents, view exact", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(long_run())
