"""The store's binding ids (``crc32(name) & 0xFFFF``, see :mod:`.naming`), without the store's
libraries: the conformance kit picks resource names whose ids differ."""

from __future__ import annotations

import zlib

QUARANTINE_ID = 0xFFFF


def binding_id(name: str) -> int:
    return zlib.crc32(name.encode("utf-8")) & 0xFFFF


def distinct_ids(names) -> bool:
    """Whether ``names`` have distinct binding ids, none of them the quarantine's."""
    ids = [binding_id(n) for n in names]
    return len(set(ids)) == len(ids) and QUARANTINE_ID not in ids
