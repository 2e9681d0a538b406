"""A private redis-server for the tests that restart or kill it."""

from __future__ import annotations

import shutil
import signal
import subprocess
import time

import pytest

pytest.importorskip("redis")

import redis

from tests.support.helpers import free_port, skip_unless_required


class Server:
    def __init__(self, folder, *settings: str):
        if shutil.which("redis-server") is None:
            skip_unless_required("redis-server is not installed")
        self.folder, self.settings = folder, settings
        self.port = free_port()
        self.proc = None
        self.start()

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def start(self) -> None:
        self.proc = subprocess.Popen(
            [
                "redis-server",
                "--port",
                str(self.port),
                "--bind",
                "127.0.0.1",
                "--dir",
                str(self.folder),
                "--save",
                "",
                *self.settings,
            ],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        client = redis.Redis.from_url(self.url)
        deadline = time.monotonic() + 20
        while True:
            try:
                if client.ping():
                    break
            except redis.exceptions.ConnectionError:
                if time.monotonic() > deadline or self.proc.poll() is not None:
                    raise
                time.sleep(0.02)  # polling the new server until it answers (with a deadline)
        client.close()

    def kill(self) -> None:
        self.proc.send_signal(signal.SIGKILL)
        self.proc.wait(10)

    def close(self) -> None:
        if self.proc.poll() is None:
            self.kill()
