"""The order rules of a session, on both sides: every legal and every illegal step.

The two machines (runtime side, driver side) check the same rules; what differs is which
messages are "sent" and which are "received".  ``step(machine, msg)`` feeds a message to
the right method for its sender, so every case below runs on both sides.
"""

from __future__ import annotations

import itertools

import pytest

from tidemark.drivers.base import Transactor
from tidemark.errors import ProtocolViolation
from tidemark.protocol.messages import (
    Acknowledge,
    Acknowledged,
    BindingSpec,
    Field,
    Flush,
    Flushed,
    Load,
    Loaded,
    Open,
    Opened,
    Quarantine,
    Range,
    StartCommit,
    StartedCommit,
    Store,
)
from tidemark.protocol.state import DriverStateMachine, RuntimeSession, RuntimeStateMachine, Status
from tidemark.testing.guard import GuardedTransactor

FIELDS = (Field("k", "/k", "string", is_key=True, nullable=False), Field("n", "/n", "integer"))
STANDARD = BindingSpec({"table": "t"}, "c/standard", ("/k",), FIELDS)
DELTA = BindingSpec({"table": "d"}, "c/delta", ("/k",), FIELDS, delta_updates=True)
BINDINGS = (STANDARD, DELTA)

CHECKPOINT = {"checkpoint_id": "cp", "batch_id": 0, "materialization": "m"}
A, B, C = ("a",), ("b",), ("c",)

RUNTIME_MSGS = (Open, Acknowledge, Load, Flush, Store, Quarantine, StartCommit)
DRIVER_MSGS = (Opened, Acknowledged, Loaded, Flushed, StartedCommit)

# What the error says each side may send next, per state.
RUNTIME_EXPECTS = {
    Status.NEW: "Open",
    Status.OPENING: "nothing until Opened",
    Status.ACKNOWLEDGE: "Acknowledge (then Load*)",
    Status.LOAD: "Load or Flush",
    Status.FLUSH: "nothing until Flushed",
    Status.STORE: "Store, Quarantine or StartCommit",
    Status.COMMIT: "nothing until StartedCommit",
    Status.CLOSED: "nothing (the session is closed)",
}
DRIVER_EXPECTS = {
    Status.NEW: "nothing before Open",
    Status.OPENING: "Opened",
    Status.ACKNOWLEDGE: "Acknowledged",
    Status.LOAD: "Loaded",
    Status.FLUSH: "Loaded or Flushed",
    Status.STORE: "nothing during the Store phase",
    Status.COMMIT: "StartedCommit",
    Status.CLOSED: "nothing (the session is closed)",
}


def store(binding=0, keys=(A,), exists=None, deletes=None):
    n = len(keys)
    return Store(
        binding,
        tuple(keys),
        tuple((1,) for _ in keys),
        tuple({"k": k[0], "n": 1} for k in keys),
        tuple(exists if exists is not None else (False,) * n),
        tuple(deletes or (False,) * n),
    )


def loaded(keys=(A,), binding=0):
    return Loaded(binding, tuple(keys), tuple({"k": k[0], "n": 1} for k in keys))


def sample(cls):
    """A representative message of each class (for the phase matrix)."""
    return {
        Open: Open("m", "v1", Range(), bindings=BINDINGS),
        Opened: Opened(None),
        Acknowledge: Acknowledge(),
        Acknowledged: Acknowledged(),
        Load: Load(0, (C,)),
        Loaded: loaded((A,)),
        Flush: Flush(),
        Flushed: Flushed(),
        Store: store(keys=(C,)),
        Quarantine: Quarantine(({"binding": 0, "location": "f:1", "key_json": "[]", "reason": "r", "value": "x"},)),
        StartCommit: StartCommit(CHECKPOINT),
        StartedCommit: StartedCommit(),
    }[cls]


def by_runtime(msg) -> bool:
    return isinstance(msg, RUNTIME_MSGS)


