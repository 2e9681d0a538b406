"""SQLite: the embedded, store-authoritative endpoint (stdlib ``sqlite3`` only).

Config: ``{path: "views.db", retry: {busy_timeout: 30, attempts: 5, ...}}``.
Resource: ``{table: NAME}``.

Several shards — separate processes, e.g. Spark's Python workers — write one database
file: WAL mode, every write transaction is ``BEGIN IMMEDIATE`` (take the write lock
first, so no transaction has to upgrade a read lock), ``busy_timeout`` waits for the
lock, and a remaining ``SQLITE_BUSY`` is retried under the driver's
:class:`~tidemark.policy.RetryPolicy`.

Everything else is the SQL skeleton (:mod:`tidemark.drivers.sql`): this module is the
dialect and the client (connections), assembled into the endpoint's parts.  A session stages its Stores in the connection's
``temp`` database (no lock on the shared file) and the commit moves them into the
tables in one ``BEGIN IMMEDIATE`` transaction that also verifies the fence and writes
the runtime checkpoint.
"""

from __future__ import annotations

import os
import sqlite3
from typing import Any, Callable, Optional, Sequence, TypeVar

from tidemark.drivers.base import resolve_local_path
from tidemark.drivers.common.datetimes import sortable_text
from tidemark.drivers.common.settings import config_schema
from tidemark.drivers.sql import (
    BOOLEAN,
    CHECKPOINTS_TABLE,
    INTEGER,
    JSON,
    NUMBER,
    QUARANTINE_TABLE,
    RESOURCES_TABLE,
    TEXT,
    TIMESTAMP,
    Dialect,
    SqlDriver,
    TableModel,
)
from tidemark.drivers.sql.dialect import Reduction
from tidemark.drivers.sql.model import IDENTITIES_TABLE
from tidemark.drivers.sql.parts import SqlEndpoint, SqlParts
from tidemark.drivers.sqlite import reduce
from tidemark.drivers.sqlite.settings import SETTINGS, SqliteSettings
from tidemark.errors import DriverError, EndpointUnavailable, TidemarkError
from tidemark.policy import retry
from tidemark.protocol.messages import SpecResponse

T = TypeVar("T")


def _reduce_forms(model: TableModel, dialect: Dialect) -> reduce.SqliteReduce:
    return reduce.SqliteReduce(dialect.quote, [dialect.quote(c.name) for c in model.keys], lean=model.lean)


class SQLiteDialect(Dialect):
    title = "SQLite"
    placeholder = "?"
    types = {TEXT: "TEXT", INTEGER: "INTEGER", NUMBER: "REAL", BOOLEAN: "INTEGER", JSON: "TEXT", TIMESTAMP: "TEXT"}
    document_type = "TEXT"
    row_id_type = "INTEGER PRIMARY KEY AUTOINCREMENT"
    temp_schema = "temp"
    bool_as_int = True
    json_as_text = True
    name_collate = " COLLATE NOCASE"  # table names are case-insensitive (ASCII) in SQLite
    lean_rows = True
    exact_decimals = False  # NUMERIC affinity keeps a double
    lean_date_times = True  # fixed-width UTC text, which sorts as the instants (the remainder keeps another spelling)
    date_time_column = staticmethod(sortable_text)
    typed_staging = True
    typed_remainder = True  # ... with their remainders (each date-time as its sortable text: sql/writer.py)
    reduction = Reduction(reduce.ENDPOINT_REDUCE, _reduce_forms, reduce.unescaped_names, reduce.refused)

    def widens(self, existing_type: str, col) -> bool:
        """integer -> number needs nothing in SQLite: an INTEGER column keeps a fractional value
        as REAL (and a whole one as INTEGER), so the column stays as it is.  SQLite cannot
        change a column's type in place, so every other change is refused."""
        return existing_type.upper() == "INTEGER" and col.kind == NUMBER

    def exists(self, schema: str, names: Sequence[str]) -> tuple[str, tuple]:
        one = f"(SELECT 1 FROM {self.quote(schema)}.sqlite_master WHERE name = ? COLLATE NOCASE)"
        return "SELECT " + ", ".join([one] * len(names)), tuple(names)

    def columns(self, schema: str, table: str) -> tuple[str, tuple]:
        # required: NOT NULL without a default, and not the rowid (an INTEGER primary key)
        return (
            'SELECT name, type, pk > 0, "notnull" AND dflt_value IS NULL AND NOT (pk > 0 AND upper(type) = '
            "'INTEGER') FROM pragma_table_info(?, ?)",
            (table, schema),
        )


SQL_TYPES = SQLiteDialect.types
DIALECT = SQLiteDialect()
SCHEMA = "main"  # tidemark's own tables, and the views
OWN_TABLES = (CHECKPOINTS_TABLE, RESOURCES_TABLE, QUARANTINE_TABLE, IDENTITIES_TABLE)


