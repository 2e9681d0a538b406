"""nats-py errors -> :mod:`tidemark.errors`, at the boundary.

=========================================  =========================================
nats / JetStream                            tidemark
=========================================  =========================================
10071 wrong last sequence (on a progress    :class:`~tidemark.errors.FencedOff`: a newer
subject: the fence)                         session wrote this channel's progress subject
10201 atomic batch contains a duplicate     :class:`~tidemark.errors.FencedOff`: another
message id                                  writer stored these counters since we looked
connection refused / closed / timeout,     :class:`~tidemark.errors.EndpointUnavailable`
no responders, 503 (JetStream not ready)    (Transient)
authorization violation                     :class:`~tidemark.errors.AuthenticationFailed`
any other API error                         :class:`RequestRefused` (Terminal)
=========================================  =========================================
"""

from __future__ import annotations

import asyncio

from tidemark.errors import AuthenticationFailed, DriverError, EndpointUnavailable, FencedOff, Terminal

ERR_WRONG_LAST_SEQUENCE = 10071
ERR_NO_MESSAGE_FOUND = 10037
ERR_STREAM_NOT_FOUND = 10059
ERR_ATOMIC_DISABLED = 10174
ERR_ATOMIC_INCOMPLETE = 10176
ERR_ATOMIC_UNSUPPORTED_HEADER = 10177
ERR_ATOMIC_TOO_LARGE = 10199
ERR_ATOMIC_DUPLICATE_MSG_ID = 10201


class RequestRefused(DriverError, Terminal):
    """JetStream refused a request for a reason retrying cannot fix (names the error code)."""

    def __init__(self, message: str, *, err_code: int | None = None):
        self.err_code = err_code
        super().__init__(message)


class NatsApiError(Exception):
    """A JetStream error reply tidemark decoded itself (raw batch-publish replies)."""

    def __init__(self, code: int, err_code: int, description: str):
        self.code = code
        self.err_code = err_code
        self.description = description
        super().__init__(f"code={code} err_code={err_code} {description}")


def translate(exc: BaseException, what: str) -> Exception:
    """The tidemark error for ``exc`` raised while doing ``what`` (raise it ``from exc``)."""
    import nats.errors as ne
    import nats.js.errors as je

    err_code = getattr(exc, "err_code", None)
    code = getattr(exc, "code", None)
    desc = getattr(exc, "description", None) or str(exc) or type(exc).__name__
    if err_code == ERR_WRONG_LAST_SEQUENCE:
        return FencedOff(f"{what}: a newer session owns this range ({desc})")
    if err_code == ERR_ATOMIC_DUPLICATE_MSG_ID:
        return FencedOff(f"{what}: another writer stored these messages ({desc})")
    if isinstance(exc, ne.AuthorizationError):
        return AuthenticationFailed(f"{what}: NATS refused the credentials")
    if isinstance(
        exc,
        (
            ne.NoServersError,
            ne.ConnectionClosedError,
            ne.StaleConnectionError,
            ne.NoRespondersError,
            ne.ConnectionReconnectingError,
            ne.TimeoutError,
            je.NoStreamResponseError,
            asyncio.TimeoutError,
            ConnectionError,
            OSError,
        ),
    ):
        return EndpointUnavailable(f"{what}: {desc}")
    if isinstance(exc, je.ServiceUnavailableError) or code == 503:
        return EndpointUnavailable(f"{what}: {desc}")
    if isinstance(exc, (je.APIError, NatsApiError)):
        return RequestRefused(f"{what}: {desc} (err_code {err_code})", err_code=err_code)
    return RequestRefused(f"{what}: {type(exc).__name__}: {desc}")
