"""The push endpoints' one driver (:mod:`tidemark.drivers.push`) on its own, without Spark or
a broker: the real local state store (the store endpoint's, on RocksDB) beside an in-memory
log part written here (:class:`MemoryLog`), which keeps what a log endpoint keeps -- fences
and frontiers per range, the committed rows in commit order, the quarantine -- and refuses a
stale session's publish as Kafka's transactional fencing does.

The exactly-once behaviours pinned here are the driver's: where the endpoint's commit counts
(Kafka, NATS), the endpoint commits first and the local store follows, and Open brings the
local store to the endpoint's frontier (after a crash between the two commits, on a machine
that never held the range, over a store of an earlier run) or refuses a store ahead of it;
where the local store's commit counts (the webhook), the publish runs inside the store's
fenced commit, so a zombie sends nothing and a crash before the store's write replays the
batch."""

from __future__ import annotations

import pickle
from dataclasses import dataclass, field
from typing import Optional, Sequence

import pytest

pytest.importorskip("rocksdict")

from tidemark.collection.keys import key_hash
from tidemark.drivers.base import CheckpointRow
from tidemark.drivers.common.columns import dumps
from tidemark.drivers.common.fences import CheckpointState, fenced_off, plan_open
from tidemark.drivers.push import PushDriver, PushLog
from tidemark.drivers.push.local import QUARANTINE_ID, binding_id
from tidemark.errors import FencedOff, IncompatibleSchema, RecoveryError
from tidemark.faults import fault_point, hooked
from tidemark.protocol.checkpoints import batch_of
from tidemark.protocol.messages import (
    Acknowledge,
    BindingSpec,
    Field,
    Flush,
    Load,
    Open,
    Quarantine,
    Range,
    SpecResponse,
    StartCommit,
    Store,
)
from tidemark.store import Reader, tidemark_key

MAT = "m"
FIELDS = (Field("id", "/id", "string", is_key=True), Field("n", "/n", "integer"))
TOTALS = BindingSpec({"name": "totals"}, "events", ("/id",), FIELDS)
CHANGES = BindingSpec({"name": "changes"}, "events", ("/id",), FIELDS, delta_updates=True)
BINDINGS = (TOTALS, CHANGES)
PUBLISHED = "test_log_published"  # a fault point of MemoryLog's publish, after the endpoint took the batch


# ----------------------------------------------------------------------------- the in-memory log endpoint


@dataclass
class Endpoint:
    fences: dict = field(default_factory=dict)  # (materialization, Range) -> fence
    frontiers: dict = field(default_factory=dict)  # (materialization, Range) -> runtime checkpoint
    rows: list = field(default_factory=list)  # (materialization, resource, key, JSON bytes | None), commit order
    quarantine: list = field(default_factory=list)
    deliveries: list = field(default_factory=list)  # (range name, batch, [(resource, key, value)]) per publish
    sessions: int = 0  # sessions open at the endpoint (a producer each)


ENDPOINTS: dict[str, Endpoint] = {}


class MemorySession:
    def __init__(self, ep: Endpoint, commits: bool, mat: str, key_range: Range, fence: int, checkpoint, resources):
        self.ep, self.commits, self.mat, self.range, self.fence = ep, commits, mat, key_range, fence
        self.checkpoint: Optional[dict] = checkpoint if commits else None
        self.place = f"the frontier of range {key_range.name} at the in-memory log"
        self.resources = list(resources)
        self.sent: list = []
        ep.sessions += 1

    def send(self, msg: Store) -> None:
        res = self.resources[msg.binding]
        for key, doc, delete in zip(msg.keys, msg.docs, msg.deletes):
            self.sent.append((res, tuple(key), None if delete else dumps(doc).encode()))

    def publish(self, cp: dict, batch: Optional[int], quarantined: list[dict]) -> None:
        if self.commits and self.ep.fences.get((self.mat, self.range)) != self.fence:
            raise fenced_off(self.mat, self.range, self.fence)  # a receiver (commits: false) fences nothing
        self.ep.deliveries.append((self.range.name, batch, list(self.sent)))
        if self.commits:
            self.ep.rows.extend((self.mat, *row) for row in self.sent)
            self.ep.frontiers[(self.mat, self.range)] = cp
            self.ep.quarantine.extend(quarantined)
        fault_point(PUBLISHED)

    def committed(self) -> None:
        self.sent = []

    def close(self) -> None:
        self.ep.sessions -= 1


