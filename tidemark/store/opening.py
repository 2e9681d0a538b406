"""Open of a range: fence every overlapping session, then bring the range to its
committed state — keep it, roll it forward, restore it, or build it from a split or
a merge.  Everything happens under the exclusive file locks of the opened range and
of every local range overlapping it.

Steps (the order is the correctness):

1. Lock: under the short layout lock, register the range (its lock file) and take the
   locks of every registered range overlapping it, all or nothing (retry on conflict).
2. Heads: what each overlapping range committed last, locally and in the changelog
   (the changelog is written first, so it may be ahead: a crash between the two).
3. Plan: :func:`tidemark.store.layout.plan` (a refusal changes nothing, fences nobody).
4. Fence: ``fence = 1 + max(fence of every overlapping local store)``, written into each
   of them (and, in step 6, into the range): a zombie of the range, of a parent before a
   split or of a child before a merge finds another fence at its commit.
5. Materialize: keep the local store if it is at the planned batch (and is the commit the
   changelog holds); roll it forward from the changelog if it is behind; else build a
   new DB from the sources (local stores at the planned batch, else the changelog) and
   swap it in.  Nothing is wiped before its replacement is complete.
6. Write the fence into the range; snapshot it to the changelog when the changelog lacks
   its planned batch (a split, a merge, or a changelog configured late).
"""

from __future__ import annotations

import os
import shutil
import time
import uuid
from dataclasses import dataclass
from typing import Any, Iterator, Optional, cast

from tidemark.errors import EndpointUnavailable, RecoveryError
from tidemark.protocol.messages import Range
from tidemark.store import db as rdb
from tidemark.store.changelog import Changelog
from tidemark.store.config import StoreConfig
from tidemark.store.keys import clamp, is_range_name, range_bounds
from tidemark.store.layout import Head, Plan, plan
from tidemark.store.locking import FileLock, acquire_all, release_all

BUILD_CHUNK = 4096


@dataclass(frozen=True, slots=True)
class Opened:
    fence: int
    meta: rdb.Meta
    since_snapshot: int  # commits in the changelog after the range's newest snapshot
    reader: object  # a read-only handle on the committed state, opened under the locks


def lock_ranges(cfg: StoreConfig, key_range: Range) -> list[FileLock]:
    """Step 1: the locks of ``key_range`` and of every registered range overlapping it."""
    os.makedirs(os.path.dirname(cfg.layout_lock_path), exist_ok=True)
    deadline = time.monotonic() + cfg.lock_timeout
    delay = 0.001
    while True:
        with FileLock(cfg.layout_lock_path).acquire(True, cfg.lock_timeout):
            open(cfg.lock_path(key_range), "a").close()
            names = [n[:-5] for n in os.listdir(os.path.dirname(cfg.layout_lock_path)) if n.endswith(".lock")]
            touched = [Range.parse(n) for n in names if is_range_name(n)]
            paths = [cfg.lock_path(r) for r in touched if r.overlaps(key_range)]
            try:
                return acquire_all(paths, timeout=0)
            except EndpointUnavailable:
                pass
        if time.monotonic() >= deadline:
            raise EndpointUnavailable(
                f"store {cfg.path}: range {key_range.name} or a range overlapping it stayed locked for "
                f"{cfg.lock_timeout:.0f}s (another Open or a commit); retry, or raise retry.lock_timeout"
            )
        time.sleep(delay)
        delay = min(delay * 2, 0.05)


def local_ranges(cfg: StoreConfig, key_range: Range) -> dict[Range, rdb.Meta]:
    out = {}
    base = os.path.join(cfg.path, "ranges")
    for name in os.listdir(base) if os.path.isdir(base) else ():
        if is_range_name(name) and Range.parse(name).overlaps(key_range) and rdb.exists(os.path.join(base, name)):
            r = Range.parse(name)
            db = rdb.open_primary(cfg.db_path(r))
            try:
                out[r] = rdb.read_meta(db)
            finally:
                db.close()
    return out


