"""The sync facade: :class:`NatsClient` runs :class:`~tidemark.drivers.nats.channel.AsyncNats` on a
private event loop in a daemon thread (the runtime is synchronous, and a loop that only
runs during calls would miss the server's pings), and translates every nats error into
:mod:`tidemark.errors` (:mod:`tidemark.drivers.nats.errors`).
"""

from __future__ import annotations

import asyncio
import threading
from typing import Any, Coroutine, Iterable, Iterator, Optional, Sequence, TypeVar

from tidemark.drivers.common.redact import redact_url
from tidemark.drivers.nats import layout, publish, wire
from tidemark.drivers.nats.channel import AsyncNats, Committed, NatsSettings, OutDoc, Session, StreamSetup
from tidemark.drivers.nats.errors import translate
from tidemark.drivers.nats.reader import CommittedMessage, committed_view, fold_committed
from tidemark.drivers.nats.wire import BatchId, Channel, Frontier, InFlight
from tidemark.errors import TidemarkError
from tidemark.policy import DEFAULT_POLICY, RetryPolicy
from tidemark.protocol.messages import Range

T = TypeVar("T")


class NatsClient:
    """One connection to a NATS server with JetStream; every method blocks.

    ::

        with NatsClient("nats://127.0.0.1:4222") as nc:
            nc.ensure_stream("VIEWS", ["views.customers"])
            ch = Channel("VIEWS", "customer_view", Range())
            session = nc.open(ch)                      # fences older sessions
            inflight = nc.written_after(ch, session.frontier)
            nc.publish_batch(session, BatchId(cp, 7), docs, checkpoint, skip=inflight)
            view = nc.committed_view("VIEWS", "views.customers")
    """

    def __init__(
        self,
        url: str,
        *,
        policy: RetryPolicy = DEFAULT_POLICY,
        settings: Optional[NatsSettings] = None,
        name: str = "tidemark",
    ):
        settings = settings if settings is not None else NatsSettings()
        self.url = url
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, name="tidemark-nats", daemon=True)
        self._thread.start()
        self._timeout = max(policy.connect_timeout, settings.request_timeout) * 6
        try:
            self._aio: AsyncNats = self._run(
                AsyncNats.connect(url, settings, connect_timeout=policy.connect_timeout, name=name),
                f"connect to NATS at {redact_url(url)}",
            )
        except BaseException:
            self._stop_loop()
            raise

    # ------------------------------------------------------------ plumbing
    def _run(self, coro: Coroutine[Any, Any, T], what: str) -> T:
        fut = asyncio.run_coroutine_threadsafe(coro, self._loop)
        try:
            return fut.result(timeout=self._timeout)
        except TidemarkError:
            raise
        except BaseException as exc:  # translated at the boundary
            fut.cancel()
            if isinstance(exc, (KeyboardInterrupt, SystemExit)):
                raise
            raise translate(exc, what) from exc

    def _stop_loop(self) -> None:
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(timeout=10)

    def close(self) -> None:
        try:
            self._run(self._aio.close(), "close the NATS connection")
        except TidemarkError:
            pass
        finally:
            self._stop_loop()

    def __enter__(self) -> "NatsClient":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    @property
    def server_version(self) -> str:
        return self._aio.server_version

    # ------------------------------------------------------------ API
    def ensure_stream(
        self,
        stream: str,
        subjects: Sequence[str],
        *,
        prefix: str = "",
        atomic: Optional[bool] = None,
        metadata: Optional[dict] = None,
    ) -> StreamSetup:
        """Create or extend ``stream`` for ``subjects`` and the progress subjects (Apply)."""
        return self._run(
            self._aio.ensure_stream(stream, subjects, prefix=prefix, atomic=atomic, metadata=metadata),
            f"create stream {stream!r}",
        )

    def read_frontier(self, channel: Channel) -> Frontier:
        """The channel's last progress record and its stream sequence (seq 0: none yet)."""
        return self._run(self._aio.read_frontier(channel), f"read the frontier of {channel.progress_subject}")

    def open(self, channel: Channel) -> Session:
        """Claim the channel (an ``open`` record fenced on the last record): older sessions
        are fenced from now on.  FencedOff when the range was closed by a rescale."""
        return self._run(self._aio.open(channel), f"open {channel.progress_subject}")

    def written_after(self, channel: Channel, frontier: Frontier, subjects: Optional[Sequence[str]] = None) -> InFlight:
        """The in-flight batch's messages already in the stream, by counter (what a replay skips)."""
        return self._run(
            self._aio.written_after(channel, frontier, subjects),
            f"scan {channel.stream!r} after the frontier of range {channel.range.name}",
        )

    def publish_batch(
        self,
        session: Session,
        batch: BatchId,
        docs: Iterable[OutDoc],
        checkpoint: dict,
        *,
        skip: Optional[InFlight] = None,
        subjects: Optional[Sequence[str]] = None,
    ) -> Committed:
        """Write one batch and its commit record, fenced; safe to call again for the same batch."""
        return self._run(
            publish.publish_batch(self._aio, session, batch, docs, checkpoint, skip=skip, subjects=subjects),
            f"publish batch {batch.batch_id} to {session.channel.stream!r}",
        )

    def close_range(self, channel: Channel, successors: Sequence[Range] = ()) -> Frontier:
        """Retire a range after a rescale; its sessions are fenced from now on."""
        return self._run(self._aio.close_range(channel, successors), f"close {channel.progress_subject}")

    def rescale(
        self, stream: str, materialization: str, old: Sequence[Range], new: Sequence[Range], *, prefix: str = ""
    ) -> dict[str, Frontier]:
        """Close the old ranges and open the new ones with the inherited frontier."""
        return self._run(
            self._aio.rescale(stream, materialization, old, new, prefix=prefix),
            f"rescale {materialization!r} on {stream!r}",
        )

    def channel_frontiers(self, stream: str, materialization: str, prefix: str = "") -> dict[Range, Frontier]:
        """The last progress record of every range of ``materialization`` on ``stream``."""
        return self._run(
            layout.channel_frontiers(self._aio, stream, materialization, prefix),
            f"read the progress subjects of {materialization!r} on {stream!r}",
        )

    def take_over(self, channel: Channel, choose: layout.Chooser) -> tuple[Session, dict[Range, Frontier]]:
        """Open ``channel`` on a new layout: close the overlapping ranges, inherit their frontier
        (:func:`tidemark.drivers.nats.layout.take_over`)."""
        return self._run(layout.take_over(self._aio, channel, choose), f"open {channel.progress_subject}")

    def purge(self, stream: str, subjects: Sequence[str]) -> int:
        """Remove every message of ``stream`` on ``subjects`` (filters allowed)."""
        return self._run(layout.purge(self._aio, stream, subjects), f"purge {list(subjects)} of {stream!r}")

    def stream_names(self) -> list[str]:
        return self._run(layout.stream_names(self._aio), "list the streams")

    def stream_exists(self, stream: str) -> bool:
        return self._run(layout.stream_exists(self._aio, stream), f"look up stream {stream!r}")

    def subject_writers(self, stream: str, subjects: Sequence[str]) -> dict[str, str]:
        return self._run(layout.subject_writers(self._aio, stream, subjects), f"read the subjects of {stream!r}")

    def stream_config(self, stream: str) -> Optional[dict]:
        return self._run(layout.stream_config(self._aio, stream), f"look up stream {stream!r}")

    def scan(
        self, stream: str, start_seq: int = 1, subjects: Optional[Sequence[str]] = None
    ) -> list[tuple[int, str, dict, bytes]]:
        """Every message of ``stream`` from ``start_seq`` (as it was when the scan began)."""

        async def collect() -> list[tuple[int, str, dict, bytes]]:
            return [(m.seq, m.subject, m.headers, m.data) async for m in self._aio.scan(stream, start_seq, subjects)]

        return self._run(collect(), f"scan stream {stream!r}")

    def read_committed(
        self,
        stream: str,
        *,
        prefix: str = "",
        materialization: Optional[str] = None,
        subjects: Optional[Sequence[str]] = None,
    ) -> Iterator[CommittedMessage]:
        """Only messages a commit record covers, once each, in commit order.  ``subjects``
        limits the data subjects read (progress subjects are always read)."""
        prefix = prefix or wire.default_prefix(stream)
        filt = None if subjects is None else [*subjects, wire.progress_wildcard(prefix)]
        return fold_committed(self.scan(stream, 1, filt), prefix, materialization, filtered=subjects is not None)

    def committed_view(
        self, stream: str, subject: str, *, prefix: str = "", materialization: Optional[str] = None
    ) -> dict[tuple, Any]:
        """The last committed document per key of ``subject``."""
        return committed_view(
            self.read_committed(stream, prefix=prefix, materialization=materialization, subjects=[subject]), subject
        )
