"""How rows reach a session's temp tables: :class:`RowWriter` is the generic writer
(``executemany`` of converted tuples); an endpoint with a bulk path supplies a subclass as its
driver's ``writer`` (PostgreSQL: COPY, :mod:`tidemark.drivers.postgres.copy`; MySQL: ``LOAD
DATA``, :mod:`tidemark.drivers.mysql.bulk`).  The session (:mod:`.transactor`) decides what is
written and when; the writer only how, and names the key of a value the endpoint refuses.

Each method runs its statements in ONE transaction of the session (``prepare`` first: the
statement that creates the temp table, or empties what a committed transaction left in it).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Optional, Protocol, Sequence, TypeVar

from tidemark.drivers.sql.model import TIMESTAMP, TableModel, coerce, dumps
from tidemark.protocol.messages import REMAINDER, Key

T = TypeVar("T")


class Session(Protocol):
    """What a writer asks of the session (:class:`~tidemark.drivers.sql.transactor.SqlTransactor`)."""

    driver: Any
    dialect: Any
    con: Any

    def execute(self, sql: str, params: Optional[Sequence[Any]] = None) -> Any: ...

    def executemany(self, sql: str, rows: Sequence[Sequence[Any]]) -> None: ...

    def transaction(self, body: Callable[[], T], write: bool = True) -> T: ...

    def in_transaction(self, body: Callable[[], T], what: str, write: bool = True) -> T: ...


@dataclass(frozen=True)
class Chunk:
    """One Store's rows for a binding's staging table."""

    table: str  # the staging table, as statements name it
    prepare: Sequence[str]  # run first: create the table, or empty what a committed transaction left
    names: Sequence[str]  # the staging columns written
    kinds: Sequence[str]  # each column's kind (ORDER, FLAG, DOC or the view's column kind)
    rows: list[tuple[Any, ...]]  # raw values, one per name
    key_names: Sequence[str]  # non-empty: a row whose key is staged replaces it
    model: TableModel
    keys: Sequence[Key]  # each row's key, to name a refused value
    docs: Callable[[], Sequence[Any]]  # each row's document, to name a refused value
    what: str  # for messages: "store <table>"


@dataclass(frozen=True)
class KeyChunk:
    """One Load's keys for the Load table, and the join that reads their rows."""

    table: str
    prepare: Sequence[str]
    names: Sequence[str]  # key_index, then the key columns
    model: TableModel
    keys: Sequence[Key]
    select: str
    what: str


# kinds of the staging table's own columns, beside the view's column kinds
ORDER, FLAG, DOC = "store order", "flag", "document"


class RowWriter:
    """Rows into temp tables by ``executemany``; values converted by kind."""

    #: a document's JSON text as it is staged
    dumps: Callable[[Any], str] = staticmethod(dumps)

    def convert(self, kind: str) -> Callable[[Any], Any]:
        """A value of ``kind`` as a statement parameter."""
        if kind == ORDER:
            return int
        if kind == FLAG:
            return lambda x: int(bool(x))
        if kind == DOC:
            return lambda x: x
        return lambda v: coerce(kind, v)

    def insert(self, s: Session, table: str, names: Sequence[str], key_names: Sequence[str] = ()) -> str:
        """The ``INSERT`` of one row; with ``key_names``, a row whose key is there replaces it."""
        dialect = s.dialect
        sql = f"INSERT INTO {table} ({', '.join(names)}) VALUES ({dialect.params(len(names))})"
        if key_names:
            sql += " " + dialect.upsert(key_names, [n for n in names if n not in key_names])
        return sql

    def stage(self, s: Session, chunk: Chunk) -> None:
        """The chunk's rows into its staging table, in one transaction."""
        convs = [self.convert(k) for k in chunk.kinds]
        converted = [tuple([c(v) for c, v in zip(convs, r)]) for r in chunk.rows]
        sql = self.insert(s, chunk.table, chunk.names, chunk.key_names)

        def body() -> None:
            for statement in chunk.prepare:
                s.execute(statement)
            s.executemany(sql, converted)

        s.in_transaction(body, chunk.what, write=False)

    def stage_typed(
        self,
        s: Session,
        table: str,
        prepare: Sequence[str],
        model: TableModel,
        rows: Any,
        keys: Sequence[Key],
        what: str,
    ) -> None:
        """An Arrow table's columns (the view's columns, by name) into the typed staging ``table``:
        a date-time as its column's value (``Dialect.date_time_column``), then each row's
        remainder where the dialect stages it (``Dialect.typed_remainder``)."""
        dialect = s.dialect
        columns = [rows.column(c.name).to_pylist() for c in model.columns]
        convert = dialect.date_time_column
        for j, c in enumerate(model.columns):
            if convert is not None and c.kind == TIMESTAMP:
                columns[j] = [None if v is None else convert(v) for v in columns[j]]
        if dialect.typed_remainder:
            named = REMAINDER in rows.column_names
            columns.append(rows.column(REMAINDER).to_pylist() if named else [None] * rows.num_rows)
        tuples = list(zip(*columns))
        sql = f"INSERT INTO {table} VALUES ({dialect.params(len(columns))})"

        def body() -> None:
            for statement in prepare:
                s.execute(statement)
            s.executemany(sql, tuples)

        s.in_transaction(body, what, write=False)

    def load(self, s: Session, chunk: KeyChunk) -> list[Any]:
        """The keys (``key_index``, then the key columns) into the Load table, then the rows
        of the chunk's ``select``, in one transaction."""
        kinds = [c.kind for c in chunk.model.keys]
        rows = [(i, *(coerce(k, v) for k, v in zip(kinds, key))) for i, key in enumerate(chunk.keys)]
        sql = self.insert(s, chunk.table, chunk.names)

        def body() -> list[Any]:
            for statement in chunk.prepare:
                s.execute(statement)
            s.executemany(sql, rows)
            found: list[Any] = s.execute(chunk.select).fetchall()  # the client library's rows
            return found

        return s.in_transaction(body, chunk.what, write=False)