def step(m, msg) -> None:
    """Feed ``msg`` to machine ``m`` from the side that sends it."""
    if isinstance(m, RuntimeStateMachine):
        (m.send if by_runtime(msg) else m.receive)(msg)
    else:
        (m.receive if by_runtime(msg) else m.send)(msg)


def walk(m, msgs) -> None:
    for msg in msgs:
        step(m, msg)


SIDES = pytest.mark.parametrize("side", [RuntimeStateMachine, DriverStateMachine], ids=["runtime", "driver"])

# Named points of a session: the messages that lead there, and what may come next.
OPEN = [Open("m", "v1", Range(), bindings=BINDINGS)]
OPENED = OPEN + [Opened(None)]
ACK_SENT = OPENED + [Acknowledge()]
ACKED_FIRST = OPENED + [Acknowledged()]
LOADING = ACK_SENT + [Acknowledged(), Load(0, (A, B))]
FLUSHING = LOADING + [Flush()]
STORING = FLUSHING + [Flushed()]
COMMITTING = STORING + [StartCommit(CHECKPOINT)]
POINTS = {
    "new": ([], Status.NEW, {Open}),
    "opening": (OPEN, Status.OPENING, {Opened}),
    "acknowledge": (OPENED, Status.ACKNOWLEDGE, {Acknowledge, Acknowledged}),
    "acknowledge-sent": (ACK_SENT, Status.ACKNOWLEDGE, {Load, Acknowledged}),
    "acknowledged-first": (ACKED_FIRST, Status.ACKNOWLEDGE, {Acknowledge}),
    "load": (LOADING, Status.LOAD, {Load, Flush, Loaded}),
    "flush": (FLUSHING, Status.FLUSH, {Loaded, Flushed}),
    "store": (STORING, Status.STORE, {Store, Quarantine, StartCommit}),
    "commit": (COMMITTING, Status.COMMIT, {StartedCommit}),
    "next-transaction": (COMMITTING + [StartedCommit()], Status.ACKNOWLEDGE, {Acknowledge, Acknowledged}),
}
MATRIX = [(p, cls) for p in POINTS for cls in RUNTIME_MSGS + DRIVER_MSGS]


@SIDES
@pytest.mark.parametrize("point,cls", MATRIX, ids=[f"{p}-{c.__name__}" for p, c in MATRIX])
def test_every_message_in_every_state(side, point, cls):
    prefix, status, legal = POINTS[point]
    m = side(BINDINGS)
    walk(m, prefix)
    assert m.status is status
    msg = sample(cls)
    if cls in legal:
        step(m, msg)  # no violation
        return
    with pytest.raises(ProtocolViolation) as err:
        step(m, msg)
    exc = err.value
    expected = (RUNTIME_EXPECTS if by_runtime(msg) else DRIVER_EXPECTS)[status]
    assert (exc.state, exc.received, exc.expected) == (status.value, cls.__name__, expected)
    assert f"state {status.value}" in str(exc) and cls.__name__ in str(exc) and expected in str(exc)
    assert ("the runtime sent it" if by_runtime(msg) else "the driver sent it") in str(exc)
    assert m.status is status  # a rejected message changes nothing


