"""Log sources of collections (Kafka topics, NATS JetStream streams), Spark-free: the parts
(:mod:`tidemark.sources.kafka`, :mod:`tidemark.sources.nats`) and the batch planning they
share (:mod:`tidemark.sources.log`).  Spark reads them through :mod:`tidemark.spark.logsource`."""

from __future__ import annotations

from typing import Any, Mapping

from tidemark.errors import SpecError
from tidemark.sources.log import Log

KINDS = ("kafka", "nats")


def open_log(kind: str, config: Mapping[str, Any]) -> Log:
    """The log of a source's settings (``kind``: a key of :data:`KINDS`)."""
    if kind == "kafka":
        from tidemark.sources.kafka import KafkaLog

        return KafkaLog(config)
    if kind == "nats":
        from tidemark.sources.nats import NatsLog

        return NatsLog(config)
    raise ValueError(f"unknown log source {kind!r} (known: {', '.join(KINDS)})")


def log_settings(kind: str, config: Mapping[str, Any], where: str = "") -> dict:
    """The source's settings checked and filled (unknown keys refused, defaults in)."""
    if kind == "kafka":
        from tidemark.sources.kafka import read_settings
    elif kind == "nats":
        from tidemark.sources.nats import read_settings
    else:
        raise ValueError(f"unknown log source {kind!r}")
    try:
        return read_settings(config, where)
    except SpecError as exc:  # the settings' own words are an endpoint's
        raise SpecError(str(exc).replace(f"endpoint {kind} source", f"{kind} source")) from None


def check_log(collection: str, kind: str, config: Mapping[str, Any]) -> str:
    """One line for ``tidemark check`` (and a run before Spark starts): the log's parts and
    what they hold; an unreachable log raises its error (naming it, no secrets)."""
    log = open_log(kind, config)
    try:
        bounds = log.bounds()
    finally:
        log.close()
    if not bounds:
        return f"source {collection}: {kind} {log.name}: does not exist yet (read from its start once it does)"
    held = sum(b.end - b.earliest for b in bounds.values())
    return f"source {collection}: {kind} {log.name}: {len(bounds)} part(s), offsets {held} held"