class MemoryLog(PushLog):
    """A log endpoint in this process (``name``), whose commit counts unless ``commits: false``."""

    name = "memory-log"

    def __init__(self, config: dict):
        self.settings = dict(config)
        self.commits = bool(config.get("commits", True))
        self.store_options = {"path": config["state"]}
        self.ep = ENDPOINTS.setdefault(config["name"], Endpoint())

    @staticmethod
    def resolve_config(config: dict, base_dir: str) -> dict:
        return dict(config)

    def spec(self) -> SpecResponse:
        return SpecResponse()

    def resources(self, materialization: str, bindings: Sequence[BindingSpec]) -> list[str]:
        return [b.resource["name"] for b in bindings]

    def fence(self, req: Open, resources: Sequence[str]) -> MemorySession:
        mat, key_range, ep = req.materialization, req.range, self.ep
        over = [
            CheckpointState(r, f, ep.frontiers.get((m, r)))
            for (m, r), f in ep.fences.items()
            if m == mat and r.overlaps(key_range)
        ]
        plan = plan_open(mat, key_range, over)
        for s in over:
            ep.fences[(mat, s.range)] = s.fence + 1
        ep.fences[(mat, key_range)] = plan.fence
        if plan.checkpoint is not None:
            ep.frontiers[(mat, key_range)] = plan.checkpoint
        return MemorySession(ep, self.commits, mat, key_range, plan.fence, plan.checkpoint, resources)

    def rows(self, materialization: str, resources: Sequence[str]):
        if not self.commits:
            return None
        return [(res, key, v) for m, res, key, v in self.ep.rows if m == materialization and res in resources]

    def checkpoints(self, materialization: str) -> Optional[list[CheckpointRow]]:
        if not self.commits:
            return None
        return [
            CheckpointRow(m, r, f, self.ep.frontiers.get((m, r)))
            for (m, r), f in self.ep.fences.items()
            if m == materialization
        ]

    def quarantined(self, materialization: str) -> Optional[list[dict]]:
        return list(self.ep.quarantine) if self.commits else None

    def drop(self, materialization: str, bindings: Sequence[BindingSpec], resources: Sequence[str]) -> list[str]:
        ep = self.ep
        ep.fences = {k: v for k, v in ep.fences.items() if k[0] != materialization}
        ep.frontiers = {k: v for k, v in ep.frontiers.items() if k[0] != materialization}
        ep.rows = [r for r in ep.rows if r[0] != materialization]
        ep.quarantine = []
        return [f"dropped {materialization} at the in-memory log"]


class MemoryPushDriver(PushDriver):
    name = "memory-push"
    log_part = MemoryLog


# ----------------------------------------------------------------------------- helpers


@pytest.fixture
def endpoint(tmp_path):
    """``machine(name, commits=True)``: a driver on its own local state folder (a machine),
    all of them on one in-memory log endpoint."""
    name = f"log-{tmp_path}"
    made: list[PushDriver] = []

    def machine(state: str = "a", commits: bool = True) -> MemoryPushDriver:
        driver = MemoryPushDriver({"name": name, "state": str(tmp_path / state), "commits": commits})
        made.append(driver)
        return driver

    yield machine
    for driver in made:
        driver.close()
    ENDPOINTS.pop(name, None)


def cp(batch: int, checkpoint_id: str = "c1") -> dict:
    return {"checkpoint_id": checkpoint_id, "batch_id": batch, "materialization": MAT}


def store_msg(binding: int, docs: dict, deletes: Sequence[str] = ()) -> Store:
    keys = sorted(docs) + sorted(deletes)
    n = len(keys)
    return Store(
        binding,
        tuple((k,) for k in keys),
        ((),) * n,
        tuple(docs.get(k, {"id": k}) for k in keys),
        (False,) * n,
        tuple(k in deletes for k in keys),
    )


def session(driver: PushDriver, key_range: Range = Range()):
    txn, opened = driver.open(Open(MAT, "v1", key_range, bindings=BINDINGS))
    txn.acknowledge(Acknowledge())
    return txn, opened


