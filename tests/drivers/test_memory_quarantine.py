"""The memory driver (the runtime's test double) quarantines in every commit pattern: the
rows commit with the transaction's data, once, and a session that dies first leaves none."""

from __future__ import annotations

import uuid

import pytest

from tidemark.drivers import memory
from tidemark.drivers.base import CommitPattern, capabilities_of
from tidemark.errors import SpecError
from tidemark.protocol.messages import (
    Acknowledge,
    BindingSpec,
    Field,
    Flush,
    Open,
    Quarantine,
    Range,
    StartCommit,
    Store,
)
from tidemark.runtime.merge_patch import apply_update
from tidemark.runtime.startup_checks import check_capabilities

MAT = "view"
BINDING = BindingSpec(
    {"table": "t"},
    "orders",
    ("/k",),
    (Field("k", "/k", "string", is_key=True, nullable=False), Field("n", "/n", "integer")),
)
ROW = {"binding": 0, "location": "f.json:3", "key_json": '["a"]', "reason": "/n: not an integer", "value": "x"}


@pytest.fixture
def name():
    n = f"q-{uuid.uuid4().hex[:8]}"
    yield n
    memory.reset(n)


def transaction(driver, state, batch, quarantine=(), commit=True):
    """One session with one transaction; returns the driver-checkpoint update (or None)."""
    t, _ = driver.open(Open(MAT, "v1", Range(), state=state, bindings=(BINDING,)))
    t.acknowledge(Acknowledge(state=state))
    t.flush(Flush())
    t.store(Store(0, (("a",),), ((batch,),), ({"k": "a", "n": batch},), (False,), (False,)))
    if quarantine:
        t.quarantine(Quarantine(tuple(quarantine)))
    if not commit:
        t.close()  # died before StartCommit
        return None
    started = t.start_commit(StartCommit({"checkpoint_id": "c", "batch_id": batch, "materialization": MAT}))
    t.close()
    return started.state


@pytest.mark.parametrize("pattern", [p.value for p in CommitPattern])
def test_quarantine_commits_with_the_transaction_once(pattern, name):
    driver = memory.MemoryDriver({"pattern": pattern, "name": name})
    assert capabilities_of(driver).quarantine
    state = None
    transaction(driver, state, 0, [dict(ROW, location="lost.json:1")], commit=False)
    assert memory.quarantined(MAT, {"name": name}) == []
    for batch, rows in ((0, [ROW]), (1, []), (2, [dict(ROW, location="f.json:9")])):
        state = apply_update(state, transaction(driver, state, batch, rows))
        for _ in range(2):  # the recovery log holds it; the apply runs again after a restart
            driver.coordinator_acknowledge(MAT, state, {"checkpoint_id": "c", "batch_id": batch}, (BINDING,))
    if pattern == CommitPattern.IDEMPOTENT_APPLY_SHARD.value:
        for _ in range(2):  # the next session's Acknowledge applies the last stage, once
            t, _ = driver.open(Open(MAT, "v1", Range(), state=state, bindings=(BINDING,)))
            t.acknowledge(Acknowledge(state=state))
            t.close()
    got = driver.quarantined(MAT)
    assert [(r["batch_id"], r["location"]) for r in got] == [(0, "f.json:3"), (2, "f.json:9")]
    assert got[0] == dict(ROW, batch_id=0)
    assert driver.dump(MAT, BINDING) == {("a",): {"k": "a", "n": 2}}
    assert driver.drop(MAT, (BINDING,)) and driver.quarantined(MAT) == []


def test_file_backend_and_undeclared_quarantine(tmp_path):
    path = str(tmp_path / "m.json")
    driver = memory.MemoryDriver({"path": path})
    transaction(driver, None, 0, [ROW])
    assert [r["location"] for r in memory.quarantined(MAT, {"path": path})] == ["f.json:3"]
    off = memory.MemoryDriver({"path": path, "quarantine": False})
    assert not capabilities_of(off).quarantine
    with pytest.raises(SpecError, match="quarantine"):
        check_capabilities(
            capabilities_of(off),
            materialization=MAT,
            driver_name="memory",
            bindings=(BINDING,),
            on_invalid="quarantine",
        )
