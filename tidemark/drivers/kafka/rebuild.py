"""Bring a range's local store to Kafka's frontier by reading the topics.

Kafka is the authority: a batch is committed when its transaction (data and progress
record) is. The local store that answers Loads commits *after* it, so it can be behind —
one batch after a crash between the two commits, or entirely when the range now runs
on a machine that never held it. Then the range's part of every standard binding's topic
is read back (read_committed): the last record of each key whose hash falls in the range
is the key's document, a tombstone a delete; records that another writer put on the topic
(:func:`written_by`) are skipped. The store takes exactly that, committed with
the frontier's runtime checkpoint. A store *ahead* of Kafka means the topics were reset
under it, and Open refuses.
"""

from __future__ import annotations

import logging
import time
from typing import Any, Optional, Sequence

import orjson

from tidemark.collection.keys import key_hash
from tidemark.drivers.common.fences import identity
from tidemark.drivers.kafka.reader import committed_messages
from tidemark.errors import DocumentError, RecoveryError
from tidemark.store import RangeStore, tidemark_key
from tidemark.store.db import batch_of

log = logging.getLogger("tidemark")


def needs_rebuild(materialization: str, store: RangeStore, frontier: Optional[dict]) -> bool:
    """True when the store is behind ``frontier``; raises when it is ahead or another run's."""
    have = store.checkpoint
    if identity(have) == identity(frontier):
        return False
    if frontier is None or batch_of(have) >= batch_of(frontier):
        raise RecoveryError(
            f"materialization {materialization!r}: the local state store {store.name} holds batch "
            f"{batch_of(have)} but Kafka's progress topic has {'nothing' if frontier is None else f'batch {batch_of(frontier)}'} "
            "for this range: the topics were deleted or reset under it. Start the view over with "
            f"`tidemark reset SPEC -m {materialization}` (it removes the state too); nothing was written"
        )
    return True


def written_by(msg, materialization: str) -> bool:
    """Whether a data record is this view's: its ``tidemark-materialization`` header names it
    (a record with a ``tidemark-range`` header but no materialization is an older tidemark's,
    and kept); a record without tidemark's headers is another writer's."""
    headers = dict(msg.headers() or ())
    owner = headers.get("tidemark-materialization")
    if owner is not None:
        return owner == materialization.encode("utf-8")
    return "tidemark-range" in headers


def rebuild(
    config: dict,
    store: RangeStore,
    topics: Sequence[tuple[str, int]],
    frontier: dict,
    *,
    policy,
    materialization: Optional[str] = None,
) -> int:
    """Make ``store`` (of one range) hold the committed view of ``topics`` — ``(topic,
    binding id)`` of the standard bindings — for its keys, committed with ``frontier``; with
    ``materialization``, from that view's records only (:func:`written_by`).
    Returns the number of documents it holds afterwards."""
    t0 = time.monotonic()
    rng = store.range
    txn = store.transaction()
    ids = {bid.to_bytes(2, "big") for _, bid in topics}
    for k, _ in list(txn.scan()):
        if k[4:6] in ids:  # tidemark_key: hash(4) | binding id(2) | key
            txn.delete(k)
    kept = 0
    for topic, bid in topics:
        last: dict[bytes, Any] = {}
        for msg in committed_messages(config, topic, policy=policy):
            raw = msg.key()
            try:
                key = tuple(orjson.loads(raw))
            except (orjson.JSONDecodeError, TypeError) as exc:
                raise DocumentError(
                    f"kafka: a record of {topic!r} has a key that is not a JSON array ({exc})",
                    location=f"{topic}[{msg.partition()}]@{msg.offset()}",
                ) from exc
            if rng.contains(key_hash(key)) and (materialization is None or written_by(msg, materialization)):
                last[raw] = (key, msg.value())
        for key, value in last.values():
            if value is None:
                continue
            txn.put(tidemark_key(key, bid), value)
            kept += 1
    txn.commit(frontier)
    log.warning(
        "kafka: rebuilt the local state of range %s from the topics to batch %s (%d documents, %.1fs)",
        rng.name,
        batch_of(frontier),
        kept,
        time.monotonic() - t0,
    )
    return kept
