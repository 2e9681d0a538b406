"""The protocol's order rules as explicit state machines, for both sides of a session.

One session (one shard's RPC) walks through these states::

    NEW --Open--> OPENING --Opened--> ACKNOWLEDGE
    ACKNOWLEDGE: Acknowledge (runtime) and Acknowledged (driver), in either order;
                 Loads may follow Acknowledge before Acknowledged arrives
    ACKNOWLEDGE --both seen--> LOAD: Load* / Loaded*
    LOAD --Flush (never before Acknowledged)--> FLUSH: Loaded* then Flushed
    FLUSH --Flushed--> STORE: Store* Quarantine? (no driver output at all)
    STORE --StartCommit--> COMMIT --StartedCommit--> ACKNOWLEDGE (the next transaction)
    any --close--> CLOSED

Key rules checked on top of the phase:

* a key is Loaded-requested at most once per transaction, only for standard
  (non-delta) bindings;
* Loaded only for keys that were requested in this transaction, at most once per key,
  never before Acknowledged (read-committed) and never after Flushed;
* ``Store.exists[i]`` is true exactly when the key was Loaded in this transaction.

:class:`RuntimeStateMachine` sends runtime messages and receives driver replies;
:class:`DriverStateMachine` does the opposite.  Both raise
:class:`~tidemark.errors.ProtocolViolation` naming the state, the message and what was
expected, and say which side broke the rule.  :class:`RuntimeSession` wraps a
:class:`~tidemark.drivers.base.Transactor` for the runtime: same methods, every
message and reply checked.  (:class:`tidemark.testing.guard.GuardedTransactor` is the
driver-side twin.)

Key tracking costs memory per requested key; above ``max_tracked_keys`` keys in one
transaction the per-key checks are switched off for that transaction (phase checks stay).
"""

from __future__ import annotations

import enum
from abc import ABC, abstractmethod
from typing import Any, Callable, Optional, Protocol, Sequence

from tidemark.errors import ProtocolViolation
from tidemark.protocol.messages import (
    Acknowledge,
    Acknowledged,
    AnyStore,
    BindingSpec,
    Flush,
    Flushed,
    Key,
    Load,
    Loaded,
    Open,
    Opened,
    Quarantine,
    StartCommit,
    StartedCommit,
    Store,
    StoreTexts,
)

DEFAULT_MAX_TRACKED_KEYS = 1_000_000


class Status(str, enum.Enum):
    NEW = "NEW"  # nothing sent yet: Open
    OPENING = "OPENING"  # Open sent: Opened
    ACKNOWLEDGE = "ACKNOWLEDGE"  # transaction start: Acknowledge / Acknowledged in either order
    LOAD = "LOAD"  # both acknowledged: Load* / Loaded*, then Flush
    FLUSH = "FLUSH"  # Flush sent: Loaded*, then Flushed
    STORE = "STORE"  # Flushed received: Store*, then StartCommit
    COMMIT = "COMMIT"  # StartCommit sent: StartedCommit
    CLOSED = "CLOSED"


# What each side may send next, per state (for error messages).
_RUNTIME_EXPECTS = {
    Status.NEW: "Open",
    Status.OPENING: "nothing until Opened",
    Status.ACKNOWLEDGE: "Acknowledge (then Load*)",
    Status.LOAD: "Load or Flush",
    Status.FLUSH: "nothing until Flushed",
    Status.STORE: "Store, Quarantine or StartCommit",
    Status.COMMIT: "nothing until StartedCommit",
    Status.CLOSED: "nothing (the session is closed)",
}
_DRIVER_EXPECTS = {
    Status.NEW: "nothing before Open",
    Status.OPENING: "Opened",
    Status.ACKNOWLEDGE: "Acknowledged",
    Status.LOAD: "Loaded",
    Status.FLUSH: "Loaded or Flushed",
    Status.STORE: "nothing during the Store phase",
    Status.COMMIT: "StartedCommit",
    Status.CLOSED: "nothing (the session is closed)",
}


def _name(msg: Any) -> str:
    return type(msg).__name__


class _Check(Protocol):
    """A machine's check of one message: raise a ProtocolViolation unless ``ok``."""

    def __call__(self, ok: bool, detail: str = "") -> None: ...