def commit(driver, batch: int, docs: dict, deletes=(), *, checkpoint_id="c1", key_range=Range(), changes=None):
    txn, opened = session(driver, key_range)
    try:
        if docs or deletes:
            txn.store(store_msg(0, docs, deletes))
        if changes:
            txn.store(store_msg(1, changes))
        txn.start_commit(StartCommit(cp(batch, checkpoint_id)))
    finally:
        txn.close()
    return opened


def loaded(txn, keys: Sequence[str]) -> dict:
    """What the session's Loads answer for ``keys`` of the standard binding (after Acknowledged)."""
    out = list(txn.load(Load(0, tuple((k,) for k in keys))))
    more, _ = txn.flush(Flush())
    return {k[0]: driver for ld in [*out, *more] for k, driver in zip(ld.keys, ld.docs)}


def local_batch(driver: PushDriver) -> list[int]:
    """The batch each range of the driver's local state store committed."""
    return [batch_of(r.runtime_checkpoint) for r in driver.local.checkpoints(MAT)]


class Crash(Exception):
    """The process dies at a fault point (raised by a hook, in this process)."""


def crash(point: str) -> None:
    raise Crash(point)


def doc(key: str, n: int) -> dict:
    return {"id": key, "n": n}


# ----------------------------------------------------------------------------- the endpoint's commit counts


def test_a_committed_batch_is_at_the_endpoint_and_the_local_store_answers_the_loads(endpoint):
    driver = endpoint()
    first = commit(driver, 0, {"a": doc("a", 1), "b": doc("b", 2)}, changes={"a": doc("a", 1)})
    assert first.runtime_checkpoint is None
    assert driver.dump(MAT, TOTALS) == {("a",): doc("a", 1), ("b",): doc("b", 2)}  # read back from the endpoint
    assert driver.dump(MAT, CHANGES) == [doc("a", 1)]
    assert [(r.range, r.runtime_checkpoint) for r in driver.checkpoints(MAT)] == [(Range(), cp(0))]
    txn, opened = session(driver)
    try:
        assert opened.runtime_checkpoint == cp(0)
        assert loaded(txn, ["a", "b", "zz"]) == {"a": doc("a", 1), "b": doc("b", 2)}
    finally:
        txn.close()
    assert local_batch(driver) == [0]
    assert driver.local.dump(MAT, CHANGES) == []  # a delta binding's rows are the endpoint's only


def test_open_rebuilds_the_local_store_after_a_crash_between_the_endpoint_commit_and_its_own(endpoint):
    """The endpoint committed batch 1 (a changed, b deleted); the process died before the
    local store did. The next Open answers the endpoint's frontier, and its Loads read batch
    1's documents: a Load from the stale store would reduce batch 2 onto batch 0's values."""
    driver = endpoint()
    commit(driver, 0, {"a": doc("a", 1), "b": doc("b", 2)})
    with hooked("after_endpoint_commit", crash), pytest.raises(Crash):
        commit(driver, 1, {"a": doc("a", 10)}, deletes=["b"])
    assert [(r.range, batch_of(r.runtime_checkpoint)) for r in driver.checkpoints(MAT)] == [(Range(), 1)]
    assert local_batch(driver) == [0]

    txn, opened = session(driver)
    try:
        assert opened.runtime_checkpoint == cp(1)
        assert loaded(txn, ["a", "b"]) == {"a": doc("a", 10)}
    finally:
        txn.close()
    assert local_batch(driver) == [1]
    commit(driver, 2, {"a": doc("a", 11)})
    assert driver.dump(MAT, TOTALS) == {("a",): doc("a", 11)}


def test_a_range_opened_on_a_machine_that_never_held_it_is_rebuilt_with_its_own_keys_only(endpoint):
    a, b = endpoint("a"), endpoint("b")
    keys = [f"key-{i}" for i in range(40)]
    commit(a, 0, {k: doc(k, i) for i, k in enumerate(keys)})
    left = Range.split(2)[0]
    mine = {k: doc(k, i) for i, k in enumerate(keys) if left.contains(key_hash((k,)))}
    assert 0 < len(mine) < len(keys)
    txn, opened = session(b, left)  # machine b: an empty local store
    try:
        assert opened.runtime_checkpoint == cp(0)  # the whole range's frontier, inherited by its half
        assert loaded(txn, keys) == mine
    finally:
        txn.close()
    with Reader(b.local.store_config(MAT), left) as stored:  # nothing of the other half
        assert set(dict(stored.scan())) == {tidemark_key((k,), binding_id("totals")) for k in mine}


