"""Kafka topics as a log source (:mod:`tidemark.sources.log`), on confluent-kafka.

::

    collections:
      orders:
        key: [/order_id]
        schema: {...}
        source:
          kafka:
            bootstrap_servers: 127.0.0.1:9092
            topic: orders                    # or topics: [orders, returns]
            starting_offsets: earliest       # or latest: only what is written after the view starts
            max_records_per_batch: 100000    # offsets per batch (default: everything available)
            security.protocol: SASL_SSL      # any key with a dot: a librdkafka property (secrets masked)

A part is a topic-partition (``orders/3``); its stable end is the partition's *last stable
offset* (ListOffsets with ``read_committed``): below it every transaction is committed or
aborted, so a range that ends there reads the same committed records every time.  Records
are read with ``isolation.level=read_committed`` (aborted records and transaction markers
skipped).  A record without a value (a tombstone) is a deletion of its key.
"""

from __future__ import annotations

import json
import time
import uuid
from typing import Any, Iterator, Mapping, Optional, cast

from tidemark.drivers.common.settings import Setting, read
from tidemark.drivers.kafka.client import call, client_config, redacted, translate
from tidemark.drivers.kafka.settings import CLIENT_KEYS, check_topic_name
from tidemark.errors import EndpointUnavailable, SourceGone, SpecError
from tidemark.sources.log import Bounds, Record

SETTINGS = (
    Setting("bootstrap_servers", description="host:port[,host:port…] (or the client key bootstrap.servers)"),
    Setting("topic", description="the topic to read"),
    Setting("topics", "array", description="several topics, read as one source"),
    Setting("starting_offsets", default="earliest", choices=("earliest", "latest")),
    Setting("max_records_per_batch", "integer", minimum=1, description="offsets per batch (default: all available)"),
    Setting("read_timeout", "number", default=60.0, minimum=0.1, description="seconds a read may wait for its range"),
)
SET_BY_TIDEMARK = ("isolation.level", "enable.auto.commit", "group.id", "auto.offset.reset")


def read_settings(config: Mapping[str, Any], where: str = "") -> dict:
    """The source's settings, checked and filled: ``topics`` (a list), ``client`` (the
    librdkafka properties), ``starting_offsets``, ``max_records_per_batch``, ``read_timeout``."""
    config = dict(config or {})
    if isinstance(config.get("topics"), str):  # a Spark option: JSON text, or names with commas
        text = config["topics"].strip()
        config["topics"] = (
            json.loads(text) if text.startswith("[") else [t.strip() for t in text.split(",") if t.strip()]
        )
    v = read("kafka source", config, SETTINGS, passthrough=lambda k: "." in k, also=CLIENT_KEYS)
    servers = v["bootstrap_servers"] or config.get("bootstrap.servers")
    if not isinstance(servers, str) or not servers.strip():
        raise SpecError(
            f"{where or 'kafka source'}: bootstrap_servers is required, e.g. {{kafka: {{bootstrap_servers: "
            "'127.0.0.1:9092', topic: orders}}"
        )
    topics = ([v["topic"]] if v["topic"] else []) + list(v["topics"] or [])
    if not topics:
        raise SpecError(f"{where or 'kafka source'}: name the topic to read: topic: NAME (or topics: [A, B])")
    client = {k: x for k, x in config.items() if "." in k}
    for forbidden in SET_BY_TIDEMARK:
        if forbidden in client:
            raise SpecError(f"{where or 'kafka source'}: {forbidden} is set by tidemark; remove it from the source")
    client["bootstrap.servers"] = servers.strip()
    return {
        "topics": [check_topic_name(t, "kafka source: topic") for t in dict.fromkeys(topics)],
        "client": client,
        "starting_offsets": v["starting_offsets"],
        "max_records_per_batch": v["max_records_per_batch"],
        "read_timeout": v["read_timeout"],
    }


def part_name(topic: str, partition: int) -> str:
    return f"{topic}/{partition}"


def split_part(part: str) -> tuple[str, int]:
    topic, _, partition = part.rpartition("/")
    return topic, int(partition)