class _Machine:
    """The order rules of one session, seen from outside: every message of both sides."""

    side = "session"

    def __init__(
        self,
        bindings: Sequence[BindingSpec] = (),
        *,
        opened: bool = False,
        max_tracked_keys: int = DEFAULT_MAX_TRACKED_KEYS,
    ):
        self.bindings = tuple(bindings)
        self.status = Status.ACKNOWLEDGE if opened else Status.NEW
        self.max_tracked_keys = max_tracked_keys
        self.transactions = 0  # completed (StartedCommit seen)
        self._new_transaction()

    def _new_transaction(self) -> None:
        self.acknowledge_sent = False
        self.acknowledged = False
        self._requested: dict[int, set[Key]] = {}
        self._loaded: dict[int, set[Key]] = {}
        self._tracked = 0
        self._tracking = True

    # ------------------------------------------------------------------ the guard
    def _guard(self, ok: bool, msg: Any, by_runtime: bool, detail: str = "") -> None:
        if ok:
            return
        expected = (_RUNTIME_EXPECTS if by_runtime else _DRIVER_EXPECTS)[self.status]
        who = "runtime" if by_runtime else "driver"
        raise ProtocolViolation(
            self.status.value,
            _name(msg),
            expected,
            f"{self.side}: the {who} sent it" + (f"; {detail}" if detail else ""),
        )

    def _binding(self, msg: Any, index: int, by_runtime: bool) -> BindingSpec | None:
        if not self.bindings:
            return None
        self._guard(
            isinstance(index, int) and 0 <= index < len(self.bindings),
            msg,
            by_runtime,
            f"binding {index!r} does not exist (the session has {len(self.bindings)})",
        )
        return self.bindings[index]

    # -------------------------------------------------------------- runtime side
    def runtime_message(self, msg: Any) -> None:
        """Check (and apply) a message the runtime sends."""
        g: _Check = lambda ok, detail="": self._guard(ok, msg, True, detail)
        s = self.status
        if isinstance(msg, Open):
            g(s is Status.NEW)
            self.status = Status.OPENING
        elif isinstance(msg, Acknowledge):
            g(
                s is Status.ACKNOWLEDGE and not self.acknowledge_sent,
                "Acknowledge was already sent in this transaction" if s is Status.ACKNOWLEDGE else "",
            )
            self.acknowledge_sent = True
            if self.acknowledged:
                self.status = Status.LOAD
        elif isinstance(msg, Load):
            g(
                s is Status.LOAD or (s is Status.ACKNOWLEDGE and self.acknowledge_sent),
                "Acknowledge must come first in every transaction" if s is Status.ACKNOWLEDGE else "",
            )
            b = self._binding(msg, msg.binding, True)
            g(b is None or not b.delta_updates, f"binding {msg.binding} is delta-updates: it gets no Loads")
            g(b is None or not b.endpoint_reduce, f"binding {msg.binding} is reduced by the endpoint: it gets no Loads")
            if self._track(len(msg.keys)):
                seen = self._requested.setdefault(msg.binding, set())
                keys = _tuples(msg.keys)
                fresh = set(keys)
                if len(fresh) != len(keys) or not seen.isdisjoint(fresh):  # find the first repeat
                    for k in keys:
                        g(k not in seen, f"key {list(k)!r} was already Loaded-requested in this transaction")
                        seen.add(k)
                seen |= fresh
        elif isinstance(msg, Flush):
            g(
                s is Status.LOAD,
                "Flush is never sent before Acknowledged was received"
                if s is Status.ACKNOWLEDGE and self.acknowledge_sent
                else "",
            )
            self.status = Status.FLUSH
        elif isinstance(msg, AnyStore):
            g(s is Status.STORE)
            b = self._binding(msg, msg.binding, True)
            n = len(msg.keys)
            if isinstance(msg, Store):
                g(
                    len(msg.values) == n and len(msg.docs) == n and len(msg.exists) == n and len(msg.deletes) == n,
                    "keys, values, docs, exists and deletes must have one entry per document",
                )
            else:
                g(
                    b is None or b.endpoint_reduce,
                    f"binding {msg.binding} is not reduced by the endpoint: {_name(msg)} is for bindings that are",
                )
                if isinstance(msg, StoreTexts):
                    g(len(msg.texts) == n, "keys and texts must have one entry per document")
                else:
                    g(len(msg.rows) == n, "keys and rows must have one entry per document")
            exists = msg.exists if isinstance(msg, Store) else (False,) * n  # texts and rows: nothing was Loaded
            if b is not None and (b.delta_updates or b.endpoint_reduce):
                g(
                    not any(exists),
                    f"binding {msg.binding} is "
                    f"{'delta-updates' if b.delta_updates else 'reduced by the endpoint'}: nothing exists",
                )
            elif self._tracking:
                loaded = self._loaded.get(msg.binding, set())
                wrong = [(k, e) for k, e in zip(_tuples(msg.keys), exists) if bool(e) != (k in loaded)]
                if wrong:
                    key, stated = wrong[0]
                    g(
                        False,
                        f"Store.exists for key {list(key)!r} is {bool(stated)} but the key was "
                        f"{'' if key in loaded else 'not '}Loaded in this transaction",
                    )
        elif isinstance(msg, Quarantine):
            g(s is Status.STORE)
            g(all(isinstance(r, dict) for r in msg.rows), "Quarantine rows must be JSON objects")
        elif isinstance(msg, StartCommit):
            g(s is Status.STORE)
            g(isinstance(msg.runtime_checkpoint, dict), "runtime_checkpoint must be a JSON object")
            self.status = Status.COMMIT
        else:
            g(False, "not a message of a transaction session")

    # --------------------------------------------------------------- driver side
    def driver_message(self, msg: Any) -> None:
        """Check (and apply) a message the driver sends."""
        g: _Check = lambda ok, detail="": self._guard(ok, msg, False, detail)
        s = self.status
        if isinstance(msg, Opened):
            g(s is Status.OPENING)
            g(
                msg.runtime_checkpoint is None or isinstance(msg.runtime_checkpoint, dict),
                "Opened.runtime_checkpoint must be a JSON object or null",
            )
            self.status = Status.ACKNOWLEDGE
        elif isinstance(msg, Acknowledged):
            g(
                s is Status.ACKNOWLEDGE and not self.acknowledged,
                "Acknowledged was already sent in this transaction" if s is Status.ACKNOWLEDGE else "",
            )
            self.acknowledged = True
            if self.acknowledge_sent:
                self.status = Status.LOAD
        elif isinstance(msg, Loaded):
            if s is Status.ACKNOWLEDGE:
                g(
                    False,
                    "Loaded before Acknowledged: Loads must not be evaluated before the "
                    "previous transaction's commit is visible (read-committed)",
                )
            g(s in (Status.LOAD, Status.FLUSH), "Loaded after Flushed" if s in (Status.STORE, Status.COMMIT) else "")
            self._binding(msg, msg.binding, False)
            g(len(msg.keys) == len(msg.docs), "Loaded needs one document per key")
            if self._tracking:
                requested = self._requested.get(msg.binding, set())
                loaded = self._loaded.setdefault(msg.binding, set())
                keys = _tuples(msg.keys)
                fresh = set(keys)
                if len(fresh) != len(keys) or not fresh <= requested or not loaded.isdisjoint(fresh):
                    for k in keys:  # find the first offender
                        g(k in requested, f"key {list(k)!r} of binding {msg.binding} was never Loaded-requested")
                        g(k not in loaded, f"key {list(k)!r} of binding {msg.binding} was already Loaded")
                        loaded.add(k)
                loaded |= fresh
        elif isinstance(msg, Flushed):
            g(s is Status.FLUSH, "Flushed before Flush" if s in (Status.LOAD, Status.ACKNOWLEDGE) else "")
            self.status = Status.STORE
        elif isinstance(msg, StartedCommit):
            g(s is Status.COMMIT)
            self.status = Status.ACKNOWLEDGE
            self.transactions += 1
            self._new_transaction()
        else:
            g(False, "not a reply of a transaction session")

    def close(self) -> None:
        self.status = Status.CLOSED

    def _track(self, n: int) -> bool:
        if not self._tracking:
            return False
        self._tracked += n
        if self._tracked > self.max_tracked_keys:
            self._tracking = False
            self._requested.clear()
            self._loaded.clear()
        return self._tracking


