"""The MySQL/MariaDB endpoint: a client over PyMySQL, assembled with the SQL skeleton.

Connections are autocommit with explicit transactions, ``READ COMMITTED``, strict SQL
mode, UTC, ``innodb_lock_wait_timeout`` from the retry policy, and ``CLIENT.FOUND_ROWS``
(an ``UPDATE`` counts the rows it matched: the commit's fence check).  Errors are
translated (redacted) by :func:`~tidemark.drivers.mysql.settings.translate`; transient
ones are retried, except on a session's connection that was lost (its temp tables are
gone with it).  Which server this is (MariaDB, which reduces in the endpoint, or MySQL 8)
the first connection's handshake says: it picks the dialect.
"""

from __future__ import annotations

from typing import Any, Callable, Optional, Sequence, TypeVar

import pymysql
from pymysql.constants import CLIENT

from tidemark.drivers.common.settings import config_schema
from tidemark.drivers.mysql.bulk import BulkWriter
from tidemark.drivers.mysql.dialect import MARIADB, MAX_IDENTIFIER_CHARS, MySqlDialect, dialect_for
from tidemark.drivers.mysql.settings import SETTINGS, MySqlSettings, is_lost, translate
from tidemark.drivers.sql import SqlDriver, TablePlan
from tidemark.drivers.sql.connection import Retrying
from tidemark.drivers.sql.parts import NoMigrations, SqlClient, SqlEndpoint, SqlParts
from tidemark.protocol.messages import SpecResponse

T = TypeVar("T")

SQL_MODE = "STRICT_ALL_TABLES,NO_ZERO_DATE,NO_ZERO_IN_DATE,ERROR_FOR_DIVISION_BY_ZERO,NO_ENGINE_SUBSTITUTION"


class MySqlClient:
    """Connections to one MySQL or MariaDB server (:class:`~tidemark.drivers.sql.parts.SqlClient`)."""

    def __init__(self, settings: MySqlSettings):
        self.settings = settings
        self.dialect: MySqlDialect = MARIADB  # until the first connection says which server this is
        self.dialect_known = False
        self.retrying = Retrying(
            "mysql",
            f"{settings.host}:{settings.port}",
            settings.policy,
            pymysql.Error,
            lambda exc, what: translate(exc, settings, what),
            lambda con, exc: is_lost(exc) or not con.open,
        )

    def open_connection(self) -> pymysql.connections.Connection:
        """A connection with the session settings (see the module docstring); the dialect
        follows the server the handshake names."""
        con = pymysql.connect(**self.settings.connect_args(), client_flag=CLIENT.FOUND_ROWS)
        try:
            with con.cursor() as cur:
                cur.execute(
                    f"SET SESSION sql_mode = '{SQL_MODE}', SESSION time_zone = '+00:00', "
                    f"SESSION innodb_lock_wait_timeout = {max(1, int(self.settings.policy.lock_timeout))}, "
                    "SESSION group_concat_max_len = 4294967295"  # the reduce statement joins members (reduce.py)
                )
                cur.execute("SET SESSION TRANSACTION ISOLATION LEVEL READ COMMITTED")
            self.dialect, self.dialect_known = dialect_for(con.get_server_info()), True  # from the handshake
        except pymysql.Error:
            con.close()
            raise
        return con

    def connect(self, retrying: bool = True) -> pymysql.connections.Connection:
        return self.retrying.connect(self.open_connection, retrying)

    def run(self, fn: Callable[[], T], what: str, con: Any = None) -> T:
        return self.retrying.run(fn, what, con)

    def usable(self, con: pymysql.connections.Connection) -> bool:
        return con.open

    def close(self, con: pymysql.connections.Connection) -> None:
        try:
            con.close()
        except pymysql.Error:
            pass

    def transaction(self, con: Any, body: Callable[[], T], write: bool = True) -> T:
        con.begin()
        try:
            out = body()
            con.commit()
            return out
        except BaseException:
            if con.open:
                try:
                    con.rollback()
                except pymysql.Error:
                    pass
            raise

    def execute(self, con: Any, sql: str, params: Optional[Sequence[Any]] = None) -> Any:
        cur = con.cursor()
        cur.execute(sql, params)
        return cur

    def executemany(self, con: Any, sql: str, rows: Sequence[Sequence[Any]]) -> None:
        with con.cursor() as cur:
            cur.executemany(sql, rows)

    def session_info(self, con: Any) -> Any:
        return None

    def check_session(self, con: Any, session: Any) -> None:
        pass


class MySqlMigrations(NoMigrations):
    """MySQL's :class:`~tidemark.drivers.sql.parts.Migrations`: integer -> number (no table
    options, no words beyond the skeleton's)."""

    def migrate(self, client: SqlClient, con: Any, plan: TablePlan, dry_run: bool) -> list[str]:
        """integer -> number: ``MODIFY`` the column to ``double`` (every bigint below 2^53 is exact)."""
        if not plan.widened:
            return []
        dialect = client.dialect
        if not dry_run:
            client.execute(
                con,
                f"ALTER TABLE {dialect.ident(plan.model)} "
                + ", ".join(
                    f"MODIFY COLUMN {dialect.quote(col.name)} {dialect.ddl_type(col)}" for col, _ in plan.widened
                ),
            )
        return [
            f"change column {col.name} of {plan.model.display} from {was} to {dialect.column_type(col)}"
            for col, was in plan.widened
        ]


SPEC = SpecResponse(
    config_schema=config_schema(SETTINGS),
    resource_schema={
        "type": "object",
        "required": ["table"],
        "properties": {
            "table": {"type": "string", "maxLength": MAX_IDENTIFIER_CHARS},
            "schema": {"type": "string", "maxLength": MAX_IDENTIFIER_CHARS},
        },
    },
)


def _assemble(config: dict) -> SqlParts:
    settings = MySqlSettings.from_config(config)
    return SqlParts(
        client=MySqlClient(settings),
        schema=settings.schema,
        chunk=20_000,
        spec=SPEC,
        settings=settings,
        describe=f"MySqlDriver({settings!r})",
        writer=BulkWriter(),
        migrations=MySqlMigrations(),
    )


class MySqlDriver(SqlDriver):
    """MySQL and MariaDB: the SQL skeleton over :class:`MySqlClient`, ``LOAD DATA`` and its migrations."""

    name = "mysql"
    endpoint = SqlEndpoint(_assemble)
