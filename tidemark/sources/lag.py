"""How far a view is behind its log sources: per part, the records past the offsets of the
last batch the view committed (Spark's ``offsets/N`` of that batch), and the part's newest
offset.  Read without Spark (``tidemark status``, the Prometheus gauge)."""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any, Mapping, Optional

from tidemark.sources import open_log


@dataclass(frozen=True)
class PartLag:
    source: str  # the collection
    part: str  # "orders/3", or a NATS stream
    read_to: Optional[int]  # the next offset the view reads (None: it has read nothing of the part)
    newest: int  # the part's stable end (the next offset to be written and committed)
    behind: int  # records (offsets) between them

    def as_json(self) -> dict:
        return asdict(self)


def committed_offsets(checkpoint: str, batch: Optional[int]) -> list[Any]:
    """The source offsets Spark recorded for ``batch`` under ``checkpoint`` (one per source,
    in the query's source order), or [] before the first batch."""
    from tidemark.runtime.identity import SparkCheckpoint

    if batch is None:
        return []
    return SparkCheckpoint(checkpoint.rstrip("/") + "/spark").source_offsets(batch)


def log_lag(spec, materialization: str, batch: Optional[int]) -> Optional[list[PartLag]]:
    """The lag of every log source of the materialization's bindings after committed batch
    ``batch`` (None: nothing committed yet, every record waits); None where no binding
    reads a log."""
    mat = spec.materializations[materialization]
    offsets = committed_offsets(spec.checkpoint_location(materialization), batch)
    out: list[PartLag] = []
    found = False
    for i, b in enumerate(mat.bindings):
        src = spec.collections[b.source].source
        if src is None or not src.log:
            continue
        found = True
        read_to: Mapping[str, int] = offsets[i] if i < len(offsets) and isinstance(offsets[i], dict) else {}
        log = open_log(src.log, src.log_config)
        try:
            bounds = log.bounds()
        finally:
            log.close()
        for part, bound in sorted(bounds.items()):
            next_offset = read_to.get(part)
            behind = bound.end - (bound.earliest if next_offset is None else max(next_offset, bound.earliest))
            out.append(PartLag(b.source, part, next_offset, bound.end, max(0, behind)))
    return out if found else None


def input_waiting(spec, materialization: str) -> Any:
    """What waits for the view (the Prometheus gauge): records per part of its log sources
    (a dict), else files of its file sources (an int, :func:`tidemark.ops.pending_files`)."""
    from tidemark.runtime.recovery_log import RecoveryLog

    mat = spec.materializations[materialization]
    if not any(getattr(spec.collections[b.source].source, "log", None) for b in mat.bindings):
        from tidemark.ops import pending_files

        return pending_files(spec, materialization)
    entry, _torn = RecoveryLog(spec.checkpoint_location(materialization), materialization, create=False).peek_last()
    parts = log_lag(spec, materialization, None if entry is None else entry.batch_id) or []
    return {p.part: float(p.behind) for p in parts}


# Spark's own Kafka source (a DataFrame given to tidemark.materialize), for `status --checkpoint`


def is_spark_kafka(offsets) -> bool:
    """Spark's Kafka source writes ``{"topic": {"partition": next_offset, ...}, ...}``."""
    return (
        isinstance(offsets, dict)
        and bool(offsets)
        and all(
            isinstance(parts, dict) and all(isinstance(v, int) for v in parts.values()) for parts in offsets.values()
        )
    )


def kafka_waiting(bootstrap: str, topics: dict) -> int:
    """Messages in ``topics`` past the given next offsets (``{topic: {partition: offset}}``;
    a partition not listed, or a negative offset, counts from its earliest message)."""
    from confluent_kafka import Consumer, TopicPartition

    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": "tidemark-status",
            "enable.auto.commit": False,
            "socket.connection.setup.timeout.ms": 5000,
            "log_level": 0,
        }
    )  # errors raise
    try:
        waiting = 0
        for topic, parts in topics.items():
            meta = consumer.list_topics(topic, timeout=10).topics[topic]
            if meta.error is not None:
                raise RuntimeError(f"topic {topic!r}: {meta.error.str()}")
            for p in meta.partitions:
                low, high = consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=10, cached=False)
                next_offset = parts.get(str(p), -1)
                waiting += max(0, high - max(next_offset, low))
        return waiting
    finally:
        consumer.close()
