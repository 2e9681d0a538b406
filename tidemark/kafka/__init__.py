"""Kafka groundwork for the exactly-once Kafka sink (issue #22): no Spark, no driver contract.

* :mod:`.ids` — ``transactional_id(materialization, range)``: the fence of a range.
* :mod:`.progress` — ``ProgressRecord``: a range's write frontier, committed with its data.
* :mod:`.writer` — ``RangeWriter`` (data + progress in one transaction), ``fence_and_abort``.
* :mod:`.reader` — ``read_frontier(s)`` and ``tail``, read_committed up to the high watermark.
* :mod:`.topics` — ``ensure_topics`` (idempotent; a mismatch is an ``IncompatibleSchema``).
* :mod:`.client` — configs, redaction, confluent-kafka errors → :mod:`tidemark.errors`.

Needs ``confluent-kafka`` (``pip install tidemark[kafka]``); the modules import it lazily.
"""

from tidemark.kafka.ids import layout_ids, safe_name, transactional_id
from tidemark.kafka.progress import FORMAT_VERSION, ProgressRecord, progress_key, progress_partition

__all__ = [
    "FORMAT_VERSION",
    "ProgressRecord",
    "RangeWriter",
    "TopicSpec",
    "ensure_topics",
    "fence_and_abort",
    "layout_ids",
    "progress_key",
    "progress_partition",
    "progress_topic_spec",
    "read_frontier",
    "read_frontiers",
    "safe_name",
    "tail",
    "transactional_id",
]


def __getattr__(name: str):  # lazy: importing tidemark.kafka does not need confluent-kafka
    if name in ("RangeWriter", "fence_and_abort"):
        from tidemark.kafka import writer

        return getattr(writer, name)
    if name in ("read_frontier", "read_frontiers", "tail", "committed_messages"):
        from tidemark.kafka import reader

        return getattr(reader, name)
    if name in ("TopicSpec", "ensure_topics", "progress_topic_spec", "check_topics"):
        from tidemark.kafka import topics

        return getattr(topics, name)
    raise AttributeError(name)
