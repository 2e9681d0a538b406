"""Split and merge: a new layout's range takes its keys and checkpoint from the old
ranges covering it, from local stores or (on another machine) from the changelog."""

from __future__ import annotations

import shutil

import pyarrow.fs as pafs
import pytest

pytest.importorskip("rocksdict")

from tidemark.errors import FencedOff, RecoveryError
from tidemark.protocol.messages import Range
from tidemark.store import RangeStore, Reader, StoreConfig, tidemark_key
from tidemark.store.keys import key_hash_of
from tidemark.store.layout import Head, plan

FULL = Range()
LOW, HIGH = Range.split(2)


def cp(batch: int, cid: str = "c1") -> dict:
    return {"materialization": "m", "checkpoint_id": cid, "batch_id": batch}


def keys(n: int) -> list[bytes]:
    return [tidemark_key([f"key-{i}"]) for i in range(n)]


def commit(store: RangeStore, batch: int, items: dict[bytes, bytes | None]) -> None:
    txn = store.transaction()
    for key, value in items.items():
        if store.range.contains(key_hash_of(key)):
            if value is None:
                txn.delete(key)
            else:
                txn.put(key, value)
    txn.commit(cp(batch))


def view(cfg, key_range) -> tuple[dict | None, dict[bytes, bytes]]:
    with Reader(cfg, key_range) as r:
        return r.checkpoint, dict(r.scan())


def within(key_range: Range, data: dict) -> dict:
    return {k: v for k, v in data.items() if key_range.contains(key_hash_of(k))}


@pytest.fixture
def cfg(tmp_path):
    return StoreConfig(
        path=str(tmp_path / "store"),
        changelog=str(tmp_path / "changelog"),
        changelog_fs=pafs.LocalFileSystem(),
        snapshot_every=1000,
    )


def test_split_one_to_two_then_merge_back(cfg):
    ks = keys(200)
    data = {key: b"v-" + key[6:] for key in ks}
    parent = RangeStore.open(cfg, FULL)
    commit(parent, 0, data)
    commit(parent, 1, {ks[0]: None, ks[1]: b"changed"})
    data.pop(ks[0])
    data[ks[1]] = b"changed"

    low, high = RangeStore.open(cfg, LOW), RangeStore.open(cfg, HIGH)
    assert low.recover() == high.recover() == cp(1)  # a split copies the checkpoint
    assert view(cfg, LOW) == (cp(1), within(LOW, data))
    assert view(cfg, HIGH) == (cp(1), within(HIGH, data))
    assert within(LOW, data) and within(HIGH, data)
    with pytest.raises(FencedOff):  # the parent's session is a zombie now
        commit(parent, 2, {ks[5]: b"zombie"})

    commit(low, 2, {k: b"low2" for k in ks[:50]})
    commit(high, 2, {k: b"high2" for k in ks[:50]})
    for key in ks[:50]:
        data[key] = b"low2" if LOW.contains(key_hash_of(key)) else b"high2"

    merged = RangeStore.open(cfg, FULL)  # the old parent store is stale (batch 1): rebuilt
    assert merged.recover() == cp(2)
    assert view(cfg, FULL) == (cp(2), data)
    with pytest.raises(FencedOff):
        commit(low, 3, {ks[7]: b"zombie"})
    commit(merged, 3, {ks[9]: b"merged3"})
    data[ks[9]] = b"merged3"
    assert view(cfg, FULL) == (cp(3), data)


def test_merge_refuses_ranges_at_different_batches(cfg):
    ks = keys(50)
    parent = RangeStore.open(cfg, FULL)
    commit(parent, 0, {k: b"0" for k in ks})
    low, high = RangeStore.open(cfg, LOW), RangeStore.open(cfg, HIGH)
    commit(low, 1, {k: b"1" for k in ks})  # high never committed batch 1
    with pytest.raises(RecoveryError, match=r"00000000-7fffffff: batch 1.*80000000-ffffffff: batch 0"):
        RangeStore.open(cfg, FULL)
    commit(high, 1, {k: b"1" for k in ks})
    assert RangeStore.open(cfg, FULL).recover() == cp(1)


def test_merge_refuses_different_checkpoints_of_one_batch(cfg):
    low, high = RangeStore.open(cfg, LOW), RangeStore.open(cfg, HIGH)
    txn = low.transaction()
    txn.commit(cp(3, "first"))
    txn = high.transaction()
    txn.commit(cp(3, "second"))
    with pytest.raises(RecoveryError, match="disagree"):
        RangeStore.open(cfg, FULL)


def test_split_on_another_machine_builds_from_the_changelog(cfg, tmp_path):
    ks = keys(100)
    data = {k: b"x" + k[-3:] for k in ks}
    parent = RangeStore.open(cfg, FULL)
    commit(parent, 0, data)
    commit(parent, 1, {ks[3]: None})
    data.pop(ks[3])
    parent.close()
    shutil.rmtree(cfg.path)  # the task of the new layout runs where no local store is
    low = RangeStore.open(cfg, LOW)
    assert low.recover() == cp(1)
    assert view(cfg, LOW) == (cp(1), within(LOW, data))
    # the new range is self-contained in the changelog (a snapshot at the inherited batch)
    shutil.rmtree(cfg.path)
    assert RangeStore.open(cfg, LOW).recover() == cp(1)
    assert view(cfg, LOW) == (cp(1), within(LOW, data))


def test_plan_rules():
    q = [Range(0, 0x3FFFFFFF), Range(0x40000000, 0x7FFFFFFF)]
    assert plan("s", LOW, []).sources == ()
    assert plan("s", LOW, [Head(FULL, cp(4))]).sources == (FULL,)
    assert plan("s", LOW, [Head(FULL, cp(4)), Head(LOW, cp(4))]).sources == (LOW,)
    assert plan("s", LOW, [Head(FULL, cp(4)), Head(LOW, cp(3))]).sources == (FULL,)
    assert plan("s", LOW, [Head(FULL, cp(4)), Head(q[0], cp(5)), Head(q[1], cp(5))]).sources == tuple(q)
    with pytest.raises(RecoveryError):
        plan("s", LOW, [Head(FULL, cp(4)), Head(q[0], cp(5))])


def test_a_merge_inherits_when_the_ranges_committed_one_batch_under_two_spec_versions():
    """Range LOW committed batch 3 under spec version v1, HIGH finished batch 3 after the config
    was edited (v2): one batch, the same identity (checkpoint, batch, query, offsets). A merge
    inherits it, as the SQL endpoints do (the one rule: tidemark.protocol.checkpoints); another
    query's batch 3 still disagrees."""
    a = dict(cp(3), version="v1", query_id="q", offsets={"0": 5})
    b = dict(cp(3), version="v2", query_id="q", offsets={"0": 5})
    merged = plan("s", FULL, [Head(LOW, a), Head(HIGH, b)])
    assert merged.checkpoint == a and set(merged.sources) == {LOW, HIGH}
    other = dict(b, query_id="q2")
    with pytest.raises(RecoveryError, match="disagree"):
        plan("s", FULL, [Head(LOW, a), Head(HIGH, other)])
