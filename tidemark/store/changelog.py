"""The changelog of committed batches and periodic snapshots, through :mod:`pyarrow.fs`.

Layout under the changelog root (beside the Spark checkpoint, so local disk, HDFS or
S3 alike), one directory per range (:attr:`Range.name`)::

    <range>/log/<batch:020d>-<digest>.arrow    the changes of one committed batch
    <range>/snap/<batch:020d>-<digest>.arrow   every live key of the range at a batch

Each file is an Arrow IPC stream ``(key: binary, value: binary)`` sorted by key — a
null value is a delete — with the runtime checkpoint, the batch it was built on
(``prev_batch``) and its kind in the schema metadata, so the head of a range costs one
small read.  A file is written under a temporary name and moved into place: readers
never see half of one.  ``digest`` hashes the content; two commits of one batch that
wrote the same changes (a deterministic re-run) have one name, two that differ are an
ambiguity.  Each entry also names the digest of the entry it was built on
(``prev_digest``), so an entry a later one was built on wins over a duplicate of its batch
(a speculative attempt on another machine that committed late, after the next batch):
only a duplicate at the newest batch is an ambiguity :meth:`Changelog.chain` refuses to
guess about (the recovery log's digest settles it at the next Open).

The engine writes a batch's entry *before* its local commit (KIP-892's order: what
the changelog holds and the local store lacks is rolled forward at the next Open).
A range's state at batch N is its newest snapshot at or below N merged with the
entries after it, newest first (:meth:`Changelog.state`), streamed in key order.
"""

from __future__ import annotations

import hashlib
import json
import os
import uuid
from dataclasses import dataclass
from typing import Iterable, Iterator, Optional, cast

import pyarrow as pa
import pyarrow.fs as pafs

from tidemark.errors import RecoveryError
from tidemark.files import filesystem
from tidemark.protocol.messages import Range
from tidemark.store.db import batch_of
from tidemark.store.iters import bounded, live, merge
from tidemark.store.keys import is_range_name
from tidemark.store.layout import Head

SCHEMA = pa.schema([("key", pa.binary()), ("value", pa.binary())])
ROWS_PER_CHUNK = 4096


@dataclass(frozen=True, slots=True)
class Ref:
    """One changelog file."""

    range: Range
    kind: str  # "log" or "snap"
    batch: int
    digest: str
    path: str


