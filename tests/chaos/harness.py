"""Run ``tidemark run`` as a real subprocess, SIGKILL it at armed fault points, restart.

Used by the chaos tests and by ``python -m tests.chaos.harness`` for long runs.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from dataclasses import dataclass, field

KILLED = -signal.SIGKILL


@dataclass
class RunOutcome:
    attempts: int = 0
    kills: int = 0
    returncodes: list = field(default_factory=list)
    stderr_tail: str = ""


def run_until_done(spec_path: str, *, faults: str = "", random_kill: str = "", max_attempts: int = 10,
                   timeout: float = 300, extra_env: dict | None = None) -> RunOutcome:
    """Run ``tidemark run SPEC --available-now`` until it exits 0, restarting after kills.

    ``faults`` arms points (see tidemark.faults) in the first attempts; use ``!once=PATH``
    markers so a restarted process does not die at the same point forever.
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
        }
    )
    env.update(extra_env or {})
    for attempt in range(max_attempts):
        run_env = dict(env)
        if faults:
            run_env["TIDEMARK_FAULTS"] = faults
        if random_kill:
            run_env["TIDEMARK_FAULT_RANDOM"] = f"{random_kill}-{attempt}"
        proc = subprocess.Popen(
            [sys.executable, "-m", "tidemark", "run", spec_path, "--available-now", "--master", "local[2]"],
            env=run_env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            start_new_session=True,  # its own process group: a kill takes Spark's JVM and workers too
        )
        try:
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
        out.stderr_tail = stderr[-3000:]
        if proc.returncode == 0:
            return out
        if proc.returncode == KILLED:
            out.kills += 1
            continue
        raise AssertionError(f"tidemark run failed with {proc.returncode}:\n{stderr[-3000:]}")
    raise AssertionError(f"not done after {max_attempts} attempts; last stderr:\n{out.stderr_tail}")
