"""The typed, frozen configuration of a store, and where its files live.

``{store: {path: DIR, changelog: URI, max_uncommitted_bytes: N, snapshot_every: N}}``;
Spark options arrive as strings, so :meth:`StoreConfig.from_config` parses numbers.

Under ``path``::

    ranges/<range>/          the RocksDB of one key range (Range.name: 0000abcd-ffffffff)
    ranges/.build-*/         a range being built by a split, a merge or a restore
    locks/<range>.lock       the range's file lock (commit, Open: exclusive; reader: shared)
    locks/_layout.lock       held briefly while an Open picks and locks the ranges it touches
    tmp/<range>/             SST files of large commits before their ingestion (emptied at Open)
"""

from __future__ import annotations

import enum
import os
from dataclasses import dataclass
from typing import Any, Optional

import pyarrow.fs as pafs

from tidemark.errors import SpecError
from tidemark.protocol.messages import Range


class Isolation(str, enum.Enum):
    READ_COMMITTED = "read-committed"
    READ_UNCOMMITTED = "read-uncommitted"


@dataclass(frozen=True)
class StoreConfig:
    path: str
    changelog: Optional[str] = None  # a directory or URI beside the checkpoint; None: no restore
    changelog_fs: Optional[pafs.FileSystem] = None  # given: ``changelog`` is a path inside it
    max_uncommitted_bytes: int = 64 << 20
    snapshot_every: int = 100  # commits of a range between snapshots
    keep_snapshots: int = 2
    spill_dir: Optional[str] = None  # default: the system temp directory
    lock_timeout: float = 60.0

    def __post_init__(self) -> None:
        if not self.path:
            raise SpecError("store: `path` is required")
        if self.max_uncommitted_bytes < 0 or self.snapshot_every < 1 or self.keep_snapshots < 1:
            raise SpecError("store: max_uncommitted_bytes must be >= 0, snapshot_every and keep_snapshots >= 1")

    @classmethod
    def from_config(cls, config: dict[str, Any], lock_timeout: float = 60.0) -> "StoreConfig":
        known = {"path", "changelog", "max_uncommitted_bytes", "snapshot_every", "keep_snapshots", "spill_dir"}
        extra = set(config) - known
        if extra:
            raise SpecError(f"store: unknown option(s) {sorted(extra)}; known: {sorted(known)}")
        try:
            ints = {
                k: int(config[k])
                for k in ("max_uncommitted_bytes", "snapshot_every", "keep_snapshots")
                if config.get(k) is not None
            }
        except (TypeError, ValueError) as exc:
            raise SpecError(f"store: {exc}") from exc
        return cls(
            path=str(config.get("path") or ""),
            changelog=config.get("changelog"),
            spill_dir=config.get("spill_dir"),
            lock_timeout=lock_timeout,
            **ints,
        )

    # ------------------------------------------------------------------ paths
    def db_path(self, key_range: Range) -> str:
        return os.path.join(self.path, "ranges", key_range.name)

    def lock_path(self, key_range: Range) -> str:
        return os.path.join(self.path, "locks", key_range.name + ".lock")

    @property
    def layout_lock_path(self) -> str:
        return os.path.join(self.path, "locks", "_layout.lock")

    def tmp_dir(self, key_range: Range) -> str:
        return os.path.join(self.path, "tmp", key_range.name)
