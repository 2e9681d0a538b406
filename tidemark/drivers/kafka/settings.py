"""The ``kafka`` endpoint's config: tidemark's options, and librdkafka's properties.

::

    endpoint:
      kafka:
        bootstrap_servers: "127.0.0.1:9092"     # required
        state: tidemark-state                   # the local store of full documents (Loads);
                                                #   relative: to the spec's folder
        progress_topic: tidemark_progress       # compacted; one record per range and commit
        quarantine_topic: tidemark_quarantine   # invalid documents (on_invalid: quarantine)
        partitions: 6                           # of the topics Apply creates (default: broker's)
        replication_factor: 3                   # (default: broker's)
        transactional_id_prefix: tidemark       # for prefixed ACLs
        retry: {lock_timeout: 60}
        security.protocol: SASL_SSL             # any key with a dot: a librdkafka property
        sasl.username: ...

    bindings: [{source: orders, resource: {topic: customers, partitions: 12}}]
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from typing import Any, Mapping, Optional

from tidemark.drivers.common.settings import MASK, Setting, read
from tidemark.drivers.kafka.ids import DEFAULT_PREFIX
from tidemark.drivers.limits import ValueLimits
from tidemark.errors import SpecError
from tidemark.policy import RetryPolicy
from tidemark.protocol.messages import BindingSpec

DEFAULT_STATE = "tidemark-state"
SETTINGS = (
    Setting("bootstrap_servers", description="host:port[,host:port…] (or the client key bootstrap.servers)"),
    Setting("state", default=DEFAULT_STATE, description="the local state store's folder (relative: the spec's folder)"),
    Setting("progress_topic", default="tidemark_progress"),
    Setting("quarantine_topic", default="tidemark_quarantine"),
    Setting("partitions", "integer", minimum=1, description="partitions of a topic tidemark creates"),
    Setting("replication_factor", "integer", default=-1, minimum=-1, description="-1: the broker's default"),
    Setting("transactional_id_prefix", default=DEFAULT_PREFIX),
    Setting("retry", "retry"),
)
SECRET_WORDS = ("password", "secret", "token", "sasl.oauthbearer.config", "ssl.key.pem", "credential")


def secret_key(key: str) -> bool:
    """A Kafka client key whose value is a credential."""
    return any(w in key.lower() for w in SECRET_WORDS)


CLIENT_KEYS = ", and any key with a dot, which goes to the Kafka client (e.g. security.protocol)"
RESOURCE_OPTIONS = ("topic", "partitions", "replication_factor")
RESOURCE_ALIASES = ("table", "name")  # accepted for `topic` (specs written for other endpoints)
# Kafka's legal topic names: 1-249 of [a-zA-Z0-9._-], not "." or "..".
_TOPIC = re.compile(r"^[A-Za-z0-9._-]{1,249}$")


def _positive(value: Any, what: str, allow_minus_one: bool = False) -> Optional[int]:
    if value is None:
        return None
    try:
        n = int(value)
    except (TypeError, ValueError):
        raise SpecError(f"kafka: {what} must be an integer, got {value!r}") from None
    if n < 1 and not (allow_minus_one and n == -1):
        raise SpecError(
            f"kafka: {what} must be >= 1{' (or -1: the broker default)' if allow_minus_one else ''}, got {n}"
        )
    return n


def check_topic_name(name: Any, what: str) -> str:
    if not isinstance(name, str) or not _TOPIC.match(name) or name in (".", ".."):
        raise SpecError(f"kafka: {what} must be a topic name of 1-249 characters [A-Za-z0-9._-], got {name!r}")
    return name


MESSAGE_MAX_BYTES = 1_000_000  # librdkafka's message.max.bytes by default
RECORD_ROOM = 16 * 1024  # of a record's bytes, kept for its key, headers and framing


def document_limits(client: Mapping[str, Any]) -> ValueLimits:
    """What a topic holds of a document: the producer's ``message.max.bytes`` less room for
    the record's key and headers (a broker or topic configured lower refuses at produce)."""
    raw = client.get("message.max.bytes", MESSAGE_MAX_BYTES)
    try:
        most = int(raw)
    except (TypeError, ValueError):
        most = MESSAGE_MAX_BYTES
    return ValueLimits(max_document_bytes=max(1024, most - RECORD_ROOM))


