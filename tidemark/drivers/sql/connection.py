"""Connections and retries for the SQL endpoints over a network client library (PostgreSQL,
MySQL): one copy of what they share.

A driver says how to open a connection with its session settings (:meth:`open_connection`),
how to translate its library's errors (:meth:`translate`, redacted), when a connection is
lost and when it is still usable.  Everything else is here: transient errors are retried
under the driver's policy, except on a session's connection that was lost (its temp tables
are gone with it), and the driver's own connection is made again when it is gone.
"""

from __future__ import annotations

from typing import Any, Callable, ClassVar, Optional, TypeVar

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


class ClientConnections:
    """:meth:`run`, :meth:`connect` and :attr:`con` of a SQL driver (mixed in before
    :class:`~tidemark.drivers.sql.SqlDriver`); the driver has ``name``, ``settings`` (with
    ``host`` and ``port``), ``policy`` and ``_con``."""

    client_error: ClassVar[type[BaseException]] = Exception  # the client library's base error
    # declared by the driver this is mixed into
    name: ClassVar[str]
    settings: Any
    policy: RetryPolicy
    _con: Any

    # ------------------------------------------------------------ the driver's part
    def open_connection(self) -> Any:
        """A new connection with the session set up; raises :attr:`client_error` (and closes
        what it opened) when it cannot."""
        raise NotImplementedError

    def translate(self, exc: BaseException, what: str) -> TidemarkError:
        raise NotImplementedError

    def is_lost(self, con: Any, exc: BaseException) -> bool:
        """True when ``con`` is gone (a retry on another connection would not find its state)."""
        raise NotImplementedError

    def usable(self, con: Any) -> bool:
        raise NotImplementedError

    # ------------------------------------------------------------ shared
    def run(self, fn: Callable[[], T], what: str, con: Any = None) -> T:
        """``fn()``, the library's errors translated; transient ones retried while ``con`` (a
        session's connection, if given) lives."""

        def attempt() -> T:
            try:
                return fn()
            except self.client_error as exc:
                err = self.translate(exc, what)
                if con is not None and self.is_lost(con, exc):  # session state (temp tables) is gone
                    raise _NoRetry(EndpointUnavailable(f"{err} (connection lost)")) from None
                raise err from None

        try:
            return retry(attempt, self.policy, what=f"{self.name} {what}")
        except _NoRetry as wrapped:
            raise wrapped.error from None

    def connect(self, retrying: bool = True) -> Any:
        """A new connection (retried under the policy unless ``retrying`` is off: callers
        inside :meth:`run` retry already)."""

        def attempt() -> Any:
            try:
                return self.open_connection()
            except self.client_error as exc:
                raise self.translate(exc, "connect") from None

        if not retrying:
            return attempt()
        s = self.settings
        return retry(attempt, self.policy, what=f"{self.name} connect to {s.host}:{s.port}")

    @property
    def con(self) -> Any:
        """The driver's own connection (setup and inspection), made again when it is gone."""
        current: Optional[Any] = self._con
        if current is None or not self.usable(current):
            self._con = self.connect(retrying=False)  # used inside run(), which retries
        return self._con


__all__ = ["ClientConnections"]
