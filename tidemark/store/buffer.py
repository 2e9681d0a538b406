"""The uncommitted writes of one transaction: memory up to a bound, then a spill store.

Writes go to a dict.  When the dict holds more than ``max_bytes`` (keys + values + 64
bytes per entry), all of it moves to a private *spill* RocksDB in a temporary
directory (no WAL: a spill only matters while its process lives) and the dict starts
over — the KIP-892 "secondary store for uncommitted changes", without its commit file:
the commit reads the buffer out and writes it into the range's DB in one atomic write.

Reads give the dict precedence over the spill (it holds the newer writes), and a
delete is kept as a ``None`` value in both, so it hides the committed value below.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from typing import Any, Iterator, Optional, cast

from rocksdict import Options, Rdict, WriteBatch, WriteOptions

from tidemark.errors import DriverError
from tidemark.store.iters import bounded, merge

ENTRY_OVERHEAD = 64
_PUT, _DEL = b"\x01", b"\x00"
MISSING = object()


class WriteBuffer:
    def __init__(self, max_bytes: int, spill_dir: Optional[str] = None, label: str = ""):
        if max_bytes < 0:
            raise ValueError("max_uncommitted_bytes must be >= 0")
        self.max_bytes = max_bytes
        self.spill_dir = spill_dir
        self.label = label
        self._mem: dict[bytes, Optional[bytes]] = {}
        self._mem_bytes = 0
        self._spill: Optional[Rdict] = None
        self._spill_path: Optional[str] = None
        self.spills = 0  # how many times memory moved to the spill store
        self.writes = 0

    # ------------------------------------------------------------------ writes
    def put(self, key: bytes, value: Optional[bytes]) -> None:
        """Record a put (``value`` bytes) or a delete (``value`` None)."""
        old = self._mem.get(key, MISSING)
        if old is not MISSING:
            self._mem_bytes -= len(key) + len(cast(Optional[bytes], old) or b"") + ENTRY_OVERHEAD
        self._mem[key] = value
        self._mem_bytes += len(key) + len(value or b"") + ENTRY_OVERHEAD
        self.writes += 1
        if self._mem_bytes > self.max_bytes:
            self._spill_memory()

    def _spill_memory(self) -> None:
        if self._spill is None:
            if self.spill_dir:
                os.makedirs(self.spill_dir, exist_ok=True)
            self._spill_path = tempfile.mkdtemp(prefix="tidemark-spill-", dir=self.spill_dir)
            opt = Options(raw_mode=True)
            opt.create_if_missing(True)
            try:
                self._spill = Rdict(self._spill_path, opt)
            except Exception as exc:
                raise DriverError(
                    f"store {self.label}: cannot create the spill store in {self._spill_path}: {exc}"
                ) from exc
        wb = WriteBatch(raw_mode=True)
        for k, v in self._mem.items():
            wb.put(k, _DEL if v is None else _PUT + v)
        wo = WriteOptions()
        cast(Any, wo).disable_wal = True  # a property (rocksdict's stub declares a method)
        self._spill.write(wb, wo)
        self._mem.clear()
        self._mem_bytes = 0
        self.spills += 1

    # ------------------------------------------------------------------- reads
    @property
    def spilled(self) -> bool:
        return self._spill is not None

    @property
    def memory_bytes(self) -> int:
        return self._mem_bytes

    def __len__(self) -> int:  # an upper bound when spilled (a key may be in both)
        return len(self._mem) + (sum(1 for _ in self._spill.keys()) if self._spill is not None else 0)

    def lookup(self, key: bytes):
        """The buffered value (bytes), ``None`` for a buffered delete, or :data:`MISSING`."""
        v = self._mem.get(key, MISSING)
        if v is not MISSING or self._spill is None:
            return v
        raw = self._spill.get(key)
        if raw is None:
            return MISSING
        return None if raw[:1] == _DEL else raw[1:]

    def items(self, lo: Optional[bytes] = None, hi: Optional[bytes] = None) -> Iterator[tuple[bytes, Optional[bytes]]]:
        """Buffered entries with ``lo <= key < hi`` in key order, deletes as ``None``.
        A snapshot: writes made while iterating are not seen."""
        mem = sorted((k, v) for k, v in self._mem.items() if (lo is None or k >= lo) and (hi is None or k < hi))
        if self._spill is None:
            return iter(mem)
        return merge(mem, bounded(self._spill_items(lo), lo, hi))

    def _spill_items(self, lo: Optional[bytes]) -> Iterator[tuple[bytes, Optional[bytes]]]:
        assert self._spill is not None  # items() calls this only with a spill
        it = self._spill.iter()
        if lo is None:
            it.seek_to_first()
        else:
            it.seek(lo)
        while it.valid():
            raw = it.value()
            yield it.key(), (None if raw[:1] == _DEL else raw[1:])
            it.next()

    # --------------------------------------------------------------- lifecycle
    def clear(self) -> None:
        self._mem.clear()
        self._mem_bytes = 0
        self.writes = 0
        if self._spill is not None:
            db, self._spill = self._spill, None
            db.close()
            assert self._spill_path is not None  # set with the spill
            shutil.rmtree(self._spill_path, ignore_errors=True)
            self._spill_path = None

    close = clear
