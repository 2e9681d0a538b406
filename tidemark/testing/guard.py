"""Driver-side order enforcement: wrap any :class:`Transactor` in a :class:`GuardedTransactor`.

The wrapper checks what the runtime sends (e.g. Flush before Acknowledge, a key Loaded
twice, Store before Flushed) and what the wrapped driver answers (e.g. Loaded for a key
never requested) with a :class:`~tidemark.protocol.state.DriverStateMachine`, raising
:class:`~tidemark.errors.ProtocolViolation`.  A driver can return
``GuardedTransactor(MyTransactor(...), req.bindings)`` from :meth:`Driver.open`.
"""

from __future__ import annotations

from typing import Sequence

from tidemark.drivers.base import Transactor
from tidemark.protocol.messages import (
    Acknowledge,
    Acknowledged,
    AnyStore,
    BindingSpec,
    Flush,
    Flushed,
    Load,
    Loaded,
    Quarantine,
    StartCommit,
    StartedCommit,
)
from tidemark.protocol.state import DEFAULT_MAX_TRACKED_KEYS, DriverStateMachine, Status


class GuardedTransactor(Transactor):
    """A :class:`Transactor` whose every call and reply is checked against the order rules."""

    def __init__(
        self,
        transactor: Transactor,
        bindings: Sequence[BindingSpec],
        *,
        max_tracked_keys: int = DEFAULT_MAX_TRACKED_KEYS,
    ):
        self.inner = transactor
        self.machine = DriverStateMachine(bindings, opened=True, max_tracked_keys=max_tracked_keys)

    @property
    def status(self) -> Status:
        return self.machine.status

    def acknowledge(self, msg: Acknowledge) -> Acknowledged:
        self.machine.receive(msg)
        reply = self.inner.acknowledge(msg)
        self.machine.send(reply)
        return reply

    def load(self, msg: Load) -> list[Loaded]:
        self.machine.receive(msg)
        replies = list(self.inner.load(msg) or ())
        for reply in replies:
            self.machine.send(reply)
        return replies

    def flush(self, msg: Flush) -> tuple[list[Loaded], Flushed]:
        self.machine.receive(msg)
        loaded, flushed = self.inner.flush(msg)
        loaded = list(loaded or ())
        for reply in loaded:
            self.machine.send(reply)
        self.machine.send(flushed)
        return loaded, flushed

    def store(self, msg: AnyStore) -> None:
        self.machine.receive(msg)
        self.inner.store(msg)

    def start_commit(self, msg: StartCommit) -> StartedCommit:
        self.machine.receive(msg)
        reply = self.inner.start_commit(msg)
        self.machine.send(reply)
        return reply

    def quarantine(self, msg: Quarantine) -> None:
        self.machine.receive(msg)
        self.inner.quarantine(msg)

    def close(self) -> None:
        self.machine.close()
        self.inner.close()


__all__ = ["GuardedTransactor"]
