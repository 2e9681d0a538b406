"""A range's session on the ``nats`` log: what a shard session (the push endpoints' one
:class:`~tidemark.drivers.push.PushTransactor`, with the local state store answering Loads)
sends and publishes.

* Open (:func:`fence`): fence on the log, read the frontier.  List the materialization's
  progress subjects.  When the range has its own live record and no other live range
  overlaps it, append an ``open`` record fenced on the last one
  (:meth:`tidemark.drivers.nats.NatsClient.open`).  Otherwise the layout changed: the range
  takes over (:func:`tidemark.drivers.nats.layout.take_over`) -- it inherits the checkpoint by
  the rule of :func:`tidemark.drivers.common.fences.plan_open` and closes every other live
  overlapping range, each close fenced on what was read, so a session of the old layout is
  fenced and nothing it commits is lost.  Then the in-flight batch: the messages of the range
  written after its committed batch (:meth:`~tidemark.drivers.nats.NatsClient.written_after`);
  the replay skips exactly those.
* Store (:meth:`NatsSession.send`): every row is queued as a message (the key's full
  document; a delete of a standard binding carries ``Tidemark-Op: delete``).
* Quarantine: the rows are queued as messages on the materialization's quarantine subject,
  in the same batch (so they commit with it, or not at all).
* StartCommit: ``before_endpoint_commit``; the batch's messages and its progress record
  (:meth:`tidemark.drivers.nats.NatsClient.publish_batch`: fenced on the range's progress subject,
  skipping the counters the Open found already written); ``after_endpoint_commit``; then
  the store commits with the same runtime checkpoint.  A crash between the two is repaired
  by the next Open (the store is behind the log: rebuilt from it).

Counters are assigned after sorting the batch by (binding, key), so a replay of the same
batch gives every key the counter — and the ``Nats-Msg-Id`` — it had in the first attempt.
"""

from __future__ import annotations

from typing import Optional, Sequence

from tidemark.collection.keys import key_json
from tidemark.drivers.common.fences import CheckpointState, identity, plan_open
from tidemark.drivers.nats.channel import LIMITS, Committed, OutDoc, Session
from tidemark.drivers.nats.client import NatsClient
from tidemark.drivers.nats.layout import needs_takeover
from tidemark.drivers.nats.wire import BatchId, Channel, Frontier, InFlight
from tidemark.errors import FencedOff
from tidemark.faults import fault_point
from tidemark.jsontext import dumps_bytes
from tidemark.protocol.messages import Range, Store

OPEN_ATTEMPTS = 20


class _MidBatch(OutDoc):
    """The middle document of a batch: reaching its encoding is the ``nats_mid_batch`` fault
    point (a writer killed there leaves part of the batch in the stream)."""

    __slots__ = ()

    def payload(self) -> bytes:
        fault_point("nats_mid_batch")
        return OutDoc.payload(self)


def fence(client: NatsClient, channel: Channel) -> Session:
    """The range's session on the log, its frontier the checkpoint to resume from."""
    mat, key_range = channel.materialization, channel.range

    def choose(over: dict[Range, Frontier]) -> tuple[Optional[BatchId], Optional[dict]]:
        plan = plan_open(mat, key_range, [CheckpointState(r, f.seq, f.checkpoint) for r, f in over.items()])
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
        if needs_takeover(key_range, frontiers):
            return client.take_over(channel, choose)[0]
        try:
            return client.open(channel)
        except FencedOff:
            # A session of the range wrote a record between our read and our open record:
            # it is the older one; read again and open after it.
            if attempt == OPEN_ATTEMPTS - 1:
                raise
    raise AssertionError("unreachable")


class NatsSession:
    """One fenced atomic batch publish per batch, with the range's progress record."""

    def __init__(
        self,
        client: NatsClient,
        channel: Channel,
        subjects: Sequence[str],
        delta: Sequence[bool],
        quarantine_subject: str,
    ):
        self.client = client
        self.range = channel.range
        self.session = fence(client, channel)
        self.checkpoint = self.session.frontier.checkpoint
        self.place = f"stream {channel.stream!r}"
        self.subjects = list(subjects)
        self.delta = list(delta)
        self.quarantine_subject = quarantine_subject
        self.inflight = client.written_after(channel, self.session.frontier, self._all())
        self._queued: list[tuple[int, str, OutDoc]] = []
        self.last_commit: Optional[Committed] = None  # tidemark.drivers.nats.Committed of the last StartCommit

    def _all(self) -> list[str]:
        return [*dict.fromkeys(self.subjects), self.quarantine_subject]

    def send(self, msg: Store) -> None:
        b = msg.binding
        subject = self.subjects[b]
        for key, doc, delete in zip(msg.keys, msg.docs, msg.deletes):
            delete = bool(delete) and not self.delta[b]
            data = None if doc is None else dumps_bytes(doc)  # encoded once, its size checked here
            if data is not None:
                LIMITS.check_document(len(data), key, f"nats: subject {subject!r}")
            self._queued.append((b, key_json(key), OutDoc(subject, list(key), data, delete)))

    def _batch_docs(self, batch: Optional[int], quarantined: list[dict]) -> list[OutDoc]:
        self._queued.sort(key=lambda q: (q[0], q[1]))  # stable: a delta binding's rows of one key keep their order
        docs = [d for _, _, d in self._queued]
        docs += [OutDoc(self.quarantine_subject, [batch, self.range.name, n], row) for n, row in enumerate(quarantined)]
        if len(docs) >= 3:
            mid = len(docs) // 2
            d = docs[mid]
            docs[mid] = _MidBatch(d.subject, d.key, d.document, d.delete)
        return docs

    def publish(self, cp: dict, batch: Optional[int], quarantined: list[dict]) -> None:
        self.last_commit = self.client.publish_batch(
            self.session,
            BatchId.from_checkpoint(cp),
            self._batch_docs(batch, quarantined),
            cp,
            skip=self.inflight,
            subjects=self._all(),
        )

    def committed(self) -> None:
        self.inflight = InFlight()
        self._queued = []

    def close(self) -> None:
        pass  # the client is the driver's
