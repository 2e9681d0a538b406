"""The PostgreSQL endpoint: a client over psycopg 3, assembled with the SQL skeleton.

Connections are autocommit with explicit transactions and a ``lock_timeout``; errors are
translated (redacted) by :func:`~tidemark.drivers.postgres.settings.translate` and the
transient ones retried, except on a session's connection that was lost (its temp tables
are gone with it).  The parts: :class:`PostgresClient`, the COPY row writer
(:mod:`.copy`) and the migrations (:mod:`.ddl`).
"""

from __future__ import annotations

from typing import Any, Callable, Optional, Sequence, TypeVar

import psycopg

from tidemark.drivers.common.settings import config_schema
from tidemark.drivers.postgres.copy import CopyWriter, backend_pid
from tidemark.drivers.postgres.ddl import PostgresMigrations
from tidemark.drivers.postgres.dialect import DIALECT
from tidemark.drivers.postgres.settings import SETTINGS, PgSettings, translate
from tidemark.drivers.sql import SqlDriver
from tidemark.drivers.sql.connection import Retrying
from tidemark.drivers.sql.parts import SqlEndpoint, SqlParts
from tidemark.errors import DriverError
from tidemark.protocol.messages import SpecResponse

T = TypeVar("T")


class PostgresClient:
    """Connections to one PostgreSQL server (:class:`~tidemark.drivers.sql.parts.SqlClient`)."""

    dialect = DIALECT
    dialect_known = True

    def __init__(self, settings: PgSettings):
        self.settings = settings
        self.retrying = Retrying(
            "postgres",
            f"{settings.host}:{settings.port}",
            settings.policy,
            psycopg.Error,
            lambda exc, what: translate(exc, settings, what),
            lambda con, exc: con.broken,
        )

    def open_connection(self) -> psycopg.Connection:
        """An autocommit connection with the policy's ``lock_timeout``."""
        policy = self.settings.policy
        con = psycopg.connect(
            self.settings.conninfo, autocommit=True, connect_timeout=max(1, int(policy.connect_timeout))
        )
        try:
            con.execute(f"SET lock_timeout = {int(policy.lock_timeout * 1000)}")
        except psycopg.Error:
            con.close()
            raise
        return con

    def connect(self, retrying: bool = True) -> psycopg.Connection:
        return self.retrying.connect(self.open_connection, retrying)

    def run(self, fn: Callable[[], T], what: str, con: Any = None) -> T:
        return self.retrying.run(fn, what, con)

    def usable(self, con: psycopg.Connection) -> bool:
        return not (con.closed or con.broken)

    def close(self, con: psycopg.Connection) -> None:
        con.close()

    def transaction(self, con: psycopg.Connection, body: Callable[[], T], write: bool = True) -> T:
        with con.transaction():
            return body()

    def execute(self, con: psycopg.Connection, sql: str, params: Optional[Sequence[Any]] = None) -> Any:
        return con.execute(sql) if params is None else con.execute(sql, params)

    def executemany(self, con: psycopg.Connection, sql: str, rows: Sequence[Sequence[Any]]) -> None:
        with con.cursor() as cur:
            cur.executemany(sql, rows)

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


SPEC = SpecResponse(
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


def _assemble(config: dict) -> SqlParts:
    settings = PgSettings.from_config(config)
    return SqlParts(
        client=PostgresClient(settings),
        schema=settings.schema,
        chunk=50_000,
        spec=SPEC,
        settings=settings,
        describe=f"PostgresDriver({settings!r})",
        writer=CopyWriter(),
        migrations=PostgresMigrations(settings),
    )


class PostgresDriver(SqlDriver):
    """PostgreSQL: the SQL skeleton over :class:`PostgresClient`, COPY and its migrations."""

    name = "postgres"
    endpoint = SqlEndpoint(_assemble)
