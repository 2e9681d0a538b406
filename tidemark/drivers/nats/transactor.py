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

from tidemark.collection.keys import compact_json, key_json
from tidemark.drivers.base import ReadCommittedLoads, Transactor
from tidemark.faults import fault_point
from tidemark.drivers.nats.wire import BatchId, InFlight
from tidemark.drivers.nats.client import NatsClient
from tidemark.drivers.nats.channel import OutDoc, Session
from tidemark.protocol.messages import (
    Acknowledge,
    Acknowledged,
    Load,
    Loaded,
    Quarantine,
    StartCommit,
    StartedCommit,
    Store,
)
from tidemark.drivers.store.transactor import committed_loads
from tidemark.store import RangeStore, tidemark_key
from tidemark.drivers.common.columns import quarantine_row


class _MidBatch(OutDoc):
    """The middle document of a batch: reaching its encoding is the ``nats_mid_batch`` fault
    point (a writer killed there leaves part of the batch in the stream)."""

    __slots__ = ()

    def payload(self) -> bytes:
        fault_point("nats_mid_batch")
        return OutDoc.payload(self)


class NatsTransactor(ReadCommittedLoads, Transactor):
    def __init__(
        self,
        client: NatsClient,
        session: Session,
        inflight: InFlight,
        store: RangeStore,
        subjects: Sequence[str],
        delta: Sequence[bool],
        ids: Sequence[int],
        quarantine_subject: str,
        materialization: str,
    ):
        self.client = client
        self.session = session
        self.inflight = inflight
        self.rs = store
        self.subjects = list(subjects)
        self.delta = list(delta)
        self.ids = list(ids)
        self.quarantine_subject = quarantine_subject
        self.materialization = materialization
        self.range = session.channel.range
        self._acknowledged = False
        self._deferred: list[Load] = []
        self._queued: list[tuple[int, str, OutDoc]] = []
        self._quarantine: list[dict] = []
        self.last_commit = None  # tidemark.drivers.nats.Committed of the last StartCommit

    def acknowledge(self, msg: Acknowledge) -> Acknowledged:
        self._acknowledged = True
        return Acknowledged()

    def _evaluate(self, msg: Load) -> list[Loaded]:
        return committed_loads(self.rs, self.ids[msg.binding], msg)

    def store(self, msg: Store) -> None:
        b = msg.binding
        subject = self.subjects[b]
        txn = None if self.delta[b] else self.rs.transaction()
        bid = self.ids[b]
        for key, doc, delete in zip(msg.keys, msg.docs, msg.deletes):
            delete = bool(delete) and not self.delta[b]
            if txn is not None:
                if delete:
                    txn.delete(tidemark_key(key, bid))
                else:
                    txn.put(tidemark_key(key, bid), compact_json(doc).encode("utf-8"))
            self._queued.append((b, key_json(key), OutDoc(subject, list(key), doc, delete)))

    def quarantine(self, msg: Quarantine) -> None:
        self._quarantine.extend(msg.rows)

    def _batch_docs(self, batch: Optional[int]) -> list[OutDoc]:
        self._queued.sort(key=lambda q: (q[0], q[1]))  # stable: a delta binding's rows of one key keep their order
        docs = [d for _, _, d in self._queued]
        for n, row in enumerate(self._quarantine):
            docs.append(
                OutDoc(
                    self.quarantine_subject,
                    [batch, self.range.name, n],
                    quarantine_row(self.materialization, batch, self._resource(row), row),
                )
            )
        if len(docs) >= 3:
            mid = len(docs) // 2
            d = docs[mid]
            docs[mid] = _MidBatch(d.subject, d.key, d.document, d.delete)
        return docs

    def _resource(self, row: dict) -> Optional[str]:
        b = row.get("binding")
        return self.subjects[b] if isinstance(b, int) and 0 <= b < len(self.subjects) else None

    def start_commit(self, msg: StartCommit) -> StartedCommit:
        cp = msg.runtime_checkpoint
        batch = BatchId.from_checkpoint(cp)
        docs = self._batch_docs(batch.batch_id)
        fault_point("before_endpoint_commit")
        self.last_commit = self.client.publish_batch(
            self.session,
            batch,
            docs,
            cp,
            skip=self.inflight,
            subjects=[*dict.fromkeys(self.subjects), self.quarantine_subject],
        )
        fault_point("after_endpoint_commit")
        self.rs.transaction().commit(cp)
        self.inflight = InFlight()
        self._queued, self._quarantine = [], []
        self._acknowledged = False
        return StartedCommit()

    def close(self) -> None:
        self.rs.close()
