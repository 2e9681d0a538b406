"""The store engine in one process: atomic commit, read-your-writes, deletes, abort,
the bounded buffer spilling to disk, key order, fencing, refusals."""

from __future__ import annotations

import random

import pytest

pytest.importorskip("rocksdict")

from tidemark.errors import DriverError, FencedOff, ProtocolViolation, RecoveryError
from tidemark.protocol.messages import Range
from tidemark.store import Isolation, RangeStore, Reader, StoreConfig, encode_key, tidemark_key

FULL = Range()


def cp(batch: int) -> dict:
    return {"materialization": "m", "checkpoint_id": "c1", "batch_id": batch}


def k(i: int) -> bytes:
    return tidemark_key([f"key-{i}"])


@pytest.fixture
def cfg(tmp_path):
    return StoreConfig(path=str(tmp_path / "store"), spill_dir=str(tmp_path / "spill"))


def committed(cfg, key_range=FULL) -> tuple[dict | None, dict[bytes, bytes]]:
    with Reader(cfg, key_range) as r:
        return r.checkpoint, dict(r.scan())


def test_commit_writes_data_and_checkpoint_together_and_reads_your_writes(cfg):
    store = RangeStore.open(cfg, FULL)
    assert store.recover() is None
    txn = store.transaction()
    for i in range(10):
        txn.put(k(i), b"v%d" % i)
    txn.delete(k(3))
    assert txn.get(k(2)) == b"v2"
    assert txn.get(k(3)) is None
    assert txn.get(k(2), Isolation.READ_COMMITTED) is None  # not committed yet
    assert committed(cfg) == (None, {})  # another reader sees nothing before the commit
    info = txn.commit(cp(0))
    assert info.batch == 0 and info.keys == 11
    checkpoint, data = committed(cfg)
    assert checkpoint == cp(0)
    assert data == {k(i): b"v%d" % i for i in range(10) if i != 3}
    assert store.recover() == cp(0)

    txn = store.transaction()
    txn.delete(k(0))
    txn.put(k(1), b"new")
    assert dict(txn.scan()) == {**{k(i): b"v%d" % i for i in range(2, 10) if i != 3}, k(1): b"new"}
    assert dict(txn.scan(isolation=Isolation.READ_COMMITTED)) == data
    txn.commit(cp(1))
    assert committed(cfg)[1] == {**{k(i): b"v%d" % i for i in range(2, 10) if i != 3}, k(1): b"new"}


def test_abort_drops_every_uncommitted_write(cfg):
    store = RangeStore.open(cfg, FULL)
    txn = store.transaction()
    txn.put(k(1), b"a")
    txn.commit(cp(0))
    txn = store.transaction()
    txn.put(k(1), b"b")
    txn.delete(k(1))
    txn.put(k(2), b"c")
    txn.abort()
    with pytest.raises(ProtocolViolation):
        txn.put(k(3), b"d")
    assert committed(cfg) == (cp(0), {k(1): b"a"})
    assert store.transaction().get(k(2)) is None
    # a new session sees the same; nothing was wiped
    assert RangeStore.open(cfg, FULL).recover() == cp(0)
    assert committed(cfg) == (cp(0), {k(1): b"a"})


def test_buffer_smaller_than_one_batch_spills_and_reads_merge_in_key_order(tmp_path):
    cfg = StoreConfig(path=str(tmp_path / "store"), spill_dir=str(tmp_path / "spill"), max_uncommitted_bytes=512)
    store = RangeStore.open(cfg, FULL)
    rnd = random.Random(7)
    model: dict[bytes, bytes] = {}
    txn = store.transaction()
    for i in range(300):
        txn.put(k(i), b"c%d" % i)
        model[k(i)] = b"c%d" % i
    txn.commit(cp(0))

    txn = store.transaction()
    for n in range(3000):  # overwrites, deletes of committed and of buffered keys, re-puts
        i = rnd.randrange(600)
        if rnd.random() < 0.3:
            txn.delete(k(i))
            model.pop(k(i), None)
        else:
            txn.put(k(i), b"t%d-%d" % (i, n))
            model[k(i)] = b"t%d-%d" % (i, n)
        if n % 500 == 0:
            assert dict(txn.scan()) == model
    assert txn.buffer.spills > 5, "the buffer must have spilled several times"
    assert txn.buffer.memory_bytes <= 512
    scanned = list(txn.scan())
    assert [key for key, _ in scanned] == sorted(model)  # key order across memory, spill, store
    assert dict(scanned) == model
    for i in range(600):
        assert txn.get(k(i)) == model.get(k(i))
    lo, hi = sorted(model)[50], sorted(model)[150]
    assert list(txn.scan(lo, hi)) == sorted((a, b) for a, b in model.items() if lo <= a < hi)
    info = txn.commit(cp(1))
    assert info.spilled
    assert committed(cfg) == (cp(1), model)
    assert list(tmp_path.joinpath("spill").iterdir()) == []  # the spill store is gone


def test_prefix_scan_and_key_encoding(cfg):
    store = RangeStore.open(cfg, FULL)
    txn = store.transaction()
    a, b = encode_key(0x10, b"apple"), encode_key(0x10, b"apricot")
    c, d = encode_key(0x10, b"banana"), encode_key(0x11, b"apple")
    for key in (d, c, b, a):
        txn.put(key, key[4:])
    assert [key for key, _ in txn.prefix(encode_key(0x10, b"ap"))] == [a, b]
    txn.commit(cp(0))
    txn = store.transaction()
    txn.delete(a)
    txn.put(encode_key(0x10, b"apz"), b"z")
    assert [key for key, _ in txn.prefix(encode_key(0x10, b"ap"))] == [b, encode_key(0x10, b"apz")]
    with Reader(cfg, FULL) as r:
        assert [key for key, _ in r.prefix(encode_key(0x10, b""))] == [a, b, c]


def test_a_newer_session_fences_the_older_one(cfg):
    old = RangeStore.open(cfg, FULL)
    txn = old.transaction()
    txn.put(k(1), b"old")
    new = RangeStore.open(cfg, FULL)
    assert new.fence > old.fence
    with pytest.raises(FencedOff, match="00000000-ffffffff"):
        txn.commit(cp(0))
    t2 = new.transaction()
    t2.put(k(1), b"new")
    t2.commit(cp(0))
    assert committed(cfg) == (cp(0), {k(1): b"new"})
    with pytest.raises(FencedOff):  # and stays fenced
        t3 = old.transaction()
        t3.put(k(2), b"x")
        t3.commit(cp(1))
    assert committed(cfg) == (cp(0), {k(1): b"new"})


def test_refusals_name_the_range(cfg):
    half = Range(0, 0x7FFFFFFF)
    store = RangeStore.open(cfg, half)
    txn = store.transaction()
    outside = encode_key(0x80000000, b"x")
    with pytest.raises(DriverError, match="outside the range"):
        txn.put(outside, b"1")
    txn.put(encode_key(1, b"x"), b"1")
    txn.commit(cp(4))
    txn = store.transaction()
    with pytest.raises(RecoveryError, match="not after the committed batch 4"):
        txn.commit(cp(4))
    txn = store.transaction()
    with pytest.raises(ProtocolViolation, match="batch_id"):
        txn.commit({"checkpoint_id": "c1"})
    assert committed(cfg, half) == (cp(4), {encode_key(1, b"x"): b"1"})
