"""Merging ordered key/value streams (the buffer, its spill, the committed store)."""

from __future__ import annotations

import heapq
from typing import Iterable, Iterator, Optional


def merge(*sources: Iterable[tuple[bytes, Optional[bytes]]]) -> Iterator[tuple[bytes, Optional[bytes]]]:
    """Merge streams sorted by key into one sorted stream with one entry per key; on equal
    keys the entry of the earliest source wins (newest layer first).  A value of ``None``
    is a delete and is passed on; :func:`live` drops them."""
    heads = []
    iters = [iter(s) for s in sources]
    for prio, it in enumerate(iters):
        for k, v in it:
            heads.append((k, prio, v))
            break
    heapq.heapify(heads)
    while heads:
        key, prio, value = heads[0]
        yield key, value
        # advance every source sitting on this key
        while heads and heads[0][0] == key:
            _, p, _ = heapq.heappop(heads)
            for k, v in iters[p]:
                heapq.heappush(heads, (k, p, v))
                break


def live(items: Iterable[tuple[bytes, Optional[bytes]]]) -> Iterator[tuple[bytes, bytes]]:
    for k, v in items:
        if v is not None:
            yield k, v


def bounded(items: Iterable[tuple[bytes, Optional[bytes]]], lo: Optional[bytes], hi: Optional[bytes]):
    """The entries of a sorted stream with ``lo <= key < hi``."""
    for k, v in items:
        if lo is not None and k < lo:
            continue
        if hi is not None and k >= hi:
            return
        yield k, v
