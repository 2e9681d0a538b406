"""``store``: a transactional state store per shard key range (KIP-892), on RocksDB.

Modules (each small): :mod:`.engine` (sessions, transactions, the commit),
:mod:`.opening` (Open: fencing, roll forward, restore, split/merge), :mod:`.layout`
(which ranges a range inherits from), :mod:`.changelog` (changelog + snapshots through
pyarrow.fs), :mod:`.reader` (queries from any process), :mod:`.buffer` (the bounded,
spilling write buffer), :mod:`.db` (RocksDB), :mod:`.keys` (key encoding),
:mod:`.locking` (file locks), :mod:`.config`.

Needs ``rocksdict``: ``pip install tidemark[store]``.
"""

from __future__ import annotations

try:
    import rocksdict  # noqa: F401
except ImportError as exc:  # pragma: no cover - depends on the install
    raise ImportError("the store endpoint needs rocksdict: pip install 'tidemark[store]'") from exc

from tidemark.store.changelog import Changelog
from tidemark.store.config import Isolation, StoreConfig
from tidemark.store.engine import CommitInfo, RangeStore, Status, Transaction
from tidemark.store.keys import decode_tidemark_key, encode_key, key_hash_of, range_bounds, tidemark_key
from tidemark.store.reader import Reader

__all__ = [
    "Changelog",
    "CommitInfo",
    "Isolation",
    "RangeStore",
    "Reader",
    "Status",
    "StoreConfig",
    "Transaction",
    "decode_tidemark_key",
    "encode_key",
    "key_hash_of",
    "range_bounds",
    "tidemark_key",
]
