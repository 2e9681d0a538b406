"""SQLite: the embedded, store-authoritative endpoint (stdlib ``sqlite3`` only).

Config: ``{path: "views.db", retry: {busy_timeout: 30, attempts: 5, ...}}``.
Resource: ``{table: NAME}``.

Several shards — separate processes, e.g. Spark's Python workers — write one database
file: WAL mode, every write transaction is ``BEGIN IMMEDIATE`` (take the write lock
first, so no transaction has to upgrade a read lock), ``busy_timeout`` waits for the
lock, and a remaining ``SQLITE_BUSY`` is retried under the driver's
:class:`~tidemark.policy.RetryPolicy`.

Everything else is the SQL skeleton (:mod:`tidemark.drivers.sql`): this module is the
dialect and the connection code.  A session stages its Stores in the connection's
``temp`` database (no lock on the shared file) and the commit moves them into the
tables in one ``BEGIN IMMEDIATE`` transaction that also verifies the fence and writes
the runtime checkpoint.
"""

from __future__ import annotations

import dataclasses
import os
import sqlite3
from typing import Any, Callable, Optional, Sequence, TypeVar

from tidemark.drivers.base import Capabilities, resolve_local_path
from tidemark.drivers.common.settings import config_schema
from tidemark.drivers.sql import BOOLEAN, INTEGER, JSON, NUMBER, TEXT, TIMESTAMP, Dialect, SqlDriver, sql_capabilities
from tidemark.drivers.sqlite import reduce
from tidemark.drivers.sqlite.settings import SETTINGS, SqliteSettings
from tidemark.errors import DriverError, EndpointUnavailable, TidemarkError
from tidemark.policy import retry
from tidemark.protocol.messages import SpecResponse

T = TypeVar("T")


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
    typed_staging = True

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


CAPABILITIES = dataclasses.replace(sql_capabilities(10_000), endpoint_reduce=reduce.ENDPOINT_REDUCE)


class SQLiteDriver(SqlDriver):
    name = "sqlite"
    dialect = DIALECT
    schema = "main"

    def capabilities(self) -> Capabilities:
        return CAPABILITIES

    def __init__(self, config: dict | None = None):
        super().__init__(config)
        s = SqliteSettings.from_config(self.config)
        self.path, self.policy, self.synchronous = s.path, s.policy, s.synchronous
        self._con: Optional[sqlite3.Connection] = None

    @classmethod
    def resolve_config(cls, config: dict, base_dir: str) -> dict:
        """``path`` relative to the spec's folder (``:memory:`` and ``file:`` URIs as they are)."""
        if str(config.get("path", "")).startswith("file:"):
            return config
        return resolve_local_path(config, "path", base_dir)

    def __repr__(self) -> str:
        return f"SQLiteDriver(path={self.path!r})"

    # ------------------------------------------------------------ connections
    def run(self, fn: Callable[[], T], what: str, con: Any = None) -> T:
        """Run ``fn`` translating sqlite3 errors, retrying busy/locked under the policy."""

        def attempt() -> T:
            try:
                return fn()
            except sqlite3.Error as exc:
                raise _translate(exc, self.path) from exc

        return retry(attempt, self.policy, what=f"sqlite {what}")

    def connect(self) -> sqlite3.Connection:
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
                for ddl in self.dialect.system_tables(
                    self.checkpoints_table, self.resources_table, self.quarantine_table, self.identities_table
                )[:2]:  # checkpoints, resources
                    con.execute(ddl)
            except BaseException:
                con.close()
                raise
            return con

        return self.run(setup, "connect")

    @property
    def con(self) -> sqlite3.Connection:
        if self._con is None:
            self._con = self.connect()
        return self._con

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

    def executemany(self, con: sqlite3.Connection, sql: str, rows: Sequence[Sequence[Any]]) -> None:
        con.executemany(sql, rows)

    def reduce_sql(self, model) -> reduce.SqliteReduce:
        return reduce.SqliteReduce(self.dialect.quote, [self.dialect.quote(c.name) for c in model.keys])

    def staged_texts(self, texts: Sequence[str]) -> Sequence[str]:
        return reduce.unescaped_names(texts)

    def reduce_refused(self, model, exc: Exception) -> Optional[Exception]:
        return reduce.refused(model, exc)

    # ------------------------------------------------------------ setup phase
    def spec(self) -> SpecResponse:
        return SpecResponse(
            config_schema=config_schema(SETTINGS),
            resource_schema={"type": "object", "required": ["table"], "properties": {"table": {"type": "string"}}},
        )
