"""The MySQL/MariaDB driver: connection code over PyMySQL on the SQL skeleton.

Connections are autocommit with explicit transactions, ``READ COMMITTED``, strict SQL
mode, UTC, ``innodb_lock_wait_timeout`` from the retry policy, and ``CLIENT.FOUND_ROWS``
(an ``UPDATE`` counts the rows it matched: the commit's fence check).  Errors are
translated (redacted) by :func:`~tidemark.drivers.mysql.settings.translate`; transient
ones are retried, except on a session's connection that was lost (its temp tables are
gone with it).
"""

from __future__ import annotations

from typing import Any, Callable, Optional, Sequence, TypeVar

import pymysql
from pymysql.constants import CLIENT

from tidemark.drivers.base import Capabilities
from tidemark.drivers.mysql.dialect import MARIADB, MAX_IDENTIFIER_CHARS, MAX_STRING_KEYS, dialect_for
from tidemark.drivers.mysql.settings import CONFIG_KEYS, BULK_MODES, MySqlSettings, is_lost, translate
from tidemark.drivers.mysql.transactor import MySqlTransactor
from tidemark.drivers.sql import JSON, TEXT, SqlDriver, TablePlan, TableModel, sql_capabilities
from tidemark.errors import EndpointUnavailable, IncompatibleSchema, SpecError, TidemarkError
from tidemark.policy import retry
from tidemark.protocol.messages import BindingSpec, SpecResponse

T = TypeVar("T")

CAPABILITIES = sql_capabilities(20_000)
SQL_MODE = "STRICT_ALL_TABLES,NO_ZERO_DATE,NO_ZERO_IN_DATE,ERROR_FOR_DIVISION_BY_ZERO,NO_ENGINE_SUBSTITUTION"


class _NoRetry(Exception):
    def __init__(self, error: TidemarkError):
        super().__init__(str(error))
        self.error = error


class MySqlDriver(SqlDriver):
    name = "mysql"
    dialect = MARIADB  # until the first connection says which server this is
    transactor = MySqlTransactor

    def capabilities(self) -> Capabilities:
        return CAPABILITIES

    def __init__(self, config: dict | None = None):
        super().__init__(config)
        self.settings = MySqlSettings.parse(self.config)
        self.schema = self.settings.schema
        self.policy = self.settings.policy
        self._con: Optional[pymysql.connections.Connection] = None

    def __repr__(self) -> str:
        return f"MySqlDriver({self.settings!r})"

    # ------------------------------------------------------------ connections
    def run(self, fn: Callable[[], T], what: str, con: Any = None) -> T:
        """Run ``fn``, translating PyMySQL errors; retry transient ones while the connection lives."""

        def attempt() -> T:
            try:
                return fn()
            except pymysql.Error as exc:
                err = translate(exc, self.settings, what)
                if con is not None and (is_lost(exc) or not con.open):  # temp tables are gone: no retry here
                    raise _NoRetry(EndpointUnavailable(f"{err} (connection lost)")) from None
                raise err from None

        try:
            return retry(attempt, self.policy, what=f"mysql {what}")
        except _NoRetry as wrapped:
            raise wrapped.error from None

    def connect(self, retrying: bool = True) -> pymysql.connections.Connection:
        s = self.settings

        def attempt() -> pymysql.connections.Connection:
            try:
                con = pymysql.connect(**s.connect_args(), client_flag=CLIENT.FOUND_ROWS)
            except pymysql.Error as exc:
                raise translate(exc, s, "connect") from None
            try:
                with con.cursor() as cur:
                    cur.execute(f"SET SESSION sql_mode = '{SQL_MODE}', SESSION time_zone = '+00:00', "
                                f"SESSION innodb_lock_wait_timeout = {max(1, int(s.policy.lock_timeout))}")
                    cur.execute("SET SESSION TRANSACTION ISOLATION LEVEL READ COMMITTED")
                self.dialect = dialect_for(con.get_server_info())  # from the handshake
            except pymysql.Error as exc:
                con.close()
                raise translate(exc, s, "connect") from None
            return con

        if not retrying:
            return attempt()
        return retry(attempt, self.policy, what=f"mysql connect to {s.host}:{s.port}")

    @property
    def con(self) -> pymysql.connections.Connection:
        if self._con is None or not self._con.open:
            self._con = self.connect(retrying=False)  # used inside run(), which retries
        return self._con

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
    def model(self, binding: BindingSpec) -> TableModel:
        """The skeleton's model, with MySQL's words for names over 64 characters and a
        primary key too long for InnoDB."""
        resource = binding.resource if isinstance(binding.resource, dict) else {}
        for what, name in (("table", resource.get("table")), ("schema", resource.get("schema"))):
            if isinstance(name, str) and len(name) > MAX_IDENTIFIER_CHARS:
                raise SpecError(f"binding of {binding.collection!r}: {what} name {name!r} is {len(name)} characters; "
                                f"MySQL allows {MAX_IDENTIFIER_CHARS}. Choose a shorter one.")
        model = super().model(binding)
        strings = [c.name for c in model.keys if c.kind in (TEXT, JSON)]
        if not model.delta and len(strings) > MAX_STRING_KEYS:
            raise IncompatibleSchema(
                f"table {model.display!r}: {len(strings)} string key fields {strings}; an InnoDB primary key holds "
                f"at most {MAX_STRING_KEYS} string columns of 255 characters (3072 bytes). Use fewer string keys")
        return model

    @property
    def omitted_reason(self) -> str:
        return f"its name is longer than MySQL's {MAX_IDENTIFIER_CHARS}-character column names; its value stays in flow_document"

    def existing(self, con: Any, model: TableModel) -> tuple[Optional[dict[str, tuple[str, bool]]], list[str]]:
        d = self.dialect
        rows = self.execute(con, *d.columns(model.schema, model.name)).fetchall()
        existing = {name: (d.normal_type(dtype, ctype, coll, bool(checked)), bool(pk))
                    for name, dtype, ctype, coll, pk, _req, checked in rows}
        return existing or None, [r[0] for r in rows if r[5]]

    def migrate(self, con: Any, plan: TablePlan, dry_run: bool) -> list[str]:
        """integer -> number: ``MODIFY`` the column to ``double`` (every bigint below 2^53 is exact)."""
        if not plan.widened:
            return []
        d = self.dialect
        if not dry_run:
            self.execute(con, f"ALTER TABLE {d.ident(plan.model)} " + ", ".join(
                f"MODIFY COLUMN {d.quote(col.name)} {d.ddl_type(col)}" for col, _ in plan.widened))
        return [f"change column {col.name} of {plan.model.display} from {was} to {d.column_type(col)}"
                for col, was in plan.widened]

    def spec(self) -> SpecResponse:
        props: dict[str, Any] = {k: {"type": "string"} for k in CONFIG_KEYS if k not in ("port", "retry", "bulk")}
        props["port"] = {"type": ["integer", "string"]}
        props["password"] = {"type": "string", "secret": True}
        props["bulk"] = {"type": "string", "enum": list(BULK_MODES), "default": "infile"}
        props["retry"] = {"type": "object"}
        return SpecResponse(
            config_schema={"type": "object", "properties": props},
            resource_schema={"type": "object", "required": ["table"],
                             "properties": {"table": {"type": "string", "maxLength": MAX_IDENTIFIER_CHARS},
                                            "schema": {"type": "string", "maxLength": MAX_IDENTIFIER_CHARS}}},
        )
