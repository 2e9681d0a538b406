"""The Redis client, and Redis errors translated into tidemark's error tree.

redis-py retries connection errors by itself (three times, by default, since 6.0); here
its retries are off, so that :class:`~tidemark.policy.RetryPolicy` is the one place that
decides how often and how long (:func:`run`).  URLs in messages have their password
masked (:func:`~tidemark.drivers.common.redact.redact`).
"""

from __future__ import annotations

from typing import Callable, TypeVar

from tidemark.drivers.common.redact import redact
from tidemark.errors import AuthenticationFailed, DriverError, EndpointRefused, EndpointUnavailable, TidemarkError
from tidemark.policy import DEFAULT_POLICY, RetryPolicy, retry

T = TypeVar("T")


def _redis():
    try:
        import redis
    except ImportError as exc:  # pragma: no cover - the extra is missing
        raise ImportError(
            "the redis endpoint needs redis-py; fix: pip install 'tidemark[redis]'", name="redis"
        ) from exc
    return redis


def connect(url: str, policy: RetryPolicy = DEFAULT_POLICY):
    """A ``redis.Redis`` for ``url`` (``redis://``, ``rediss://`` or ``unix://``) without
    redis-py's own retries, with the policy's timeouts (connect: ``connect_timeout``; a
    reply, e.g. of a long commit script: ``reply_timeout``)."""
    redis = _redis()
    from redis.backoff import NoBackoff
    from redis.retry import Retry

    try:
        return redis.Redis.from_url(
            url,
            socket_connect_timeout=policy.connect_timeout,
            socket_timeout=policy.reply_timeout,
            retry=Retry(NoBackoff(), 0),
            health_check_interval=0,
        )
    except ValueError as exc:
        raise DriverError(f"invalid Redis URL {redact(url)!r}: {redact(exc, [url])}") from None


def translate(exc: BaseException, url: str, what: str) -> TidemarkError:
    """A redis-py error as a tidemark error (Transient where a retry may succeed)."""
    redis = _redis()
    E = redis.exceptions
    where = f"redis {redact(url)}: {what}"
    text = redact(exc, [url])
    if isinstance(exc, (E.AuthenticationError, E.NoPermissionError)):
        return AuthenticationFailed(f"{where}: the server refused the credentials or the ACL user ({text})")
    if isinstance(exc, (E.ConnectionError, E.TimeoutError, E.ReadOnlyError, E.TryAgainError, E.MasterDownError)):
        # ConnectionError covers BusyLoadingError (the server is loading its data set);
        # ReadOnlyError: a replica after a failover, the primary comes back at the same URL.
        return EndpointUnavailable(f"{where}: {type(exc).__name__}: {text}")
    if isinstance(exc, E.ResponseError) and str(exc).startswith("BUSY"):
        return EndpointUnavailable(f"{where}: the server is busy running a script ({text})")
    if isinstance(exc, E.OutOfMemoryError):
        return EndpointRefused(f"{where}: the server is out of memory (maxmemory) and refused the write: {text}")
    return DriverError(f"{where}: {type(exc).__name__}: {text}")


def run(fn: Callable[[], T], url: str, what: str, policy: RetryPolicy = DEFAULT_POLICY) -> T:
    """``fn()`` with redis-py errors translated, retried under ``policy`` while transient."""
    redis = _redis()

    def attempt() -> T:
        try:
            return fn()
        except redis.exceptions.RedisError as exc:
            raise translate(exc, url, what) from exc

    return retry(attempt, policy, what=f"redis {what}")
