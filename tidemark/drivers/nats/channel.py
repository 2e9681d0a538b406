"""The asyncio core: stream setup, frontier, in-flight scan, the fenced progress records, rescale.

A batch's fenced publish over it is :func:`tidemark.drivers.nats.publish.publish_batch`.

The sync facade (:mod:`tidemark.drivers.nats.client`) runs these coroutines on its own loop and
translates errors; nothing here is Spark or driver-contract aware.

Exactly-once without transactions
---------------------------------
A channel's progress subject is a chain of :class:`~tidemark.drivers.nats.wire.ProgressRecord`
messages; each is published with ``Nats-Expected-Last-Subject-Sequence`` naming the one
before it, so the chain never forks.  :meth:`AsyncNats.open` appends an ``open`` record:
from then on a zombie's next record names a stale sequence and the server refuses it
(err 10071 -> :class:`~tidemark.errors.FencedOff`).
"""

from __future__ import annotations

import json
import uuid
from dataclasses import dataclass, field
from typing import Any, Optional, Sequence, cast

from tidemark.drivers.limits import ValueLimits
from tidemark.drivers.nats import wire
from tidemark.drivers.nats.errors import ERR_NO_MESSAGE_FOUND, ERR_WRONG_LAST_SEQUENCE, NatsApiError
from tidemark.drivers.nats.wire import BatchId, Channel, Frontier, InFlight, ProgressRecord
from tidemark.errors import FencedOff, RecoveryError
from tidemark.jsontext import dumps_bytes
from tidemark.protocol.messages import Range

MIN_ATOMIC_VERSION = (2, 12, 0)


@dataclass(frozen=True, slots=True)
class NatsSettings:
    """Sizes and timeouts of the NATS library (the policy object's NATS part)."""

    request_timeout: float = 10.0  # one JetStream API request or publish ack
    max_batch: int = 1000  # messages per atomic batch (the server's default limit)
    ack_every: int = 250  # await acks every N messages (flow control; atomic mode: an empty ack)
    duplicate_window: float = 120.0  # seconds; ordered mode relies on it against zombies
    fetch_size: int = 512  # messages per pull while scanning


MAX_PAYLOAD = 1024 * 1024  # a NATS server's max_payload by default
#: what a message holds of a document: the server's payload limit less room for the headers
#: (the key, the batch's own); a server configured lower refuses at publish
LIMITS = ValueLimits(max_document_bytes=MAX_PAYLOAD - 16 * 1024)


@dataclass(frozen=True, slots=True)
class OutDoc:
    """One document to write: the key's full document, or its deletion."""

    subject: str
    key: Sequence[Any]
    document: Any  # JSON-able, or bytes already encoded
    delete: bool = False

    def payload(self) -> bytes:
        d = self.document
        if isinstance(d, (bytes, bytearray)):
            return bytes(d)
        return b"" if d is None else dumps_bytes(d)


@dataclass(frozen=True, slots=True)
class StreamSetup:
    stream: str
    subjects: tuple[str, ...]
    atomic: bool
    server_version: str
    duplicate_window: float


@dataclass(slots=True)
class Session:
    """A channel claimed by :meth:`AsyncNats.open`; ``frontier`` follows every record we write."""

    channel: Channel
    id: str
    frontier: Frontier
    atomic: bool
    msg_ids_in_batches: bool = True  # cleared if the server refuses Nats-Msg-Id in atomic batches


@dataclass(frozen=True, slots=True)
class Committed:
    batch: BatchId
    seq: int  # the stream sequence of the commit record (the new fence)
    count: int  # documents in the batch
    written: int  # documents this call wrote
    skipped: int  # documents already in the stream (or the whole batch, when already committed)
    atomic_batches: int = 0


@dataclass(frozen=True, slots=True)
class RawMsg:
    seq: int
    subject: str
    headers: dict = field(default_factory=dict)
    data: bytes = b""


def version_tuple(v: str) -> tuple[int, int, int]:
    parts = (v.lstrip("v").split("-")[0].split(".") + ["0", "0", "0"])[:3]
    try:
        return int(parts[0]), int(parts[1]), int(parts[2])
    except ValueError:
        return 0, 0, 0


def subject_matches(pattern: str, subject: str) -> bool:
    """NATS subject matching: ``*`` is one token, a final ``>`` one or more."""
    p, t = pattern.split("."), subject.split(".")
    for i, tok in enumerate(p):
        if tok == ">":
            return len(t) > i
        if i >= len(t) or (tok != "*" and tok != t[i]):
            return False
    return len(p) == len(t)