@SIDES
def test_a_full_session_of_two_transactions(side):
    m = side(BINDINGS)
    statuses = []
    for msg in OPEN + [
        Opened({"batch_id": 3}),
        Acknowledge(),
        Acknowledged(),
        Load(0, (A, B, C)),
        loaded((A,)),
        Flush(),
        loaded((B,)),
        Flushed(),
        store(keys=(A, B, C), exists=(True, True, False)),
        store(binding=1, keys=(A,)),
        StartCommit(CHECKPOINT),
        StartedCommit(),
    ]:
        step(m, msg)
        statuses.append(m.status)
    assert statuses == [
        Status.OPENING,
        Status.ACKNOWLEDGE,
        Status.ACKNOWLEDGE,
        Status.LOAD,
        Status.LOAD,
        Status.LOAD,
        Status.FLUSH,
        Status.FLUSH,
        Status.STORE,
        Status.STORE,
        Status.STORE,
        Status.COMMIT,
        Status.ACKNOWLEDGE,
    ]
    assert m.transactions == 1
    # The second transaction starts afresh: the same keys may be Loaded again.
    walk(
        m,
        [
            Acknowledged(),
            Acknowledge(),
            Load(0, (A,)),
            loaded((A,)),
            Flush(),
            Flushed(),
            store(keys=(A,), exists=(True,)),
            StartCommit(CHECKPOINT),
            StartedCommit(),
        ],
    )
    assert m.transactions == 2 and m.status is Status.ACKNOWLEDGE


@SIDES
def test_acknowledge_and_acknowledged_in_either_order(side):
    for order in ([Acknowledge(), Acknowledged()], [Acknowledged(), Acknowledge()]):
        m = side(BINDINGS)
        walk(m, OPENED + order)
        assert m.status is Status.LOAD


@SIDES
def test_loads_before_acknowledged_are_allowed_from_the_runtime(side):
    m = side(BINDINGS)
    walk(m, ACK_SENT + [Load(0, (A,)), Load(0, (B,))])
    assert m.status is Status.ACKNOWLEDGE
    walk(m, [Acknowledged(), loaded((A, B))])  # answered once the driver acknowledged
    assert m.status is Status.LOAD


@SIDES
def test_load_before_acknowledge_is_rejected(side):
    m = side(BINDINGS)
    walk(m, ACKED_FIRST)
    with pytest.raises(ProtocolViolation, match="Acknowledge must come first"):
        step(m, Load(0, (A,)))


@SIDES
def test_flush_before_acknowledged_is_rejected(side):
    m = side(BINDINGS)
    walk(m, ACK_SENT + [Load(0, (A,))])
    with pytest.raises(ProtocolViolation, match="Flush is never sent before Acknowledged") as err:
        step(m, Flush())
    assert (err.value.state, err.value.received) == ("ACKNOWLEDGE", "Flush")


@SIDES
def test_loaded_before_acknowledged_is_rejected(side):
    m = side(BINDINGS)
    walk(m, ACK_SENT + [Load(0, (A,))])
    with pytest.raises(ProtocolViolation, match="read-committed") as err:
        step(m, loaded((A,)))
    assert (err.value.state, err.value.received, err.value.expected) == ("ACKNOWLEDGE", "Loaded", "Acknowledged")


@SIDES
@pytest.mark.parametrize("where", ["load", "flush", "across-phases"])
def test_loaded_for_a_key_twice_is_rejected(side, where):
    m = side(BINDINGS)
    walk(m, LOADING)
    first = [loaded((A,))]
    if where == "flush":
        first = [Flush(), loaded((A,))]
    walk(m, first)
    if where == "across-phases":
        step(m, Flush())
    with pytest.raises(ProtocolViolation, match=r"key \['a'\] of binding 0 was already Loaded") as err:
        step(m, loaded((A,)))
    assert err.value.received == "Loaded"


@SIDES
def test_loaded_twice_in_one_message_is_rejected(side):
    m = side(BINDINGS)
    walk(m, LOADING)
    with pytest.raises(ProtocolViolation, match="already Loaded"):
        step(m, loaded((A, A)))


@SIDES
def test_loaded_after_flushed_is_rejected(side):
    m = side(BINDINGS)
    walk(m, STORING)
    with pytest.raises(ProtocolViolation, match="Loaded after Flushed") as err:
        step(m, loaded((A,)))
    assert (err.value.state, err.value.expected) == ("STORE", "nothing during the Store phase")


@SIDES
def test_loaded_for_a_key_never_requested_is_rejected(side):
    m = side(BINDINGS)
    walk(m, LOADING)
    with pytest.raises(ProtocolViolation, match=r"key \['c'\] of binding 0 was never Loaded-requested"):
        step(m, loaded((C,)))


