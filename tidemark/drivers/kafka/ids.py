"""Transactional ids: one per (materialization, shard range).

``transactional.id`` is Kafka's fence: a producer that calls ``init_transactions`` with an
id aborts the open transaction of every earlier producer with that id and fences them off.
So the id must be a pure function of (materialization, range) — the same on every
executor, every attempt, every run — and different for different ranges::

    tidemark.<materialization>.<key_begin hex>-<key_end hex>

A materialization name outside ``[A-Za-z0-9_-]`` (or longer than :data:`MAX_NAME`) is
replaced by a readable prefix of its safe characters plus a digest of the full name, so
distinct names never share an id and every id is at most :data:`MAX_ID` characters of
``[A-Za-z0-9._-]`` (safe in ACLs, logs and shell commands).
"""

from __future__ import annotations

import hashlib
import re

from tidemark.errors import SpecError
from tidemark.protocol.messages import Range

MAX_NAME = 80  # characters of the materialization name kept as they are
MAX_ID = 160
DEFAULT_PREFIX = "tidemark"
_SAFE = re.compile(r"^[A-Za-z0-9_-]+$")
_UNSAFE = re.compile(r"[^A-Za-z0-9_-]+")
_PREFIX = re.compile(r"^[A-Za-z0-9_-]{1,40}$")


def safe_name(name: str) -> str:
    """``name`` itself when it is short and safe, else ``<safe part>-<12 hex of sha256>``."""
    if not name:
        raise SpecError("a materialization name must not be empty")
    if _SAFE.match(name) and len(name) <= MAX_NAME:
        return name
    readable = _UNSAFE.sub("_", name).strip("_")[: MAX_NAME - 13].rstrip("_") or "m"
    return f"{readable}-{hashlib.sha256(name.encode('utf-8')).hexdigest()[:12]}"


def transactional_id(materialization: str, range: Range, *, prefix: str = DEFAULT_PREFIX) -> str:
    """The ``transactional.id`` of ``range`` of ``materialization``.

    ``prefix`` lets an operator match tidemark's ids with a prefixed ACL
    (``--resource-pattern-type prefixed``)."""
    if not _PREFIX.match(prefix):
        raise SpecError(f"kafka transactional id prefix must be 1-40 of [A-Za-z0-9_-], got {prefix!r}")
    tid = f"{prefix}.{safe_name(materialization)}.{range.key_begin:08x}-{range.key_end:08x}"
    assert len(tid) <= MAX_ID, tid
    return tid


def layout_ids(materialization: str, ranges, *, prefix: str = DEFAULT_PREFIX) -> list[str]:
    """The transactional ids of a shard layout (e.g. an old layout to fence at a rescale)."""
    return [transactional_id(materialization, r, prefix=prefix) for r in ranges]
