"""Key encoding of the store: every key starts with its 32-bit key hash.

A store key is ``4-byte big-endian key hash + payload``.  Byte order is then hash order
first, so the keys of a shard range ``[key_begin, key_end]`` are one contiguous interval
``[pack(key_begin), pack(key_end + 1))`` — a split or a merge copies intervals, never
scans a whole store to filter by hash.  The payload is the caller's; tidemark's driver
uses :func:`tidemark_key`: a 2-byte binding index and the key's canonical JSON text, so
one store holds every binding of a range and a scan yields keys in (hash, binding, key
text) order.

Inside RocksDB one more byte goes in front (:data:`DATA` for data, :data:`META` for the
reserved fence/checkpoint keys), so metadata and data share one column family and one
write batch or SST file commits both atomically.
"""

from __future__ import annotations

import struct
from typing import Optional, Sequence

from tidemark.collection.keys import key_hash, key_json
from tidemark.protocol.messages import KEY_SPACE_MAX, Range

META = b"\x00"
DATA = b"\x01"
_U32 = struct.Struct(">I")
_U16 = struct.Struct(">H")


def encode_key(hash32: int, payload: bytes) -> bytes:
    """A store key: the 4-byte big-endian hash, then ``payload``."""
    return _U32.pack(hash32) + bytes(payload)


def tidemark_key(key: Sequence, binding: int = 0) -> bytes:
    """The store key of a tidemark key tuple in binding number ``binding`` (0..65535)."""
    text = key_json(key)
    return _U32.pack(key_hash(key)) + _U16.pack(binding) + text.encode("utf-8")


def decode_tidemark_key(skey: bytes) -> tuple[int, str]:
    """``(binding, key_json)`` of a key made by :func:`tidemark_key`."""
    return _U16.unpack_from(skey, 4)[0], skey[6:].decode("utf-8")


def key_hash_of(skey: bytes) -> int:
    if len(skey) < 4:
        raise ValueError(f"store key {skey!r} is shorter than its 4-byte key hash")
    return _U32.unpack_from(skey, 0)[0]


def range_bounds(key_range: Range) -> tuple[bytes, Optional[bytes]]:
    """The store keys of ``key_range``: ``[first, end)``; ``end`` is None for the end of the key space."""
    end = None if key_range.key_end == KEY_SPACE_MAX else _U32.pack(key_range.key_end + 1)
    return _U32.pack(key_range.key_begin), end


def prefix_end(prefix: bytes) -> Optional[bytes]:
    """The smallest key greater than every key starting with ``prefix`` (None: none is)."""
    p = bytearray(prefix)
    while p:
        if p[-1] < 0xFF:
            p[-1] += 1
            return bytes(p)
        p.pop()
    return None


def clamp(key_range: Range, lo: Optional[bytes], hi: Optional[bytes]) -> tuple[bytes, Optional[bytes]]:
    """Intersect ``[lo, hi)`` with the interval of ``key_range``."""
    rlo, rhi = range_bounds(key_range)
    lo = rlo if lo is None or lo < rlo else lo
    if hi is None or (rhi is not None and hi > rhi):
        hi = rhi
    return lo, hi


def is_range_name(name: str) -> bool:
    begin, sep, end = name.partition("-")
    return bool(sep) and len(begin) == 8 and len(end) == 8 and all(c in "0123456789abcdef" for c in begin + end)
