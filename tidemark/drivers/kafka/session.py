"""A range's session on Kafka: a Kafka transaction per batch, what a shard session (the push
endpoints' one :class:`~tidemark.drivers.push.PushTransactor`, with the local store of full
documents answering Loads) sends and publishes.

* Store: each document is sent to its binding's topic inside the range's open Kafka
  transaction (key: the collection key as a JSON array; value: the full reduced document
  as JSON; a delete: a tombstone; headers ``tidemark-range`` (the shard range),
  ``tidemark-sequence``: the range's commit number, the ``sequence`` of the progress record
  that commits it, and ``tidemark-materialization``: the view that wrote it).
* Quarantine: the rows go to the quarantine topic in the same transaction (at StartCommit,
  which knows the batch).
* StartCommit: the range's progress record joins the transaction and it commits — the
  batch is now committed (``before_endpoint_commit`` / ``after_endpoint_commit`` are the
  fault points around it) — then the local store commits with the same runtime
  checkpoint. A crash between the two leaves the store one batch behind Kafka; the next
  Open rebuilds it from the topics (:mod:`tidemark.drivers.push.catchup`).
"""

from __future__ import annotations

from typing import Any, Optional, Sequence

from tidemark.collection.keys import key_json
from tidemark.drivers.kafka.progress import ProgressRecord
from tidemark.drivers.kafka.writer import RangeWriter
from tidemark.jsontext import dumps_bytes
from tidemark.protocol.messages import Store


class KafkaSession:
    """A Kafka transaction per batch, committed with the range's progress record."""

    def __init__(
        self,
        writer: RangeWriter,
        *,
        materialization: str,
        topics: Sequence[str],
        quarantine_topic: str,
        checkpoint: Optional[dict],
        frontier: Optional[ProgressRecord],
        place: str,
        partitions: Optional[dict] = None,
    ):
        self.writer = writer
        self.materialization = materialization
        self.range = writer.range
        self.topics = list(topics)
        self.checkpoint = checkpoint  # the range's, as Open planned it (own or inherited)
        self.place = place
        self.quarantine_topic = quarantine_topic
        self.frontier = frontier  # the range's last committed progress record (None: never committed)
        self.counts = {"docs": 0, "deletes": 0, "quarantined": 0}
        self.partitions = dict(partitions or {})  # the data topics' partition counts at Open (recorded)

    def _begin(self) -> None:
        if not self.writer.in_transaction:
            self.writer.begin()

    @property
    def sequence(self) -> int:
        """The ``sequence`` of the progress record this transaction will commit."""
        prev = self.frontier
        return prev.sequence + 1 if prev is not None and prev.range == self.range else 1

    def _headers(self) -> list[tuple[str, bytes]]:
        return [
            ("tidemark-range", self.range.name.encode()),
            ("tidemark-sequence", str(self.sequence).encode()),
            ("tidemark-materialization", self.materialization.encode("utf-8")),
        ]

    def send(self, msg: Store) -> None:
        self._begin()
        topic = self.topics[msg.binding]
        headers = self._headers()
        for key, doc, delete in zip(msg.keys, msg.docs, msg.deletes):
            self.writer.send(topic, key, None if delete else doc, headers=headers)
            self.counts["deletes" if delete else "docs"] += 1

    def publish(self, cp: dict, batch: Optional[int], quarantined: list[dict]) -> None:
        self._begin()  # an empty batch still moves the range's frontier
        headers = self._headers()
        key = key_json([self.materialization]).encode("utf-8")
        for row in quarantined:
            self.writer.send_raw(self.quarantine_topic, key, dumps_bytes(row), headers=headers)
        self.counts["quarantined"] = len(quarantined)
        prev = self.frontier
        ids: dict[str, Any] = {"transactional_id": self.writer.transactional_id, "partitions": self.partitions}
        if prev is not None and prev.range == self.range:
            record = prev.next(cp, self.counts, range=self.range, **ids)
        else:
            record = ProgressRecord.first(self.materialization, self.range, cp, self.counts, **ids)
        self.writer.commit(record)
        self.frontier = record

    def committed(self) -> None:
        self.counts = {"docs": 0, "deletes": 0, "quarantined": 0}

    def close(self) -> None:
        self.writer.close()
