"""Bounded-memory buffers for a shard task: combined rows and loaded documents.

A shard holds every combined document of its keys between the Load and the Store
phase, and every Loaded document until it is reduced.  Both spill to local disk above
a budget, so a shard's memory stays bounded whatever the batch size.
"""

from __future__ import annotations

import json
import os
import pickle
import sqlite3
import tempfile
from typing import IO, Any, Iterator

from tidemark.protocol.messages import Key

Item = tuple[Any, ...]  # e.g. (binding, key, doc_json)


class SpillBuffer:
    """An append-only sequence that keeps at most ``budget_bytes`` of items in memory.

    Items are tuples, e.g. ``(binding, key, doc_json)``; their size is the ``size`` the
    caller gives (or the length of their strings) plus 64.  Iteration yields items in
    append order.
    """

    def __init__(self, budget_bytes: int = 64 << 20, directory: str | None = None):
        self.budget = budget_bytes
        self.directory = directory
        self._mem: list[Item] = []
        self._mem_bytes = 0
        self._file: IO[bytes] | None = None
        self.spilled_chunks = 0
        self.count = 0

    def append(self, item: Item, size: int | None = None) -> None:
        self._mem.append(item)
        self._mem_bytes += 64 + (sum(len(x) for x in item if isinstance(x, str)) if size is None else size)
        self.count += 1
        if self._mem_bytes > self.budget:
            self._spill()

    def _spill(self) -> None:
        if self._file is None:
            self._file = tempfile.TemporaryFile(prefix="tidemark-spill-", dir=self.directory)
        pickle.dump(self._mem, self._file, protocol=pickle.HIGHEST_PROTOCOL)
        self.spilled_chunks += 1
        self._mem = []
        self._mem_bytes = 0

    def __iter__(self) -> Iterator[Item]:
        if self._file is not None:
            self._file.flush()
            self._file.seek(0)
            for _ in range(self.spilled_chunks):
                yield from pickle.load(self._file)
        yield from self._mem

    def close(self) -> None:
        if self._file is not None:
            self._file.close()
            self._file = None
        self._mem = []


class LoadedIndex:
    """``(binding, key) -> doc`` that moves to an on-disk SQLite table above ``max_docs``."""

    def __init__(self, max_docs: int = 200_000, directory: str | None = None):
        self.max_docs = max_docs
        self.directory = directory
        self._mem: dict[tuple[int, Key], Any] = {}
        self._db: sqlite3.Connection | None = None
        self._path: str | None = None
        self.count = 0

    def put(self, binding: int, key: Key, doc: Any) -> None:
        self.count += 1
        if self._db is None:
            self._mem[(binding, key)] = doc
            if len(self._mem) > self.max_docs:
                self._to_disk()
        else:
            self._db.execute(
                "INSERT OR REPLACE INTO loaded VALUES (?, ?, ?)",
                (binding, json.dumps(list(key)), json.dumps(doc)),
            )

    def _to_disk(self) -> None:
        fd, self._path = tempfile.mkstemp(prefix="tidemark-loaded-", suffix=".db", dir=self.directory)
        os.close(fd)
        self._db = sqlite3.connect(self._path)
        self._db.execute("PRAGMA journal_mode=OFF")
        self._db.execute("PRAGMA synchronous=OFF")
        self._db.execute("CREATE TABLE loaded (binding INTEGER, key TEXT, doc TEXT, PRIMARY KEY (binding, key))")
        self._db.executemany(
            "INSERT OR REPLACE INTO loaded VALUES (?, ?, ?)",
            ((b, json.dumps(list(k)), json.dumps(d)) for (b, k), d in self._mem.items()),
        )
        self._mem = {}

    def get(self, binding: int, key: Key) -> Any:
        if self._db is None:
            return self._mem.get((binding, key))
        row = self._db.execute(
            "SELECT doc FROM loaded WHERE binding = ? AND key = ?", (binding, json.dumps(list(key)))
        ).fetchone()
        return json.loads(row[0]) if row else None

    def __contains__(self, item: tuple[int, Key]) -> bool:
        binding, key = item
        if self._db is None:
            return (binding, key) in self._mem
        return self.get(binding, key) is not None

    @property
    def on_disk(self) -> bool:
        return self._db is not None

    def close(self) -> None:
        if self._db is not None:
            self._db.close()
            self._db = None
        if self._path:
            try:
                os.unlink(self._path)
            except FileNotFoundError:
                pass
            self._path = None
        self._mem = {}
