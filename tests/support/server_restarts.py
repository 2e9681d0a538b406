"""Riding out an endpoint server's restart, for the tests that restart one."""

from __future__ import annotations

import logging
import threading
from typing import Callable

from tidemark import faults


def ride_out(
    spark, tmp_path, monkeypatch, caplog, spec: str, restart: Callable[[], None], point: str = "before_endpoint_commit"
) -> list[str]:
    """Run ``spec``; once a shard session stalls at ``point`` (by default just before its
    endpoint commit: inside its transaction), ``restart`` the server.  Returns the retry lines."""
    from tidemark.spark.runner import run_spec

    stalled = tmp_path / "stalled"
    monkeypatch.setenv(faults.ENV, f"{point}:stall=4!once={stalled}")
    faults.rearm()
    done, failed = threading.Event(), []

    def restarter() -> None:
        while not stalled.exists() and not done.wait(0.05):  # the stall has begun (a file the fault writes)
            pass
        if not done.is_set():
            try:
                restart()
            except BaseException as exc:  # reported by the test
                failed.append(exc)

    thread = threading.Thread(target=restarter)
    thread.start()
    try:
        with caplog.at_level(logging.WARNING, logger="tidemark"):
            run_spec(spec, spark=spark)
    finally:
        done.set()
        thread.join()
        monkeypatch.delenv(faults.ENV)
        faults.rearm()
    assert not failed, failed
    assert stalled.exists(), "no session stalled before its commit"
    return [r.getMessage() for r in caplog.records if "(run 2 of the batch;" in r.getMessage()]