@SIDES
def test_loaded_needs_one_document_per_key(side):
    m = side(BINDINGS)
    walk(m, LOADING)
    with pytest.raises(ProtocolViolation, match="one document per key"):
        step(m, Loaded(0, (A, B), ({"k": "a"},)))


@SIDES
@pytest.mark.parametrize("cls", DRIVER_MSGS)
def test_driver_output_during_the_store_phase_is_rejected(side, cls):
    m = side(BINDINGS)
    walk(m, STORING + [store(keys=(C,))])
    with pytest.raises(ProtocolViolation) as err:
        step(m, sample(cls))
    assert (err.value.state, err.value.received, err.value.expected) == (
        "STORE",
        cls.__name__,
        "nothing during the Store phase",
    )


@SIDES
def test_a_key_is_load_requested_at_most_once(side):
    m = side(BINDINGS)
    walk(m, LOADING)
    with pytest.raises(ProtocolViolation, match=r"key \['a'\] was already Loaded-requested"):
        step(m, Load(0, (A,)))
    m2 = side(BINDINGS)
    walk(m2, ACK_SENT)
    with pytest.raises(ProtocolViolation, match="already Loaded-requested"):
        step(m2, Load(0, (C, C)))


@SIDES
def test_delta_updates_binding_gets_no_load_but_gets_flush(side):
    m = side(BINDINGS)
    walk(m, ACK_SENT + [Acknowledged()])
    with pytest.raises(ProtocolViolation, match="binding 1 is delta-updates: it gets no Loads") as err:
        step(m, Load(1, (A,)))
    assert (err.value.state, err.value.received) == ("LOAD", "Load")
    walk(m, [Flush(), Flushed(), store(binding=1, keys=(A, B)), StartCommit(CHECKPOINT), StartedCommit()])
    assert m.transactions == 1
    # A session of delta-updates bindings only: Flush with no Load at all.
    only_delta = side((DELTA,))
    walk(
        only_delta,
        [Open("m", "v1", Range(), bindings=(DELTA,)), Opened(), Acknowledge(), Acknowledged(), Flush(), Flushed()],
    )
    assert only_delta.status is Status.STORE


@SIDES
def test_store_exists_must_match_what_was_loaded(side):
    m = side(BINDINGS)
    walk(m, LOADING + [loaded((A,)), Flush(), Flushed()])
    step(m, store(keys=(A, B), exists=(True, False)))
    with pytest.raises(ProtocolViolation, match=r"Store.exists for key \['b'\] is True but the key was not Loaded"):
        step(m, store(keys=(B,), exists=(True,)))
    with pytest.raises(ProtocolViolation, match=r"Store.exists for key \['a'\] is False but the key was Loaded"):
        step(m, store(keys=(A,), exists=(False,)))
    with pytest.raises(ProtocolViolation, match="delta-updates: nothing exists"):
        step(m, store(binding=1, keys=(A,), exists=(True,)))


@SIDES
def test_store_columns_must_have_one_entry_per_document(side):
    m = side(BINDINGS)
    walk(m, STORING)
    bad = Store(0, (A, B), ((1,),), ({"k": "a"}, {"k": "b"}), (False, False), (False, False))
    with pytest.raises(ProtocolViolation, match="one entry per document"):
        step(m, bad)


@SIDES
@pytest.mark.parametrize("msg", [Load(2, (A,)), Load(-1, (A,))], ids=["too-big", "negative"])
def test_unknown_binding_is_rejected(side, msg):
    m = side(BINDINGS)
    walk(m, ACK_SENT)
    with pytest.raises(ProtocolViolation, match="does not exist"):
        step(m, msg)


