"""The PostgreSQL driver: connection code over psycopg 3 on the SQL skeleton.

Connections are autocommit with explicit transactions and a ``lock_timeout``; errors are
translated (redacted) by :func:`~tidemark.drivers.postgres.settings.translate` and the
transient ones retried, except on a session's connection that was lost (its temp tables
are gone with it).
"""

from __future__ import annotations

import dataclasses
from typing import Any, Callable, Optional, TypeVar

import psycopg

from tidemark.drivers.base import Capabilities
from tidemark.drivers.postgres.ddl import PostgresDDL
from tidemark.drivers.postgres.dialect import DIALECT, ENDPOINT_REDUCE
from tidemark.drivers.postgres.settings import CONFIG_KEYS, PgSettings, translate
from tidemark.drivers.postgres.transactor import PostgresTransactor, backend_pid
from tidemark.drivers.sql import SqlDriver, sql_capabilities
from tidemark.errors import EndpointUnavailable, TidemarkError
from tidemark.policy import retry
from tidemark.protocol.messages import SpecResponse

T = TypeVar("T")

# PostgreSQL reduces a binding's batches itself where every strategy has a SQL form
CAPABILITIES = dataclasses.replace(sql_capabilities(50_000), endpoint_reduce=ENDPOINT_REDUCE)


class _NoRetry(Exception):
    def __init__(self, error: TidemarkError):
        super().__init__(str(error))
        self.error = error


class PostgresDriver(PostgresDDL, SqlDriver):
    name = "postgres"
    dialect = DIALECT
    transactor = PostgresTransactor

    def capabilities(self) -> Capabilities:
        return CAPABILITIES

    def __init__(self, config: dict | None = None):
        super().__init__(config)
        self.settings = PgSettings.parse(self.config)
        self.schema = self.settings.schema
        self.policy = self.settings.policy
        self._con: Optional[psycopg.Connection] = None

    def __repr__(self) -> str:
        return f"PostgresDriver({self.settings!r})"

    # ------------------------------------------------------------ connections
    def run(self, fn: Callable[[], T], what: str, con: Optional[psycopg.Connection] = None) -> T:
        """Run ``fn``, translating psycopg errors; retry transient ones while the connection lives."""

        def attempt() -> T:
            try:
                return fn()
            except psycopg.Error as exc:
                err = translate(exc, self.settings, what)
                if con is not None and con.broken:  # session state (temp tables) is gone: no retry here
                    err = EndpointUnavailable(f"{err} (connection lost)")
                    raise _NoRetry(err) from None
                raise err from None

        try:
            return retry(attempt, self.policy, what=f"postgres {what}")
        except _NoRetry as wrapped:
            raise wrapped.error from None

    def connect(self, retrying: bool = True) -> psycopg.Connection:
        """A new autocommit connection (retried under the policy unless ``retrying`` is off:
        callers inside :meth:`run` retry already)."""
        s = self.settings

        def attempt() -> psycopg.Connection:
            try:
                con = psycopg.connect(s.conninfo, autocommit=True, connect_timeout=max(1, int(s.policy.connect_timeout)))
            except psycopg.Error as exc:
                raise translate(exc, s, "connect") from None
            try:
                con.execute(f"SET lock_timeout = {int(s.policy.lock_timeout * 1000)}")
            except psycopg.Error as exc:
                con.close()
                raise translate(exc, s, "connect") from None
            return con

        if not retrying:
            return attempt()
        return retry(attempt, self.policy, what=f"postgres connect to {s.host}:{s.port}")

    @property
    def con(self) -> psycopg.Connection:
        if self._con is None or self._con.closed or self._con.broken:
            self._con = self.connect(retrying=False)  # used inside run(), which retries
        return self._con

    def transaction(self, con: psycopg.Connection, body: Callable[[], T], write: bool = True) -> T:
        with con.transaction():
            return body()

    def session_info(self, con: psycopg.Connection) -> Any:
        return backend_pid(con)  # every later transaction of the session must run there

    # ------------------------------------------------------------ setup phase
    def spec(self) -> SpecResponse:
        props = {k: {"type": "string"} for k in CONFIG_KEYS if k not in ("port", "retry")}
        props["port"] = {"type": ["integer", "string"]}
        props["password"] = {"type": "string", "secret": True}
        props["retry"] = {"type": "object"}
        props["fillfactor"] = {"type": "integer", "minimum": 10, "maximum": 100}
        return SpecResponse(
            config_schema={"type": "object", "properties": props},
            resource_schema={"type": "object", "required": ["table"],
                             "properties": {"table": {"type": "string"}, "schema": {"type": "string"},
                                            "fillfactor": {"type": "integer", "minimum": 10, "maximum": 100}}},
        )