def open_range(cfg: StoreConfig, key_range: Range, changelog: Optional[Changelog]) -> Opened:
    locks = lock_ranges(cfg, key_range)
    try:
        _clean_leftovers(cfg, key_range)
        local = local_ranges(cfg, key_range)
        # Step 2: heads, local and changelog; the later one wins per range.
        heads = {r: Head(r, m.checkpoint) for r, m in local.items()}
        if changelog is not None:
            for r in changelog.ranges():
                if r.overlaps(key_range):
                    h = changelog.head(r)
                    if h is not None and (r not in heads or h.batch > heads[r].batch):
                        heads[r] = h
        # Step 3: plan.
        opening = plan(cfg.path, key_range, list(heads.values()))
        # Step 4 (after the plan, which may refuse: a refused Open fences nobody): fence
        # every overlapping local store.
        fence = 1 + max((m.fence for m in local.values()), default=0)
        for r in local:
            db = rdb.open_primary(cfg.db_path(r))
            try:
                rdb.write_fence(db, fence)
            finally:
                db.close()
        # Step 5: materialize.
        _materialize(cfg, key_range, opening, local, changelog)
        # Step 6: fence the range, snapshot what the changelog lacks.
        db = rdb.open_primary(cfg.db_path(key_range))
        try:
            rdb.write_fence(db, fence)
            meta = rdb.read_meta(db)
            since = 0
            if changelog is not None:
                ch = changelog.head(key_range)
                if opening.checkpoint is not None and (ch is None or ch.batch < opening.batch):
                    changelog.write(
                        key_range, "snap", opening.checkpoint, -1, rdb.iter_data(db, *range_bounds(key_range))
                    )
                snaps = changelog.refs(key_range, "snap")
                last_snap = snaps[-1].batch if snaps else -1
                since = sum(1 for e in changelog.refs(key_range, "log") if e.batch > last_snap)
        finally:
            db.close()
        return Opened(fence, meta, since, rdb.open_read_only(cfg.db_path(key_range)))
    finally:
        release_all(locks)


def _clean_leftovers(cfg: StoreConfig, key_range: Range) -> None:
    """An Open that crashed mid-swap left ``.old-*`` (complete, the previous store) and
    maybe ``.build-*`` (incomplete): put the old one back if the range has none."""
    shutil.rmtree(cfg.tmp_dir(key_range), ignore_errors=True)  # SST files of a commit that died
    final = cfg.db_path(key_range)
    base = os.path.dirname(final)
    if not os.path.isdir(base):
        return
    for name in sorted(os.listdir(base)):
        path = os.path.join(base, name)
        if name.startswith(f".old-{key_range.name}-") and not os.path.exists(final):
            os.rename(path, final)
        elif name.startswith((f".build-{key_range.name}-", f".old-{key_range.name}-")):
            shutil.rmtree(path, ignore_errors=True)


def _materialize(
    cfg: StoreConfig, key_range: Range, opening: Plan, local: dict[Range, rdb.Meta], changelog: Optional[Changelog]
) -> None:
    mine = local.get(key_range)
    if opening.sources == ():
        if mine is None:
            rdb.open_primary(cfg.db_path(key_range)).close()  # a new, empty store
        return
    if opening.sources == (key_range,) and mine is not None:
        if mine.batch == opening.batch and not _diverged(key_range, mine, changelog):
            return  # committed state is here: nothing to undo, nothing to wipe
        if mine.batch < opening.batch and changelog is not None:
            try:
                snap, entries = changelog.chain(
                    key_range, opening.batch, base=mine.batch, base_digest=(mine.commit or {}).get("digest")
                )
            except RecoveryError:
                snap, entries = None, None
            if snap is None and entries is not None:
                _roll_forward(cfg, key_range, entries, changelog)
                return
    _rebuild(cfg, key_range, opening, local, changelog)