class Changelog:
    def __init__(self, uri: str, fs: Optional[pafs.FileSystem] = None):
        if fs is None:
            fs, root = filesystem(uri)
        else:
            root = uri
        self.fs, self.root = fs, root.rstrip("/")
        self._local = isinstance(fs, pafs.LocalFileSystem)
        self._meta_cache: dict[str, dict] = {}
        self.fs.create_dir(self.root, recursive=True)

    # ----------------------------------------------------------------- listing
    def ranges(self) -> list[Range]:
        sel = pafs.FileSelector(self.root, allow_not_found=True)
        return sorted(
            (
                Range.parse(i.base_name)
                for i in self.fs.get_file_info(sel)
                if i.type == pafs.FileType.Directory and is_range_name(i.base_name)
            ),
            key=lambda r: (r.key_begin, r.key_end),
        )

    def refs(self, key_range: Range, kind: str) -> list[Ref]:
        sel = pafs.FileSelector(f"{self.root}/{key_range.name}/{kind}", allow_not_found=True)
        out = []
        for info in self.fs.get_file_info(sel):
            name = info.base_name
            stem, dot, ext = name.partition(".")
            batch, dash, digest = stem.partition("-")
            if ext == "arrow" and dash and batch.isdigit():
                out.append(Ref(key_range, kind, int(batch), digest, info.path))
        return sorted(out, key=lambda r: (r.batch, r.digest))

    def metadata(self, ref: Ref) -> dict:
        """``{"checkpoint": dict, "prev_batch": int, "kind": str}`` of one file."""
        meta = self._meta_cache.get(ref.path)
        if meta is None:
            with self.fs.open_input_stream(ref.path) as f:
                reader = pa.ipc.open_stream(f)
                raw = reader.schema.metadata or {}
            meta = {k.decode(): json.loads(v) for k, v in raw.items()}
            self._meta_cache[ref.path] = meta
        return meta

    def head(self, key_range: Range) -> Optional[Head]:
        refs = self.refs(key_range, "log") + self.refs(key_range, "snap")
        if not refs:
            return None
        top = max(refs, key=lambda r: r.batch)
        return Head(key_range, self.metadata(top)["checkpoint"])

    # ------------------------------------------------------------------ writing
    def write(
        self,
        key_range: Range,
        kind: str,
        checkpoint: dict,
        prev_batch: int,
        items: Iterable[tuple[bytes, Optional[bytes]]],
        prev_digest: Optional[str] = None,
    ) -> Ref:
        """Write one entry (``kind="log"``) or snapshot (``"snap"``); items sorted by key.
        ``prev_digest``: the digest of the entry the local store held (None when unknown)."""
        batch = batch_of(checkpoint)
        meta = {"checkpoint": checkpoint, "prev_batch": prev_batch, "kind": kind, "range": key_range.name}
        if prev_digest:
            meta["prev_digest"] = prev_digest
        schema = SCHEMA.with_metadata({k: json.dumps(v, sort_keys=True) for k, v in meta.items()})
        directory = f"{self.root}/{key_range.name}/{kind}"
        self.fs.create_dir(directory, recursive=True)
        tmp = f"{directory}/.tmp-{uuid.uuid4().hex}"
        digest = hashlib.blake2b(digest_size=12)
        digest.update(json.dumps(meta, sort_keys=True).encode())
        with self.fs.open_output_stream(tmp) as out, pa.ipc.new_stream(out, schema) as writer:
            keys: list = []
            values: list = []
            for k, v in items:
                digest.update(len(k).to_bytes(4, "big") + k)
                digest.update(b"-" if v is None else len(v).to_bytes(4, "big") + v)
                keys.append(k)
                values.append(v)
                if len(keys) >= ROWS_PER_CHUNK:
                    writer.write_batch(pa.record_batch([keys, values], schema=schema))
                    keys, values = [], []
            if keys:
                writer.write_batch(pa.record_batch([keys, values], schema=schema))
        if self._local:
            with open(tmp, "rb+") as f:
                os.fsync(f.fileno())
        path = f"{directory}/{batch:020d}-{digest.hexdigest()}.arrow"
        self.fs.move(tmp, path)
        if self._local:
            fd = os.open(directory, os.O_RDONLY)
            try:
                os.fsync(fd)
            finally:
                os.close(fd)
        return Ref(key_range, kind, batch, digest.hexdigest(), path)

    # ------------------------------------------------------------------ reading
    def read(self, ref: Ref) -> Iterator[tuple[bytes, Optional[bytes]]]:
        with self.fs.open_input_stream(ref.path) as f:
            for rb in pa.ipc.open_stream(f):
                yield from zip(rb.column(0).to_pylist(), rb.column(1).to_pylist())

    def entries(self, key_range: Range) -> dict[int, "Ref | list[Ref]"]:
        """The log entry of each batch; where attempts committed a batch twice, the one a later
        entry was built on (``prev_digest``), or the list of candidates when none says."""
        by_batch: dict[int, list[Ref]] = {}
        for ref in self.refs(key_range, "log"):
            by_batch.setdefault(ref.batch, []).append(ref)
        if all(len(refs) == 1 for refs in by_batch.values()):
            return {b: refs[0] for b, refs in by_batch.items()}
        named = {
            (m["prev_batch"], m.get("prev_digest")) for refs in by_batch.values() for m in map(self.metadata, refs)
        }
        out: dict[int, "Ref | list[Ref]"] = {}
        for b, refs in by_batch.items():
            if len(refs) > 1:
                won = [r for r in refs if (b, r.digest) in named]
                out[b] = won[0] if len(won) == 1 else refs
            else:
                out[b] = refs[0]
        return out

    def chain(
        self, key_range: Range, upto: int, base: int = -1, base_digest: Optional[str] = None
    ) -> tuple[Optional[Ref], list[Ref]]:
        """The files that rebuild ``key_range`` at batch ``upto``: ``(snapshot or None, entries)``,
        entries oldest first.  With ``base`` >= 0 (a local store at that batch) the entries
        after ``base`` are preferred when they chain from it (and from ``base_digest``, the
        local commit's entry, where both are known); otherwise the newest
        snapshot they chain from.  Raises RecoveryError when no chain reaches ``upto``."""
        chosen = self.entries(key_range)
        by_batch = {b: ref for b, ref in chosen.items() if b <= upto}
        ambiguous = [b for b, ref in by_batch.items() if isinstance(ref, list)]
        if ambiguous:
            b = ambiguous[0]
            raise RecoveryError(
                f"changelog {self.root}/{key_range.name}: batch {b} was committed twice with different changes "
                f"({', '.join(r.digest for r in cast(list[Ref], by_batch[b]))}): two task attempts on different machines both "
                "committed; keep the file the recovery log names, delete the other, and open again"
            )
        snaps = [s for s in self.refs(key_range, "snap") if s.batch <= upto]

        def walk(start: int, start_digest: Optional[str] = None) -> Optional[list[Ref]]:
            out: list[Ref]
            out, pos = [], start
            for b in sorted(by_batch):
                if b <= start:
                    continue
                ref = cast(Ref, by_batch[b])  # one entry per batch: ambiguous ones raised above
                meta = self.metadata(ref)
                if meta["prev_batch"] != pos:
                    return None
                if not out and start_digest and meta.get("prev_digest") not in (None, start_digest):
                    return None  # built on another attempt's commit of the base batch
                out.append(ref)
                pos = b
            return out if pos == upto else None

        if base >= 0:
            entries = walk(base, base_digest)
            if entries is not None:
                return None, entries
        for snap in reversed(snaps):
            entries = walk(snap.batch)
            if entries is not None:
                return snap, entries
        entries = walk(-1)
        if entries is not None:
            return None, entries
        raise RecoveryError(
            f"changelog {self.root}/{key_range.name} cannot rebuild batch {upto}: entries are missing between "
            f"the snapshots ({[s.batch for s in snaps]}) and the log ({sorted(by_batch)}); "
            "the changelog was pruned or partly deleted — restore it, or start over with `tidemark reset`"
        )

    def state(
        self, key_range: Range, upto: int, lo: Optional[bytes] = None, hi: Optional[bytes] = None
    ) -> Iterator[tuple[bytes, bytes]]:
        """The live keys of ``key_range`` at batch ``upto`` within ``[lo, hi)``, in key order."""
        snap, entries = self.chain(key_range, upto)
        layers = [bounded(self.read(e), lo, hi) for e in reversed(entries)]
        if snap is not None:
            layers.append(bounded(self.read(snap), lo, hi))
        return live(merge(*layers))

    # ------------------------------------------------------------------ pruning
    def prune(self, key_range: Range, keep_snapshots: int = 2) -> None:
        """Delete snapshots but the newest ``keep_snapshots`` and entries they cover."""
        snaps = self.refs(key_range, "snap")
        if not snaps or keep_snapshots < 1:
            return
        oldest_kept = snaps[-keep_snapshots:][0].batch
        for ref in snaps[:-keep_snapshots] + [e for e in self.refs(key_range, "log") if e.batch <= oldest_kept]:
            try:
                self.fs.delete_file(ref.path)
            except FileNotFoundError:
                pass
            self._meta_cache.pop(ref.path, None)
