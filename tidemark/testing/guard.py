"""Driver-side order enforcement: wrap any :class:`Transactor` in a :class:`GuardedTransactor`.

The wrapper checks what the runtime sends (e.g. Flush before Acknowledge, a key Loaded
twice, Store before Flushed) and what the wrapped driver answers (e.g. Loaded for a key
never requested) with a :class:`~tidemark.protocol.state.DriverStateMachine`, raising
:class:`~tidemark.errors.ProtocolViolation`.  A driver can return
``GuardedTransactor(MyTransactor(...), req.bindings)`` from :meth:`Driver.open`.
"""

from __future__ import annotations

from typing import Any, Sequence

from tidemark.drivers.base import Transactor
from tidemark.protocol.messages import BindingSpec
from tidemark.protocol.state import DEFAULT_MAX_TRACKED_KEYS, CheckedTransactor, DriverStateMachine


class GuardedTransactor(CheckedTransactor, Transactor):
    """A :class:`Transactor` whose every call and reply is checked against the order rules."""

    machine: DriverStateMachine

    def __init__(
        self,
        transactor: Transactor,
        bindings: Sequence[BindingSpec],
        *,
        max_tracked_keys: int = DEFAULT_MAX_TRACKED_KEYS,
    ):
        self.transactor = transactor
        self.machine = DriverStateMachine(bindings, opened=True, max_tracked_keys=max_tracked_keys)

    def sent(self, msg: Any) -> None:
        self.machine.receive(msg)

    def replied(self, reply: Any, cls: type) -> None:
        self.machine.send(reply)


__all__ = ["GuardedTransactor"]
