"""Every channel of a materialization, and an Open that changes the shard layout.

The sink's Open does not know the previous layout: it lists the progress subjects of the
materialization (:func:`channel_frontiers`), and when its range has no live record of its
own, or another live range overlaps it (the first Open after a split or a merge), it
takes over (:func:`take_over`):

1. read every channel's frontier;
2. choose the checkpoint the range inherits (``choose(frontiers)``, the caller's rule);
3. close every *other* live overlapping range, each ``closed`` record fenced on the
   sequence read in step 1 — a session of the old layout that committed meanwhile moved
   that sequence, so the close fails and the whole plan starts over from step 1;
4. append the range's ``open`` record with ``inherited_from``, fenced the same way.

A session of the old layout is fenced from step 3 on (its next record names a stale
sequence), and the inherited checkpoint is never older than what the old ranges committed.
"""

from __future__ import annotations

import uuid
from typing import Callable, Optional, Sequence

from tidemark.drivers.nats import wire
from tidemark.drivers.nats.channel import AsyncNats, Session
from tidemark.drivers.nats.wire import BatchId, Channel, Frontier, ProgressRecord
from tidemark.errors import FencedOff, RecoveryError
from tidemark.protocol.messages import Range

TAKEOVER_ATTEMPTS = 20

# choose(frontiers of the overlapping ranges) -> (committed batch, runtime checkpoint)
Chooser = Callable[[dict[Range, Frontier]], tuple[Optional[BatchId], Optional[dict]]]


def progress_filter(stream: str, materialization: str, prefix: str = "") -> str:
    return f"{prefix or wire.default_prefix(stream)}.progress.{wire.subject_token(materialization)}.*"


async def list_progress_subjects(
    aio: AsyncNats, stream: str, materialization: str, prefix: str = "", *, filt: str = ""
) -> list[str]:
    """The progress subjects of ``materialization`` that hold a record (one per range ever opened)."""
    filt = filt or progress_filter(stream, materialization, prefix)
    out: list[str] = []
    offset = 0
    while True:
        resp = await aio._api(f"STREAM.INFO.{stream}", {"subjects_filter": filt, "offset": offset})
        subjects = (resp.get("state") or {}).get("subjects") or {}
        out.extend(subjects)
        total = int(resp.get("total") or 0)
        offset += len(subjects)
        if not subjects or offset >= total:
            return sorted(set(out))


async def subject_writers(aio: AsyncNats, stream: str, subjects: Sequence[str]) -> dict[str, str]:
    """``{subject: materialization}`` of the last data message on each subject that has one
    (its ``Tidemark-Materialization`` header)."""
    from nats.js.errors import NotFoundError

    out: dict[str, str] = {}
    for subject in subjects:
        try:
            m = await aio.jsm.get_last_msg(stream, subject)
        except NotFoundError:
            continue
        writer = (m.headers or {}).get(wire.H_MATERIALIZATION)
        if writer:
            out[subject] = writer
    return out


async def channel_frontiers(
    aio: AsyncNats, stream: str, materialization: str, prefix: str = ""
) -> dict[Range, Frontier]:
    """The last progress record of every range of ``materialization`` on ``stream``."""
    out: dict[Range, Frontier] = {}
    for subject in await list_progress_subjects(aio, stream, materialization, prefix):
        key_range = Range.parse(subject.rsplit(".", 1)[1])
        out[key_range] = await aio.read_frontier(Channel(stream, materialization, key_range, prefix))
    return out


def needs_takeover(key_range: Range, frontiers: dict[Range, Frontier]) -> bool:
    """True when ``key_range`` cannot simply be re-opened: it has no live record of its own, or a
    live record of another range overlaps it (the layout changed)."""
    own = frontiers.get(key_range)
    if own is None or own.record is None or own.closed:
        return True
    return any(r != key_range and r.overlaps(key_range) and not f.closed for r, f in frontiers.items())


