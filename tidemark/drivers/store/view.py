"""Reading one materialization's store from any process: which range holds each part of
the key space now, at which batch, and a consistent snapshot over all of them.

A store directory keeps every range it ever had: after a split the parent's DB stays
(at the batch it handed over), after a merge the children's.  The *current* holder of a
key hash is the range covering it with the newest committed batch — inherited copies and
their sources hold the same batch with the same data, so ties do not matter (the local DB
is preferred over the changelog, the narrower range over the wider).  A range whose local
DB is missing or behind its changelog is read from the changelog (snapshot + entries),
which is exactly what the next Open on it will restore.

Isolation (see docs/endpoints/store.md):

``read-committed``
    Every range is read through :class:`tidemark.store.Reader` at READ_COMMITTED (a
    snapshot taken under the range's shared lock: never during a commit), and the view
    is accepted only when every current range shows the *same* batch: the state after
    one whole batch, across shards.  While a batch is being committed (shards commit one
    after another) it re-reads the ranges that lag, for up to ``timeout`` seconds;
    :class:`~tidemark.errors.EndpointUnavailable` after that names the ranges and batches
    (a job stopped between two shards' commits: they agree once it runs again).
``read-uncommitted``
    No waiting at all: each range as RocksDB has applied it at that moment, which may be
    a commit whose writer has not returned yet and may differ from range to range (some
    shards already committed batch N, others not).  Within a range it is still whole
    batches; writes that no range committed (a transaction's buffer) are never visible
    outside the process that made them.
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass
from typing import Iterator, Optional

from tidemark.errors import DriverError, EndpointUnavailable
from tidemark.protocol.messages import KEY_SPACE_MAX, Range
from tidemark.store import Changelog, Isolation, Reader, StoreConfig, key_hash_of
from tidemark.store.db import batch_of, exists
from tidemark.store.iters import bounded, live
from tidemark.store.keys import is_range_name, prefix_end

_U32_MAX = KEY_SPACE_MAX


@dataclass
class Source:
    """What one range holds: a local reader, or the changelog at its head."""

    range: Range
    checkpoint: Optional[dict]
    fence: int = 0
    reader: Optional[Reader] = None
    changelog: Optional[Changelog] = None

    @property
    def batch(self) -> int:
        return batch_of(self.checkpoint)

    def items(self, lo: bytes, hi: Optional[bytes]) -> Iterator[tuple[bytes, bytes]]:
        if self.reader is not None:
            return self.reader.scan(lo, hi)
        if self.checkpoint is None:
            return iter(())
        assert self.changelog is not None  # a source without a reader is at the changelog's head
        return live(self.changelog.state(self.range, self.batch, lo, hi))

    def get(self, skey: bytes) -> Optional[bytes]:
        if self.reader is not None:
            return self.reader.get(skey)
        for _k, v in self.items(skey, skey + b"\x00"):
            return v
        return None

    def close(self) -> None:
        if self.reader is not None:
            self.reader.close()


def _bound(h: int) -> bytes:
    return h.to_bytes(4, "big")


def local_range_names(cfg: StoreConfig) -> list[Range]:
    base = os.path.join(cfg.path, "ranges")
    if not os.path.isdir(base):
        return []
    return sorted(
        (Range.parse(n) for n in os.listdir(base) if is_range_name(n) and exists(os.path.join(base, n))),
        key=lambda r: (r.key_begin, r.key_end),
    )


def heads(
    cfg: StoreConfig, changelog: Optional[Changelog], isolation: Isolation, ranges: Optional[list[Range]] = None
) -> dict[Range, Source]:
    """Every range of the store, local or in the changelog, with what it committed last
    (the newer of the two).  Only ``ranges`` (and the changelog's) are (re)read."""
    out: dict[Range, Source] = {}
    for key_range in local_range_names(cfg) if ranges is None else ranges:
        try:
            reader = Reader(cfg, key_range, isolation)
        except DriverError:
            continue  # removed between the listing and the open (a rebuild's swap)
        out[key_range] = Source(key_range, reader.checkpoint, reader.meta.fence if reader.meta else 0, reader)
    if changelog is not None:
        for key_range in changelog.ranges():
            if ranges is not None and key_range not in ranges:
                continue
            head = changelog.head(key_range)
            if head is None:
                continue
            have = out.get(key_range)
            if have is None or head.batch > have.batch:
                if have is not None:
                    have.close()
                out[key_range] = Source(key_range, head.checkpoint, have.fence if have else 0, None, changelog)
    return out


def plan(sources: dict[Range, Source]) -> list[tuple[int, int, Source]]:
    """``[(hash_begin, hash_end, source)]`` in hash order: who holds each part now (a part
    no range holds yet is an empty source at batch -1, so that read-committed waits for it)."""
    if not sources:
        return []
    points = {0}
    for r in sources:
        points.add(r.key_begin)
        if r.key_end < _U32_MAX:
            points.add(r.key_end + 1)
    bounds = sorted(points)
    out: list[tuple[int, int, Source]] = []
    for i, lo in enumerate(bounds):
        hi = bounds[i + 1] - 1 if i + 1 < len(bounds) else _U32_MAX
        cover = [s for r, s in sources.items() if r.key_begin <= lo and hi <= r.key_end]
        if not cover:  # no range ever held this part: empty, at no batch (-1)
            cover = [Source(Range(lo, hi), None)]
        best = max(cover, key=lambda s: (s.batch, s.reader is not None, -(s.range.key_end - s.range.key_begin)))
        if out and out[-1][2] is best and out[-1][1] + 1 == lo:
            out[-1] = (out[-1][0], hi, best)
        else:
            out.append((lo, hi, best))
    return out


class StoreView:
    """A snapshot of one materialization's store (all ranges), per the isolation level."""

    def __init__(
        self,
        cfg: StoreConfig,
        changelog: Optional[Changelog] = None,
        isolation: Isolation | str = Isolation.READ_COMMITTED,
        timeout: float = 30.0,
    ):
        self.config, self.changelog = cfg, changelog
        self.isolation = Isolation(isolation)
        self.timeout = timeout
        self.sources: dict[Range, Source] = {}
        self.parts: list[tuple[int, int, Source]] = []
        self.refresh()

    # ----------------------------------------------------------------- opening
    def refresh(self) -> "StoreView":
        """Re-read the store: the newest state the isolation level allows."""
        self.close()
        deadline = time.monotonic() + self.timeout
        delay = 0.005
        self.sources = heads(self.config, self.changelog, self.isolation)
        while True:
            self.parts = plan(self.sources)
            if self.isolation is Isolation.READ_UNCOMMITTED:
                break
            batches = {s.batch for _, _, s in self.parts}
            ids = {s.checkpoint.get("checkpoint_id") for _, _, s in self.parts if isinstance(s.checkpoint, dict)}
            if len(batches) <= 1 and len(ids) <= 1:
                break
            if time.monotonic() >= deadline:
                detail = ", ".join(f"{s.range.name}: batch {s.batch}" for _, _, s in self.parts)
                self.close()
                raise EndpointUnavailable(
                    f"store {self.config.path}: the ranges did not reach one batch within {self.timeout:.0f}s "
                    f"({detail}): a batch is committed on some shards only — the job is committing it, or "
                    "stopped between two shards' commits (the next run completes it). Read with "
                    "isolation read-uncommitted to see each range's last commit"
                )
            time.sleep(delay)
            delay = min(delay * 2, 0.1)
            top = max(batches)
            lagging = [s.range for _, _, s in self.parts if s.batch < top]
            # a part no range held, or ranges of two checkpoints (opened across a rebuild's
            # exchange of the folders): look again
            if len(ids) > 1 or any(r not in self.sources for r in lagging):
                self.close()
                self.sources = heads(self.config, self.changelog, self.isolation)
                continue
            for r in set(lagging):
                self.sources.pop(r).close()
            self.sources.update(heads(self.config, self.changelog, self.isolation, list(set(lagging))))
        used = {id(s) for _, _, s in self.parts}
        for s in self.sources.values():
            if id(s) not in used:
                s.close()
        return self

    @property
    def batches(self) -> dict[str, int]:
        """The batch each current range shows (one value under read-committed)."""
        return {s.range.name: s.batch for _, _, s in self.parts}

    @property
    def batch(self) -> int:
        """The batch the view shows (-1: none committed); under read-uncommitted the
        oldest of the ranges'."""
        return min((s.batch for _, _, s in self.parts), default=-1)

    @property
    def checkpoint(self) -> Optional[dict]:
        cps = [s.checkpoint for _, _, s in self.parts if s.checkpoint is not None]
        return min(cps, key=batch_of) if cps else None

    # ------------------------------------------------------------------ reading
    def get(self, skey: bytes) -> Optional[bytes]:
        h = key_hash_of(skey)
        for lo, hi, src in self.parts:
            if lo <= h <= hi:
                return src.get(skey)
        return None

    def items(self, lo: Optional[bytes] = None, hi: Optional[bytes] = None) -> Iterator[tuple[bytes, bytes]]:
        """Entries with ``lo <= key < hi``, in store-key order, over every current range."""
        for plo, phi, src in self.parts:
            a = _bound(plo)
            b = _bound(phi + 1) if phi < _U32_MAX else None
            if lo is not None and lo > a:
                a = lo
            if hi is not None and (b is None or hi < b):
                b = hi
            if b is not None and a >= b:
                continue
            yield from bounded(src.items(a, b), a, b)

    def prefix(self, p: bytes) -> Iterator[tuple[bytes, bytes]]:
        return self.items(p, prefix_end(p))

    def close(self) -> None:
        for s in self.sources.values():
            s.close()
        self.sources, self.parts = {}, []

    def __enter__(self) -> "StoreView":
        return self

    def __exit__(self, *exc) -> None:
        self.close()