@SIDES
def test_unknown_binding_in_loaded_and_store_is_rejected(side):
    m = side(BINDINGS)
    walk(m, LOADING)
    with pytest.raises(ProtocolViolation, match="binding 5 does not exist"):
        step(m, loaded((A,), binding=5))
    walk(m, [Flush(), Flushed()])
    with pytest.raises(ProtocolViolation, match="binding 7 does not exist"):
        step(m, store(binding=7))


@SIDES
def test_repeated_acknowledge_or_acknowledged_is_rejected(side):
    m = side(BINDINGS)
    walk(m, ACK_SENT)
    with pytest.raises(ProtocolViolation, match="Acknowledge was already sent"):
        step(m, Acknowledge())
    m = side(BINDINGS)
    walk(m, ACKED_FIRST)
    with pytest.raises(ProtocolViolation, match="Acknowledged was already sent"):
        step(m, Acknowledged())


@SIDES
def test_flushed_before_flush_is_rejected(side):
    m = side(BINDINGS)
    walk(m, LOADING)
    with pytest.raises(ProtocolViolation, match="Flushed before Flush"):
        step(m, Flushed())


@SIDES
def test_checkpoints_must_be_objects(side):
    m = side(BINDINGS)
    walk(m, OPEN)
    with pytest.raises(ProtocolViolation, match="Opened.runtime_checkpoint must be a JSON object or null"):
        step(m, Opened([1, 2]))
    walk(m, [Opened({"batch_id": 1}), Acknowledge(), Acknowledged(), Flush(), Flushed()])
    with pytest.raises(ProtocolViolation, match="runtime_checkpoint must be a JSON object"):
        step(m, StartCommit("batch 1"))


@SIDES
def test_closed_session_accepts_nothing(side):
    m = side(BINDINGS)
    walk(m, LOADING)
    m.close()
    for cls in RUNTIME_MSGS + DRIVER_MSGS:
        with pytest.raises(ProtocolViolation) as err:
            step(m, sample(cls))
        assert err.value.state == "CLOSED"
        assert err.value.expected == "nothing (the session is closed)"


@SIDES
def test_messages_of_no_session_are_rejected(side):
    m = side(BINDINGS)
    walk(m, OPENED)
    with pytest.raises(ProtocolViolation, match="not a message of a transaction session"):
        m.runtime_message("hello")
    with pytest.raises(ProtocolViolation, match="not a reply of a transaction session"):
        m.driver_message(42)


@SIDES
def test_key_tracking_switches_off_above_the_limit_but_phases_stay(side):
    m = side(BINDINGS, max_tracked_keys=2)
    walk(m, ACK_SENT + [Acknowledged(), Load(0, (A, B, C))])  # 3 > 2: per-key checks off
    walk(m, [Load(0, (A,)), loaded((A,)), loaded((A,)), Flush(), Flushed(), store(keys=(A,), exists=(False,))])
    with pytest.raises(ProtocolViolation, match="Loaded after Flushed"):
        step(m, loaded((A,)))
    walk(m, [StartCommit(CHECKPOINT), StartedCommit(), Acknowledge(), Acknowledged(), Load(0, (A,))])
    with pytest.raises(ProtocolViolation, match="already Loaded-requested"):  # back on for the next transaction
        step(m, Load(0, (A,)))


def test_the_two_sides_name_themselves():
    r, d = RuntimeStateMachine(BINDINGS), DriverStateMachine(BINDINGS)
    with pytest.raises(ProtocolViolation, match="runtime-side check: the driver sent it"):
        r.receive(Opened())
    with pytest.raises(ProtocolViolation, match="driver-side check: the runtime sent it"):
        d.receive(Flush())
    # The runtime sends what the driver receives, and the reverse.
    r.send(sample(Open)), d.receive(sample(Open))
    r.receive(Opened()), d.send(Opened())
    assert r.status is d.status is Status.ACKNOWLEDGE
    with pytest.raises(ProtocolViolation):
        d.send(Acknowledge())  # a driver never sends Acknowledge: it is checked as a reply
    with pytest.raises(ProtocolViolation):
        r.receive(Flush())


