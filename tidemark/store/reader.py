"""Queries of a range's store from any process, while writers commit.

``Reader(config, key_range, isolation)`` opens a read-only RocksDB handle — a fixed snapshot
of the range as of that moment (see :mod:`tidemark.store.db`) — and answers ``get``,
``scan`` and ``prefix`` in key order from it until :meth:`Reader.refresh`.

READ_COMMITTED
    The handle is opened under the range's *shared* file lock, so never while a commit
    or an Open holds the exclusive one: it shows exactly the state after some commit —
    never part of a batch, never an uncommitted or aborted write — and waits at most
    one commit for the lock.  The lock is released right after the open; a long scan
    never holds up a writer.

READ_UNCOMMITTED
    Uncommitted writes never leave the process that made them (they sit in its
    transaction's buffer and private spill store), so a reader in another process cannot
    see them, by design.  For such a reader READ_UNCOMMITTED means: do not wait for the
    lock.  The handle opens on whatever RocksDB has applied at that moment, which may
    include a commit whose ``commit()`` call has not returned yet (its atomic write is
    done, the writer is still snapshotting or releasing) — still whole batches only,
    because a RocksDB write batch and an SST ingestion apply atomically.  An open that
    races a directory swap (an Open rebuilding the range) is retried until
    ``lock_timeout``.  Inside the writing process,
    :meth:`tidemark.store.Transaction.get` / ``scan`` with READ_UNCOMMITTED is
    read-your-writes: this transaction's writes over the committed state.
"""

from __future__ import annotations

import time
from typing import Iterator, Optional

from tidemark.errors import DriverError, EndpointUnavailable
from tidemark.protocol.messages import Range
from tidemark.store import db as rdb
from tidemark.store.config import Isolation, StoreConfig
from tidemark.store.keys import clamp, prefix_end
from tidemark.store.locking import turnstile_acquire


class Reader:
    def __init__(self, config: StoreConfig, key_range: Range, isolation: Isolation = Isolation.READ_COMMITTED):
        self.config, self.range, self.isolation = config, key_range, Isolation(isolation)
        self._db: Optional[rdb.Rdict] = None
        self.meta: Optional[rdb.Meta] = None
        self.refresh()

    @property
    def name(self) -> str:
        return f"store {self.config.path} range {self.range.name}"

    def refresh(self) -> "Reader":
        """Reopen on the newest state (per the isolation level)."""
        path = self.config.db_path(self.range)
        if self.isolation is Isolation.READ_COMMITTED:
            with turnstile_acquire(self.config.lock_path(self.range), False, self.config.lock_timeout):
                if not rdb.exists(path):
                    raise DriverError(
                        f"{self.name}: no store at {path}; nothing was opened on this range "
                        "(check the path and the shard layout)"
                    )
                self._db = rdb.open_read_only(path)
        else:
            deadline = time.monotonic() + self.config.lock_timeout
            delay = 0.001
            while True:
                try:
                    if not rdb.exists(path):
                        raise DriverError(f"{self.name}: no store at {path}")
                    self._db = rdb.open_read_only(path)
                    break
                except DriverError as exc:
                    if time.monotonic() >= deadline:
                        raise EndpointUnavailable(f"{self.name}: could not open for reading: {exc}") from exc
                    time.sleep(delay)
                    delay = min(delay * 2, 0.05)
        self.meta = rdb.read_meta(self._db)
        return self

    @property
    def checkpoint(self) -> Optional[dict]:
        """The runtime checkpoint of the state this reader shows."""
        return self.meta.checkpoint if self.meta else None

    def get(self, key: bytes) -> Optional[bytes]:
        assert self._db is not None  # open (refresh) until close
        return rdb.get_data(self._db, bytes(key))

    def scan(self, lo: Optional[bytes] = None, hi: Optional[bytes] = None) -> Iterator[tuple[bytes, bytes]]:
        lo, hi = clamp(self.range, lo, hi)
        assert self._db is not None  # open (refresh) until close
        return rdb.iter_data(self._db, lo, hi)

    def prefix(self, prefix: bytes) -> Iterator[tuple[bytes, bytes]]:
        return self.scan(bytes(prefix), prefix_end(bytes(prefix)))

    def close(self) -> None:
        self._db = None

    def __enter__(self) -> "Reader":
        return self

    def __exit__(self, *exc) -> None:
        self.close()
