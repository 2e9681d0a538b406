"""POST a batch's chunks to a webhook, with retries under the retry policy.

Delivery is at-least-once: a chunk whose reply was lost (a crash, a timeout, a dropped
connection) is sent again, by the retry or by the replay of the batch.  Every request
carries the chunk's ``Idempotency-Key``, so a receiver that honours it applies each chunk
once: effectively-once end to end.

Per request:

* 2xx — delivered;
* 408, 425, 429, 5xx, connection refused or dropped, timeouts — retried (transient) with
  the policy's backoff; ``Retry-After`` (seconds or an HTTP date) adds its wait, capped at
  ``reply_timeout``; once the attempts are spent, :class:`~tidemark.errors.EndpointUnavailable`
  names the URL, the chunk, the last status and the attempts;
* 401, 403 — :class:`~tidemark.errors.AuthenticationFailed`, at once;
* any other status (4xx, 3xx: redirects are not followed) —
  :class:`~tidemark.errors.EndpointRefused`, at once.

Messages show the URL without user, password or query values, never a header's value, and
at most 200 characters of the response body with those secrets masked.
"""

from __future__ import annotations

import email.utils
import time
from dataclasses import dataclass
from typing import Callable, Iterable, Optional

from tidemark.drivers.common.redact import redact
from tidemark.drivers.webhook.chunks import Chunk
from tidemark.drivers.webhook.settings import WebhookConfig
from tidemark.errors import AuthenticationFailed, DriverError, EndpointRefused, EndpointUnavailable
from tidemark.faults import fault_point
from tidemark.policy import retry

TRANSIENT_STATUS = frozenset({408, 425, 429}) | frozenset(range(500, 600))
USER_AGENT = "tidemark-webhook/1"


class Unavailable(EndpointUnavailable):
    """A transient failure of one request; ``retry_after``: seconds the server asked for."""

    def __init__(self, message: str, retry_after: Optional[float] = None):
        super().__init__(message)
        self.retry_after = retry_after


@dataclass(frozen=True, slots=True)
class Delivered:
    chunks: int
    documents: int
    requests: int  # including retries


def _urllib3():
    try:
        import urllib3
    except ImportError as exc:  # pragma: no cover - the extra is missing
        raise ImportError(
            "the webhook endpoint needs urllib3; fix: pip install 'tidemark[webhook]'", name="urllib3"
        ) from exc
    return urllib3


def retry_after_seconds(value: Optional[str], now: Optional[float] = None) -> Optional[float]:
    """``Retry-After`` as seconds from now: delta-seconds or an HTTP date; None if absent or bad."""
    if not value:
        return None
    value = value.strip()
    if value.isdigit():
        return float(value)
    try:
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    return max(0.0, when.timestamp() - (time.time() if now is None else now))


class WebhookClient:
    """One webhook endpoint (a pool of keep-alive connections). Thread-safe for posting."""

    def __init__(self, config: WebhookConfig):
        urllib3 = _urllib3()
        self.config = config
        self._pool = urllib3.PoolManager(
            timeout=urllib3.Timeout(connect=config.policy.connect_timeout, read=config.policy.reply_timeout),
            retries=False,  # the policy retries, here
        )
        self._headers = {"User-Agent": USER_AGENT, **dict(config.headers), "Content-Type": "application/json"}

    def _where(self, chunk: Chunk) -> str:
        return f"webhook POST {self.config.display}: {chunk.label}, Idempotency-Key {chunk.key}"

    def post(self, chunk: Chunk) -> int:
        """Send one chunk once; return the status, or raise (see the module docstring)."""
        urllib3 = _urllib3()
        headers = {**self._headers, "Idempotency-Key": chunk.key}
        try:
            resp = self._pool.request("POST", self.config.url, body=chunk.body, headers=headers, redirect=False)
        except urllib3.exceptions.SSLError as exc:
            raise DriverError(f"{self._where(chunk)}: TLS failed: {redact(exc, self.config.secrets)}") from None
        except (urllib3.exceptions.HTTPError, OSError) as exc:
            raise Unavailable(
                f"{self._where(chunk)}: {type(exc).__name__}: {redact(exc, self.config.secrets)}"
            ) from None
        status = resp.status
        if 200 <= status < 300:
            return status
        text = redact(resp.data[:200].decode("utf-8", "replace"), self.config.secrets).strip()
        detail = f"HTTP {status} {resp.reason or ''}".rstrip() + (f": {text}" if text else "")
        if status in TRANSIENT_STATUS:
            raise Unavailable(f"{self._where(chunk)}: {detail}", retry_after_seconds(resp.headers.get("Retry-After")))
        if status in (401, 403):
            raise AuthenticationFailed(f"{self._where(chunk)}: {detail} (check the endpoint's headers)")
        raise EndpointRefused(f"{self._where(chunk)}: {detail}")

    def send(self, chunk: Chunk) -> int:
        """:meth:`post` with retries under the policy; returns the requests it took."""
        policy = self.config.policy
        tries = [0]

        def attempt() -> int:
            tries[0] += 1
            return self.post(chunk)

        def wait_as_asked(exc: BaseException, _n: int) -> None:
            asked = getattr(exc, "retry_after", None)
            if asked:
                time.sleep(min(asked, policy.reply_timeout))  # the server's Retry-After, then the backoff

        try:
            retry(attempt, policy, what=f"webhook {chunk.label}", on_retry=wait_as_asked)
        except EndpointUnavailable as exc:
            raise EndpointUnavailable(f"{exc} (gave up after {tries[0]} attempt{'s' * (tries[0] != 1)})") from exc
        return tries[0]

    def deliver(self, chunks: Iterable[Chunk], *, on_chunk: Optional[Callable[[Chunk], None]] = None) -> Delivered:
        """Send ``chunks`` in order, each after the previous one was acknowledged (2xx).

        A failure stops the delivery and raises; the batch's replay sends every chunk again
        (the receiver's idempotency keys make that harmless).  Fault point
        ``webhook_after_chunk`` is reached after each acknowledged chunk."""
        n = docs = requests = 0
        for chunk in chunks:
            requests += self.send(chunk)
            n += 1
            docs += chunk.documents
            if on_chunk is not None:
                on_chunk(chunk)
            fault_point("webhook_after_chunk")
        return Delivered(n, docs, requests)

    def close(self) -> None:
        self._pool.clear()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
