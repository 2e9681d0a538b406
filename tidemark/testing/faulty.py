"""A fault-injecting wrapper around any driver: crash, stall or zombie at the N-th event.

``FaultyDriver(inner, fault="crash", at_event=3)`` counts protocol events of every
session opened through it — ``open``, ``acknowledge``, ``load``, ``flush``, ``store``,
``start_commit`` and ``coordinator_acknowledge`` — and at event ``at_event`` (1-based;
only events named ``on`` count when given):

``crash``
    raises :class:`SimulatedCrash`; the session is dropped without ``close`` and every
    later call on it raises again (a dead process says nothing more).
``stall``
    blocks until :meth:`FaultyDriver.release` is called (or ``stall_timeout`` passes),
    then continues: a slow endpoint, or a session that outlives its task.
``zombie``
    opens a *newer* session on the same range through the inner driver (bumping its
    fence), then lets the old session go on: its commit must fail with FencedOff where
    the store is authoritative.  The newer sessions are in :attr:`FaultyDriver.usurpers`.

``when="before"`` (default) fires before the inner driver sees the event; ``"after"``
lets the inner driver handle it first and loses the reply (e.g. a crash after the
endpoint committed but before StartedCommit reached the runtime).
"""

from __future__ import annotations

import threading
from typing import Any, Optional, Sequence, cast

from tidemark.drivers.base import Capabilities, Driver, Transactor
from tidemark.faults import InjectedFault
from tidemark.protocol.messages import (
    Acknowledge,
    Acknowledged,
    AnyStore,
    Applied,
    Apply,
    BindingSpec,
    Flush,
    Flushed,
    Load,
    Loaded,
    Open,
    Opened,
    Quarantine,
    StartCommit,
    StartedCommit,
)

FAULTS = ("crash", "stall", "zombie")
EVENTS = ("open", "acknowledge", "load", "flush", "store", "start_commit", "coordinator_acknowledge")


class SimulatedCrash(InjectedFault):
    """The process 'died' at a fault point: the session is gone, ``close`` never runs."""


class FaultyDriver(Driver):
    name = "faulty"

    def __init__(
        self,
        inner: Driver,
        fault: str = "crash",
        at_event: int = 1,
        *,
        on: Optional[str] = None,
        when: str = "before",
        stall_timeout: float = 30.0,
    ):
        if fault not in FAULTS:
            raise ValueError(f"fault must be one of {FAULTS}, got {fault!r}")
        if on is not None and on not in EVENTS:
            raise ValueError(f"on must be one of {EVENTS}, got {on!r}")
        if when not in ("before", "after"):
            raise ValueError("when must be 'before' or 'after'")
        super().__init__(inner.config)
        self.inner = inner
        self.fault = fault
        self.at_event = at_event
        self.on = on
        self.when = when
        self.stall_timeout = stall_timeout
        self.events: list[str] = []  # every counted event, in order
        self.fired: Optional[str] = None  # the event the fault fired at
        self.usurpers: list[tuple[Transactor, Opened]] = []
        self.stalled = threading.Event()  # set while a stall is in progress
        self._release = threading.Event()
        self._lock = threading.Lock()

    def capabilities(self) -> Capabilities:
        return self.inner.capabilities()  # it speaks for the inner driver

    def release(self) -> None:
        """End a stall."""
        self._release.set()

    # ------------------------------------------------------------- event counting
    def _due(self, event: str) -> bool:
        with self._lock:
            if self.on is not None and event != self.on:
                return False
            self.events.append(event)
            if self.fired is None and len(self.events) == self.at_event:
                self.fired = event
                return True
            return False

    def _fire(self, event: str, session: "FaultySession | None", req: Optional[Open]) -> None:
        if self.fault == "crash":
            if session is not None:
                session.dead = True
            raise SimulatedCrash(f"simulated crash at event {self.at_event} ({event})")
        if self.fault == "stall":
            self.stalled.set()
            self._release.wait(self.stall_timeout)
            self.stalled.clear()
        elif self.fault == "zombie" and req is not None:
            self.usurpers.append(self.inner.open(req))

    def event(self, event: str, call, session: "FaultySession | None" = None, req: Optional[Open] = None):
        if session is not None and session.dead:
            raise SimulatedCrash(f"the session crashed earlier; {event} reached a dead session")
        due = self._due(event)
        if due and self.when == "before":
            self._fire(event, session, req)
        result = call()
        if due and self.when == "after":
            self._fire(event, session, req)
        return result

    # --------------------------------------------------------------- driver API
    def spec(self):
        return self.inner.spec()

    def validate(self, req):
        return self.inner.validate(req)

    def apply(self, req: Apply) -> Applied:
        return self.inner.apply(req)

    def open(self, req: Open) -> tuple[Transactor, Opened]:
        session = FaultySession(self, req)
        transactor, opened = self.event("open", lambda: self.inner.open(req), None, req)
        session.inner = transactor
        return session, opened

    def coordinator_acknowledge(
        self, materialization: str, state: Any, runtime_checkpoint: dict, bindings: Sequence[BindingSpec]
    ) -> None:
        self.event(
            "coordinator_acknowledge",
            lambda: self.inner.coordinator_acknowledge(materialization, state, runtime_checkpoint, bindings),
        )

    def dump(self, materialization, binding):
        return self.inner.dump(materialization, binding)

    def checkpoints(self, materialization):
        return self.inner.checkpoints(materialization)

    def identities(self, materialization, bindings):
        return self.inner.identities(materialization, bindings)

    def close(self) -> None:
        self.inner.close()


class FaultySession(Transactor):
    def __init__(self, driver: FaultyDriver, req: Open):
        self.driver = driver
        self.req = req
        self.inner: Transactor | None = None
        self.dead = False

    def acknowledge(self, msg: Acknowledge) -> Acknowledged:
        return self.driver.event("acknowledge", lambda: cast(Transactor, self.inner).acknowledge(msg), self, self.req)

    def load(self, msg: Load) -> Sequence[Loaded]:
        return self.driver.event("load", lambda: cast(Transactor, self.inner).load(msg), self, self.req)

    def flush(self, msg: Flush) -> tuple[Sequence[Loaded], Flushed]:
        return self.driver.event("flush", lambda: cast(Transactor, self.inner).flush(msg), self, self.req)

    def store(self, msg: AnyStore) -> None:
        return self.driver.event("store", lambda: cast(Transactor, self.inner).store(msg), self, self.req)

    def quarantine(self, msg: Quarantine) -> None:
        return self.driver.event("store", lambda: cast(Transactor, self.inner).quarantine(msg), self, self.req)

    def start_commit(self, msg: StartCommit) -> StartedCommit:
        return self.driver.event("start_commit", lambda: cast(Transactor, self.inner).start_commit(msg), self, self.req)

    def close(self) -> None:
        if not self.dead and self.inner is not None:
            self.inner.close()


__all__ = ["FaultyDriver", "FaultySession", "SimulatedCrash", "FAULTS", "EVENTS"]