def _tuples(keys: Sequence[Key]) -> list[Key]:
    """Keys as tuples (they are, from the runtime; a driver may answer with lists)."""
    return [k if k.__class__ is tuple else tuple(k) for k in keys]


class RuntimeStateMachine(_Machine):
    """The runtime's view: :meth:`send` what the runtime sends, :meth:`receive` replies."""

    side = "runtime-side check"

    def send(self, msg: Any) -> None:
        self.runtime_message(msg)

    def receive(self, msg: Any) -> None:
        self.driver_message(msg)


class DriverStateMachine(_Machine):
    """The driver's view: :meth:`receive` what the runtime sends, :meth:`send` replies."""

    side = "driver-side check"

    def receive(self, msg: Any) -> None:
        self.runtime_message(msg)

    def send(self, msg: Any) -> None:
        self.driver_message(msg)


def _expect_type(sm: _Machine, reply: Any, cls: type) -> None:
    if not isinstance(reply, cls):
        raise ProtocolViolation(
            sm.status.value, _name(reply), cls.__name__, f"{sm.side}: the driver returned the wrong reply type"
        )


class SessionTransactor(Protocol):
    """What a :class:`RuntimeSession` calls: a :class:`~tidemark.drivers.base.Transactor`."""

    def acknowledge(self, msg: Acknowledge) -> Acknowledged: ...
    def load(self, msg: Load) -> Sequence[Loaded]: ...
    def flush(self, msg: Flush) -> tuple[Sequence[Loaded], Flushed]: ...
    def store(self, msg: AnyStore) -> None: ...
    def quarantine(self, msg: Quarantine) -> None: ...
    def start_commit(self, msg: StartCommit) -> StartedCommit: ...
    def close(self) -> None: ...