def test_a_local_store_of_an_earlier_run_is_replaced_by_the_endpoints_view(endpoint):
    a, b = endpoint("a"), endpoint("b")
    for half in Range.split(2):  # machine b held the view of run c1, on two shards
        mine = {"old": doc("old", 1)} if half.contains(key_hash(("old",))) else {}
        commit(b, 0, mine, checkpoint_id="c1", key_range=half)
    a.log.drop(MAT, BINDINGS, ["totals", "changes"])  # the view started over at the endpoint (run c2)
    commit(a, 0, {"new": doc("new", 2)}, checkpoint_id="c2")
    commit(a, 1, {"new": doc("new", 3)}, checkpoint_id="c2")
    txn, opened = session(b)
    try:
        assert opened.runtime_checkpoint == cp(1, "c2")
        assert loaded(txn, ["old", "new"]) == {"new": doc("new", 3)}
    finally:
        txn.close()
    assert [(r.range, r.runtime_checkpoint) for r in b.local.checkpoints(MAT)] == [(Range(), cp(1, "c2"))]
    assert b.local.dump(MAT, TOTALS) == {("new",): doc("new", 3)}


def test_a_local_store_ahead_of_the_endpoint_is_refused_and_left_as_it_is(endpoint):
    driver = endpoint()
    commit(driver, 0, {"a": doc("a", 1)})
    commit(driver, 1, {"a": doc("a", 2)})
    driver.log.drop(MAT, BINDINGS, ["totals", "changes"])  # reset under the local store
    with pytest.raises(RecoveryError, match="local state store .* is at batch 1 but .* has committed only nothing"):
        driver.open(Open(MAT, "v1", Range(), bindings=BINDINGS))
    assert driver.log.ep.sessions == 0  # the endpoint's session was closed
    assert local_batch(driver) == [1] and driver.local.dump(MAT, TOTALS) == {("a",): doc("a", 2)}


def test_a_zombie_session_is_refused_at_the_endpoint_and_changes_nothing(endpoint):
    driver = endpoint()
    commit(driver, 0, {"a": doc("a", 1)})
    zombie, _ = session(driver)
    zombie.store(store_msg(0, {"a": doc("a", 666)}))
    newer, opened = session(driver)  # a retried task opens the range again
    assert opened.runtime_checkpoint == cp(0)
    with pytest.raises(FencedOff, match="fence .* is stale"):
        zombie.start_commit(StartCommit(cp(1)))
    zombie.close()
    assert driver.dump(MAT, TOTALS) == {("a",): doc("a", 1)} and local_batch(driver) == [0]
    newer.store(store_msg(0, {"a": doc("a", 2)}))
    newer.start_commit(StartCommit(cp(1)))
    newer.close()
    assert driver.dump(MAT, TOTALS) == {("a",): doc("a", 2)} and local_batch(driver) == [1]


def test_a_session_whose_endpoint_commit_landed_before_a_newer_open_reports_it_committed(endpoint):
    """The endpoint took batch 1; before the local store followed, a session of a new layout
    opened an overlapping range on the same machine (its Open fences the store). The batch
    is committed -- the newer Open answers it -- so StartCommit says so (a FencedOff here
    would tell the runtime a committed batch was not), and the store is rebuilt by the Open."""
    a = endpoint()
    commit(a, 0, {"a": doc("a", 1)})
    left = Range.split(2)[0]
    newer: list = []

    def open_newer(point: str) -> None:
        newer.append(session(endpoint(), left))

    z, _ = session(a)
    z.store(store_msg(0, {k: doc(k, 2) for k in ("a", "b", "c", "d")}))
    with hooked("after_endpoint_commit", open_newer):
        z.start_commit(StartCommit(cp(1)))
    z.close()
    txn, opened = newer[0]
    try:
        assert opened.runtime_checkpoint == cp(1)
        mine = {k: doc(k, 2) for k in ("a", "b", "c", "d") if left.contains(key_hash((k,)))}
        assert loaded(txn, ["a", "b", "c", "d"]) == mine
    finally:
        txn.close()