def test_machine_of_an_open_session_starts_at_acknowledge():
    m = RuntimeStateMachine(BINDINGS, opened=True)
    assert m.status is Status.ACKNOWLEDGE
    with pytest.raises(ProtocolViolation):
        m.send(sample(Open))


# ---------------------------------------------------- the wrappers around a Transactor


class Scripted(Transactor):
    """A transactor that answers with what a test scripts (right or wrong)."""

    def __init__(self, **answers):
        self.answers = answers
        self.closed = False

    def acknowledge(self, msg):
        return self.answers.get("acknowledge", Acknowledged())

    def load(self, msg):
        return self.answers.get("load", [])

    def flush(self, msg):
        return self.answers.get("flush", ([], Flushed()))

    def store(self, msg):
        pass

    def start_commit(self, msg):
        return self.answers.get("start_commit", StartedCommit())

    def close(self):
        self.closed = True


@pytest.mark.parametrize("wrapper", ["runtime", "driver"])
def test_wrappers_pass_a_correct_transaction(wrapper):
    inner = Scripted(load=[loaded((A,))], flush=([loaded((B,))], Flushed()))
    t = RuntimeSession(inner, BINDINGS) if wrapper == "runtime" else GuardedTransactor(inner, BINDINGS)
    assert isinstance(t.acknowledge(Acknowledge()), Acknowledged)
    assert [r.keys for r in t.load(Load(0, (A, B, C)))] == [(A,)]
    late, flushed = t.flush(Flush())
    assert [r.keys for r in late] == [(B,)] and isinstance(flushed, Flushed)
    t.store(store(keys=(A, B, C), exists=(True, True, False)))
    assert isinstance(t.start_commit(StartCommit(CHECKPOINT)), StartedCommit)
    assert t.status is Status.ACKNOWLEDGE
    t.close()
    assert inner.closed and t.status is Status.CLOSED


@pytest.mark.parametrize("wrapper", ["runtime", "driver"])
def test_wrappers_reject_a_loaded_for_a_key_never_requested(wrapper):
    inner = Scripted(load=[loaded((C,))])
    t = RuntimeSession(inner, BINDINGS) if wrapper == "runtime" else GuardedTransactor(inner, BINDINGS)
    t.acknowledge(Acknowledge())
    with pytest.raises(ProtocolViolation, match="never Loaded-requested"):
        t.load(Load(0, (A,)))


@pytest.mark.parametrize("wrapper", ["runtime", "driver"])
def test_wrappers_reject_flush_before_acknowledge(wrapper):
    t = RuntimeSession(Scripted(), BINDINGS) if wrapper == "runtime" else GuardedTransactor(Scripted(), BINDINGS)
    with pytest.raises(ProtocolViolation) as err:
        t.flush(Flush())
    assert (err.value.state, err.value.received) == ("ACKNOWLEDGE", "Flush")


def test_runtime_session_rejects_the_wrong_reply_type():
    t = RuntimeSession(Scripted(acknowledge=Flushed()), BINDINGS)
    with pytest.raises(ProtocolViolation, match="wrong reply type") as err:
        t.acknowledge(Acknowledge())
    assert (err.value.received, err.value.expected) == ("Flushed", "Acknowledged")


def test_every_point_of_the_matrix_is_reachable_on_both_sides():
    # The matrix above covers each status at least once, and both sides agree on each point.
    seen = set()
    for prefix, status, _ in POINTS.values():
        r, d = RuntimeStateMachine(BINDINGS), DriverStateMachine(BINDINGS)
        walk(r, prefix), walk(d, prefix)
        assert r.status is d.status is status
        seen.add(status)
    assert seen == set(Status) - {Status.CLOSED}
    assert len(list(itertools.product(POINTS, RUNTIME_MSGS + DRIVER_MSGS))) == len(MATRIX)