class CheckedTransactor(ABC):
    """A transactor's calls, each message the runtime sends passed to :meth:`sent` and each
    reply to :meth:`replied` (the runtime's side: :class:`RuntimeSession`; the driver's:
    :class:`~tidemark.testing.guard.GuardedTransactor`)."""

    transactor: SessionTransactor
    machine: _Machine

    @abstractmethod
    def sent(self, msg: Any) -> None:
        """Check a message the runtime sends, before the transactor gets it."""

    @abstractmethod
    def replied(self, reply: Any, cls: type) -> None:
        """Check a reply the transactor gave (of the class ``cls`` the call returns)."""

    @property
    def status(self) -> Status:
        return self.machine.status

    def acknowledge(self, msg: Acknowledge) -> Acknowledged:
        self.sent(msg)
        reply = self.transactor.acknowledge(msg)
        self.replied(reply, Acknowledged)
        return reply

    def load(self, msg: Load) -> list[Loaded]:
        self.sent(msg)
        replies = list(self.transactor.load(msg) or ())
        for reply in replies:
            self.replied(reply, Loaded)
        return replies

    def flush(self, msg: Flush) -> tuple[list[Loaded], Flushed]:
        self.sent(msg)
        replies, flushed = self.transactor.flush(msg)
        loaded = list(replies or ())
        for reply in loaded:
            self.replied(reply, Loaded)
        self.replied(flushed, Flushed)
        return loaded, flushed

    def store(self, msg: AnyStore) -> None:
        self.sent(msg)
        self.transactor.store(msg)

    def quarantine(self, msg: Quarantine) -> None:
        self.sent(msg)
        self.transactor.quarantine(msg)

    def start_commit(self, msg: StartCommit) -> StartedCommit:
        self.sent(msg)
        reply = self.transactor.start_commit(msg)
        self.replied(reply, StartedCommit)
        return reply

    def close(self) -> None:
        self.machine.close()
        self.transactor.close()


class RuntimeSession(CheckedTransactor):
    """A :class:`~tidemark.drivers.base.Transactor` as the runtime uses it: every message
    it sends and every reply it gets is checked by a :class:`RuntimeStateMachine`.

    Create it right after ``driver.open(...)`` returned ``(transactor, opened)``.
    """

    machine: RuntimeStateMachine

    def __init__(
        self,
        transactor: SessionTransactor,
        bindings: Sequence[BindingSpec],
        *,
        max_tracked_keys: int = DEFAULT_MAX_TRACKED_KEYS,
        check_store: Optional[Callable[[AnyStore], None]] = None,
    ):
        self.transactor = transactor
        self.machine = RuntimeStateMachine(bindings, opened=True, max_tracked_keys=max_tracked_keys)
        self.check_store = check_store  # refuses a Store the endpoint cannot hold (its declared limits)

    def sent(self, msg: Any) -> None:
        self.machine.send(msg)

    def replied(self, reply: Any, cls: type) -> None:
        _expect_type(self.machine, reply, cls)
        self.machine.receive(reply)

    def store(self, msg: AnyStore) -> None:
        self.sent(msg)
        if self.check_store is not None:
            self.check_store(msg)
        self.transactor.store(msg)


__all__ = [
    "Status",
    "RuntimeStateMachine",
    "DriverStateMachine",
    "CheckedTransactor",
    "RuntimeSession",
    "DEFAULT_MAX_TRACKED_KEYS",
]
