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
from tidemark.drivers.common.settings import config_schema
from tidemark.drivers.postgres.copy import CopyWriter, backend_pid
from tidemark.drivers.postgres.ddl import PostgresDDL
from tidemark.drivers.postgres.dialect import DIALECT, ENDPOINT_REDUCE, REDUCE
from tidemark.drivers.postgres.settings import SETTINGS, PgSettings, translate
from tidemark.drivers.sql import SqlDriver, sql_capabilities
from tidemark.drivers.sql.connection import ClientConnections
from tidemark.errors import DriverError, TidemarkError
from tidemark.protocol.messages import SpecResponse

T = TypeVar("T")

# PostgreSQL reduces a binding's batches itself where every strategy has a SQL form
CAPABILITIES = dataclasses.replace(sql_capabilities(50_000), endpoint_reduce=ENDPOINT_REDUCE)


class PostgresDriver(ClientConnections, PostgresDDL, SqlDriver):
    name = "postgres"
    dialect = DIALECT
    writer = CopyWriter()

    def capabilities(self) -> Capabilities:
        return CAPABILITIES

    def __init__(self, config: dict | None = None):
        super().__init__(config)
        self.settings = PgSettings.from_config(self.config)
        self.schema = self.settings.schema
        self.policy = self.settings.policy
        self._con: Optional[psycopg.Connection] = None

    def __repr__(self) -> str:
        return f"PostgresDriver({self.settings!r})"

    # ------------------------------------------------------------ connections (drivers.sql.connection)
    client_error = psycopg.Error

    def open_connection(self) -> psycopg.Connection:
        """An autocommit connection with the policy's ``lock_timeout``."""
        s = self.settings
        con = psycopg.connect(s.conninfo, autocommit=True, connect_timeout=max(1, int(s.policy.connect_timeout)))
        try:
            con.execute(f"SET lock_timeout = {int(s.policy.lock_timeout * 1000)}")
        except psycopg.Error:
            con.close()
            raise
        return con

    def translate(self, exc: BaseException, what: str) -> TidemarkError:
        return translate(exc, self.settings, what)

    def is_lost(self, con: psycopg.Connection, exc: BaseException) -> bool:
        return con.broken

    def usable(self, con: psycopg.Connection) -> bool:
        return not (con.closed or con.broken)

    def transaction(self, con: psycopg.Connection, body: Callable[[], T], write: bool = True) -> T:
        with con.transaction():
            return body()

    def session_info(self, con: psycopg.Connection) -> Any:
        return backend_pid(con)  # every later transaction of the session must run there

    def check_session(self, con: psycopg.Connection, session: Any) -> None:
        """Inside a transaction: refuse to go on in another server process than Open's
        (``session``: ``pg_backend_pid()`` at Open).

        Staged rows live in the session's temp tables, so a Store, a Load or the commit that
        reaches another process (a pooler in transaction or statement mode hands each
        transaction any server connection) would write or read another session's tables.
        The check runs first in each of those transactions, so nothing of it is done."""
        if session is None:
            return
        now = backend_pid(con)
        if now != session:
            raise DriverError(
                f"PostgreSQL at {self.settings.where}: this session's transactions reached two server processes (pid "
                f"{session}, then {now}). A connection pooler in transaction or statement mode (PgBouncer's "
                "pool_mode = transaction, say) is between tidemark and PostgreSQL. tidemark stages rows in "
                "temp tables of its own session, so it needs a session of its own: connect to PostgreSQL "
                "directly, or through a pooler in session mode. Nothing of this transaction was committed."
            )

    def reduce_sql(self, model):
        return REDUCE

    # ------------------------------------------------------------ setup phase
    def spec(self) -> SpecResponse:
        return SpecResponse(
            config_schema=config_schema(SETTINGS),
            resource_schema={
                "type": "object",
                "required": ["table"],
                "properties": {
                    "table": {"type": "string"},
                    "schema": {"type": "string"},
                    "fillfactor": {"type": "integer", "minimum": 10, "maximum": 100},
                },
            },
        )
