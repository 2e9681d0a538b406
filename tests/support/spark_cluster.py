"""A Spark standalone cluster for tests: a master and two workers started from the PySpark
installation (``$SPARK_HOME/bin/spark-class``) as separate processes on this machine.

    from tests.support.spark_cluster import standalone  # noqa: F401   (module-scoped fixture)

``standalone.url`` is ``spark://127.0.0.1:PORT``; :meth:`StandaloneCluster.kill_worker_of`
SIGKILLs the worker (and its executor JVM) that runs a given Python worker process — a machine
lost mid-batch — and :meth:`StandaloneCluster.add_worker` starts a replacement. Readiness is
awaited by polling the master's JSON page until a deadline, never by a fixed sleep.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

from tests.support.helpers import free_port

START_DEADLINE = 90.0


def spark_home() -> str:
    import pyspark

    return os.path.dirname(pyspark.__file__)


class StandaloneCluster:
    def __init__(self, base: Path, workers: int = 2, cores: int = 1, memory: str = "1g"):
        self.base = base
        self.cores, self.memory = cores, memory
        self.port, self.ui = free_port(), free_port()
        self.master = None
        self.workers: list[subprocess.Popen] = []
        self.env = {
            **os.environ,
            "SPARK_HOME": spark_home(),
            "SPARK_LOCAL_IP": "127.0.0.1",
            "PYSPARK_PYTHON": sys.executable,
            "SPARK_LOG_DIR": str(base / "logs"),
            "SPARK_NO_DAEMONIZE": "1",
        }
        self.env.pop("TIDEMARK_FAULTS", None)
        self._wanted = workers

    @property
    def url(self) -> str:
        return f"spark://127.0.0.1:{self.port}"

    def _spawn(self, name: str, args: list[str], **env) -> subprocess.Popen:
        log = open(self.base / f"{name}.log", "ab")
        return subprocess.Popen(
            [os.path.join(spark_home(), "bin", "spark-class"), *args],
            env={**self.env, **env},
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )

    def start(self) -> None:
        (self.base / "logs").mkdir(parents=True, exist_ok=True)
        self.master = self._spawn(
            "master",
            [
                "org.apache.spark.deploy.master.Master",
                "--host",
                "127.0.0.1",
                "--port",
                str(self.port),
                "--webui-port",
                str(self.ui),
            ],
        )
        for _ in range(self._wanted):
            self.add_worker()

    def add_worker(self) -> None:
        n = len(self.workers)
        work = self.base / f"work{n}"
        work.mkdir(exist_ok=True)
        # Each worker on a loopback address of its own: Spark sees two hosts, as on two machines
        # (it never runs a speculative copy of a task on the host that runs the original).
        host = f"127.0.0.{n + 1}"
        self.workers.append(
            self._spawn(
                f"worker{n}",
                [
                    "org.apache.spark.deploy.worker.Worker",
                    self.url,
                    "--host",
                    host,
                    "--cores",
                    str(self.cores),
                    "--memory",
                    self.memory,
                    "--webui-port",
                    str(free_port()),
                    "--work-dir",
                    str(work),
                ],
                SPARK_LOCAL_IP=host,
            )
        )
        self.await_workers(sum(1 for w in self.workers if w.poll() is None))

    def state(self) -> dict:
        with urllib.request.urlopen(f"http://127.0.0.1:{self.ui}/json/", timeout=5) as r:
            return json.load(r)

    def await_workers(self, alive: int, deadline: float = START_DEADLINE) -> None:
        until = time.monotonic() + deadline
        last = None
        while time.monotonic() < until:
            if self.master.poll() is not None:
                raise RuntimeError(f"the Spark master exited:\n{self.log_tail('master')}")
            try:
                st = self.state()
                last = [w["state"] for w in st.get("workers", [])]
                if sum(1 for s in last if s == "ALIVE") >= alive:
                    return
            except (OSError, ValueError):  # not up yet; or its UI still serving the HTML page at /json/
                pass
            time.sleep(0.2)  # polling the master's page, bounded by the deadline
        raise RuntimeError(
            f"{alive} Spark workers not alive after {deadline}s (states {last}):\n{self.log_tail('worker0')}"
        )

    def kill_worker_of(self, pid: int) -> int:
        """SIGKILL the worker whose process tree holds ``pid`` (with its executor JVM)."""
        for i, w in enumerate(self.workers):
            if w.poll() is None and pid in _descendants(w.pid):
                for p in [w.pid, *_descendants(w.pid)]:
                    if p != pid:  # the Python worker itself lives on, orphaned: a zombie
                        try:
                            os.kill(p, signal.SIGKILL)
                        except ProcessLookupError:
                            pass
                w.wait(30)
                return i
        raise AssertionError(f"process {pid} runs under no worker of the cluster")

    def log_tail(self, name: str, lines: int = 40) -> str:
        try:
            return "\n".join((self.base / f"{name}.log").read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return ""

    def stop(self) -> None:
        for p in [*self.workers, self.master]:
            if p is not None and p.poll() is None:
                try:
                    os.killpg(p.pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
                p.wait(30)


def _descendants(pid: int) -> set[int]:
    children: dict[int, list[int]] = {}
    for name in os.listdir("/proc"):
        if name.isdigit():
            try:
                with open(f"/proc/{name}/stat") as f:
                    ppid = int(f.read().rsplit(")", 1)[1].split()[1])
                children.setdefault(ppid, []).append(int(name))
            except (OSError, ValueError, IndexError):
                pass
    out, todo = set(), [pid]
    while todo:
        for c in children.get(todo.pop(), []):
            if c not in out:
                out.add(c)
                todo.append(c)
    return out


@pytest.fixture(scope="module")
def standalone(tmp_path_factory):
    base = tmp_path_factory.mktemp("spark-standalone")
    cluster = StandaloneCluster(base)
    try:
        cluster.start()
        yield cluster
    finally:
        cluster.stop()
        shutil.rmtree(base, ignore_errors=True)
