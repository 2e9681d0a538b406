"""Every timeout and retry of tidemark's endpoint I/O lives here, in one policy object.

A :class:`RetryPolicy` is frozen and picklable (it travels to executors inside a driver
config).  :func:`retry` runs a function and retries it while it raises a
:class:`~tidemark.errors.Transient` error (or whatever ``retryable`` accepts), with
exponential backoff, capped, with jitter.  Drivers translate library errors into the
error tree *inside* ``fn``, so one predicate serves every endpoint.

Config (any driver): ``retry: {attempts: 5, base_delay: 0.05, max_delay: 2.0,
connect_timeout: 10, busy_timeout: 30, lock_timeout: 60, reply_timeout: 300}``.
"""

from __future__ import annotations

import logging
import random
import time
from dataclasses import dataclass, fields, replace
from typing import Any, Callable, Optional, TypeVar

from tidemark.errors import SpecError, is_transient

log = logging.getLogger(__name__)

T = TypeVar("T")


@dataclass(frozen=True, slots=True)
class RetryPolicy:
    """How often and how long to retry transient endpoint errors, and how long to wait.

    ``attempts`` counts the first try.  Delay before retry ``n`` (1-based) is
    ``min(max_delay, base_delay * multiplier**(n-1))``, scaled by a random factor in
    ``[1 - jitter, 1]``.  The timeouts are seconds."""

    attempts: int = 5
    base_delay: float = 0.05
    max_delay: float = 2.0
    multiplier: float = 2.0
    jitter: float = 0.5
    connect_timeout: float = 10.0  # opening a connection to a remote endpoint
    busy_timeout: float = 30.0  # SQLite: wait this long for the write lock before SQLITE_BUSY
    lock_timeout: float = 60.0  # PostgreSQL: wait this long for a row/table lock; Kafka: for a transaction
    # to init/commit/abort, and for a read_committed read held up by another producer's open transaction
    reply_timeout: float = 300.0  # an external driver program (command:): wait this long for a reply

    def __post_init__(self) -> None:
        if self.attempts < 1:
            raise SpecError("retry.attempts must be >= 1")
        if self.base_delay < 0 or self.max_delay < 0 or self.multiplier < 1 or not 0 <= self.jitter <= 1:
            raise SpecError("retry: delays must be >= 0, multiplier >= 1, 0 <= jitter <= 1")

    def delay(self, retry_number: int, draw: random.Random | None = None) -> float:
        base = min(self.max_delay, self.base_delay * self.multiplier ** max(0, retry_number - 1))
        factor = 1.0 - self.jitter * (draw or random).random()
        return base * factor

    @classmethod
    def from_config(cls, config: Optional[dict]) -> "RetryPolicy":
        """Parse ``{attempts: ..., ...}`` (Spark options arrive as strings)."""
        if not config:
            return DEFAULT_POLICY
        if not isinstance(config, dict):
            raise SpecError("retry must be a mapping, e.g. {attempts: 5, max_delay: 2}")
        known = {f.name: f.type for f in fields(cls)}
        kwargs: dict[str, Any] = {}
        for k, v in config.items():
            if k not in known:
                raise SpecError(f"unknown retry setting {k!r} (known: {', '.join(sorted(known))})")
            try:
                kwargs[k] = int(v) if k == "attempts" else float(v)
            except (TypeError, ValueError):
                raise SpecError(f"retry.{k} must be a number, got {v!r}") from None
        return replace(DEFAULT_POLICY, **kwargs)


DEFAULT_POLICY = RetryPolicy()


def retry(
    fn: Callable[[], T],
    policy: RetryPolicy = DEFAULT_POLICY,
    *,
    retryable: Callable[[BaseException], bool] = is_transient,
    what: str = "endpoint operation",
    on_retry: Callable[[BaseException, int], None] | None = None,
) -> T:
    """Call ``fn()``; retry while it raises a retryable error, at most ``policy.attempts`` times.

    The last error propagates; when it was retried, its message ends with how many
    tries failed ("(all 3 tries failed)"): a *try* is one call of ``fn``, a batch that runs
    again (:mod:`tidemark.spark.processor`) is a *run* of the batch.  The first failure is logged once (a warning); the retries after it at
    debug level, so that a retried error is not printed once per attempt.  ``on_retry(exc,
    n)`` runs before retry ``n`` (e.g. to reconnect)."""
    attempt = 1
    while True:
        try:
            return fn()
        except BaseException as exc:
            if attempt >= policy.attempts or not retryable(exc):
                if attempt > 1 and exc.args and isinstance(exc.args[0], str) and " tries failed)" not in exc.args[0]:
                    first, sep, rest = exc.args[0].partition("\n")
                    exc.args = (f"{first} (all {attempt} tries failed){sep}{rest}", *exc.args[1:])
                raise
            delay = policy.delay(attempt)
            # the error itself is shown once, by whoever gets it in the end
            (log.warning if attempt == 1 else log.debug)(
                "%s failed (%s): try %d of %d, the next in %.1f s",
                what,
                type(exc).__name__,
                attempt,
                policy.attempts,
                delay,
            )
            log.debug("%s: %s", what, exc)
            if on_retry is not None:
                on_retry(exc, attempt)
            time.sleep(delay)  # backoff before the retry (not a wait for a condition)
            attempt += 1
