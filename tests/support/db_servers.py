"""Private PostgreSQL and MariaDB servers for tests that kill and restart their database:
``initdb`` / ``pg_ctl`` and ``mariadb-install-db`` / ``mariadbd`` from the machine's packages,
on a free port, data in a folder of their own. Readiness is awaited by connecting until a
deadline. Without the binaries the tests skip (fail where ``TIDEMARK_REQUIRE_ALL`` is set)."""

from __future__ import annotations

import glob
import os
import shutil
import signal
import subprocess
import tempfile
import time
from pathlib import Path

from tests.support.helpers import free_port, skip_unless_required

START_DEADLINE = 60.0


def _as_postgres(argv: list[str]) -> list[str]:
    """initdb and pg_ctl refuse to run as root: run them as the ``postgres`` user there."""
    if os.geteuid() != 0:
        return argv
    return ["runuser", "-u", "postgres", "--", *argv]


class PrivatePostgres:
    """One PostgreSQL server (trust authentication, user ``postgres``); :meth:`crash` stops it
    as a power cut does (``pg_ctl stop -m immediate``: no checkpoint, recovery at the next
    start) and :meth:`start` brings it back on the same port and data."""

    def __init__(self) -> None:
        bins = sorted(glob.glob("/usr/lib/postgresql/*/bin/initdb"))
        if not bins or (os.geteuid() == 0 and shutil.which("runuser") is None):
            skip_unless_required("no PostgreSQL server binaries (initdb, pg_ctl) on this machine")
        self.bin = Path(bins[-1]).parent
        # not under pytest's tmp folder: the server runs as another user, which must reach it
        self.folder = Path(tempfile.mkdtemp(prefix="tidemark-pg-"))
        if os.geteuid() == 0:
            shutil.chown(self.folder, "postgres")
        self.data, self.port = self.folder / "data", free_port()
        subprocess.run(
            _as_postgres(
                [str(self.bin / "initdb"), "-D", str(self.data), "-A", "trust", "-U", "postgres", "--no-sync"]
            ),
            check=True,
            capture_output=True,
        )
        self.start()

    @property
    def url(self) -> str:
        return f"postgresql://postgres@127.0.0.1:{self.port}/postgres"

    def _ctl(self, *args: str) -> None:
        subprocess.run(
            _as_postgres([str(self.bin / "pg_ctl"), "-D", str(self.data), *args]), check=True, capture_output=True
        )

    def start(self) -> None:
        options = f"-p {self.port} -k {self.folder} -c listen_addresses=127.0.0.1 -c fsync=off"
        self._ctl("-o", options, "-l", str(self.folder / "server.log"), "-w", "-t", str(int(START_DEADLINE)), "start")

    def crash(self) -> None:
        self._ctl("-m", "immediate", "-w", "stop")

    def close(self) -> None:
        try:
            self._ctl("-m", "immediate", "-w", "stop")
        except subprocess.CalledProcessError:
            pass  # not running
        shutil.rmtree(self.folder, ignore_errors=True)


class PrivateMariaDB:
    """One MariaDB server (``root`` without a password, database ``test``); :meth:`kill` is
    SIGKILL (InnoDB recovers at the next start), :meth:`start` brings it back."""

    def __init__(self, folder: Path) -> None:
        server, install = shutil.which("mariadbd") or "/usr/sbin/mariadbd", shutil.which("mariadb-install-db")
        if not os.path.exists(server) or install is None:
            skip_unless_required("no MariaDB server binaries (mariadbd, mariadb-install-db) on this machine")
        self.server, self.folder = server, Path(folder)
        self.data, self.port, self.proc = self.folder / "data", free_port(), None
        subprocess.run(
            [
                install,
                "--no-defaults",
                *(["--user=root"] if os.geteuid() == 0 else []),
                f"--datadir={self.data}",
                "--auth-root-authentication-method=normal",
                "--skip-test-db",
            ],
            check=True,
            capture_output=True,
        )
        self.start()
        self.sql("CREATE DATABASE IF NOT EXISTS test")

    @property
    def url(self) -> str:
        return f"mysql://root@127.0.0.1:{self.port}/test"

    def sql(self, query: str) -> None:
        import pymysql

        con = pymysql.connect(host="127.0.0.1", port=self.port, user="root", autocommit=True)
        try:
            con.cursor().execute(query)
        finally:
            con.close()

    def start(self) -> None:
        import pymysql

        log = open(self.folder / "server.log", "ab")
        try:
            self.proc = subprocess.Popen(
                [
                    self.server,
                    "--no-defaults",
                    *(["--user=root"] if os.geteuid() == 0 else []),
                    f"--datadir={self.data}",
                    f"--port={self.port}",
                    "--bind-address=127.0.0.1",
                    f"--socket={self.folder / 'sock'}",
                    f"--pid-file={self.folder / 'pid'}",
                    "--skip-log-bin",
                ],
                stdout=log,
                stderr=subprocess.STDOUT,
            )
        finally:
            log.close()
        until = time.monotonic() + START_DEADLINE
        while True:
            try:
                pymysql.connect(host="127.0.0.1", port=self.port, user="root", connect_timeout=1).close()
                return
            except pymysql.err.OperationalError:
                if self.proc.poll() is not None or time.monotonic() > until:
                    raise
                time.sleep(0.05)  # polling the new server until it answers (with a deadline)

    def kill(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGKILL)
            self.proc.wait(20)

    def close(self) -> None:
        self.kill()
