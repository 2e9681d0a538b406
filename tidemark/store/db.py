"""RocksDB (through ``rocksdict``) for one range: open, metadata, ordered reads, writes.

One column family holds both kinds of keys, told apart by a first byte
(:mod:`tidemark.store.keys`): ``META`` keys ``fence``, ``checkpoint`` and ``commit``, and
``DATA`` keys.  One write batch — or, for a transaction that spilled, one ingested SST
file — therefore commits data and checkpoint together, atomically (RocksDB applies a
write batch whole or not at all after a crash; an ingestion is one MANIFEST record).

Handles are opened in two ways:

* primary (read-write) — only while the range's file lock is held exclusively, for an
  Open or a commit, then closed: RocksDB's own ``LOCK`` allows one primary per DB, and
  a zombie session must never keep it.
* read-only — takes no RocksDB lock.  With ``max_open_files=-1`` it opens every table
  file and replays the WAL at open, then never looks at the directory again: it is an
  immutable snapshot as of its open, unaffected by later commits or compactions (open
  files stay readable on POSIX after the primary deletes them).
"""

from __future__ import annotations

import json
import os
import uuid
from dataclasses import dataclass
from typing import Any, Iterable, Iterator, Optional

from rocksdict import (
    AccessType,
    IngestExternalFileOptions,
    Options,
    Rdict,
    ReadOptions,
    SstFileWriter,
    WriteBatch,
    WriteOptions,
)

from tidemark.errors import DriverError
from tidemark.store.keys import DATA, META

DATA_TAG = DATA

FENCE = META + b"fence"
CHECKPOINT = META + b"checkpoint"
COMMIT = META + b"commit"


def options() -> Options:
    opt = Options(raw_mode=True)
    opt.create_if_missing(True)
    opt.set_max_open_files(-1)  # read-only handles pin every table file at open
    opt.set_keep_log_file_num(2)  # one info LOG per open otherwise piles up
    return opt


def sync_write() -> WriteOptions:
    w = WriteOptions()
    w.sync = True
    return w


def _open(path: str, read_only: bool) -> Rdict:
    try:
        if read_only:
            return Rdict(path, options(), access_type=AccessType.read_only())
        return Rdict(path, options())
    except Exception as exc:  # rocksdict raises plain Exception
        mode = "read-only" if read_only else "read-write"
        raise DriverError(f"store {path}: cannot open RocksDB {mode}: {exc}") from exc


def open_primary(path: str) -> Rdict:
    """Open read-write. Call only while holding the range's exclusive file lock."""
    os.makedirs(path, exist_ok=True)
    return _open(path, False)


def open_read_only(path: str) -> Rdict:
    return _open(path, True)


def exists(path: str) -> bool:
    return os.path.exists(os.path.join(path, "CURRENT"))


@dataclass(frozen=True, slots=True)
class Meta:
    """What a range's DB says about itself."""

    fence: int
    checkpoint: Optional[dict]
    commit: Optional[dict]  # {"batch": int, "digest": str, "token": str} of the last commit

    @property
    def batch(self) -> int:
        return batch_of(self.checkpoint)


def batch_of(checkpoint: Any) -> int:
    b = checkpoint.get("batch_id") if isinstance(checkpoint, dict) else None
    return b if isinstance(b, int) and not isinstance(b, bool) else -1


def read_meta(db: Rdict) -> Meta:
    fence = db.get(FENCE)
    cp = db.get(CHECKPOINT)
    commit = db.get(COMMIT)
    return Meta(
        int(fence) if fence is not None else 0,
        json.loads(cp) if cp is not None else None,
        json.loads(commit) if commit is not None else None,
    )


def meta_items(checkpoint: Optional[dict], commit: Optional[dict]) -> list[tuple[bytes, bytes]]:
    """The META entries of a commit, in key order (``checkpoint`` < ``commit``)."""
    out = []
    if checkpoint is not None:
        out.append((CHECKPOINT, dumps(checkpoint)))
    if commit is not None:
        out.append((COMMIT, dumps(commit)))
    return out


def dumps(obj: Any) -> bytes:
    return json.dumps(obj, separators=(",", ":"), sort_keys=True).encode("utf-8")


def write_fence(db: Rdict, fence: int) -> None:
    wb = WriteBatch(raw_mode=True)
    wb.put(FENCE, str(fence).encode())
    db.write(wb, sync_write())


def iter_data(db: Rdict, lo: Optional[bytes] = None, hi: Optional[bytes] = None) -> Iterator[tuple[bytes, bytes]]:
    """Data entries with store keys in ``[lo, hi)``, in key order (store keys, no tag byte)."""
    ro = ReadOptions()
    ro.set_iterate_lower_bound(DATA + (lo or b""))
    ro.set_iterate_upper_bound(DATA + hi if hi is not None else bytes([DATA[0] + 1]))
    it = db.iter(ro)
    it.seek(DATA + (lo or b""))
    while it.valid():
        yield it.key()[1:], it.value()
        it.next()


def get_data(db: Rdict, key: bytes) -> Optional[bytes]:
    return db.get(DATA + key)


def write_atomic(
    db: Rdict,
    changes: Iterable[tuple[bytes, Optional[bytes]]],
    metas: list[tuple[bytes, bytes]],
    sst_dir: Optional[str] = None,
) -> None:
    """Apply sorted ``changes`` (store keys; ``None`` deletes) and ``metas`` in one atomic
    step: a synced write batch, or — with ``sst_dir``, for a change set too big to hold
    in memory — one SST file written there and ingested (moved) into the DB."""
    v: Optional[bytes]  # a meta's value, then a change's (None: a delete)
    if sst_dir is None:
        wb = WriteBatch(raw_mode=True)
        for k, v in metas:
            wb.put(k, v)
        for k, v in changes:
            if v is None:
                wb.delete(DATA + k)
            else:
                wb.put(DATA + k, v)
        db.write(wb, sync_write())
        return
    os.makedirs(sst_dir, exist_ok=True)
    path = os.path.join(sst_dir, f"commit-{uuid.uuid4().hex}.sst")
    try:
        writer = SstFileWriter(options())
        writer.open(path)
        for k, v in sorted(metas):
            writer[k] = v
        for k, v in changes:
            if v is None:
                del writer[DATA + k]
            else:
                writer[DATA + k] = v
        writer.finish()
        ingest = IngestExternalFileOptions()
        ingest.set_move_files(True)
        db.ingest_external_file([path], ingest)
    finally:
        if os.path.exists(path):
            os.unlink(path)
