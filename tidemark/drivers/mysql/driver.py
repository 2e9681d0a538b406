"""The MySQL/MariaDB driver: connection code over PyMySQL on the SQL skeleton.

Connections are autocommit with explicit transactions, ``READ COMMITTED``, strict SQL
mode, UTC, ``innodb_lock_wait_timeout`` from the retry policy, and ``CLIENT.FOUND_ROWS``
(an ``UPDATE`` counts the rows it matched: the commit's fence check).  Errors are
translated (redacted) by :func:`~tidemark.drivers.mysql.settings.translate`; transient
ones are retried, except on a session's connection that was lost (its temp tables are
gone with it).
"""

from __future__ import annotations

import dataclasses
from typing import Any, Callable, Optional, Sequence, TypeVar, cast

import pymysql
from pymysql.constants import CLIENT

from tidemark.drivers.base import Capabilities
from tidemark.drivers.common.settings import config_schema
from tidemark.drivers.mysql.bulk import BulkWriter
from tidemark.drivers.mysql.dialect import MARIADB, MAX_IDENTIFIER_CHARS, MAX_STRING_KEYS, MySqlDialect, dialect_for
from tidemark.drivers.mysql.reduce import ENDPOINT_REDUCE, MariaReduce
from tidemark.drivers.mysql.settings import SETTINGS, MySqlSettings, is_lost, translate
from tidemark.drivers.sql import JSON, TEXT, SqlDriver, TableModel, TablePlan, sql_capabilities
from tidemark.drivers.sql.connection import ClientConnections
from tidemark.drivers.sql.reduce import unescaped_names
from tidemark.errors import IncompatibleSchema, SpecError, TidemarkError
from tidemark.protocol.messages import BindingSpec, SpecResponse

T = TypeVar("T")

CAPABILITIES = sql_capabilities(20_000)
REDUCING = dataclasses.replace(CAPABILITIES, endpoint_reduce=ENDPOINT_REDUCE)
SQL_MODE = "STRICT_ALL_TABLES,NO_ZERO_DATE,NO_ZERO_IN_DATE,ERROR_FOR_DIVISION_BY_ZERO,NO_ENGINE_SUBSTITUTION"


class MySqlDriver(ClientConnections, SqlDriver):
    name = "mysql"
    dialect: MySqlDialect = MARIADB  # until the first connection says which server this is
    writer = BulkWriter()

    def capabilities(self) -> Capabilities:
        """MariaDB reduces in the endpoint (``drivers/mysql/reduce.py``); MySQL 8 Loads. Which
        server this is comes from the first connection."""
        self.con  # noqa: B018 - the handshake names the server
        return REDUCING if self.dialect.mariadb else CAPABILITIES

    def reduce_sql(self, model: TableModel) -> MariaReduce:
        return MariaReduce(self.dialect.quote, self.dialect.ident(model), model)

    def staged_texts(self, texts):
        return unescaped_names(texts)

    def __init__(self, config: dict | None = None):
        super().__init__(config)
        self.settings = MySqlSettings.from_config(self.config)
        self.schema = self.settings.schema
        self.policy = self.settings.policy
        self._con: Optional[pymysql.connections.Connection] = None

    def __repr__(self) -> str:
        return f"MySqlDriver({self.settings!r})"

    # ------------------------------------------------------------ connections (drivers.sql.connection)
    client_error = pymysql.Error

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
            self.dialect = dialect_for(con.get_server_info())  # from the handshake
        except pymysql.Error:
            con.close()
            raise
        return con

    def translate(self, exc: BaseException, what: str) -> TidemarkError:
        return translate(exc, self.settings, what)

    def is_lost(self, con: pymysql.connections.Connection, exc: BaseException) -> bool:
        return is_lost(exc) or not con.open

    def usable(self, con: pymysql.connections.Connection) -> bool:
        return con.open

    def close(self) -> None:
        if self._con is not None:
            try:
                self._con.close()
            except pymysql.Error:
                pass
            self._con = None

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

    # ------------------------------------------------------------ setup phase
    def base_model(self, binding: BindingSpec) -> TableModel:
        """The skeleton's model, with MySQL's words for names over 64 characters and a
        primary key too long for InnoDB."""
        resource = binding.resource if isinstance(binding.resource, dict) else {}
        for what, name in (("table", resource.get("table")), ("schema", resource.get("schema"))):
            if isinstance(name, str) and len(name) > MAX_IDENTIFIER_CHARS:
                raise SpecError(
                    f"binding of {binding.collection!r}: {what} name {name!r} is {len(name)} characters; "
                    f"MySQL allows {MAX_IDENTIFIER_CHARS}. Choose a shorter one."
                )
        model = super().base_model(binding)
        strings = [c.name for c in model.keys if c.kind in (TEXT, JSON)]
        if not model.delta and len(strings) > MAX_STRING_KEYS:
            raise IncompatibleSchema(
                f"table {model.display!r}: {len(strings)} string key fields {strings}; an InnoDB primary key holds "
                f"at most {MAX_STRING_KEYS} string columns of 255 characters (3072 bytes). Use fewer string keys"
            )
        return model

    @property
    def omitted_reason(self) -> str:
        return f"its name is longer than MySQL's {MAX_IDENTIFIER_CHARS}-character column names; its value stays in flow_document"

    def existing(self, con: Any, model: TableModel) -> tuple[Optional[dict[str, tuple[str, bool]]], list[str]]:
        dialect = self.dialect
        # cast: base_model sets the schema
        rows = self.execute(con, *dialect.columns(cast(str, model.schema), model.name)).fetchall()
        existing = {
            name: (dialect.normal_type(dtype, ctype, coll, bool(checked)), bool(pk))
            for name, dtype, ctype, coll, pk, _req, checked in rows
        }
        return existing or None, [r[0] for r in rows if r[5]]

    def migrate(self, con: Any, plan: TablePlan, dry_run: bool) -> list[str]:
        """integer -> number: ``MODIFY`` the column to ``double`` (every bigint below 2^53 is exact)."""
        if not plan.widened:
            return []
        dialect = self.dialect
        if not dry_run:
            self.execute(
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

    def spec(self) -> SpecResponse:
        return SpecResponse(
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