def _diverged(key_range: Range, mine: rdb.Meta, changelog: Optional[Changelog]) -> bool:
    """The local commit of the batch is not the one the changelog holds (another
    machine's attempt of the same batch won)."""
    if changelog is None or not mine.commit or not mine.commit.get("digest"):
        return False
    entry = changelog.entries(key_range).get(mine.batch)
    if entry is None:
        return False
    digests = {r.digest for r in entry} if isinstance(entry, list) else {entry.digest}
    return mine.commit["digest"] not in digests


def _roll_forward(cfg: StoreConfig, key_range: Range, entries, changelog: Changelog) -> None:
    """Apply the changelog entries the local store lacks, each atomically."""
    db = rdb.open_primary(cfg.db_path(key_range))
    try:
        for ref in entries:
            cp = changelog.metadata(ref)["checkpoint"]
            metas = rdb.meta_items(cp, {"batch": ref.batch, "digest": ref.digest})
            rdb.write_atomic(db, changelog.read(ref), metas, sst_dir=cfg.tmp_dir(key_range))
    finally:
        db.close()


def _source_items(
    cfg: StoreConfig,
    key_range: Range,
    src: Range,
    opening: Plan,
    local: dict[Range, rdb.Meta],
    changelog: Optional[Changelog],
) -> Iterator[tuple[bytes, bytes]]:
    lo, hi = clamp(key_range, *range_bounds(src))
    meta = local.get(src)
    if (
        meta is not None
        and meta.batch == opening.batch
        and (src != key_range or not _diverged(key_range, meta, changelog))
    ):
        handle = rdb.open_read_only(cfg.db_path(src))
        return rdb.iter_data(handle, lo, hi)
    if changelog is None:
        raise RecoveryError(
            f"store {cfg.path}: range {key_range.name} must be built from range {src.name} at batch {opening.batch}, "
            "whose local store is missing or behind, and no changelog is configured to restore it from; "
            "configure `changelog:` beside the checkpoint, or run on the machine that holds the store"
        )
    return changelog.state(src, opening.batch, lo, hi)


def _rebuild(
    cfg: StoreConfig, key_range: Range, opening: Plan, local: dict[Range, rdb.Meta], changelog: Optional[Changelog]
) -> None:
    """Build the range in a new directory from its sources, then swap it in."""
    final = cfg.db_path(key_range)
    base = os.path.dirname(final)
    os.makedirs(base, exist_ok=True)
    tag = uuid.uuid4().hex[:8]
    build = os.path.join(base, f".build-{key_range.name}-{tag}")
    db = rdb.open_primary(build)
    try:
        from rocksdict import WriteBatch, WriteOptions

        nowal = WriteOptions()
        cast(Any, nowal).disable_wal = True  # a property (rocksdict's stub declares a method)
        for src in sorted(opening.sources, key=lambda r: r.key_begin):
            wb, n = WriteBatch(raw_mode=True), 0
            for k, v in _source_items(cfg, key_range, src, opening, local, changelog):
                wb.put(rdb.DATA_TAG + k, v)
                n += 1
                if n >= BUILD_CHUNK:
                    db.write(wb, nowal)
                    wb, n = WriteBatch(raw_mode=True), 0
            if n:
                db.write(wb, nowal)
        db.flush()
        commit = {"batch": opening.batch, "inherited": [r.name for r in opening.sources]}
        own = (
            changelog.entries(key_range).get(opening.batch)
            if changelog is not None and opening.sources == (key_range,)
            else None
        )
        if own is not None and not isinstance(own, list):
            commit["digest"] = own.digest  # restored from this range's own entry: the next one chains from it
        rdb.write_atomic(db, iter(()), rdb.meta_items(opening.checkpoint, commit))
    finally:
        db.close()
    if os.path.exists(final):
        old = os.path.join(base, f".old-{key_range.name}-{tag}")
        os.rename(final, old)
        os.rename(build, final)
        shutil.rmtree(old, ignore_errors=True)
    else:
        os.rename(build, final)
    fd = os.open(base, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
