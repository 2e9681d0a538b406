"""Topic creation through the AdminClient: idempotent, and loud about a mismatch.

:func:`ensure_topics` creates what is missing. A topic that already exists is accepted when
it has what tidemark asked for (the partition count, if one was given, and every config
entry given); otherwise :class:`~tidemark.errors.IncompatibleSchema` lists every difference.
Two processes may race to create one topic: the loser sees it exist and checks it.

The progress topic must be compacted and nothing else (``cleanup.policy=compact``): with
``delete`` in its policy, retention would delete a quiet range's frontier.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Iterable, Mapping, Optional

from tidemark.drivers.kafka.client import call, client_config, kafka_error_of, translate
from tidemark.errors import DriverError, IncompatibleSchema
from tidemark.policy import DEFAULT_POLICY, RetryPolicy

#: Config entries whose value is a comma-separated set (order does not matter).
LIST_CONFIGS = {"cleanup.policy"}


@dataclass(frozen=True, slots=True)
class TopicSpec:
    """A topic tidemark needs. ``partitions=None`` accepts any count of an existing topic
    (and creates it with the broker's default)."""

    name: str
    partitions: Optional[int] = None
    config: Mapping[str, str] = field(default_factory=dict)
    replication_factor: int = -1  # the broker's default


def progress_topic_spec(name: str, partitions: int = 1, replication_factor: int = -1) -> TopicSpec:
    return TopicSpec(name, partitions, {"cleanup.policy": "compact"}, replication_factor)


def ensure_topics(
    config: Mapping[str, Any], specs: Iterable[TopicSpec], *, policy: RetryPolicy = DEFAULT_POLICY
) -> dict[str, str]:
    """Create the missing topics; check the existing ones. Returns ``{name: "created" | "exists"}``."""
    from confluent_kafka import KafkaError
    from confluent_kafka.admin import AdminClient, NewTopic

    specs = list(specs)
    timeout = policy.connect_timeout
    admin = call(lambda: AdminClient(client_config(config)), "connecting the admin client", config)
    new = [
        NewTopic(
            s.name,
            s.partitions if s.partitions is not None else -1,
            s.replication_factor,
            config={k: str(v) for k, v in s.config.items()},
        )
        for s in specs
    ]
    futures = call(
        lambda: admin.create_topics(new, operation_timeout=timeout, request_timeout=timeout), "creating topics", config
    )
    outcome: dict[str, str] = {}
    for spec in specs:
        try:
            futures[spec.name].result(timeout + 5)
            outcome[spec.name] = "created"
        except Exception as exc:
            err = kafka_error_of(exc)
            if err is None or err.code() != KafkaError.TOPIC_ALREADY_EXISTS:
                raise translate(exc, f"creating topic {spec.name!r}", config) from exc
            outcome[spec.name] = "exists"
    existing = [s for s in specs if outcome[s.name] == "exists"]
    if existing:
        check_topics(admin, existing, timeout=timeout, config=config)
    return outcome


def check_topics(admin, specs: Iterable[TopicSpec], *, timeout: float, config: Mapping[str, Any] | None = None) -> None:
    """Raise IncompatibleSchema listing every way the existing topics differ from ``specs``."""
    from confluent_kafka.admin import ConfigResource

    specs = list(specs)
    problems: list[str] = []
    metadata = call(lambda: admin.list_topics(timeout=timeout), "reading topic metadata", config)
    resources = {s.name: ConfigResource(ConfigResource.Type.TOPIC, s.name) for s in specs if s.config}
    described = (
        call(
            lambda: admin.describe_configs(list(resources.values()), request_timeout=timeout),
            "describing topic configs",
            config,
        )
        if resources
        else {}
    )
    for spec in specs:
        topic = metadata.topics.get(spec.name)
        if topic is None or topic.error is not None:
            raise DriverError(
                f"kafka: topic {spec.name!r} exists but its metadata is unavailable"
                f"{f' ({topic.error})' if topic is not None else ''}"
            )
        have = len(topic.partitions)
        if spec.partitions is not None and have != spec.partitions:
            problems.append(f"topic {spec.name!r} has {have} partitions, tidemark needs {spec.partitions}")
        if spec.name in resources:
            try:
                entries = described[resources[spec.name]].result(timeout + 5)
            except Exception as exc:
                raise translate(exc, f"describing topic {spec.name!r}", config) from exc
            for key, want in spec.config.items():
                entry = entries.get(key)
                got = None if entry is None else entry.value
                if not _same(key, got, str(want)):
                    problems.append(f"topic {spec.name!r} has {key}={got}, tidemark needs {key}={want}")
    if problems:
        raise IncompatibleSchema(
            "kafka: existing topics do not match: " + "; ".join(problems) + " (change the topic, or name another one)"
        )


def _same(key: str, got: Optional[str], want: str) -> bool:
    if got is None:
        return False
    if key in LIST_CONFIGS:
        return {p.strip() for p in got.split(",")} == {p.strip() for p in want.split(",")}
    return got.strip() == want.strip()


def partition_counts(config: Mapping[str, Any], topics: Iterable[str], *, timeout: float) -> dict[str, int]:
    """The partition count of each of ``topics`` that exists (one metadata request)."""
    from confluent_kafka.admin import AdminClient

    admin = call(lambda: AdminClient(client_config(config)), "connecting the admin client", config)
    metadata = call(lambda: admin.list_topics(timeout=timeout), "reading topic metadata", config)
    out = {}
    for t in topics:
        info = metadata.topics.get(t)
        if info is not None and info.error is None:
            out[t] = len(info.partitions)
    return out
