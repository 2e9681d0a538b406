"""A collection read from a NATS JetStream stream (see :mod:`tidemark.sources.log`).

::

    source: {nats: {url: "nats://127.0.0.1:4222",  # required; a password or token in it is never printed
                    stream: ORDERS,                 # required
                    subjects: [orders.>],           # optional subject filters (default: the whole stream)
                    starting_offsets: earliest,     # earliest | latest: where a new view starts
                    max_records_per_batch: 10000}}  # optional: stream sequences per batch, at most

The stream is one part, named by the stream; its offsets are stream sequences.  A range is
read through an ephemeral pull consumer (``by_start_sequence``, no acks, the filters), in
sequence order, and ends by itself at ``end`` or when the consumer has nothing pending, so
sequences deleted or filtered out inside the range cost no wait.

Records: a message's payload is the value.  A deletion has no value and its key in the key:
a message of tidemark's own ``nats`` endpoint marked ``Tidemark-Op: delete`` (key: its
``Tidemark-Key`` header, a JSON array), and a NATS KV delete or purge marker on
``$KV.<bucket>.<key>`` (key: the KV key as a JSON string).  Messages under
``tidemark.<stream>.`` -- the endpoint's progress records and quarantine -- are not documents
and are skipped.
"""

from __future__ import annotations

import asyncio
import json
import re
import threading
import uuid
from typing import Any, Coroutine, Iterator, Mapping, Optional, Sequence, TypeVar

from tidemark.drivers.common.redact import redact_url
from tidemark.drivers.common.settings import Setting, read
from tidemark.drivers.nats import wire
from tidemark.errors import SpecError, TidemarkError
from tidemark.sources.log import Bounds, Record, check_retained

T = TypeVar("T")
SETTINGS = (
    Setting(
        "url", required=True, secret=True, description="nats://[USER:PASSWORD@]HOST:PORT (or tls://, ws://, wss://)"
    ),
    Setting("stream", required=True, description="the JetStream stream to read"),
    Setting("subjects", "array", description="subject filters (wildcards allowed); default: the whole stream"),
    Setting("starting_offsets", default="earliest", choices=("earliest", "latest"), description="where a view starts"),
    Setting("max_records_per_batch", "integer", minimum=1, description="stream sequences per batch, at most"),
)
CONNECT_TIMEOUT = 10.0
REQUEST_TIMEOUT = 10.0  # one JetStream API request or fetch
FETCH = 512  # messages per pull
_STREAM_OK = re.compile(r"^[A-Za-z0-9_-]+$")
KV_OPERATION = "KV-Operation"  # NATS KV: DEL / PURGE markers
MARKER_REASON = "Nats-Marker-Reason"  # server 2.11+: a delete marker the server wrote (TTL, purge)


def read_settings(config: Optional[Mapping[str, Any]], where: str = "") -> dict:
    """The checked settings with defaults filled; SpecError (never showing the URL's secrets)."""
    try:
        v = read("nats", config, SETTINGS)
        if not str(v["url"]).startswith(("nats://", "tls://", "ws://", "wss://")):
            raise SpecError(
                f"endpoint nats: url must be a NATS URL like nats://127.0.0.1:4222, got {redact_url(v['url'])}"
            )
        if not _STREAM_OK.match(v["stream"]):
            raise SpecError(f"endpoint nats: stream must be a name of letters, digits, _ and -, got {v['stream']!r}")
        subjects = list(v["subjects"] or ())
        bad = [s for s in subjects if not isinstance(s, str) or not s or any(c.isspace() for c in s)]
        if bad:
            raise SpecError(f"endpoint nats: subjects must be subject filters like orders.>, got {bad!r}")
        v["subjects"] = subjects or None
    except SpecError as exc:
        raise SpecError(str(exc).replace("endpoint nats", "nats source", 1), path=where or None) from None
    return v


def to_record(
    stream: str, seq: int, subject: str, headers: Optional[Mapping[str, str]], data: bytes
) -> Optional[Record]:
    """The record of one message, or None for what is not a document (tidemark's progress
    records and quarantine, under ``tidemark.<stream>.``)."""
    if subject.startswith(wire.default_prefix(stream) + "."):
        return None
    h = headers or {}
    if wire.H_KEY in h and wire.H_COUNTER in h:  # a data message of tidemark's nats endpoint
        deleted = h.get(wire.H_OP) == wire.OP_DELETE
        return Record(seq, None if deleted else data, h[wire.H_KEY].encode())
    kv_key = subject.split(".", 2)[2] if subject.startswith("$KV.") and subject.count(".") >= 2 else None
    key = None if kv_key is None else json.dumps(kv_key, ensure_ascii=False).encode()
    if h.get(KV_OPERATION) in ("DEL", "PURGE") or (kv_key is not None and MARKER_REASON in h):
        return Record(seq, None, key)
    return Record(seq, data, key)