class KafkaLog:
    """The topics of a Kafka source (:class:`tidemark.sources.log.Log`)."""

    kind = "kafka"

    def __init__(self, config: Mapping[str, Any]):
        self.settings = config if "client" in config else read_settings(config)
        self.client: dict = dict(self.settings["client"])
        self.topics: list[str] = list(self.settings["topics"])
        self.name = ", ".join(self.topics)
        self._admin: Any = None

    def __repr__(self) -> str:
        return f"KafkaLog({self.topics}, {redacted(self.client)})"

    def _admin_client(self):
        from confluent_kafka.admin import AdminClient

        if self._admin is None:
            self._admin = call(lambda: AdminClient(client_config(self.client)), "connecting", self.client)
        return self._admin

    def bounds(self) -> dict[str, Bounds]:
        from confluent_kafka import IsolationLevel, TopicPartition
        from confluent_kafka.admin import OffsetSpec

        admin = self._admin_client()
        metadata = call(lambda: admin.list_topics(timeout=10), f"reading metadata of {self.name}", self.client)
        parts = []
        for topic in self.topics:
            info = metadata.topics.get(topic)
            if info is not None and info.error is None:
                parts += [TopicPartition(topic, p) for p in sorted(info.partitions)]
        if not parts:
            return {}
        low = self._offsets(parts, OffsetSpec.earliest(), IsolationLevel.READ_UNCOMMITTED)
        stable = self._offsets(parts, OffsetSpec.latest(), IsolationLevel.READ_COMMITTED)
        return {p: Bounds(low[p], max(low[p], stable[p])) for p in sorted(low)}

    def _offsets(self, parts, spec, level) -> dict[str, int]:
        admin = self._admin_client()
        futures = call(
            lambda: admin.list_offsets({tp: spec for tp in parts}, isolation_level=level, request_timeout=10),
            f"listing offsets of {self.name}",
            self.client,
        )
        out = {}
        for tp, fut in futures.items():
            try:
                out[part_name(tp.topic, tp.partition)] = fut.result(15).offset
            except Exception as exc:
                raise translate(exc, f"listing offsets of {tp.topic}[{tp.partition}]", self.client) from exc
        return out

    def read(self, part: str, start: int, end: int) -> Iterator[Record]:
        from confluent_kafka import Consumer, KafkaError, TopicPartition

        if end <= start:
            return
        topic, partition = split_part(part)
        consumer = call(
            lambda: Consumer(
                client_config(
                    self.client,
                    **{
                        "group.id": f"tidemark-source-{uuid.uuid4().hex}",  # assign() only: never joins, never commits
                        "isolation.level": "read_committed",
                        "enable.auto.commit": False,
                        "enable.auto.offset.store": False,
                        "auto.offset.reset": "error",  # a start the log no longer holds is an error, not a jump
                        "enable.partition.eof": True,
                        "fetch.wait.max.ms": 10,
                    },
                )
            ),
            "connecting a consumer",
            self.client,
        )
        try:
            low, _ = call(
                lambda: consumer.get_watermark_offsets(TopicPartition(topic, partition), timeout=10, cached=False),
                f"reading the offsets of {part}",
                self.client,
            )
            if low > start:
                raise SourceGone(
                    f"kafka source {self.name}: {part} holds offsets from {low} on but this batch reads "
                    f"{start}..{end - 1} ({low - start} records were deleted before they were read: retention)"
                )
            call(lambda: consumer.assign([TopicPartition(topic, partition, start)]), f"assigning {part}", self.client)
            deadline = time.monotonic() + float(self.settings.get("read_timeout") or 60.0)
            while True:
                batch = call(lambda: consumer.consume(1000, 0.05), f"reading {part}", self.client)
                for msg in batch:
                    err, offset = msg.error(), msg.offset() or 0
                    if err is not None:
                        if err.code() == KafkaError._PARTITION_EOF:
                            if offset >= end:  # the partition's end: the rest were aborted or markers
                                return
                            continue
                        raise translate(cast(Any, err), f"reading {part}", self.client)
                    if offset >= end:
                        return
                    yield Record(offset, msg.value(), msg.key())
                    if offset == end - 1:
                        return
                (position,) = call(
                    lambda: consumer.position([TopicPartition(topic, partition)]), f"reading {part}", self.client
                )
                if position.offset >= end:  # the rest of the range: aborted records and markers
                    return
                if time.monotonic() > deadline:
                    raise EndpointUnavailable(
                        f"kafka source {self.name}: reading {part} offsets {start}..{end - 1} stopped at "
                        f"{position.offset} for {self.settings.get('read_timeout')} s (the broker is slow or "
                        "unreachable)"
                    )
        finally:
            consumer.close()

    def close(self) -> None:
        self._admin = None


def describe(settings: Mapping[str, Any]) -> Optional[str]:
    """One line for messages: the topics and servers (no secrets)."""
    return f"kafka {', '.join(settings['topics'])} at {settings['client'].get('bootstrap.servers')}"
