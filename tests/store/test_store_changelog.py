"""The changelog beside the checkpoint: a range whose local store is missing or behind
restores from it exactly (snapshots + entries, through pyarrow.fs)."""

from __future__ import annotations

import random
import shutil

import pyarrow.fs as pafs
import pytest

pytest.importorskip("rocksdict")

from tidemark.errors import RecoveryError
from tidemark.protocol.messages import Range
from tidemark.store import Changelog, RangeStore, Reader, StoreConfig, tidemark_key

FULL = Range()


def cp(batch: int) -> dict:
    return {"materialization": "m", "checkpoint_id": "c1", "batch_id": batch}


def view(cfg, key_range=FULL):
    with Reader(cfg, key_range) as r:
        return r.checkpoint, dict(r.scan())


def run_batches(store: RangeStore, model: dict, first: int, count: int, rnd: random.Random) -> None:
    for b in range(first, first + count):
        txn = store.transaction()
        for _ in range(40):
            key = tidemark_key([f"k{rnd.randrange(120)}"])
            if rnd.random() < 0.25:
                txn.delete(key)
                model.pop(key, None)
            else:
                value = b"b%d-%d" % (b, rnd.randrange(1000))
                txn.put(key, value)
                model[key] = value
        txn.commit(cp(b))


@pytest.fixture
def cfg(tmp_path):
    return StoreConfig(
        path=str(tmp_path / "store"),
        changelog=str(tmp_path / "changelog"),
        changelog_fs=pafs.LocalFileSystem(),
        snapshot_every=4,
        keep_snapshots=2,
    )


def test_restore_after_the_local_store_is_deleted_is_exact(cfg):
    rnd, model = random.Random(1), {}
    store = RangeStore.open(cfg, FULL)
    run_batches(store, model, 0, 11, rnd)
    expected = view(cfg)
    assert expected == (cp(10), model)
    log = Changelog(cfg.changelog, cfg.changelog_fs)
    assert [s.batch for s in log.refs(FULL, "snap")] == [3, 7]  # every 4 commits, the newest 2 kept
    assert min(e.batch for e in log.refs(FULL, "log")) == 4  # entries older than the kept snapshots pruned
    store.close()
    shutil.rmtree(cfg.path)
    restored = RangeStore.open(cfg, FULL)
    assert restored.recover() == cp(10)
    assert view(cfg) == expected
    run_batches(restored, model, 11, 3, rnd)  # and it goes on from there
    assert view(cfg) == (cp(13), model)


def test_a_local_store_behind_the_changelog_rolls_forward(cfg, tmp_path):
    rnd, model = random.Random(2), {}
    store = RangeStore.open(cfg, FULL)
    run_batches(store, model, 0, 2, rnd)
    old_copy = tmp_path / "old-copy"
    shutil.copytree(cfg.db_path(FULL), old_copy)  # the local store as it was at batch 1
    run_batches(store, model, 2, 3, rnd)
    store.close()
    shutil.rmtree(cfg.db_path(FULL))
    shutil.copytree(old_copy, cfg.db_path(FULL))
    reopened = RangeStore.open(cfg, FULL)
    assert reopened.recover() == cp(4)
    assert view(cfg) == (cp(4), model)


def test_restore_refuses_a_changelog_with_a_gap(cfg):
    rnd, model = random.Random(3), {}
    cfg2 = StoreConfig(path=cfg.path, changelog=cfg.changelog, changelog_fs=cfg.changelog_fs, snapshot_every=1000)
    store = RangeStore.open(cfg2, FULL)
    run_batches(store, model, 0, 4, rnd)
    store.close()
    log = Changelog(cfg.changelog, cfg.changelog_fs)
    victim = [e for e in log.refs(FULL, "log") if e.batch == 1][0]
    cfg.changelog_fs.delete_file(victim.path)
    shutil.rmtree(cfg.path)
    with pytest.raises(RecoveryError, match="cannot rebuild batch 3"):
        RangeStore.open(cfg2, FULL)


def test_a_store_without_changelog_history_seeds_it_with_a_snapshot(tmp_path):
    local_only = StoreConfig(path=str(tmp_path / "store"))
    rnd, model = random.Random(4), {}
    run_batches(RangeStore.open(local_only, FULL), model, 0, 3, rnd)
    with_log = StoreConfig(path=local_only.path, changelog=str(tmp_path / "cl"), changelog_fs=pafs.LocalFileSystem())
    RangeStore.open(with_log, FULL).close()
    shutil.rmtree(local_only.path)
    assert RangeStore.open(with_log, FULL).recover() == cp(2)
    assert view(with_log) == (cp(2), model)