async def _append(aio: AsyncNats, channel: Channel, seen: Frontier, rec: ProgressRecord) -> Optional[Session]:
    """Append ``rec`` fenced on ``seen.seq``; None when the subject moved since."""
    session = Session(channel, rec.session, seen, False)
    try:
        await aio._append_record(session, rec)
    except FencedOff:
        return None
    return session


async def take_over(aio: AsyncNats, channel: Channel, choose: Chooser) -> tuple[Session, dict[Range, Frontier]]:
    """Open ``channel`` on a new layout (see the module docstring); returns the session and
    the frontiers the plan used.  ``choose`` may raise RecoveryError (nothing is written)."""
    mat, key_range = channel.materialization, channel.range
    for _ in range(TAKEOVER_ATTEMPTS):
        every = await channel_frontiers(aio, channel.stream, mat, channel.prefix)
        over = {r: f for r, f in every.items() if r.overlaps(key_range)}
        committed, checkpoint = choose(over)
        moved = False
        for r, f in sorted(over.items(), key=lambda kv: kv[0].key_begin):
            if r == key_range or f.closed:
                continue
            rec = f.carried_forward(wire.KIND_CLOSED, mat, r.name, uuid.uuid4().hex, successors=(key_range.name,))
            if await _append(aio, channel.with_range(r), f, rec) is None:
                moved = True
                break
        if moved:
            continue
        own = over.get(key_range, Frontier(None, 0))
        rec = ProgressRecord(
            kind=wire.KIND_OPEN,
            materialization=mat,
            range=key_range.name,
            session=uuid.uuid4().hex,
            committed=committed,
            count=0,
            checkpoint=checkpoint,
            committed_seq=None,
            inherited_from=tuple(r.name for r in sorted(over, key=lambda r: r.key_begin) if r != key_range)
            or (key_range.name,),
        )
        session = await _append(aio, channel, own, rec)
        if session is None:
            continue
        session.atomic = await aio.stream_atomic(channel.stream)
        return session, over
    raise RecoveryError(
        f"range {key_range.name} of {mat!r} on stream {channel.stream!r}: the progress subjects of the "
        f"overlapping ranges kept changing during {TAKEOVER_ATTEMPTS} attempts to open it; are "
        "sessions of two layouts running at once? Stop the old job and retry"
    )


async def purge(aio: AsyncNats, stream: str, subjects: Sequence[str]) -> int:
    """Remove every message of ``stream`` on ``subjects`` (filters allowed); returns how many."""
    from nats.js.errors import NotFoundError

    n = 0
    for s in subjects:
        try:
            resp = await aio._api(f"STREAM.PURGE.{stream}", {"filter": s})
        except NotFoundError:
            return n
        n += int(resp.get("purged") or 0)
    return n


async def stream_config(aio: AsyncNats, stream: str) -> Optional[dict]:
    """The stream's configuration, or None when there is no such stream."""
    from nats.js.errors import NotFoundError

    try:
        return (await aio._api(f"STREAM.INFO.{stream}"))["config"]
    except NotFoundError:
        return None


async def stream_exists(aio: AsyncNats, stream: str) -> bool:
    return await stream_config(aio, stream) is not None


def dropping_limits(cfg: dict) -> list[str]:
    """The settings of a stream under which the server deletes messages on its own: a view's
    documents and progress records would silently go (a rebuild of the local state, and
    readers, need every one)."""
    out = []
    for name in ("max_age", "max_msgs", "max_bytes", "max_msgs_per_subject"):
        value = cfg.get(name)
        if isinstance(value, (int, float)) and value > 0:
            out.append(f"{name} {value}")
    if cfg.get("retention", "limits") != "limits":
        out.append(f"retention {cfg.get('retention')}")
    return out


async def stream_names(aio: AsyncNats) -> list[str]:
    out: list[str] = []
    while True:
        resp = await aio._api("STREAM.NAMES", {"offset": len(out)})
        names = resp.get("streams") or []
        out.extend(names)
        if not names or len(out) >= int(resp.get("total") or 0):
            return out