def test_quarantined_rows_are_committed_by_the_endpoint_with_their_batch_and_resource(endpoint):
    driver = endpoint()
    txn, _ = session(driver)
    txn.store(store_msg(0, {"a": doc("a", 1)}))
    txn.quarantine(Quarantine(({"binding": 0, "location": "f:1", "key_json": '["x"]', "reason": "bad", "value": 1},)))
    txn.quarantine(Quarantine(({"binding": 7, "location": "f:2", "reason": "worse"},)))  # no such binding
    txn.start_commit(StartCommit(cp(3)))
    txn.close()
    rows = driver.quarantined(MAT)
    assert [(r["batch_id"], r["resource"], r["location"], r["reason"]) for r in rows] == [
        (3, "totals", "f:1", "bad"),
        (3, None, "f:2", "worse"),
    ]


# ----------------------------------------------------------------------------- the local store's commit counts


def test_store_authoritative_opened_comes_from_the_local_store_and_a_zombie_publishes_nothing(endpoint):
    driver = endpoint(commits=False)
    commit(driver, 0, {"a": doc("a", 1)})
    zombie, _ = session(driver)
    zombie.store(store_msg(0, {"a": doc("a", 666)}))
    newer, opened = session(driver)
    assert opened.runtime_checkpoint == cp(0)  # the local store's checkpoint
    with pytest.raises(FencedOff):
        zombie.start_commit(StartCommit(cp(1)))  # the store's fence check comes before the publish
    zombie.close()
    newer.close()
    assert [(batch, sent) for _, batch, sent in driver.log.ep.deliveries] == [
        (0, [("totals", ("a",), b'{"id":"a","n":1}')])
    ]
    assert driver.dump(MAT, TOTALS) == {("a",): doc("a", 1)}  # the local store's view
    assert [(r.range, r.runtime_checkpoint) for r in driver.checkpoints(MAT)] == [(Range(), cp(0))]


def test_store_authoritative_a_crash_after_the_publish_replays_the_batch_with_the_same_rows(endpoint):
    """The endpoint took batch 1, the store's write never happened: Open answers batch 0, so
    the batch runs again and publishes the same rows (a receiver that deduplicates keeps one)."""
    driver = endpoint(commits=False)
    commit(driver, 0, {"a": doc("a", 1)})
    with hooked(PUBLISHED, crash), pytest.raises(Crash):
        commit(driver, 1, {"a": doc("a", 2)})
    txn, opened = session(driver)
    try:
        assert opened.runtime_checkpoint == cp(0)
        assert loaded(txn, ["a"]) == {"a": doc("a", 1)}
    finally:
        txn.close()
    commit(driver, 1, {"a": doc("a", 2)})
    first, replay = [(b, sent) for _, b, sent in driver.log.ep.deliveries if b == 1]
    assert first == replay
    assert driver.dump(MAT, TOTALS) == {("a",): doc("a", 2)} and local_batch(driver) == [1]


# ----------------------------------------------------------------------------- setup


def test_two_standard_bindings_sharing_a_local_binding_id_are_refused(endpoint):
    driver = endpoint()
    seen: dict[int, str] = {}
    for i in range(100_000):
        name = f"view{i}"
        if binding_id(name) in seen and binding_id(name) != QUARANTINE_ID:
            break
        seen[binding_id(name)] = name
    first, second = seen[binding_id(name)], name
    same = [BindingSpec({"name": n}, "events", ("/id",), FIELDS) for n in (first, second)]
    with pytest.raises(IncompatibleSchema, match="share the local state store's 16-bit binding id"):
        driver.resources(MAT, same)
    delta = [same[0], BindingSpec({"name": second}, "events", ("/id",), FIELDS, delta_updates=True)]
    assert driver.resources(MAT, delta) == [first, second]  # a delta binding's rows are not looked up by id


def test_the_driver_ships_as_its_config(endpoint):
    driver = endpoint()
    commit(driver, 0, {"a": doc("a", 1)})
    shipped = pickle.loads(pickle.dumps(driver))
    try:
        assert type(shipped) is MemoryPushDriver and shipped.config == driver.config
        assert shipped.dump(MAT, TOTALS) == {("a",): doc("a", 1)}
    finally:
        shipped.close()