def sql_type(kind: str) -> str:
    return DIALECT.sql_type(kind)


def _translate(exc: sqlite3.Error, path: str) -> TidemarkError:
    text = str(exc)
    low = text.lower()
    if isinstance(exc, sqlite3.OperationalError) and ("locked" in low or "busy" in low):
        return EndpointUnavailable(f"SQLite database {path!r} is busy: {text}")
    if isinstance(exc, sqlite3.OperationalError) and "unable to open" in low:
        return EndpointUnavailable(f"cannot open SQLite database {path!r}: {text}")
    return DriverError(f"SQLite database {path!r}: {type(exc).__name__}: {text}")


class SqliteClient:
    """Connections to one database file (:class:`~tidemark.drivers.sql.parts.SqlClient`): WAL,
    ``busy_timeout``, ``BEGIN IMMEDIATE`` for writes, busy or locked retried under the policy."""

    dialect = DIALECT
    dialect_known = True

    def __init__(self, settings: SqliteSettings):
        self.path, self.policy, self.synchronous = settings.path, settings.policy, settings.synchronous

    def run(self, fn: Callable[[], T], what: str, con: Any = None) -> T:
        """Run ``fn`` translating sqlite3 errors, retrying busy/locked under the policy."""

        def attempt() -> T:
            try:
                return fn()
            except sqlite3.Error as exc:
                raise _translate(exc, self.path) from exc

        return retry(attempt, self.policy, what=f"sqlite {what}")

    def connect(self, retrying: bool = True) -> sqlite3.Connection:
        if self.path != ":memory:" and not self.path.startswith("file:"):
            os.makedirs(os.path.dirname(os.path.abspath(self.path)), exist_ok=True)

        def setup() -> sqlite3.Connection:
            con = sqlite3.connect(
                self.path,
                timeout=self.policy.busy_timeout,
                isolation_level=None,
                check_same_thread=False,
                uri=self.path.startswith("file:"),
            )
            try:
                reduce.register(con)
                con.execute(f"PRAGMA busy_timeout={int(self.policy.busy_timeout * 1000)}")
                con.execute("PRAGMA journal_mode=WAL")
                con.execute(f"PRAGMA synchronous={self.synchronous}")
                for ddl in DIALECT.system_tables(*(DIALECT.table(SCHEMA, t) for t in OWN_TABLES))[:2]:
                    con.execute(ddl)  # checkpoints, resources (the others: by Apply or Open)
            except BaseException:
                con.close()
                raise
            return con

        return self.run(setup, "connect")

    def usable(self, con: sqlite3.Connection) -> bool:
        return True

    def close(self, con: sqlite3.Connection) -> None:
        con.close()

    def transaction(self, con: sqlite3.Connection, body: Callable[[], T], write: bool = True) -> T:
        """``BEGIN IMMEDIATE`` (``BEGIN`` where only temp tables are written); body;
        ``COMMIT`` — rolled back on any error."""
        con.execute("BEGIN IMMEDIATE" if write else "BEGIN")
        try:
            out = body()
            con.execute("COMMIT")
            return out
        except BaseException:
            if con.in_transaction:
                con.execute("ROLLBACK")
            raise

    def execute(self, con: sqlite3.Connection, sql: str, params: Optional[Sequence[Any]] = None) -> Any:
        return con.execute(sql) if params is None else con.execute(sql, params)

    def executemany(self, con: sqlite3.Connection, sql: str, rows: Sequence[Sequence[Any]]) -> None:
        con.executemany(sql, rows)

    def session_info(self, con: sqlite3.Connection) -> Any:
        return None

    def check_session(self, con: sqlite3.Connection, session: Any) -> None:
        pass


def _resolve(config: dict, base_dir: str) -> dict:
    """``path`` relative to the spec's folder (``:memory:`` and ``file:`` URIs as they are)."""
    if str(config.get("path", "")).startswith("file:"):
        return config
    return resolve_local_path(config, "path", base_dir)


def _assemble(config: dict) -> SqlParts:
    settings = SqliteSettings.from_config(config)
    return SqlParts(
        client=SqliteClient(settings),
        schema=SCHEMA,
        chunk=10_000,
        spec=SpecResponse(
            config_schema=config_schema(SETTINGS),
            resource_schema={"type": "object", "required": ["table"], "properties": {"table": {"type": "string"}}},
        ),
        settings=settings,
        describe=f"SQLiteDriver(path={settings.path!r})",
    )


class SQLiteDriver(SqlDriver):
    """SQLite: the SQL skeleton over :class:`SqliteClient` and :class:`SQLiteDialect`."""

    name = "sqlite"
    endpoint = SqlEndpoint(_assemble, _resolve)
