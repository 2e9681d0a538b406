"""The parts a SQL endpoint is assembled from, as Estuary's ``Endpoint`` is a record of functions.

:class:`~tidemark.drivers.sql.driver.SqlDriver` is written once; an endpoint gives it an
:class:`SqlEndpoint` (how its config becomes :class:`SqlParts`) and overrides nothing.  The
parts:

* a :class:`SqlClient` -- connections, transactions, error translation and retries, and the
  :class:`~tidemark.drivers.sql.dialect.Dialect` of the server it talks to (MySQL's is known
  from the first connection's handshake);
* a row writer (:class:`~tidemark.drivers.sql.writer.RowWriter`: how rows reach a session's
  temp tables; PostgreSQL's COPY, MySQL's ``LOAD DATA``);
* :class:`Migrations` -- what Apply does beyond create and add column (new tables' options,
  widening a column's type, its words on what it leaves);
* the dialect's :class:`~tidemark.drivers.sql.dialect.Reduction` (``Dialect.reduction``): the
  statement by which the endpoint reduces a batch itself, where it can.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Optional, Protocol, Sequence, TypeVar

from tidemark.drivers.sql.dialect import Dialect
from tidemark.drivers.sql.model import TableModel
from tidemark.drivers.sql.plan import TablePlan
from tidemark.drivers.sql.writer import RowWriter
from tidemark.protocol.messages import BindingSpec, JsonObject, SpecResponse

T = TypeVar("T")


class SqlClient(Protocol):
    """Connections and transactions of one SQL endpoint, its client library's errors
    translated (redacted) to tidemark's."""

    @property
    def dialect(self) -> Dialect:
        """The SQL of the server this client talks to."""
        ...

    #: False until a connection said which server this is (MySQL or MariaDB): read
    #: :attr:`dialect` after one
    dialect_known: bool

    def connect(self, retrying: bool = True) -> Any:
        """A new connection, its session set up (retried under the endpoint's policy unless
        ``retrying`` is off: callers inside :meth:`run` retry already)."""
        ...

    def usable(self, con: Any) -> bool:
        """Whether ``con`` (the driver's own connection) can still be used."""
        ...

    def close(self, con: Any) -> None: ...

    def run(self, fn: Callable[[], T], what: str, con: Any = None) -> T:
        """``fn()``, client errors translated, transient ones retried -- not when ``con`` (a
        session's connection) was lost: its temp tables are gone with it."""
        ...

    def transaction(self, con: Any, body: Callable[[], T], write: bool = True) -> T:
        """``body()`` in one transaction of ``con``: committed, or rolled back on any error
        (``write`` false: the body writes only the session's temp tables)."""
        ...

    def execute(self, con: Any, sql: str, params: Optional[Sequence[Any]] = None) -> Any:
        """Run a statement; a cursor (``fetchone``, ``fetchall``, ``rowcount`` of an ``UPDATE``
        counting *matched* rows: the commit's fence check)."""
        ...

    def executemany(self, con: Any, sql: str, rows: Sequence[Sequence[Any]]) -> None: ...

    def session_info(self, con: Any) -> Any:
        """Read inside Open's transaction, handed to :meth:`check_session` (PostgreSQL: the
        server process)."""
        ...

    def check_session(self, con: Any, session: Any) -> None:
        """First in each of a session's transactions: raise if it must not go on."""
        ...


class Migrations(Protocol):
    """What Apply does to a binding's table beyond creating it and adding columns."""

    def table_options(self, model: TableModel, binding: BindingSpec) -> tuple[str, str]:
        """What ``CREATE TABLE`` appends for a new table, and how Apply says it (read by
        Validate too: raise SpecError for a resource's bad options)."""
        ...

    def notes(self, plan: TablePlan, omitted: Sequence[str]) -> list[str]:
        """Apply's words on what it leaves as it is (``omitted``: value fields whose names are
        too long for a column)."""
        ...

    def migrate(self, client: SqlClient, con: Any, plan: TablePlan, dry_run: bool) -> list[str]:
        """Change the types of ``plan.widened`` columns (the dialect accepted them); returns
        what it does, in words."""
        ...


class NoMigrations:
    """An endpoint whose Apply only creates tables and adds columns (SQLite)."""

    def table_options(self, model: TableModel, binding: BindingSpec) -> tuple[str, str]:
        return "", ""

    def notes(self, plan: TablePlan, omitted: Sequence[str]) -> list[str]:
        return []

    def migrate(self, client: SqlClient, con: Any, plan: TablePlan, dry_run: bool) -> list[str]:
        return []


@dataclass(frozen=True)
class SqlParts:
    """One SQL endpoint, assembled from its config."""

    client: SqlClient
    schema: str  # where tidemark's own tables live, and tables without a schema of their own
    chunk: int  # the most keys of one Load, documents of one Store
    spec: SpecResponse
    settings: Any  # the endpoint's settings, as its config reads
    describe: str  # the driver's repr (no credentials)
    writer: RowWriter = RowWriter()
    migrations: Migrations = NoMigrations()


def _unresolved(config: JsonObject, base_dir: str) -> JsonObject:
    return config


@dataclass(frozen=True)
class SqlEndpoint:
    """What a SQL endpoint's driver class names: how its config becomes its parts, and how the
    spec resolves its config (a file path against the spec's folder)."""

    assemble: Callable[[JsonObject], SqlParts]
    resolve: Callable[[JsonObject, str], JsonObject] = _unresolved


__all__ = ["Migrations", "NoMigrations", "SqlClient", "SqlEndpoint", "SqlParts"]
