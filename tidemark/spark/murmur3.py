"""Spark's Murmur3 hash of an int, in Python: which value ``repartition(n, value)`` sends to
which partition (:func:`partition_values`), so that routing can place a row in its shard's
partition without a shuffle of its own."""

from __future__ import annotations

_MASK32 = 0xFFFFFFFF


def murmur3_int(value: int, seed: int = 42) -> int:
    """Spark's ``Murmur3_x86_32.hashInt`` (what ``hash(int_col)`` and ``repartition`` use)."""

    def rotl(x: int, r: int) -> int:
        return ((x << r) | (x >> (32 - r))) & _MASK32

    k1 = (value * 0xCC9E2D51) & _MASK32
    k1 = rotl(k1, 15)
    k1 = (k1 * 0x1B873593) & _MASK32
    h1 = (seed ^ k1) & _MASK32
    h1 = rotl(h1, 13)
    h1 = (h1 * 5 + 0xE6546B64) & _MASK32
    h1 ^= 4
    h1 ^= h1 >> 16
    h1 = (h1 * 0x85EBCA6B) & _MASK32
    h1 ^= h1 >> 13
    h1 = (h1 * 0xC2B2AE35) & _MASK32
    h1 ^= h1 >> 16
    return h1 - (1 << 32) if h1 & 0x80000000 else h1


_PARTITION_VALUES: dict[int, list[int]] = {}


def partition_values(n: int) -> list[int]:
    """For each partition i < n, an int v with ``pmod(murmur3(v), n) == i``."""
    values = _PARTITION_VALUES.get(n)
    if values is None:
        found: dict[int, int] = {}
        v = 0
        while len(found) < n:
            found.setdefault(murmur3_int(v) % n, v)  # Python % is pmod
            v += 1
        values = [found[i] for i in range(n)]
        _PARTITION_VALUES[n] = values
    return values
