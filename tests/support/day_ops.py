"""Helpers for the day-to-day operations tests: the environment of a tidemark child, waiting on it, and its process group."""

from __future__ import annotations

import os
import sys
import time

import pytest

ENV = {**os.environ, "PYSPARK_PYTHON": sys.executable, "SPARK_LOCAL_IP": "127.0.0.1", "COLUMNS": "80"}


def _group_alive(pgid: int) -> bool:
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    return True


def wait_for(what: str, fn, deadline: float = 180.0, proc=None):
    """Poll ``fn`` until it returns something truthy; fail naming ``what`` at the deadline
    (or when ``proc`` exits first)."""
    end = time.monotonic() + deadline
    while time.monotonic() < end:
        got = fn()
        if got:
            return got
        if proc is not None and proc.poll() is not None:
            pytest.fail(f"the run exited ({proc.returncode}) while waiting for {what}")
        time.sleep(0.1)  # polling interval, not a wait for the condition itself
    pytest.fail(f"timed out waiting for {what}")


def _only(data, names, folder):
    os.makedirs(folder, exist_ok=True)
    for n in names:
        with open(os.path.join(data, n)) as src, open(os.path.join(folder, n), "w") as dst:
            dst.write(src.read())
    return folder
