"""Open of a ``nats`` range: fence on the log, read the frontier, bring the local store to it.

1. Fence: list the materialization's progress subjects.  When the range has its own live
   record and no other live range overlaps it, append an ``open`` record fenced on the last
   one (:meth:`tidemark.drivers.nats.NatsClient.open`).  Otherwise the layout changed: the range
   takes over (:func:`tidemark.drivers.nats.layout.take_over`) — it inherits the checkpoint by the
   rule of :func:`tidemark.drivers.common.fences.plan_open` and closes every other live
   overlapping range, each close fenced on what was read, so a session of the old layout is
   fenced and nothing it commits is lost.
2. The in-flight batch: the messages of the range written after its committed batch
   (:meth:`~tidemark.drivers.nats.NatsClient.written_after`); the replay skips exactly those.
3. The local store (a cache of the log's full documents, for Loads): open it
   (:meth:`tidemark.store.RangeStore.open` fences this machine's sessions); when its
   checkpoint is not the frontier's, rebuild the range from the log's committed documents
   (:func:`rebuild`).  A store AHEAD of the log means the log was reset under it:
   RecoveryError.
"""

from __future__ import annotations

import os
import shutil
from typing import Optional, Sequence

from tidemark.collection.keys import key_hash
from tidemark.drivers.common.fences import CheckpointState, identity, plan_open
from tidemark.drivers.nats.channel import Session
from tidemark.drivers.nats.client import NatsClient
from tidemark.drivers.nats.layout import needs_takeover
from tidemark.drivers.nats.wire import BatchId, Channel, Frontier
from tidemark.errors import FencedOff, RecoveryError
from tidemark.protocol.messages import Range
from tidemark.store import Isolation, RangeStore, StoreConfig, tidemark_key
from tidemark.store.keys import is_range_name

OPEN_ATTEMPTS = 20


def _batch(cp: Optional[dict]) -> int:
    b = cp.get("batch_id") if isinstance(cp, dict) else None
    return b if isinstance(b, int) and not isinstance(b, bool) else -1


def fence(client: NatsClient, channel: Channel) -> Session:
    """Step 1: the range's session on the log, its frontier the checkpoint to resume from."""
    mat, rng = channel.materialization, channel.range

    def choose(over: dict[Range, Frontier]) -> tuple[Optional[BatchId], Optional[dict]]:
        plan = plan_open(mat, rng, [CheckpointState(r, f.seq, f.checkpoint) for r, f in over.items()])
        cp = plan.checkpoint
        if cp is None:
            return None, None
        want = identity(cp)
        committed = next(
            (f.committed for f in over.values() if f.checkpoint is not None and identity(f.checkpoint) == want), None
        )
        return committed, cp

    for attempt in range(OPEN_ATTEMPTS):
        frontiers = client.channel_frontiers(channel.stream, mat, channel.prefix)
        if needs_takeover(rng, frontiers):
            return client.take_over(channel, choose)[0]
        try:
            return client.open(channel)
        except FencedOff:
            # A session of the range wrote a record between our read and our open record:
            # it is the older one; read again and open after it.
            if attempt == OPEN_ATTEMPTS - 1:
                raise
    raise AssertionError("unreachable")


def _wipe(cfg: StoreConfig, rng: Range) -> None:
    base = os.path.join(cfg.path, "ranges")
    for name in os.listdir(base) if os.path.isdir(base) else ():
        if is_range_name(name) and Range.parse(name).overlaps(rng):
            shutil.rmtree(os.path.join(base, name), ignore_errors=True)


def verdict(have: Optional[dict], want: Optional[dict]) -> str:
    """``same``, ``behind`` (a transaction brings it forward), ``other`` (wipe, then rebuild)
    or ``ahead`` (the log was reset under the store)."""
    if have is None and want is None:
        return "same"
    if have is None:
        return "behind"
    if want is None:
        return "ahead"
    if identity(have) == identity(want):
        return "same"
    if have.get("checkpoint_id") == want.get("checkpoint_id"):
        if _batch(have) > _batch(want):
            return "ahead"
        if _batch(have) < _batch(want):
            return "behind"
    return "other"


def open_store(
    client: NatsClient, cfg: StoreConfig, channel: Channel, want: Optional[dict], standard: Sequence[tuple[str, int]]
) -> RangeStore:
    """Step 3.  ``standard``: ``(subject, binding id)`` of each standard binding."""
    rng = channel.range
    try:
        rs = RangeStore.open(cfg, rng)
    except RecoveryError:  # the local ranges disagree among themselves: the log decides
        _wipe(cfg, rng)
        rs = RangeStore.open(cfg, rng)
    v = verdict(rs.checkpoint, want)
    if v == "same":
        return rs
    if v == "ahead":
        rs.close()
        raise RecoveryError(
            f"nats range {rng.name} of {channel.materialization!r}: the local state store {cfg.path} is at batch "
            f"{_batch(rs.checkpoint)} but stream {channel.stream!r} has committed only "
            f"{'nothing' if want is None else 'batch %d' % _batch(want)}: the stream was reset or replaced under it. "
            f"Start the view over with `tidemark reset SPEC -m {channel.materialization}`"
        )
    if v == "other":
        rs.close()
        _wipe(cfg, rng)
        rs = RangeStore.open(cfg, rng)
    rebuild(client, rs, channel, want, standard)
    return rs


def rebuild(
    client: NatsClient,
    rs: RangeStore,
    channel: Channel,
    checkpoint: Optional[dict],
    standard: Sequence[tuple[str, int]],
) -> int:
    """Replace the range's part of the store with the log's committed documents (the last per
    key whose key hash is in the range; a delete removes it) and commit ``checkpoint``."""
    assert checkpoint is not None
    rng = channel.range
    txn = rs.transaction()
    for k, _ in list(txn.scan(isolation=Isolation.READ_COMMITTED)):
        txn.delete(k)
    ids = dict(standard)
    latest: dict[bytes, Optional[bytes]] = {}
    if ids:
        for m in client.read_committed(
            channel.stream, prefix=channel.prefix, materialization=channel.materialization, subjects=list(ids)
        ):
            if m.subject not in ids or not rng.contains(key_hash(m.key)):
                continue
            latest[tidemark_key(m.key, ids[m.subject])] = None if m.delete else bytes(m.message.data)
    for k, v in latest.items():
        if v is None:
            txn.delete(k)
        else:
            txn.put(k, v)
    txn.commit(checkpoint)
    return len(latest)