class AsyncNats:
    """One NATS connection and the channel operations over it."""

    def __init__(self, nc: Any, settings: NatsSettings = NatsSettings()):
        self.nc = nc
        self.js = nc.jetstream(timeout=settings.request_timeout)
        self.jsm = nc.jsm(timeout=settings.request_timeout)
        self.settings = settings

    @classmethod
    async def connect(
        cls, url: str, settings: NatsSettings = NatsSettings(), *, connect_timeout: float = 10.0, name: str = "tidemark"
    ) -> "AsyncNats":
        import nats

        nc = await nats.connect(
            url,
            name=name,
            connect_timeout=connect_timeout,
            allow_reconnect=True,
            max_reconnect_attempts=3,
            reconnect_time_wait=0.5,
        )
        return cls(nc, settings)

    async def close(self) -> None:
        await self.nc.close()

    @property
    def server_version(self) -> str:
        v = self.nc.connected_server_version
        return f"{v.major}.{v.minor}.{v.patch}"

    # ------------------------------------------------------------ setup (Apply)
    async def _api(self, subject: str, body: Optional[dict] = None) -> dict:
        """A raw JetStream API request (JSON in, JSON out): stream configs go through here
        so that fields newer than the installed nats-py (``allow_atomic``) survive."""
        from nats.js.errors import APIError

        r = await self.nc.request(
            f"$JS.API.{subject}",
            json.dumps(body).encode() if body is not None else b"",
            timeout=self.settings.request_timeout,
        )
        resp = json.loads(r.data)
        if "error" in resp:
            raise APIError.from_error(resp["error"])
        return resp

    async def ensure_stream(
        self,
        stream: str,
        subjects: Sequence[str],
        *,
        prefix: str = "",
        atomic: Optional[bool] = None,
        metadata: Optional[dict] = None,
    ) -> StreamSetup:
        """Create ``stream`` (or extend an existing one) so it holds ``subjects`` and the
        progress subjects under ``prefix``.  ``atomic=None`` turns atomic batch publish on
        where the server supports it; ``True`` requires it; ``False`` leaves it off.
        ``metadata``: entries of the stream's metadata to set where the stream has none
        under their names (None values remove the entry)."""
        from nats.js.errors import NotFoundError

        prefix = prefix or wire.default_prefix(stream)
        want = list(dict.fromkeys([*subjects, wire.progress_wildcard(prefix)]))
        supported = version_tuple(self.server_version) >= MIN_ATOMIC_VERSION
        if atomic and not supported:
            raise NatsApiError(
                400, 0, f"atomic batch publish needs nats-server >= 2.12, this one is {self.server_version}"
            )
        use_atomic = supported if atomic is None else atomic
        try:
            cfg = (await self._api(f"STREAM.INFO.{stream}"))["config"]
        except NotFoundError:
            cfg = {
                "name": stream,
                "subjects": want,
                "storage": "file",
                "retention": "limits",
                "duplicate_window": int(self.settings.duplicate_window * 1e9),
            }
            if use_atomic:
                cfg["allow_atomic"] = True
            if metadata:
                cfg["metadata"] = {k: v for k, v in metadata.items() if v is not None}
            cfg = (await self._api(f"STREAM.CREATE.{stream}", cfg))["config"]
        else:
            have = list(cfg.get("subjects") or [])
            missing = [s for s in want if s not in have]
            meta = dict(cfg.get("metadata") or {})
            for k, v in (metadata or {}).items():
                if v is None:
                    meta.pop(k, None)
                else:
                    meta.setdefault(k, v)
            if missing or bool(cfg.get("allow_atomic")) != use_atomic or meta != dict(cfg.get("metadata") or {}):
                cfg = {**cfg, "subjects": have + missing, "allow_atomic": use_atomic, "metadata": meta}
                cfg = (await self._api(f"STREAM.UPDATE.{stream}", cfg))["config"]
        return StreamSetup(
            stream,
            tuple(cfg.get("subjects") or ()),
            bool(cfg.get("allow_atomic")),
            self.server_version,
            float(cfg.get("duplicate_window", 0)) / 1e9,
        )

    async def stream_atomic(self, stream: str) -> bool:
        return bool((await self._api(f"STREAM.INFO.{stream}"))["config"].get("allow_atomic"))

    # ------------------------------------------------------------ frontier (Open)
    async def read_frontier(self, channel: Channel) -> Frontier:
        """The last progress record of ``channel`` and its stream sequence (``seq=0``: none)."""
        from nats.js.errors import NotFoundError

        try:
            m = await self.jsm.get_last_msg(channel.stream, channel.progress_subject)
        except NotFoundError as exc:
            if getattr(exc, "err_code", None) in (ERR_NO_MESSAGE_FOUND, None):
                return Frontier(None, 0)
            raise
        return Frontier(ProgressRecord.decode(m.data or b""), int(m.seq or 0))

    async def open(self, channel: Channel) -> Session:
        """Claim ``channel``: append an ``open`` record fenced on the last one.  Every older
        session's next record then fails with FencedOff.  A closed range refuses."""
        frontier = await self.read_frontier(channel)
        if frontier.closed:
            raise FencedOff(
                f"range {channel.range.name} of {channel.materialization!r} on stream "
                f"{channel.stream!r} was closed by a rescale (successors: "
                f"{', '.join(cast(ProgressRecord, frontier.record).successors)})"  # closed: it has a record
            )
        session = Session(channel, uuid.uuid4().hex, frontier, await self.stream_atomic(channel.stream))
        prev = frontier.record
        rec = frontier.carried_forward(
            wire.KIND_OPEN,
            channel.materialization,
            channel.range.name,
            session.id,
            inflight=prev.inflight if prev else None,
        )
        await self._append_record(session, rec)
        return session

    async def written_after(
        self, channel: Channel, frontier: Frontier, subjects: Optional[Sequence[str]] = None
    ) -> InFlight:
        """The data messages of ``channel`` after its committed batch, by batch and counter:
        what a replay must skip.  Scans the stream from the committing record on."""
        written: dict[BatchId, set[int]] = {}
        last = 0
        async for m in self.scan(channel.stream, frontier.committed_seq + 1, subjects):
            d = wire.decode_data(m.seq, m.subject, m.headers, m.data)
            if d is None or d.materialization != channel.materialization or d.range != channel.range.name:
                continue
            if not d.batch.after(frontier.committed):
                continue
            written.setdefault(d.batch, set()).add(d.counter)
            last = max(last, m.seq)
        return InFlight({b: frozenset(c) for b, c in written.items()}, last)

    # ------------------------------------------------------------ fence (a batch's publish: publish.py)
    async def _resync(self, session: Session) -> None:
        f = await self.read_frontier(session.channel)
        if f.seq == session.frontier.seq:
            return
        if f.record is not None and f.record.session == session.id:
            session.frontier = f  # a record of ours whose ack we lost
            return
        raise FencedOff(self._fenced_text(session, f))

    @staticmethod
    def _fenced_text(session: Session, f: Frontier) -> str:
        ch = session.channel
        who = f"session {f.record.session[:8]} ({f.record.kind})" if f.record else "nobody"
        return (
            f"range {ch.range.name} of {ch.materialization!r} on stream {ch.stream!r}: the progress subject "
            f"moved to sequence {f.seq} by {who}; this session expected {session.frontier.seq}"
        )

    async def _append_record(self, session: Session, rec: ProgressRecord) -> None:
        """Publish one progress record fenced on ``session.frontier.seq``."""
        from nats.js.errors import APIError

        headers = {wire.H_EXPECTED_LAST_SUBJECT_SEQ: str(session.frontier.seq)}
        try:
            ack = await self.js.publish(session.channel.progress_subject, rec.encode(), headers=headers)
        except APIError as exc:
            if exc.err_code == ERR_WRONG_LAST_SEQUENCE:
                await self._fenced_or_ours(session, rec, exc)
                return
            raise
        session.frontier = Frontier(rec, int(ack.seq))

    async def _fenced_or_ours(self, session: Session, rec: ProgressRecord, exc: BaseException) -> None:
        """The fence check failed: fine if the last record is this very record (a retry after a
        lost ack), else FencedOff."""
        f = await self.read_frontier(session.channel)
        if f.record is not None and f.record == rec:
            session.frontier = f
            return
        raise FencedOff(self._fenced_text(session, f)) from exc

    # ------------------------------------------------------------ scan
    async def scan(self, stream: str, start_seq: int = 1, subjects: Optional[Sequence[str]] = None):
        """Yield :class:`RawMsg` of ``stream`` from ``start_seq`` (matching ``subjects``),
        up to the last message that was there when the scan started."""
        from nats.js.api import AckPolicy, ConsumerConfig, DeliverPolicy

        info = await self.jsm.stream_info(stream)
        if info.state.last_seq < max(1, start_seq) or info.state.messages == 0:
            return
        subjects = list(subjects or ())
        local_filter: list[str] = []
        if len(subjects) > 1 and version_tuple(self.server_version) < (2, 10, 0):
            local_filter, subjects = subjects, []  # no multi-filter consumers before 2.10
        cfg = ConsumerConfig(
            deliver_policy=DeliverPolicy.BY_START_SEQUENCE,
            opt_start_seq=max(1, start_seq),
            ack_policy=AckPolicy.NONE,
            mem_storage=True,
            inactive_threshold=120.0,
            filter_subject=subjects[0] if len(subjects) == 1 else None,
            filter_subjects=subjects if len(subjects) > 1 else None,
        )
        name = uuid.uuid4().hex
        cfg.name = name
        await self.jsm.add_consumer(stream, config=cfg)
        try:
            sub = await self.js.pull_subscribe_bind(name, stream=stream)
            pending = (await self.jsm.consumer_info(stream, name)).num_pending
            while pending > 0:
                msgs = await sub.fetch(min(pending, self.settings.fetch_size), timeout=self.settings.request_timeout)
                for m in msgs:
                    pending -= 1
                    if local_filter and not any(subject_matches(f, m.subject) for f in local_filter):
                        continue
                    yield RawMsg(int(m.metadata.sequence.stream), m.subject, dict(m.headers or {}), m.data)
            await sub.unsubscribe()
        finally:
            try:
                await self.jsm.delete_consumer(stream, name)
            except Exception:  # noqa: BLE001 - the consumer expires on its own (inactive_threshold)
                pass

    # ------------------------------------------------------------ rescale
    async def close_range(self, channel: Channel, successors: Sequence[Range] = ()) -> Frontier:
        """Retire ``channel``: a ``closed`` record carrying its frontier forward, fenced on the
        last record.  Afterwards :meth:`open` refuses it and every session on it is fenced.
        Idempotent: an already closed range is left as it is."""
        f = await self.read_frontier(channel)
        if f.closed:
            return f
        session = Session(channel, uuid.uuid4().hex, f, False)
        rec = f.carried_forward(
            wire.KIND_CLOSED,
            channel.materialization,
            channel.range.name,
            session.id,
            successors=tuple(r.name for r in successors),
        )
        await self._append_record(session, rec)
        return session.frontier

    async def rescale(
        self, stream: str, materialization: str, old: Sequence[Range], new: Sequence[Range], *, prefix: str = ""
    ) -> dict[str, Frontier]:
        """Move ``materialization`` on ``stream`` from ranges ``old`` to ranges ``new``.

        1. Read the old ranges' frontiers.  Each new range inherits the committed batch and
           checkpoint of the old ranges that overlap it; they must agree (the runtime only
           rescales where every range committed the same batch), else RecoveryError.
        2. Close the old ranges that are not in ``new`` (their zombies are fenced from now on).
        3. Open the new ranges that are not in ``old`` with the inherited frontier (an
           ``open`` record with ``inherited_from``).  Re-running after a crash is safe.
        Returns the new ranges' frontiers by range name."""
        mk = lambda r: Channel(stream, materialization, r, prefix)
        olds = {r: await self.read_frontier(mk(r)) for r in old}
        inherit: dict[Range, Frontier] = {}
        for r in new:
            covering = [(o, f) for o, f in olds.items() if o.overlaps(r)]
            if not covering:
                raise RecoveryError(f"rescale of {materialization!r}: no old range covers {r.name}")
            states = {(f.committed, json.dumps(f.checkpoint, sort_keys=True)) for _, f in covering}
            if len(states) != 1:
                raise RecoveryError(
                    f"rescale of {materialization!r}: ranges {', '.join(o.name for o, _ in covering)} covering "
                    f"{r.name} committed different batches "
                    f"({', '.join(str(f.committed) for _, f in covering)}); finish the batch on the old layout"
                )
            inherit[r] = covering[0][1]
        for o in old:
            if o not in new:
                await self.close_range(mk(o), [r for r in new if r.overlaps(o)])
        out: dict[str, Frontier] = {}
        for r in new:
            if r in old:
                out[r.name] = olds[r]
                continue
            ch = mk(r)
            f = await self.read_frontier(ch)
            src = inherit[r]
            rec0 = f.record
            if (
                rec0 is not None
                and rec0.kind == wire.KIND_OPEN
                and rec0.inherited_from
                and rec0.committed == src.committed
            ):
                out[r.name] = f  # already opened by an earlier run of this rescale
                continue
            session = Session(ch, uuid.uuid4().hex, f, False)
            rec = ProgressRecord(
                kind=wire.KIND_OPEN,
                materialization=materialization,
                range=r.name,
                session=session.id,
                committed=src.committed,
                count=0,
                checkpoint=src.checkpoint,
                committed_seq=None,
                inherited_from=tuple(o.name for o in old if o.overlaps(r)),
            )
            await self._append_record(session, rec)
            out[r.name] = session.frontier
        return out
