"""One shard session of the ``nats`` endpoint.

* Acknowledge: nothing to apply (StartCommit wrote the log and the store synchronously).
* Load: read-committed, from the local state store (the cache of the log's full documents).
* Store: standard bindings are staged into the store's transaction AND queued as messages
  (the key's full document; a delete carries ``Tidemark-Op: delete``); delta-updates
  bindings are queued only (the combined delta, no store lookups).
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
from tidemark.drivers.nats.channel import Committed, OutDoc, Session
from tidemark.drivers.nats.client import NatsClient
from tidemark.drivers.nats.wire import BatchId, InFlight
from tidemark.drivers.push import PushTransactor
from tidemark.drivers.push.local import StoreTransactor
from tidemark.faults import fault_point
from tidemark.protocol.messages import Store


class _MidBatch(OutDoc):
    """The middle document of a batch: reaching its encoding is the ``nats_mid_batch`` fault
    point (a writer killed there leaves part of the batch in the stream)."""

    __slots__ = ()

    def payload(self) -> bytes:
        fault_point("nats_mid_batch")
        return OutDoc.payload(self)


class NatsTransactor(PushTransactor):
    """A push endpoint whose commit counts (:class:`~tidemark.drivers.push.PushTransactor`):
    one fenced atomic batch publish per batch, with the range's progress record."""

    def __init__(
        self,
        client: NatsClient,
        session: Session,
        inflight: InFlight,
        state: StoreTransactor,
        subjects: Sequence[str],
        delta: Sequence[bool],
        quarantine_subject: str,
        materialization: str,
    ):
        super().__init__(state, materialization, subjects, delta)
        self.client = client
        self.session = session
        self.inflight = inflight
        self.subjects = self.resources
        self.quarantine_subject = quarantine_subject
        self._queued: list[tuple[int, str, OutDoc]] = []
        self.last_commit: Optional[Committed] = None  # tidemark.drivers.nats.Committed of the last StartCommit

    def send(self, msg: Store) -> None:
        b = msg.binding
        subject = self.subjects[b]
        for key, doc, delete in zip(msg.keys, msg.docs, msg.deletes):
            delete = bool(delete) and not self.delta[b]
            self._queued.append((b, key_json(key), OutDoc(subject, list(key), doc, delete)))

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
            subjects=[*dict.fromkeys(self.subjects), self.quarantine_subject],
        )

    def committed(self) -> None:
        self.inflight = InFlight()
        self._queued = []
