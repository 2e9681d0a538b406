"""MySQL's and MariaDB's SQL: types, identifiers (64 characters, backticks), upserts,
binary key collations, catalogs.

String keys are ``varchar(255)`` in a binary collation *without* trailing-space padding
(MariaDB ``utf8mb4_nopad_bin``, MySQL 8 ``utf8mb4_0900_bin``): the server's default
collation is case-insensitive and pads, so ``"a"``, ``"A"`` and ``"a "`` would be one row.
"""

from __future__ import annotations

from typing import Any, Optional, Sequence

from tidemark.drivers.limits import ValueLimits
from tidemark.drivers.mysql.reduce import ENDPOINT_REDUCE, MariaReduce
from tidemark.drivers.sql import (
    BOOLEAN,
    INTEGER,
    JSON,
    NUMBER,
    TEXT,
    TIMESTAMP,
    Column,
    Dialect,
    TableModel,
)
from tidemark.drivers.sql.dialect import Reduction
from tidemark.drivers.sql.json_edits import unescaped_names
from tidemark.drivers.sql.model import IS_DELETE
from tidemark.errors import IncompatibleSchema, SpecError
from tidemark.protocol.messages import BindingSpec

SQL_TYPES = {
    TEXT: "longtext",
    INTEGER: "bigint",
    NUMBER: "double",
    BOOLEAN: "boolean",
    JSON: "json",
    TIMESTAMP: "datetime(6)",
}
MAX_IDENTIFIER_CHARS = 64  # MySQL refuses longer table, database and column names
KEY_CHARS = 255  # a string key column holds this many characters (4 bytes each; InnoDB keys: 3072 bytes)
MAX_STRING_KEYS = 3072 // (4 * KEY_CHARS)  # string key columns one primary key can hold
MARIADB_COLLATION = "utf8mb4_nopad_bin"
MYSQL_COLLATION = "utf8mb4_0900_bin"
LOCKS_TABLE = "tidemark_open_locks"  # one row per materialization: Opens of it run one at a time


def quote(name: str) -> str:
    """A MySQL identifier in backticks (a backtick doubled); an empty name or NUL is refused."""
    name = str(name)
    if not name or "\x00" in name:
        raise SpecError(f"invalid MySQL identifier {name!r}")
    return "`" + name.replace("`", "``") + "`"


def _reduce_forms(model: TableModel, dialect: Dialect) -> MariaReduce:
    return MariaReduce(dialect.quote, dialect.ident(model), model)


