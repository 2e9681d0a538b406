"""Connections and retries for the SQL endpoints over a network client library (PostgreSQL,
MySQL): one copy of what they share.

A client (:class:`~tidemark.drivers.sql.parts.SqlClient`) says how to open a connection with
its session settings, how to translate its library's errors (redacted) and when a connection
is lost; :class:`Retrying` does the rest: transient errors are retried under the endpoint's
policy, except on a session's connection that was lost (its temp tables are gone with it).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, TypeVar

from tidemark.drivers.common.settings import Setting
from tidemark.errors import EndpointUnavailable, TidemarkError
from tidemark.policy import RetryPolicy, retry

T = TypeVar("T")


def connection_settings(url: str) -> tuple[Setting, ...]:
    """The settings by which a network client finds its server: a URL (``url`` shows its
    form) and the fields that override its parts."""
    return (
        Setting("url", description=f"{url} (the fields below override its parts)"),
        Setting("host"),
        Setting("port", "integer", minimum=1, maximum=65535),
        Setting("user"),
        Setting("password", secret=True),
        Setting("database"),
    )


class _NoRetry(Exception):
    def __init__(self, error: TidemarkError):
        super().__init__(str(error))
        self.error = error


@dataclass(frozen=True)
class Retrying:
    """How a network client (PostgreSQL, MySQL) runs a call and opens a connection: its
    library's errors (``error``) translated, transient ones retried under ``policy`` --
    except on a session's connection that ``is_lost`` (its temp tables are gone with it)."""

    name: str  # the endpoint, for the retry's log lines
    where: str  # host:port
    policy: RetryPolicy
    error: type[BaseException]  # the client library's base error
    translate: Callable[[BaseException, str], TidemarkError]  # redacted
    is_lost: Callable[[Any, BaseException], bool]

    def run(self, fn: Callable[[], T], what: str, con: Any = None) -> T:
        """``fn()``, the library's errors translated; transient ones retried while ``con`` (a
        session's connection, if given) lives."""

        def attempt() -> T:
            try:
                return fn()
            except self.error as exc:
                err = self.translate(exc, what)
                if con is not None and self.is_lost(con, exc):  # session state (temp tables) is gone
                    raise _NoRetry(EndpointUnavailable(f"{err} (connection lost)")) from None
                raise err from None

        try:
            return retry(attempt, self.policy, what=f"{self.name} {what}")
        except _NoRetry as wrapped:
            raise wrapped.error from None

    def connect(self, open_connection: Callable[[], T], retrying: bool = True) -> T:
        """``open_connection()`` (retried under the policy unless ``retrying`` is off: callers
        inside :meth:`run` retry already)."""

        def attempt() -> T:
            try:
                return open_connection()
            except self.error as exc:
                raise self.translate(exc, "connect") from None

        if not retrying:
            return attempt()
        return retry(attempt, self.policy, what=f"{self.name} connect to {self.where}")


__all__ = ["Retrying", "connection_settings"]
