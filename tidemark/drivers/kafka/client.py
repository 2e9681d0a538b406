"""The boundary to confluent-kafka: client configs, redaction, and error translation.

Every call into confluent-kafka that can fail goes through :func:`translate` (or
:func:`call`), so the rest of tidemark only sees :mod:`tidemark.errors`:

==========================================================  =============================
confluent-kafka error                                        tidemark error
==========================================================  =============================
``_FENCED``, ``PRODUCER_FENCED``, ``INVALID_PRODUCER_EPOCH``  :class:`FencedOff`
authentication / authorization failures                      :class:`AuthenticationFailed`
retriable errors, timeouts, transport, coordinator moves     :class:`EndpointUnavailable`
anything else (incl. "abort the transaction" errors)         :class:`DriverError`
==========================================================  =============================

A client config is a librdkafka property map (``bootstrap.servers``, ``security.protocol``,
``sasl.*``, …). Its secrets never appear in a message: :func:`redacted` shows a config, and
:func:`translate` masks any secret value that librdkafka echoed into an error string.
"""

from __future__ import annotations

import logging
import re
from typing import Any, Callable, Mapping, TypeVar

from tidemark.errors import (
    AuthenticationFailed,
    DriverError,
    EndpointUnavailable,
    FencedOff,
    TidemarkError,
)

T = TypeVar("T")

log = logging.getLogger("tidemark.drivers.kafka")

#: librdkafka properties whose values are secrets (matched by name).
SECRET_PROPERTY = re.compile(r"(password|secret|token|credential|\.pem$|key\.pem|sasl\.jaas|oauthbearer\.config)", re.I)

_FENCED = {"_FENCED", "PRODUCER_FENCED", "INVALID_PRODUCER_EPOCH"}
_AUTH = {
    "_AUTHENTICATION",
    "SASL_AUTHENTICATION_FAILED",
    "TOPIC_AUTHORIZATION_FAILED",
    "GROUP_AUTHORIZATION_FAILED",
    "CLUSTER_AUTHORIZATION_FAILED",
    "TRANSACTIONAL_ID_AUTHORIZATION_FAILED",
    "ILLEGAL_SASL_STATE",
    "UNSUPPORTED_SASL_MECHANISM",
    "DELEGATION_TOKEN_AUTH_DISABLED",
    "_SSL",
}
_UNAVAILABLE = {
    "_TRANSPORT",
    "_ALL_BROKERS_DOWN",
    "_TIMED_OUT",
    "_MSG_TIMED_OUT",
    "_RESOLVE",
    "_WAIT_COORD",
    "REQUEST_TIMED_OUT",
    "NOT_COORDINATOR",
    "COORDINATOR_NOT_AVAILABLE",
    "COORDINATOR_LOAD_IN_PROGRESS",
    "CONCURRENT_TRANSACTIONS",
    "NOT_LEADER_FOR_PARTITION",
    "LEADER_NOT_AVAILABLE",
    "NETWORK_EXCEPTION",
    "BROKER_NOT_AVAILABLE",
    "NOT_ENOUGH_REPLICAS",
    "NOT_ENOUGH_REPLICAS_AFTER_APPEND",
}


def secrets_of(config: Mapping[str, Any]) -> list[str]:
    """The secret values of a client config (longest first, for masking)."""
    values = [str(v) for k, v in config.items() if SECRET_PROPERTY.search(str(k)) and v not in (None, "")]
    return sorted(set(values), key=len, reverse=True)


def redacted(config: Mapping[str, Any]) -> dict[str, Any]:
    """``config`` with every secret value replaced by ``"***"`` (for messages and logs)."""
    return {k: ("***" if SECRET_PROPERTY.search(str(k)) and v not in (None, "") else v) for k, v in config.items()}


def mask(text: str, config: Mapping[str, Any] | None) -> str:
    for secret in secrets_of(config or {}):
        text = text.replace(secret, "***")
    return text


#: Defaults under the user's config: tidemark's clients are short-lived (one per shard session
#: and batch), so they must start fast; librdkafka still backs off exponentially from these.
FAST_START = {"retry.backoff.ms": 10, "topic.metadata.refresh.fast.interval.ms": 10, "reconnect.backoff.ms": 5}


def client_config(config: Mapping[str, Any], **overrides: Any) -> dict[str, Any]:
    """A copy of the user's librdkafka ``config`` (over :data:`FAST_START`) with tidemark's
    ``overrides`` on top, and librdkafka's log lines routed to the ``tidemark.drivers.kafka`` logger
    (not stderr)."""
    if not config.get("bootstrap.servers"):
        raise DriverError("kafka: the client config needs bootstrap.servers (e.g. '127.0.0.1:9092')")
    out: dict[str, Any] = dict(FAST_START)
    out.update((k, v) for k, v in config.items() if k != "logger")
    out.update(overrides)
    out["logger"] = config.get("logger") or log
    return out


def kafka_error_of(exc: BaseException):
    """The ``KafkaError`` inside a ``KafkaException`` (or ``exc`` itself if it is one)."""
    from confluent_kafka import KafkaError, KafkaException

    if isinstance(exc, KafkaError):
        return exc
    if isinstance(exc, KafkaException) and exc.args and isinstance(exc.args[0], KafkaError):
        return exc.args[0]
    return None


def translate(exc: BaseException, what: str, config: Mapping[str, Any] | None = None) -> TidemarkError:
    """The tidemark error for a confluent-kafka failure of ``what`` (raise it ``from exc``).

    The message names the operation and librdkafka's error name, with secrets masked."""
    if isinstance(exc, TidemarkError):
        return exc
    err = kafka_error_of(exc)
    if err is None:
        return DriverError(mask(f"kafka: {what} failed: {type(exc).__name__}: {exc}", config))
    name = err.name()
    text = mask(f"kafka: {what} failed: {name}: {err.str()}", config)
    if name in _FENCED:
        return FencedOff(text + " (a newer session of this key range initialised the same transactional.id)")
    if name in _AUTH:
        return AuthenticationFailed(text)
    if err.txn_requires_abort():
        return DriverError(text + " (the transaction was aborted; the batch must be redone)")
    if name in _UNAVAILABLE or (err.retriable() and not err.fatal()):
        return EndpointUnavailable(text)
    return DriverError(text)


def call(fn: Callable[[], T], what: str, config: Mapping[str, Any] | None = None) -> T:
    """``fn()``, with confluent-kafka errors translated (``raise … from``)."""
    from confluent_kafka import KafkaException

    try:
        return fn()
    except KafkaException as exc:  # (a KafkaError is not an exception: it is never raised, only carried)
        raise translate(exc, what, config) from exc
    except (ValueError, TypeError, BufferError) as exc:  # bad config values, full local queue
        raise DriverError(mask(f"kafka: {what} failed: {type(exc).__name__}: {exc}", config)) from exc