class NatsLog:
    """One JetStream stream as a :class:`~tidemark.sources.log.Log`; connects on first use."""

    kind = "nats"

    def __init__(self, config: Mapping[str, Any]):
        self.settings = read_settings(config)
        self.name: str = self.settings["stream"]
        self.subjects: Optional[list[str]] = self.settings["subjects"]
        self.url = redact_url(self.settings["url"])
        self._loop: Optional[asyncio.AbstractEventLoop] = None
        self._thread: Optional[threading.Thread] = None
        self._nc: Any = None

    def __repr__(self) -> str:
        return f"NatsLog(url={self.url!r}, stream={self.name!r}, subjects={self.subjects!r})"

    # ------------------------------------------------------------ plumbing
    def _run(self, coro: Coroutine[Any, Any, T], what: str, timeout: float = REQUEST_TIMEOUT * 3) -> T:
        """Run ``coro`` on the private loop (a daemon thread, so the connection answers the
        server's pings between calls); nats errors become tidemark errors, secrets masked."""
        from tidemark.drivers.nats.errors import translate

        if self._loop is None:
            self._loop = asyncio.new_event_loop()
            self._thread = threading.Thread(target=self._loop.run_forever, name="tidemark-nats-source", daemon=True)
            self._thread.start()
        fut = asyncio.run_coroutine_threadsafe(coro, self._loop)
        try:
            return fut.result(timeout=timeout)
        except TidemarkError:
            raise
        except Exception as exc:  # every nats-py error is translated at the boundary
            fut.cancel()
            err = translate(exc, f"nats source {self.name} at {self.url}: {what}")
            text = redact_url(str(err))
            raise (err if text == str(err) else type(err)(text)) from exc

    def _connected(self) -> Any:
        if self._nc is None:
            import nats

            async def quiet(exc: Exception) -> None:  # nats-py logs every error by default
                return None

            self._nc = self._run(
                nats.connect(
                    self.settings["url"],
                    name="tidemark-source",
                    connect_timeout=CONNECT_TIMEOUT,
                    max_reconnect_attempts=3,
                    reconnect_time_wait=0.5,
                    error_cb=quiet,
                ),
                "connect",
            )
        return self._nc

    def close(self) -> None:
        nc, self._nc = self._nc, None
        try:
            if nc is not None:
                self._run(nc.close(), "close")
        except TidemarkError:
            pass
        finally:
            if self._loop is not None and self._thread is not None:
                self._loop.call_soon_threadsafe(self._loop.stop)
                self._thread.join(timeout=10)
                self._loop.close()
            self._loop = self._thread = None

    def __enter__(self) -> "NatsLog":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # ------------------------------------------------------------ Log
    def bounds(self) -> dict[str, Bounds]:
        """``{stream: Bounds(first_seq, last_seq + 1)}``; an empty stream ``last_seq + 1`` twice;
        a missing stream ``{}``."""
        from nats.js.errors import NotFoundError

        jsm = self._connected().jsm(timeout=REQUEST_TIMEOUT)

        async def info() -> Optional[Any]:
            try:
                return (await jsm.stream_info(self.name)).state
            except NotFoundError:
                return None

        state = self._run(info(), "read the stream's state")
        if state is None:
            return {}
        end = int(state.last_seq or 0) + 1
        return {self.name: Bounds(int(state.first_seq or 0) if state.messages else end, end)}

    def read(self, part: str, start: int, end: int) -> Iterator[Record]:
        """The messages at ``start <= sequence < end`` (matching ``subjects``), in order;
        SourceGone when the stream no longer holds ``start``."""
        if part != self.name:
            raise ValueError(f"nats source {self.name}: no part {part!r} (its one part is the stream)")
        if end <= start:
            return
        check_retained(self.name, self.kind, {part: start}, self.bounds())
        from nats.js.api import AckPolicy, ConsumerConfig, DeliverPolicy

        from tidemark.drivers.nats.channel import subject_matches, version_tuple

        nc = self._connected()
        js, jsm = nc.jetstream(timeout=REQUEST_TIMEOUT), nc.jsm(timeout=REQUEST_TIMEOUT)
        filters = list(self.subjects or ())
        v = nc.connected_server_version
        local: Sequence[str] = ()
        if len(filters) > 1 and (v.major, v.minor, v.patch) < version_tuple("2.10.0"):
            local, filters = filters, []  # no multi-filter consumers before 2.10: filter here
        cfg = ConsumerConfig(
            name=uuid.uuid4().hex,
            deliver_policy=DeliverPolicy.BY_START_SEQUENCE,
            opt_start_seq=max(1, start),
            ack_policy=AckPolicy.NONE,
            mem_storage=True,
            inactive_threshold=120.0,
            filter_subject=filters[0] if len(filters) == 1 else None,
            filter_subjects=filters if len(filters) > 1 else None,
        )
        what = f"read sequences {start}..{end - 1}"
        info = self._run(jsm.add_consumer(self.name, config=cfg), what)
        sub = None
        try:
            sub = self._run(js.pull_subscribe_bind(cfg.name, stream=self.name), what)
            pending, at, idle = int(info.num_pending), start, 0
            while pending > 0 and at < end:
                try:
                    msgs = self._run(sub.fetch(min(pending, FETCH, end - at), timeout=REQUEST_TIMEOUT / 2), what)
                except TidemarkError:  # nothing came: a message deleted since? ask the consumer
                    idle += 1
                    pending = int(self._run(jsm.consumer_info(self.name, cfg.name), what).num_pending)
                    if idle > 2 and pending > 0:
                        raise
                    continue
                for m in msgs:
                    seq = int(m.metadata.sequence.stream)
                    if seq >= end:
                        return
                    at, pending = seq + 1, int(m.metadata.num_pending)
                    if local and not any(subject_matches(f, m.subject) for f in local):
                        continue
                    rec = to_record(self.name, seq, m.subject, m.headers, m.data)
                    if rec is not None:
                        yield rec
        finally:
            try:
                if sub is not None:
                    self._run(sub.unsubscribe(), "drop its consumer")
                self._run(jsm.delete_consumer(self.name, cfg.name), "drop its consumer")
            except TidemarkError:
                pass  # the consumer expires on its own (inactive_threshold)
