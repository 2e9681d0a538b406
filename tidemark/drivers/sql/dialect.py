"""What one SQL endpoint's SQL looks like: the only SQL text the skeleton does not write.

A :class:`Dialect` is stateless (one instance per endpoint kind, a class attribute of the
driver) and holds no connection.  The defaults are ANSI SQL where it has an answer
(``"`` quoting, ``CREATE SCHEMA``, ``information_schema``); SQLite and PostgreSQL
override what differs (``drivers/sqlite/driver.py``, ``drivers/postgres/dialect.py``), as
Estuary's ``materialize-sql`` dialects do.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any, Callable, Mapping, Optional, Protocol, Sequence

from tidemark.drivers.limits import ValueLimits
from tidemark.drivers.sql.model import (
    BOOLEAN,
    DOCUMENT_COLUMN,
    INTEGER,
    IS_DELETE,
    JSON,
    NUMBER,
    ROW_ID_COLUMN,
    TEXT,
    TIMESTAMP,
    Column,
    Shape,
    TableModel,
    quote_ident,
    scale_of_kind,
)


class _Executes(Protocol):
    """What :meth:`Dialect.reshape` uses of the SQL driver (a DB-API connection: ``con``)."""

    def execute(self, con: Any, sql: str, params: Optional[Sequence[Any]] = None) -> Any: ...
    def resource_name(self, model: TableModel) -> str: ...


def _as_staged(texts: Sequence[str]) -> Sequence[str]:
    return texts


def _not_refused(model: TableModel, exc: Exception) -> Optional[Exception]:
    return None


@dataclass(frozen=True)
class Reduction:
    """How an endpoint reduces a binding's batches itself (:mod:`tidemark.drivers.sql.reduce`)."""

    strategies: frozenset[str]  # the strategies it has a SQL form of (``Capabilities.endpoint_reduce``)
    #: the dialect's SQL pieces for a table (a :class:`~tidemark.drivers.sql.reduce.ReduceSql`)
    forms: Callable[[TableModel, "Dialect"], Any]
    #: the combined documents' JSON texts as its statement wants them staged
    staged_texts: Callable[[Sequence[str]], Sequence[str]] = _as_staged
    #: the error to raise for an error of its statement (a sum past 64 bits, named by key and
    #: property), or None to let it propagate
    refused: Callable[[TableModel, Exception], Optional[Exception]] = _not_refused


_ASCII_LOWER = str.maketrans("ABCDEFGHIJKLMNOPQRSTUVWXYZ", "abcdefghijklmnopqrstuvwxyz")


