"""A transactional state store (KIP-892) for one shard key range, on RocksDB.

::

    store = RangeStore.open(StoreConfig(path=DIR, changelog=URI), Range(0, 0x7FFFFFFF))
    store.recover()                      # -> last committed runtime checkpoint, or None
    txn = store.transaction()
    txn.put(key, value); txn.delete(key)
    txn.get(key); txn.scan(lo, hi); txn.prefix(p)   # read-your-writes, in key order
    txn.commit({"batch_id": 7, ...})     # data + checkpoint in one atomic write
    txn.abort()                          # or drop the buffer

Why the DB is open only for Open and commit
-------------------------------------------
RocksDB allows one read-write handle per DB (its ``LOCK`` file), but a Spark task retry
or a speculative attempt opens the same range while the old attempt may still run, in
another OS process on the same machine.  If a session kept the DB open, the newer one
could not even open it, let alone fence the older.  So a session opens the DB
read-write only while it holds the range's exclusive ``flock`` — at Open (fence bump,
roll forward) and inside each commit — and closes it before letting go.  Between those,
it reads committed state from a read-only handle (no RocksDB lock; a fixed snapshot as of
its last Open/commit, which is all it may see: a commit by anyone else fences it).
The fence lives in the DB under a reserved key; a commit re-reads it under the lock,
so the check and the write are one critical section and a zombie's commit fails with
:class:`~tidemark.errors.FencedOff` before writing anything.

Commit steps (``Transaction.commit``)
-------------------------------------
1. take the range's exclusive file lock; open the DB read-write;
2. fence check: the DB's fence must be this session's, else FencedOff;
3. changelog: write the batch's changes and checkpoint (if a changelog is configured);
4. one atomic RocksDB write of changes + checkpoint + commit record — a synced write
   batch, or an ingested SST file when the transaction spilled — the commit point;
5. every ``snapshot_every`` commits: a snapshot of the range to the changelog, and pruning;
6. reopen the read-only handle, close the DB, release the lock, clear the buffer.

A crash before step 3 leaves the committed state untouched (the buffer lived in this
process and its spill directory); between 3 and 4 the next Open rolls the entry
forward.  Nothing is ever wiped.  See docs/dev/store-engine.md.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass
from typing import Callable, Iterator, Optional

from tidemark import faults
from tidemark.errors import DriverError, FencedOff, ProtocolViolation, RecoveryError
from tidemark.protocol.messages import Range
from tidemark.store import db as rdb
from tidemark.store.buffer import MISSING, WriteBuffer
from tidemark.store.changelog import Changelog
from tidemark.store.config import Isolation, StoreConfig
from tidemark.store.iters import live, merge
from tidemark.store.keys import clamp, key_hash_of, prefix_end, range_bounds
from tidemark.store.locking import turnstile_acquire
from tidemark.store.opening import open_range


@dataclass(frozen=True, slots=True)
class CommitInfo:
    batch: int
    fence: int
    digest: Optional[str]  # the changelog entry's digest (None without a changelog)
    keys: int  # changes written (puts + deletes)
    spilled: bool


class Status(str, enum.Enum):
    ACTIVE = "active"
    COMMITTED = "committed"
    ABORTED = "aborted"
    FAILED = "failed"


def changelog_of(cfg: StoreConfig) -> Optional[Changelog]:
    if cfg.changelog is None:
        return None
    return Changelog(cfg.changelog, cfg.changelog_fs)


class RangeStore:
    """One writing session on one key range: a fence, the committed state, one open
    transaction at a time.  Not shared between threads."""

    def __init__(
        self,
        cfg: StoreConfig,
        key_range: Range,
        changelog: Optional[Changelog],
        fence: int,
        meta: rdb.Meta,
        since_snapshot: int,
        reader,
    ):
        self.config, self.range, self.fence = cfg, key_range, fence
        self.changelog = changelog
        self._meta = meta
        self._since_snapshot = since_snapshot
        self._ro = reader
        self._txn: Optional[Transaction] = None
        self.closed = False

    @classmethod
    def open(cls, config: StoreConfig, key_range: Range) -> "RangeStore":
        """Open a session on ``key_range``: fence older sessions of every overlapping range,
        bring the range to its committed state (see :mod:`tidemark.store.opening`)."""
        changelog = changelog_of(config)
        opened = open_range(config, key_range, changelog)
        return cls(config, key_range, changelog, opened.fence, opened.meta, opened.since_snapshot, opened.reader)

    # ------------------------------------------------------------------ state
    @property
    def name(self) -> str:
        return f"store {self.config.path} range {self.range.name}"

    @property
    def checkpoint(self) -> Optional[dict]:
        return self._meta.checkpoint

    def recover(self) -> Optional[dict]:
        """The last committed checkpoint (KIP-892 ``recover``): an open transaction is
        aborted; Open already rolled forward what the changelog held beyond the DB."""
        if self._txn is not None and self._txn.status is Status.ACTIVE:
            self._txn.abort()
        return self._meta.checkpoint

    def transaction(self) -> "Transaction":
        """The open transaction, or a new one."""
        self._check_open()
        if self._txn is None or self._txn.status is not Status.ACTIVE:
            self._txn = Transaction(self)
        return self._txn

    def _check_open(self) -> None:
        if self.closed:
            raise ProtocolViolation("closed", "store access", detail=self.name)

    # ------------------------------------------------------- committed reads
    def _committed_get(self, key: bytes) -> Optional[bytes]:
        return rdb.get_data(self._ro, key)

    def _committed_items(self, lo: Optional[bytes], hi: Optional[bytes]) -> Iterator[tuple[bytes, bytes]]:
        return rdb.iter_data(self._ro, lo, hi)

    # ----------------------------------------------------------------- commit
    def _commit(self, txn: "Transaction", checkpoint: dict, inside: Optional[Callable[[], None]] = None) -> CommitInfo:
        batch = rdb.batch_of(checkpoint)
        if batch < 0:
            raise ProtocolViolation("active", "commit", detail=f"{self.name}: checkpoint needs an integer batch_id")
        if batch <= self._meta.batch:
            raise RecoveryError(
                f"{self.name}: batch {batch} is not after the committed batch {self._meta.batch}; a re-run of "
                "a committed batch must be skipped (Open returned its checkpoint), not committed again"
            )
        buf = txn.buffer
        lo, hi = range_bounds(self.range)
        # Step 1: the range's exclusive lock, the DB read-write.
        lock = turnstile_acquire(self.config.lock_path(self.range), True, self.config.lock_timeout)
        try:
            db = rdb.open_primary(self.config.db_path(self.range))
            try:
                # Step 2: fence check, inside the critical section.
                current = rdb.read_meta(db)
                if current.fence != self.fence:
                    raise FencedOff(
                        f"{self.name}: fence {self.fence} is stale (now {current.fence}) — a newer session "
                        "opened this key range or one overlapping it (a retried or speculative task, or a "
                        "new shard layout); this transaction was not committed"
                    )
                if inside is not None:  # e.g. the webhook's POSTs: under the lock, after the fence check
                    inside()
                digest = None
                # Step 3: the changelog entry, before the local commit point.
                if self.changelog is not None:
                    ref = self.changelog.write(
                        self.range,
                        "log",
                        checkpoint,
                        current.batch,
                        buf.items(lo, hi),
                        prev_digest=(current.commit or {}).get("digest"),
                    )
                    digest = ref.digest
                faults.fault_point("store_after_changelog")
                # Step 4: data + checkpoint + commit record, one atomic write.
                commit = {"batch": batch, "digest": digest, "fence": self.fence}
                rdb.write_atomic(
                    db,
                    buf.items(lo, hi),
                    rdb.meta_items(checkpoint, commit),
                    sst_dir=self.config.tmp_dir(self.range) if buf.spilled else None,
                )
                faults.fault_point("store_after_commit")
                self._meta = rdb.Meta(self.fence, checkpoint, commit)
                # Step 5: periodic snapshot.
                self._since_snapshot += 1
                if self.changelog is not None and self._since_snapshot >= self.config.snapshot_every:
                    self.changelog.write(self.range, "snap", checkpoint, -1, rdb.iter_data(db, lo, hi))
                    self.changelog.prune(self.range, self.config.keep_snapshots)
                    self._since_snapshot = 0
            finally:
                db.close()
            # Step 6: a fresh read-only view of what was just committed.
            self._ro = rdb.open_read_only(self.config.db_path(self.range))
        finally:
            lock.release()
        return CommitInfo(batch, self.fence, digest, buf.writes, buf.spilled)

    def snapshot(self) -> None:
        """Write a snapshot of the committed range to the changelog now."""
        if self.changelog is None or self._meta.checkpoint is None:
            return
        self.changelog.write(
            self.range, "snap", self._meta.checkpoint, -1, rdb.iter_data(self._ro, *range_bounds(self.range))
        )

    def close(self) -> None:
        """Drop the open transaction and the read handle. Not guaranteed to be called."""
        if self._txn is not None:
            self._txn.abort()
        self._ro = None
        self.closed = True

    def __enter__(self) -> "RangeStore":
        return self

    def __exit__(self, *exc) -> None:
        self.close()


class Transaction:
    """Uncommitted writes with read-your-writes.  ``isolation`` of a read:
    READ_UNCOMMITTED (default) sees this transaction's writes over the committed state;
    READ_COMMITTED sees the committed state only."""

    def __init__(self, store: RangeStore):
        self.store = store
        self.status = Status.ACTIVE
        self.buffer = WriteBuffer(store.config.max_uncommitted_bytes, store.config.spill_dir, store.name)

    def _check(self, op: str) -> None:
        if self.status is not Status.ACTIVE:
            raise ProtocolViolation(self.status.value, op, expected="an active transaction", detail=self.store.name)

    def _check_key(self, key: bytes) -> bytes:
        key = bytes(key)
        if not self.store.range.contains(key_hash_of(key)):
            raise DriverError(
                f"{self.store.name}: key {key[:16]!r}… has hash {key_hash_of(key):08x}, outside the "
                "range; route each key to the store of its range"
            )
        return key

    # ----------------------------------------------------------------- writes
    def put(self, key: bytes, value: bytes) -> None:
        self._check("put")
        self.buffer.put(self._check_key(key), bytes(value))

    def delete(self, key: bytes) -> None:
        self._check("delete")
        self.buffer.put(self._check_key(key), None)

    # ------------------------------------------------------------------ reads
    def get(self, key: bytes, isolation: Isolation = Isolation.READ_UNCOMMITTED) -> Optional[bytes]:
        self._check("get")
        key = bytes(key)
        if isolation is Isolation.READ_UNCOMMITTED:
            v = self.buffer.lookup(key)
            if v is not MISSING:
                return v
        return self.store._committed_get(key)

    def scan(
        self, lo: Optional[bytes] = None, hi: Optional[bytes] = None, isolation: Isolation = Isolation.READ_UNCOMMITTED
    ) -> Iterator[tuple[bytes, bytes]]:
        """Live entries with ``lo <= key < hi`` (within the range) in key order."""
        self._check("scan")
        lo, hi = clamp(self.store.range, lo, hi)
        committed = self.store._committed_items(lo, hi)
        if isolation is Isolation.READ_COMMITTED:
            return iter(committed)
        return live(merge(self.buffer.items(lo, hi), committed))

    def prefix(self, prefix: bytes, isolation: Isolation = Isolation.READ_UNCOMMITTED) -> Iterator[tuple[bytes, bytes]]:
        return self.scan(bytes(prefix), prefix_end(bytes(prefix)), isolation)

    # ------------------------------------------------------------- lifecycle
    def commit(self, checkpoint: dict, inside: Optional[Callable[[], None]] = None) -> CommitInfo:
        """Commit the writes and ``checkpoint`` atomically (see the module docstring).
        ``inside()`` runs in the range's exclusive lock once the fence is verified, before
        anything is written: if it raises, nothing is committed, and no newer Open of an
        overlapping range can pass while it runs."""
        self._check("commit")
        try:
            info = self.store._commit(self, checkpoint, inside)
        except BaseException:
            self.status = Status.FAILED
            self.buffer.close()
            raise
        self.status = Status.COMMITTED
        self.buffer.close()
        return info

    def abort(self) -> None:
        """Drop every uncommitted write; committed state is untouched."""
        if self.status is Status.ACTIVE:
            self.status = Status.ABORTED
        self.buffer.close()