@dataclass(frozen=True)
class KafkaSettings:
    client: dict  # librdkafka properties (bootstrap.servers, security.*, sasl.*, ...)
    state: str
    progress_topic: str = "tidemark_progress"
    quarantine_topic: str = "tidemark_quarantine"
    partitions: Optional[int] = None
    replication_factor: int = -1
    prefix: str = DEFAULT_PREFIX
    policy: RetryPolicy = RetryPolicy()

    def __repr__(self) -> str:  # client keys may carry credentials (sasl.password, ssl.key.password, ...)
        shown = {k: (MASK if secret_key(k) else v) for k, v in self.client.items()}
        return f"KafkaSettings(client={shown!r}, state={self.state!r}, progress_topic={self.progress_topic!r})"

    @classmethod
    def from_config(cls, config: Mapping[str, Any]) -> "KafkaSettings":
        v = read("kafka", config, SETTINGS, passthrough=lambda k: "." in k, also=CLIENT_KEYS)
        servers = v["bootstrap_servers"] or config.get("bootstrap.servers")
        if not isinstance(servers, str) or not servers.strip():
            raise SpecError("kafka: bootstrap_servers is required, e.g. {kafka: {bootstrap_servers: '127.0.0.1:9092'}}")
        client = {k: x for k, x in config.items() if "." in k}
        client["bootstrap.servers"] = servers.strip()
        for forbidden in ("transactional.id", "enable.idempotence", "isolation.level"):
            if forbidden in client:
                raise SpecError(
                    f"kafka: {forbidden} is set by tidemark (exactly-once needs it); remove it from the config"
                )
        if v["replication_factor"] == 0:
            raise SpecError("endpoint kafka: replication_factor must be >= 1 (or -1: the broker default), got 0")
        return cls(
            client=client,
            state=v["state"],
            progress_topic=check_topic_name(v["progress_topic"], "progress_topic"),
            quarantine_topic=check_topic_name(v["quarantine_topic"], "quarantine_topic"),
            partitions=v["partitions"],
            replication_factor=v["replication_factor"],
            prefix=v["transactional_id_prefix"],
            policy=v["retry"],
        )


def topic_of(binding: BindingSpec) -> str:
    res = binding.resource if isinstance(binding.resource, dict) else {}
    extra = sorted(set(res) - set(RESOURCE_OPTIONS) - set(RESOURCE_ALIASES))
    if extra:
        raise SpecError(
            f"binding of {binding.collection!r}: kafka resource options are {list(RESOURCE_OPTIONS)}, not {extra}"
        )
    names = [k for k in ("topic",) + RESOURCE_ALIASES if k in res]
    if len(names) != 1:
        raise SpecError(
            f"binding of {binding.collection!r}: the kafka endpoint needs resource {{topic: NAME}}, "
            f"got {binding.resource!r}"
        )
    return check_topic_name(res[names[0]], f"binding of {binding.collection!r}: topic")


def resource_partitions(binding: BindingSpec, settings: KafkaSettings) -> tuple[Optional[int], int]:
    res = binding.resource if isinstance(binding.resource, dict) else {}
    parts = _positive(res.get("partitions"), f"topic {res.get('topic')!r}: partitions")
    rf = _positive(res.get("replication_factor"), f"topic {res.get('topic')!r}: replication_factor", True)
    return (parts if parts is not None else settings.partitions), (
        rf if rf is not None else settings.replication_factor
    )


def resolve_state(config: dict, base_dir: str) -> dict:
    """``state`` (default ``tidemark-state``) made absolute against the spec's folder."""
    out = dict(config)
    state = out.get("state") or DEFAULT_STATE
    if isinstance(state, str) and "://" not in state and not os.path.isabs(state):
        state = os.path.abspath(os.path.join(base_dir, state))
    out["state"] = state
    return out