class Dialect:
    """Placeholders, identifiers and their limits, types, upserts, DDL and catalogs."""

    title: str = "SQL"  # the endpoint's name in messages, e.g. "PostgreSQL"
    placeholder: str = "?"  # the DB-API marker of one parameter: "?" (qmark) or "%s" (format)
    json_placeholder: Optional[str] = None  # the marker of a JSON parameter (e.g. "%s::jsonb"); None: placeholder
    types: Mapping[str, str] = {
        TEXT: "TEXT",
        INTEGER: "BIGINT",
        NUMBER: "DOUBLE PRECISION",
        BOOLEAN: "BOOLEAN",
        JSON: "TEXT",
        TIMESTAMP: "TEXT",
    }  # column kind -> SQL type
    document_type: str = "TEXT"  # the type of flow_document in a new table
    document_types: Optional[tuple[str, ...]] = None  # the types an existing flow_document may have; None: any
    row_id_type: str = "BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY"  # flow_row_id of delta-updates tables
    max_identifier_bytes: Optional[int] = None  # longer names: refused (tables, keys) or left out (values)
    schemas: bool = False  # tables live in named schemas (a resource may name one; Apply creates it)
    temp_schema: str = ""  # how a session's temp tables are qualified (SQLite "temp"), "" not at all
    bool_as_int: bool = False  # boolean columns read back as 0/1
    json_as_text: bool = True  # JSON columns read back as text (else: as Python values)
    ddl_lock: Optional[str] = None  # a statement that serializes DDL between sessions, first in its transaction
    for_update: str = ""  # appended to Open's SELECT of the overlapping checkpoint rows, to lock them
    #: appended to ``resource = ?`` where the endpoint folds the case of table names (SQLite:
    #: ``orders`` and ``ORDERS`` are one table, so one ownership claim)
    name_collate: str = ""
    #: new views take the lean row (:mod:`tidemark.drivers.sql.lean`) where the binding can
    lean_rows: bool = False
    #: a lean row's date-time is a column of its instant (the remainder keeps another spelling)
    lean_date_times: bool = False
    #: a lean row's date-time column value of a document's text, where the database does not
    #: convert the text itself (None: the text as it is)
    date_time_column: Optional[Callable[[Any], Any]] = None
    exact_decimals: bool = True  # a decimal column keeps ``multipleOf`` numbers exactly
    typed_staging: bool = False  # a lean binding it reduces stages ``StoreRows`` (typed values)
    #: ... with their remainder (``REMAINDER``: date-time texts, nulls, undeclared properties)
    typed_remainder: bool = False
    transactional_ddl: bool = True  # DDL takes part in a transaction (MariaDB: it commits on its own)
    #: how the endpoint reduces a batch itself (None: it Loads, and the runtime reduces)
    reduction: Optional[Reduction] = None
    limits: ValueLimits = ValueLimits()  # what the endpoint cannot hold (Capabilities.limits)
    #: a condition on a staged document text ({} its column) true where the view's document
    #: column refuses it, and the rule broken, for the error that names its key (or None)
    invalid_document: Optional[str] = None
    document_rule: str = ""
    table_suffix: str = ""  # appended to a view's CREATE TABLE, before its options (MySQL: the engine)

    @property
    def name_limit(self) -> str:
        """The identifier limit in words, e.g. "PostgreSQL's 63-byte column names"."""
        return f"{self.title}'s {self.max_identifier_bytes}-byte column names"

    def check_binding(self, binding: Any, model: TableModel) -> None:
        """Refuse (SpecError, IncompatibleSchema) a binding's table the endpoint cannot hold,
        beyond the identifier limit (MySQL: names over 64 characters, too many string keys)."""

    def resolved_name(self, name: str) -> str:
        """A table's name as the endpoint resolves it (the view-identity record's ``resolved``):
        as tidemark quotes it; SQLite folds ASCII letters (``orders`` and ``ORDERS`` are one)."""
        return name.translate(_ASCII_LOWER) if self.name_collate else name

    # ------------------------------------------------------------- identifiers
    def quote(self, name: str) -> str:
        return quote_ident(name)

    def too_long(self, name: str) -> bool:
        return self.max_identifier_bytes is not None and len(name.encode("utf-8")) > self.max_identifier_bytes

    def table(self, schema: Optional[str], name: str) -> str:
        return (self.quote(schema) + "." if schema else "") + self.quote(name)

    def ident(self, model: TableModel) -> str:
        return self.table(model.schema, model.name)

    def temp(self, name: str) -> str:
        """A session temp table as statements name it."""
        return (self.temp_schema + "." if self.temp_schema else "") + self.quote(name)

    # ------------------------------------------------------------- parameters
    def params(self, n: int) -> str:
        return ", ".join([self.placeholder] * n)

    @property
    def json_param(self) -> str:
        return self.json_placeholder or self.placeholder

    # ------------------------------------------------------------------ types
    #: the type of an exact decimal column (``{scale}``: its places; 38 digits hold any sum
    #: that tidemark keeps exact)
    decimal_type: str = "NUMERIC(38,{scale})"

    def sql_type(self, kind: str) -> str:
        scale = scale_of_kind(kind)
        return self.types[kind] if scale is None else self.decimal_type.format(scale=scale)

    def column_type(self, col: Column) -> str:
        """The type of a view column (a key column may need another, e.g. a bounded string)."""
        return self.sql_type(col.kind)

    def widens(self, existing_type: str, col: Column) -> bool:
        """Whether Apply accepts an existing value column of ``existing_type`` (lower case)
        for ``col``; the driver's ``migrate`` then changes it, if it must."""
        return False

    def document_text(self, expr: str) -> str:
        """``expr`` (a JSON column) read as JSON text."""
        return expr

    # -------------------------------------------------------------------- DDL
    def system_tables(self, checkpoints: str, resources: str, quarantine: str, identities: str) -> list[str]:
        """``CREATE TABLE IF NOT EXISTS`` of tidemark's own tables (qualified names given)."""
        big, text = self.sql_type(INTEGER), self.sql_type(TEXT)
        return [
            f"CREATE TABLE IF NOT EXISTS {checkpoints} (materialization {text} NOT NULL, key_begin {big} NOT NULL, "
            f"key_end {big} NOT NULL, fence {big} NOT NULL, checkpoint {self.sql_type(JSON)}, "
            "PRIMARY KEY (materialization, key_begin, key_end))",
            f"CREATE TABLE IF NOT EXISTS {resources} (resource {text} PRIMARY KEY, materialization {text} NOT NULL, "
            f"checkpoint_id {text})",
            f"CREATE TABLE IF NOT EXISTS {quarantine} ({self.quarantine_id()}, materialization {text} NOT NULL, "
            f"batch_id {big}, location {text}, key_json {text}, reason {text} NOT NULL, value {text}"
            f"{self.quarantine_extra()})",
            f"CREATE TABLE IF NOT EXISTS {identities} (resource {text} PRIMARY KEY, materialization {text} NOT NULL, "
            f"record {text} NOT NULL)",
        ]

    def reshape(
        self,
        driver: _Executes,
        con: Any,
        live: TableModel,
        shadow: TableModel,
        live_shape: Shape,
        shadow_shape: Shape,
        columns: list[str],
    ) -> str:
        """Inside a rebuild's cut-over (:mod:`tidemark.drivers.sql.replace`): the live table
        takes the shadow's rows and its other shape (a key, columns or types changed).  This
        default drops the live table and gives the shadow its name in the same transaction
        (SQLite, whose ``ALTER`` cannot change a key or a type); PostgreSQL changes the live
        table in place."""
        driver.execute(con, f"DROP TABLE {self.ident(live)}")
        driver.execute(con, f"ALTER TABLE {self.ident(shadow)} RENAME TO {self.quote(live.name)}")
        return (
            f"replaced table {driver.resource_name(live)} by {driver.resource_name(shadow)} (its key or types changed)"
        )

    def quarantine_id(self) -> str:
        return f"id {self.row_id_type}"

    def quarantine_extra(self) -> str:
        """Further columns of the quarantine table (``, name type``), filled by defaults."""
        return ""

    def create_schema(self, schema: str) -> str:
        return f"CREATE SCHEMA IF NOT EXISTS {self.quote(schema)}"

    def ddl_type(self, col: Column) -> str:
        """The type a ``CREATE`` writes for a view column (:meth:`column_type` is the one
        Apply compares; MySQL adds a key's collation)."""
        return self.column_type(col)

    def create_table(self, model: TableModel, options: str = "") -> str:
        q, t = self.quote, self.ddl_type
        cols = [f"{q(c.name)} {t(c)} NOT NULL" for c in model.keys]
        cols += [f"{q(c.name)} {t(c)}" for c in model.values]
        cols.append(f"{q(DOCUMENT_COLUMN)} {self.document_type}{'' if model.lean else ' NOT NULL'}")
        if model.delta:
            cols.insert(0, f"{q(ROW_ID_COLUMN)} {self.row_id_type}")
        else:
            cols.append(f"PRIMARY KEY ({', '.join(q(c.name) for c in model.keys)})")
        return f"CREATE TABLE IF NOT EXISTS {self.ident(model)} ({', '.join(cols)}){self.table_suffix}{options}"

    def add_column(self, model: TableModel, col: Column) -> str:
        return f"ALTER TABLE {self.ident(model)} ADD COLUMN {self.quote(col.name)} {self.column_type(col)}"

    def create_temp(self, name: str, columns: Sequence[str], options: str = "") -> str:
        return f"CREATE TEMP TABLE IF NOT EXISTS {self.quote(name)} ({', '.join(columns)}){options}"

    # ------------------------------------------------------------------- DML
    def upsert(self, keys: Sequence[str], columns: Sequence[str]) -> str:
        """The clause after an ``INSERT`` that replaces the ``columns`` of a row whose ``keys``
        (quoted names) are already there."""
        sets = ", ".join(f"{c} = excluded.{c}" for c in columns)
        return f"ON CONFLICT ({', '.join(keys)}) DO UPDATE SET {sets}"

    # --------------------------------------------------------------- staging
    # A session's temp tables (drivers/sql/transactor.py): the Load table of keys, the
    # staging table of a binding's Stores, and how the commit moves staged rows.
    load_index_type: str = "INTEGER PRIMARY KEY"  # the Load table's key_index column
    load_table_options: str = ""  # e.g. " ON COMMIT DELETE ROWS" (then no DELETE before a Load)
    order_type: str = "INTEGER"  # the staging table's store_order column
    flag_type: str = "INTEGER"  # is_delete, was_loaded
    flag_true, flag_false = "1", "0"  # a flag column's values in a predicate
    staged_document_type: Optional[str] = None  # the staging table's document column (None: document_type)
    staging_keyed: bool = True  # the staging table's key is its primary key: a key stored twice replaces its row
    error_aborts_transaction: bool = False  # after an error only a savepoint's rollback lets the transaction go on

    def staged_type(self, col: Column) -> str:
        """A staging column's type for the view's column ``col``."""
        return self.column_type(col)

    def empty_table(self, table: str) -> str:
        return f"DELETE FROM {table}"

    def latest_staged(self, staging: str, key_sources: Sequence[str]) -> str:
        """A source (aliased ``s``) of the staged rows with one row per key, the last stored
        (for staging tables that are not keyed)."""
        raise NotImplementedError(f"{self.title}: its staging tables are keyed")

    def delete_staged(
        self, table: str, source: str, match: str, keys: Sequence[str], key_sources: Sequence[str]
    ) -> str:
        """Delete the rows of ``table`` whose key ``source`` (aliased ``s``) marks deleted;
        ``match``: the join condition of ``t`` (the table) and ``s``."""
        deleted = f"{source} WHERE s.{IS_DELETE} = {self.flag_true}"
        return f"DELETE FROM {table} WHERE ({', '.join(keys)}) IN (SELECT {', '.join(key_sources)} FROM {deleted})"

    def update_staged(self, table: str, assign: str, source: str, match: str) -> Optional[str]:
        """Update in place the rows of ``table`` whose key Load found (None: the upsert does it)."""
        return None

    def out_of_range(self, exc: BaseException) -> bool:
        """Whether ``exc`` (from a reduce statement) is a number out of its type's range."""
        return False

    def open_lock(self, schema: str, materialization: str) -> Optional[tuple[str, tuple[Any, ...]]]:
        """A statement run first in Open's transaction so that Opens of one materialization
        run one at a time (None: the transaction's own locks do it)."""
        return None

    # --------------------------------------------------------------- catalogs
    def exists(self, schema: str, names: Sequence[str]) -> tuple[str, tuple[Any, ...]]:
        """One row, one value per table name: not NULL (nor 0) where the table exists."""
        p = self.placeholder
        one = f"(SELECT 1 FROM information_schema.tables WHERE table_schema = {p} AND table_name = {p})"
        return "SELECT " + ", ".join([one] * len(names)), tuple(x for n in names for x in (schema, n))

    def columns(self, schema: str, table: str) -> tuple[str, tuple[Any, ...]]:
        """Rows ``(name, type, is_primary_key, required)`` of an existing table (none: no
        table); required: NOT NULL without a default, so an INSERT must fill it."""
        p = self.placeholder
        return (
            "SELECT c.column_name, c.data_type, k.column_name IS NOT NULL, "
            "c.is_nullable = 'NO' AND c.column_default IS NULL FROM information_schema.columns c "
            "LEFT JOIN information_schema.table_constraints t ON t.table_schema = c.table_schema "
            "AND t.table_name = c.table_name AND t.constraint_type = 'PRIMARY KEY' "
            "LEFT JOIN information_schema.key_column_usage k ON k.constraint_name = t.constraint_name "
            "AND k.table_schema = c.table_schema AND k.table_name = c.table_name AND k.column_name = c.column_name "
            f"WHERE c.table_schema = {p} AND c.table_name = {p} ORDER BY c.ordinal_position",
            (schema, table),
        )

    def read_columns(self, rows: Sequence[Sequence[Any]]) -> tuple[Optional[dict[str, tuple[str, bool]]], list[str]]:
        """The rows of :meth:`columns` as ``{name: (type, is_primary_key)}`` (None: no table),
        and the columns an INSERT must fill."""
        return {n: (t, bool(pk)) for n, t, pk, _ in rows} or None, [n for n, _, _, required in rows if required]

    def read_value(self, kind: str, value: Any) -> Any:
        """A key column's value as read back, as the key holds it."""
        if value is None:
            return None
        if kind == BOOLEAN and self.bool_as_int:
            return bool(value)
        if kind == JSON and self.json_as_text and isinstance(value, str):
            return json.loads(value)
        return value