class MySqlDialect(Dialect):
    """MariaDB 10.5+ and MySQL 8.0+ (the key collation differs, see the module docstring)."""

    title = "MySQL"
    placeholder = "%s"
    types = SQL_TYPES
    decimal_type = "decimal(38,{scale})"  # as information_schema's column_type names it
    document_type = "json"
    document_types = ("json",)
    limits = ValueLimits(max_key_characters=KEY_CHARS, max_depth=31)  # keys: varchar(255); MariaDB's JSON: 31 levels
    invalid_document = "JSON_VALID({}) = 0"
    document_rule = "MariaDB's JSON nests at most 31 levels deep; MySQL's 100"
    row_id_type = "bigint NOT NULL AUTO_INCREMENT PRIMARY KEY"
    max_identifier_bytes = MAX_IDENTIFIER_CHARS  # counted in characters, see too_long
    schemas = True  # a MySQL schema is a database
    bool_as_int = True
    json_as_text = True
    for_update = " FOR UPDATE"
    lean_rows = True
    lean_date_times = True  # a naive UTC datetime(6) column; the remainder keeps another spelling
    typed_staging = True  # a lean binding it reduces stages StoreRows (typed values): drivers/mysql/bulk.py
    typed_remainder = True  # ... with their remainders
    transactional_ddl = False  # DDL commits implicitly (a rebuild's cut-over: drivers/sql/replace.py)
    table_suffix = " ENGINE=InnoDB"
    name_limit = f"MySQL's {MAX_IDENTIFIER_CHARS}-character column names"

    def __init__(self, collation: str = MARIADB_COLLATION, mariadb: bool = True):
        self.collation = collation
        self.mariadb = mariadb  # JSON is longtext with a json_valid check there
        # MariaDB reduces in the endpoint (reduce.py); MySQL 8 Loads
        self.reduction = Reduction(ENDPOINT_REDUCE, _reduce_forms, unescaped_names) if mariadb else None

    def check_binding(self, binding: BindingSpec, model: TableModel) -> None:
        """Names over 64 characters, and a primary key too long for InnoDB."""
        resource = binding.resource if isinstance(binding.resource, dict) else {}
        for what, name in (("table", resource.get("table")), ("schema", resource.get("schema"))):
            if isinstance(name, str) and len(name) > MAX_IDENTIFIER_CHARS:
                raise SpecError(
                    f"binding of {binding.collection!r}: {what} name {name!r} is {len(name)} characters; "
                    f"MySQL allows {MAX_IDENTIFIER_CHARS}. Choose a shorter one."
                )
        strings = [c.name for c in model.keys if c.kind in (TEXT, JSON)]
        if not model.delta and len(strings) > MAX_STRING_KEYS:
            raise IncompatibleSchema(
                f"table {model.display!r}: {len(strings)} string key fields {strings}; an InnoDB primary key holds "
                f"at most {MAX_STRING_KEYS} string columns of 255 characters (3072 bytes). Use fewer string keys"
            )

    def quote(self, name: str) -> str:
        return quote(name)

    def too_long(self, name: str) -> bool:
        return len(name) > MAX_IDENTIFIER_CHARS

    # ------------------------------------------------------------------ types
    def column_type(self, col: Column) -> str:
        """The type Apply compares (``information_schema`` normalized, see ``normal_type``)."""
        if col.is_key and col.kind in (TEXT, JSON):
            return f"varchar({KEY_CHARS})"
        return self.sql_type(col.kind)

    def ddl_type(self, col: Column) -> str:
        """The type a ``CREATE`` writes: string keys get the binary no-pad collation."""
        t = self.column_type(col)
        return self.key_string() if t.startswith("varchar") else t

    def key_string(self, chars: int = KEY_CHARS) -> str:
        return f"varchar({chars}) CHARACTER SET utf8mb4 COLLATE {self.collation}"

    def normal_type(self, data_type: str, column_type: str, collation: Optional[str], json_checked: bool) -> str:
        """An existing column's type as :meth:`column_type` names it."""
        data_type, column_type = data_type.lower(), column_type.lower()
        if data_type == "json" or (data_type == "longtext" and json_checked):
            return "json"
        if column_type.startswith("tinyint(1)") or data_type == "boolean":
            return "boolean"
        if data_type in ("bigint", "double", "longtext"):
            return data_type + (" unsigned" if "unsigned" in column_type else "")
        if data_type == "varchar" and collation and collation.lower() != self.collation:
            return f"{column_type} collate {collation.lower()}"
        return column_type

    def widens(self, existing_type: str, col: Column) -> bool:
        """integer -> number: the column becomes ``double`` (``ALTER TABLE … MODIFY``)."""
        return existing_type == "bigint" and col.kind == NUMBER

    # -------------------------------------------------------------------- DDL
    def system_tables(self, checkpoints: str, resources: str, quarantine: str, identities: str) -> list[str]:
        name = self.key_string()
        locks = (
            checkpoints.rsplit(".", 1)[0] + "." + self.quote(LOCKS_TABLE)
            if "." in checkpoints
            else self.quote(LOCKS_TABLE)
        )
        return [
            f"CREATE TABLE IF NOT EXISTS {checkpoints} (materialization {name} NOT NULL, key_begin bigint NOT NULL, "
            "key_end bigint NOT NULL, fence bigint NOT NULL, checkpoint longtext, "
            "PRIMARY KEY (materialization, key_begin, key_end)) ENGINE=InnoDB",
            f"CREATE TABLE IF NOT EXISTS {resources} (resource {name} NOT NULL PRIMARY KEY, materialization {name} "
            f"NOT NULL, checkpoint_id {name}) ENGINE=InnoDB",
            f"CREATE TABLE IF NOT EXISTS {quarantine} (id {self.row_id_type}, materialization {name} NOT NULL, "
            "batch_id bigint, location longtext, key_json longtext, reason longtext NOT NULL, value longtext, "
            "quarantined_at datetime(6) NOT NULL DEFAULT CURRENT_TIMESTAMP(6), INDEX (materialization)) ENGINE=InnoDB",
            f"CREATE TABLE IF NOT EXISTS {locks} (materialization {name} NOT NULL PRIMARY KEY) ENGINE=InnoDB",
            f"CREATE TABLE IF NOT EXISTS {identities} (resource {name} NOT NULL PRIMARY KEY, materialization {name} "
            "NOT NULL, record longtext NOT NULL) ENGINE=InnoDB",
        ]

    def create_schema(self, schema: str) -> str:
        return f"CREATE DATABASE IF NOT EXISTS {self.quote(schema)} CHARACTER SET utf8mb4"

    def add_column(self, model: TableModel, col: Column) -> str:
        return (
            f"ALTER TABLE {self.ident(model)} ADD COLUMN IF NOT EXISTS {self.quote(col.name)} {self.ddl_type(col)}"
            if self.mariadb
            else f"ALTER TABLE {self.ident(model)} ADD COLUMN {self.quote(col.name)} {self.ddl_type(col)}"
        )

    def create_temp(self, name: str, columns: Sequence[str], options: str = "") -> str:
        return f"CREATE TEMPORARY TABLE IF NOT EXISTS {self.quote(name)} ({', '.join(columns)}) ENGINE=InnoDB{options}"

    # staging: keyed temp tables of the DDL's types, a multi-table DELETE
    load_index_type = "bigint NOT NULL PRIMARY KEY"
    order_type, flag_type = "bigint NOT NULL", "boolean NOT NULL"
    staged_document_type = "longtext"

    def staged_type(self, col: Column) -> str:
        return self.ddl_type(col)

    def delete_staged(
        self, table: str, source: str, match: str, keys: Sequence[str], key_sources: Sequence[str]
    ) -> str:
        return f"DELETE t FROM {table} t JOIN {source} ON {match} WHERE s.{IS_DELETE} = 1"

    def out_of_range(self, exc: BaseException) -> bool:
        # a bigint or double out of range (1690), an exact decimal past its digits (1264)
        return bool(exc.args) and exc.args[0] in (1690, 1264)

    # ------------------------------------------------------------------- DML
    def upsert(self, keys: Sequence[str], columns: Sequence[str]) -> str:
        sets = ", ".join(f"{c} = VALUES({c})" for c in columns) or ", ".join(f"{k} = {k}" for k in keys[:1])
        return f"ON DUPLICATE KEY UPDATE {sets}"

    def open_lock(self, schema: str, materialization: str) -> Optional[tuple[str, tuple]]:
        # the lock row stays locked until Open's transaction ends
        return (
            f"INSERT INTO {self.table(schema, LOCKS_TABLE)} (materialization) VALUES (%s) "
            "ON DUPLICATE KEY UPDATE materialization = materialization",
            (materialization,),
        )

    # --------------------------------------------------------------- catalogs
    def columns(self, schema: str, table: str) -> tuple[str, tuple]:
        """Rows ``(name, data_type, column_type, collation, is_primary_key, required, json_checked)``."""
        checked = (
            (
                "EXISTS (SELECT 1 FROM information_schema.check_constraints k WHERE k.constraint_schema = "
                "c.table_schema AND k.table_name = c.table_name AND k.check_clause = "
                "CONCAT('json_valid(`', c.column_name, '`)'))"
            )
            if self.mariadb
            else "0"
        )
        return (
            "SELECT c.column_name, c.data_type, c.column_type, c.collation_name, c.column_key = 'PRI', "
            "c.is_nullable = 'NO' AND c.column_default IS NULL AND c.extra NOT LIKE '%%auto_increment%%', "
            f"{checked} FROM information_schema.columns c WHERE c.table_schema = %s AND c.table_name = %s "
            "ORDER BY c.ordinal_position",
            (schema, table),
        )

    def read_columns(self, rows: Sequence[Sequence[Any]]) -> tuple[Optional[dict[str, tuple[str, bool]]], list[str]]:
        existing = {
            name: (self.normal_type(dtype, ctype, coll, bool(checked)), bool(pk))
            for name, dtype, ctype, coll, pk, _req, checked in rows
        }
        return existing or None, [r[0] for r in rows if r[5]]

    def read_value(self, kind: str, value: Any) -> Any:
        if kind == TIMESTAMP and value is not None and hasattr(value, "isoformat"):
            return value.isoformat() + "Z"
        return super().read_value(kind, value)


MARIADB = MySqlDialect(MARIADB_COLLATION, mariadb=True)
MYSQL = MySqlDialect(MYSQL_COLLATION, mariadb=False)


def dialect_for(version: str) -> MySqlDialect:
    """The dialect of a server by its ``VERSION()``: MariaDB, else MySQL 8."""
    return MARIADB if "mariadb" in version.lower() else MYSQL
