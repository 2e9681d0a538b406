"""PostgreSQL: a store-authoritative endpoint over psycopg 3.

Config: ``{url: "postgresql://user@host:5432/db"}`` and/or the fields ``host, port,
user, password, database, schema (default public), sslmode, sslrootcert, sslcert,
sslkey, application_name``, plus ``retry: {...}`` (:class:`~tidemark.policy.RetryPolicy`;
``connect_timeout`` and ``lock_timeout`` live there).  Fields override the URL.
Resource: ``{table: NAME}`` (optionally ``schema: NAME``).

Passwords are never printed: ``repr``, errors and log lines are redacted, and library
errors are translated with ``from None`` so their text cannot leak a connection string.

A session (:class:`PostgresTransactor`) has its own connection (autocommit; explicit
transactions).  Load COPYs keys into a temp table and joins — only after this session's
Acknowledged (read-committed).  Store COPYs into a temp staging table per binding;
``start_commit`` then, in ONE transaction, checks the fence and writes the runtime
checkpoint, deletes (``DELETE … USING``), upserts (``INSERT … SELECT DISTINCT ON … ON
CONFLICT DO UPDATE``) or appends (delta updates), and writes quarantine rows.
"""

from __future__ import annotations

import dataclasses
import json
import re
from dataclasses import dataclass
from typing import Any, Callable, Optional, Sequence, TypeVar

try:
    import psycopg
    from psycopg import conninfo as pg_conninfo
    from psycopg import errors as pg_errors
    from psycopg import sql as pg_sql
except ImportError as exc:  # pragma: no cover - the registry turns this into a fix
    raise ImportError("psycopg is required for the postgres driver: pip install 'tidemark[postgres]'", name="psycopg") from exc
import orjson  # 3-5x faster JSON for Store (a core dependency of tidemark)

from tidemark import jsontext
from tidemark.drivers.base import Capabilities, CheckpointRow, CommitPattern, Driver, ReadCommittedLoads, Transactor
from tidemark.drivers.sql import (
    BOOLEAN, CHECKPOINTS_TABLE, DOCUMENT_COLUMN, INTEGER, JSON, NUMBER, QUARANTINE_TABLE, RESOURCES_TABLE,
    ROW_ID_COLUMN, TEXT, claim_resource, owner_positions, resources_ddl,
    TIMESTAMP, CheckpointState, Column, TableModel, check_columns, dumps, fenced_off, load_checkpoint, plan_open,
    quarantine_rows, quote_ident as q, redact,
)
from tidemark.errors import (
    AuthenticationFailed, DriverError, EndpointUnavailable, IncompatibleSchema, SpecError, TidemarkError,
)
from tidemark.faults import fault_point
from tidemark.policy import RetryPolicy, retry
from tidemark.protocol.messages import (
    Acknowledge, Acknowledged, Applied, Apply, BindingSpec, Load, Loaded, Open, Opened, Quarantine, Range,
    SpecResponse, StartCommit, StartedCommit, Store, Validate, Validated, ValidatedBinding,
)

T = TypeVar("T")

SQL_TYPES = {TEXT: "text", INTEGER: "bigint", NUMBER: "double precision", BOOLEAN: "boolean", JSON: "jsonb",
             TIMESTAMP: "timestamp with time zone"}
SSL_MODES = ("disable", "allow", "prefer", "require", "verify-ca", "verify-full")
CONFIG_KEYS = ("url", "host", "port", "user", "password", "database", "schema", "sslmode", "sslrootcert",
               "sslcert", "sslkey", "application_name", "retry", "fillfactor")
# Free space left in each page of a view table so that updates stay on their page (HOT:
# no new index entry, old versions pruned in place).  Measured in docs/benchmarks.md.
DEFAULT_FILLFACTOR = 70
_AUTH_HINTS = ("password authentication failed", "authentication failed", "no pg_hba.conf entry",
               "pg_hba.conf rejects", "no password supplied", "password is required",
               "permission denied for database", "role \"")
# libpq reports TLS misconfiguration without a SQLSTATE: a terminal error, not "unreachable"
_TLS_HINTS = ("does not support ssl", "certificate", "private key", "invalid sslmode", "sslcert", "sslkey",
              "sslrootcert")


MAX_IDENTIFIER_BYTES = 63  # PostgreSQL cuts longer identifiers (NAMEDATALEN - 1) without an error


def too_long(name: str) -> bool:
    return len(name.encode("utf-8")) > MAX_IDENTIFIER_BYTES


def check_name_length(where: str, what: str, name: Optional[str]) -> None:
    """A schema or table name PostgreSQL would cut (and so name another one): a SpecError."""
    if name and too_long(name):
        raise SpecError(f"{where}: {what} name {name!r} is {len(name.encode('utf-8'))} bytes; PostgreSQL cuts "
                        f"identifiers at {MAX_IDENTIFIER_BYTES} bytes, so it would name another {what}. "
                        "Choose a shorter one.")


def omitted_fields(binding: BindingSpec) -> list[str]:
    """Value fields with names too long for a PostgreSQL column: they are not columns (their
    values stay in the document column)."""
    return [f.name for f in binding.value_fields if too_long(f.name)]


def kept_values(binding: BindingSpec) -> Optional[tuple[int, ...]]:
    """Positions of the value fields that are columns, or None when all of them are."""
    kept = tuple(i for i, f in enumerate(binding.value_fields) if not too_long(f.name))
    return None if len(kept) == len(binding.value_fields) else kept


_COPY_CONTEXT = re.compile(r"COPY tidemark_stage_\d+, line (\d+), column c(\d+):")


def nul_path(value: Any, path: str = "") -> Optional[str]:
    """The JSON pointer of the first U+0000 in ``value`` (in a string or a property name),
    or None: PostgreSQL's text and jsonb cannot hold that character."""
    if isinstance(value, str):
        return (path or "/") if "\x00" in value else None
    if isinstance(value, dict):
        for k, v in value.items():
            here = path + "/" + str(k).replace("~", "~0").replace("/", "~1")
            if isinstance(k, str) and "\x00" in k:
                return here
            found = nul_path(v, here)
            if found is not None:
                return found
    elif isinstance(value, (list, tuple)):
        for i, v in enumerate(value):
            found = nul_path(v, f"{path}/{i}")
            if found is not None:
                return found
    return None


def _json_dumps(doc: Any) -> str:
    try:
        return orjson.dumps(doc).decode()
    except TypeError:  # big integers, non-string keys: the stdlib
        return dumps(doc)


def sql_type(kind: str) -> str:
    return SQL_TYPES[kind]


def widens(existing_type: str, col: Column) -> bool:
    """Whether Apply can change an existing value column to ``col``'s type: every value the
    column holds is still valid under the new schema (integer -> number; anything -> a union
    or object, i.e. jsonb; a date-time string that lost its format -> text).  The column is
    then recomputed from ``flow_document``, which holds each value exactly."""
    return (existing_type, col.kind) in (("bigint", NUMBER), ("timestamp with time zone", TEXT)) or (
        col.kind == JSON and existing_type in ("text", "bigint", "double precision", "boolean", "timestamp with time zone"))


def recompute_sql(col: Column, pointer: str, con) -> str:
    """The ``USING`` expression that recomputes a value column from ``flow_document``."""
    path = [part.replace("~1", "/").replace("~0", "~") for part in pointer.split("/")[1:]]
    lit = pg_sql.Literal(path).as_string(con) + "::text[]"  # quoted by psycopg, for this server
    if col.kind == JSON:
        return f"NULLIF({q(DOCUMENT_COLUMN)} #> {lit}, 'null'::jsonb)"
    return f"({q(DOCUMENT_COLUMN)} #>> {lit})::{sql_type(col.kind)}"


def copy_text(kind: str, v: Any) -> str:
    """One field in COPY's text format (``\\N`` is NULL; backslash, tab, newline, CR escaped)."""
    if v is None:
        return "\\N"
    if kind == JSON:
        return dumps(v).replace("\\", "\\\\")  # JSON text never holds raw control characters
    if v is True:
        return "t"
    if v is False:
        return "f"
    if isinstance(v, str):
        return v.replace("\\", "\\\\").replace("\t", "\\t").replace("\n", "\\n").replace("\r", "\\r")
    if isinstance(v, int):
        return str(v)
    if isinstance(v, float):
        return str(int(v)) if kind == INTEGER and v.is_integer() else repr(v)
    return dumps(v).replace("\\", "\\\\")  # an object or array in a scalar column: its JSON text


def _escape(v: str) -> str:
    if "\\" in v or "\t" in v or "\n" in v or "\r" in v:
        return v.replace("\\", "\\\\").replace("\t", "\\t").replace("\n", "\\n").replace("\r", "\\r")
    return v


def copy_converter(kind: str) -> Callable[[Any], str]:
    """A fast :func:`copy_text` for one column kind (the common value type first)."""
    if kind == TEXT or kind == TIMESTAMP:
        return lambda v: _escape(v) if v.__class__ is str else copy_text(kind, v)
    if kind == INTEGER:
        return lambda v: str(v) if v.__class__ is int else copy_text(kind, v)
    if kind == NUMBER:
        return lambda v: repr(v) if v.__class__ is float else copy_text(kind, v)
    if kind == JSON:
        return lambda v: "\\N" if v is None else _json_dumps(v).replace("\\", "\\\\")
    return lambda v: copy_text(kind, v)


def _encode_at(row: tuple, positions: list[int]) -> tuple:
    """``row`` with the JSON-column values at ``positions`` as JSON text."""
    out = list(row)
    for j in positions:
        if out[j] is not None:
            out[j] = _json_dumps(out[j])
    return tuple(out)


@dataclass(frozen=True)
class PgSettings:
    """The parsed config: a conninfo string (with the password) and what messages may show."""

    conninfo: str
    schema: str
    host: str
    port: str
    database: str
    user: str
    secrets: tuple[str, ...]
    policy: RetryPolicy
    fillfactor: int = DEFAULT_FILLFACTOR

    def __repr__(self) -> str:  # the conninfo carries the password
        return f"PgSettings(host={self.host!r}, port={self.port!r}, database={self.database!r}, user={self.user!r}, schema={self.schema!r})"

    @property
    def where(self) -> str:
        return f"{self.host}:{self.port}/{self.database}"

    @staticmethod
    def parse(config: dict) -> "PgSettings":
        unknown = sorted(set(config) - set(CONFIG_KEYS))
        if unknown:
            raise SpecError(f"postgres: unknown config keys {unknown} (known: {', '.join(CONFIG_KEYS)})")
        if config.get("sslmode") is not None and str(config["sslmode"]) not in SSL_MODES:
            raise SpecError(f"postgres: sslmode {config['sslmode']!r} is not one of {', '.join(SSL_MODES)}")
        policy = RetryPolicy.from_config(config.get("retry"))
        fields = {k: str(config[k]) for k in ("host", "port", "user", "password", "sslmode", "sslrootcert",
                                              "sslcert", "sslkey") if config.get(k) is not None}
        if config.get("database") is not None:
            fields["dbname"] = str(config["database"])
        fields.setdefault("application_name", str(config.get("application_name", "tidemark")))
        url = str(config.get("url") or "")
        secrets = tuple(s for s in (fields.get("password"),) if s)
        try:
            conninfo = pg_conninfo.make_conninfo(url, **fields)
            params = pg_conninfo.conninfo_to_dict(conninfo)
        except psycopg.ProgrammingError as exc:
            raise SpecError("postgres: invalid url or connection settings: " + redact(exc, secrets)) from None
        secrets += tuple(s for s in (params.get("password"),) if s)
        schema = str(config.get("schema") or "public")
        check_name_length("postgres", "schema", schema)
        return PgSettings(
            conninfo=conninfo,
            schema=schema,
            host=str(params.get("host") or "localhost"),
            port=str(params.get("port") or "5432"),
            database=str(params.get("dbname") or params.get("user") or ""),
            user=str(params.get("user") or ""),
            secrets=secrets,
            policy=policy,
            fillfactor=parse_fillfactor(config.get("fillfactor", DEFAULT_FILLFACTOR), "postgres: fillfactor"),
        )


def parse_fillfactor(value: Any, where: str) -> int:
    """A table fillfactor: an integer percentage from 10 to 100 (PostgreSQL's range)."""
    if isinstance(value, bool) or not isinstance(value, (int, str)) or not str(value).strip().isdecimal() \
            or not 10 <= int(value) <= 100:
        raise SpecError(f"{where} must be an integer from 10 to 100 (percent of each page to fill), got {value!r}")
    return int(value)


def translate(exc: BaseException, s: PgSettings, what: str) -> TidemarkError:
    """A psycopg error as a tidemark error, its text redacted."""
    text = redact(exc, s.secrets).strip()
    if isinstance(exc, (pg_errors.InvalidPassword, pg_errors.InvalidAuthorizationSpecification)):
        return AuthenticationFailed(f"PostgreSQL at {s.where} refused user {s.user!r}: {text}")
    if isinstance(exc, (pg_errors.SerializationFailure, pg_errors.DeadlockDetected, pg_errors.LockNotAvailable,
                        pg_errors.QueryCanceled, pg_errors.AdminShutdown, pg_errors.CannotConnectNow)):
        return EndpointUnavailable(f"PostgreSQL at {s.where}: {what}: transient {type(exc).__name__}: {text}")
    if isinstance(exc, psycopg.OperationalError):
        low = text.lower()
        if exc.sqlstate is None and any(h in low for h in _AUTH_HINTS):  # libpq reports these without a code
            return AuthenticationFailed(f"PostgreSQL at {s.where} refused user {s.user!r}: {text}")
        if exc.sqlstate is None and 'database "' in low and "does not exist" in low:
            return DriverError(f"PostgreSQL at {s.host}:{s.port}: database {s.database!r} does not exist")
        if exc.sqlstate is None and any(h in low for h in _TLS_HINTS):
            return DriverError(f"PostgreSQL at {s.host}:{s.port}: TLS settings refused ({what}): {text} "
                               "(check sslmode, sslrootcert, sslcert and sslkey)")
        if exc.sqlstate is None:
            return EndpointUnavailable(f"PostgreSQL at {s.host}:{s.port} is unreachable ({what}): {text}")
        return EndpointUnavailable(f"PostgreSQL at {s.where}: {what}: {text}")
    return DriverError(f"PostgreSQL at {s.where}: {what}: {type(exc).__name__}: {text}")


CAPABILITIES = Capabilities(
    commit_pattern=CommitPattern.STORE_AUTHORITATIVE,
    delta_updates=True,
    max_load_keys=50_000,
    max_store_docs=50_000,
    concurrent_shards=True,
    quarantine=True,
)


class PostgresDriver(Driver):
    name = "postgres"

    def capabilities(self) -> Capabilities:
        return CAPABILITIES

    def __init__(self, config: dict | None = None):
        super().__init__(config)
        self.settings = PgSettings.parse(self.config)
        self.policy = self.settings.policy
        self._con: Optional[psycopg.Connection] = None
        self.ck = f"{q(self.settings.schema)}.{q(CHECKPOINTS_TABLE)}"
        self.qt = f"{q(self.settings.schema)}.{q(QUARANTINE_TABLE)}"
        self.rt = f"{q(self.settings.schema)}.{q(RESOURCES_TABLE)}"

    def __repr__(self) -> str:
        return f"PostgresDriver({self.settings!r})"

    # ------------------------------------------------------------ connections
    def run(self, fn: Callable[[], T], what: str, con: Optional[psycopg.Connection] = None) -> T:
        """Run ``fn``, translating psycopg errors; retry transient ones while the connection lives."""

        def attempt() -> T:
            try:
                return fn()
            except psycopg.Error as exc:
                err = translate(exc, self.settings, what)
                if con is not None and con.broken:  # session state (temp tables) is gone: no retry here
                    err = EndpointUnavailable(f"{err} (connection lost)")
                    raise _NoRetry(err) from None
                raise err from None

        try:
            return retry(attempt, self.policy, what=f"postgres {what}")
        except _NoRetry as wrapped:
            raise wrapped.error from None

    def connect(self, retrying: bool = True) -> psycopg.Connection:
        """A new autocommit connection (retried under the policy unless ``retrying`` is off:
        callers inside :meth:`run` retry already)."""
        s = self.settings

        def attempt() -> psycopg.Connection:
            try:
                con = psycopg.connect(s.conninfo, autocommit=True, connect_timeout=max(1, int(s.policy.connect_timeout)))
            except psycopg.Error as exc:
                raise translate(exc, s, "connect") from None
            try:
                con.execute(f"SET lock_timeout = {int(s.policy.lock_timeout * 1000)}")
            except psycopg.Error as exc:
                con.close()
                raise translate(exc, s, "connect") from None
            return con

        if not retrying:
            return attempt()
        return retry(attempt, self.policy, what=f"postgres connect to {s.host}:{s.port}")

    @property
    def con(self) -> psycopg.Connection:
        if self._con is None or self._con.closed or self._con.broken:
            self._con = self.connect(retrying=False)  # used inside run(), which retries
        return self._con

    def close(self) -> None:
        if self._con is not None:
            self._con.close()
            self._con = None

    def ensure_tables(self, con: psycopg.Connection) -> None:
        """The schema, checkpoints and quarantine tables (serialized: concurrent DDL races)."""
        schema = self.settings.schema
        found = con.execute("SELECT to_regclass(%s), to_regclass(%s), to_regclass(%s)",
                            (self.ck, self.qt, self.rt)).fetchone()
        if found and all(found):
            return
        with con.transaction():
            con.execute("SELECT pg_advisory_xact_lock(hashtext('tidemark ddl'))")
            con.execute(f"CREATE SCHEMA IF NOT EXISTS {q(schema)}")
            con.execute(
                f"CREATE TABLE IF NOT EXISTS {self.ck} (materialization text NOT NULL, key_begin bigint NOT NULL, "
                "key_end bigint NOT NULL, fence bigint NOT NULL, checkpoint jsonb, "
                "PRIMARY KEY (materialization, key_begin, key_end))"
            )
            con.execute(resources_ddl(self.rt))
            con.execute(
                f"CREATE TABLE IF NOT EXISTS {self.qt} (id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY, "
                "materialization text NOT NULL, batch_id bigint, location text, key_json text, reason text NOT NULL, "
                "value text, quarantined_at timestamp with time zone NOT NULL DEFAULT now())"
            )

    # ------------------------------------------------------------ setup phase
    def spec(self) -> SpecResponse:
        props = {k: {"type": "string"} for k in CONFIG_KEYS if k not in ("port", "retry")}
        props["port"] = {"type": ["integer", "string"]}
        props["password"] = {"type": "string", "secret": True}
        props["retry"] = {"type": "object"}
        props["fillfactor"] = {"type": "integer", "minimum": 10, "maximum": 100}
        return SpecResponse(
            config_schema={"type": "object", "properties": props},
            resource_schema={"type": "object", "required": ["table"],
                             "properties": {"table": {"type": "string"}, "schema": {"type": "string"},
                                            "fillfactor": {"type": "integer", "minimum": 10, "maximum": 100}}},
        )

    def model(self, binding: BindingSpec) -> TableModel:
        """The binding's table. PostgreSQL cuts identifiers at 63 bytes without a word, so a
        longer schema or table name, or key field, is refused here (from Validate, before any
        data moves). A longer value field is left out of the columns; its value stays in the
        document (Validate reports it as a constraint and Apply says so)."""
        model = TableModel.of(binding, self.settings.schema)
        for what, name in (("schema", model.schema), ("table", model.name)):
            check_name_length(f"binding of {binding.collection!r}", what, name)
        long_keys = [c.name for c in model.keys if too_long(c.name)]
        if long_keys:
            raise IncompatibleSchema(
                f"table {model.display!r}: key field(s) {long_keys} are longer than PostgreSQL's "
                f"{MAX_IDENTIFIER_BYTES}-byte column names, and a key must be a column: rename the property"
            )
        if any(too_long(c.name) for c in model.values):
            model = dataclasses.replace(model, values=tuple(c for c in model.values if not too_long(c.name)))
        return model

    def fillfactor(self, model: TableModel, binding: BindingSpec) -> int:
        """The fillfactor a new table gets: the resource's, else the endpoint's for a standard
        table; a delta-updates table is append-only and gets PostgreSQL's default (100)."""
        value = binding.resource.get("fillfactor") if isinstance(binding.resource, dict) else None
        if value is not None:
            return parse_fillfactor(value, f"binding {model.display!r}: resource fillfactor")
        return 100 if model.delta else self.settings.fillfactor

    def _existing(self, con, model: TableModel) -> tuple[Optional[dict[str, tuple[str, bool]]], list[str]]:
        """The table's columns ``{name: (type, is_primary_key)}`` (None: no table), and the
        columns an INSERT must fill (NOT NULL, no default, not identity or generated)."""
        rows = con.execute(
            "SELECT a.attname, format_type(a.atttypid, a.atttypmod), COALESCE(a.attnum = ANY(i.indkey), false), "
            "a.attnotnull AND NOT a.atthasdef AND a.attidentity = '' AND a.attgenerated = '' "
            "FROM pg_attribute a JOIN pg_class c ON a.attrelid = c.oid JOIN pg_namespace n ON c.relnamespace = n.oid "
            "LEFT JOIN pg_index i ON i.indrelid = c.oid AND i.indisprimary "
            "WHERE n.nspname = %s AND c.relname = %s AND c.relkind IN ('r', 'p') AND a.attnum > 0 AND NOT a.attisdropped",
            (model.schema, model.name),
        ).fetchall()
        return {n: (t, bool(pk)) for n, t, pk, _ in rows} or None, [n for n, _, _, required in rows if required]

    def _plan(self, con, bindings: Sequence[BindingSpec]):
        out = []
        for b in bindings:
            model = self.model(b)
            existing, required = self._existing(con, model)
            missing = None if existing is None else check_columns(
                model, existing, sql_type, has_row_id=ROW_ID_COLUMN in existing,
                document_types=("jsonb", "json"), required=required, widens=widens)
            widened = [(c, existing[c.name][0]) for c in model.values
                       if existing and c.name in existing and existing[c.name][0].lower() != sql_type(c.kind)]
            written = {c.name for c in model.columns} | {DOCUMENT_COLUMN, ROW_ID_COLUMN} | {
                n.encode()[:MAX_IDENTIFIER_BYTES].decode(errors="ignore") for n in omitted_fields(b)}
            unwritten = sorted(set(existing or ()) - written)
            out.append((model, missing, self.fillfactor(model, b), widened, unwritten))
        return out

    def validate(self, req: Validate) -> Validated:
        self.run(lambda: self._plan(self.con, req.bindings), "validate")
        return Validated(tuple(
            ValidatedBinding(b.resource_path, b.delta_updates, {name: OMITTED_REASON for name in omitted_fields(b)})
            for b in req.bindings))

    def apply(self, req: Apply) -> Applied:
        def body() -> list[str]:
            con = self.con
            actions: list[str] = []
            created.clear()
            if not req.dry_run:
                self.ensure_tables(con)
            with con.transaction():
                if not req.dry_run:
                    con.execute("SELECT pg_advisory_xact_lock(hashtext('tidemark ddl'))")
                for b, (model, missing, fillfactor, widened, unwritten) in zip(req.bindings, self._plan(con, req.bindings)):
                    actions.extend(f"leave column {name} of {model.display} as it is: no field writes it"
                                   for name in unwritten)
                    actions.extend(f"leave field {name} out of {model.display}'s columns ({OMITTED_REASON})"
                                   for name in omitted_fields(b))
                    if missing is None:
                        actions.append(f"create table {model.display}"
                                       + (f" (fillfactor {fillfactor})" if fillfactor != 100 else ""))
                        created.append(b.resource_path)
                        if not req.dry_run:
                            con.execute(f"CREATE SCHEMA IF NOT EXISTS {q(model.schema)}")
                            con.execute(create_table_sql(model, fillfactor))
                        continue
                    for col in missing:
                        actions.append(f"add column {col.name} {sql_type(col.kind)} to {model.display}")
                        if not req.dry_run:
                            con.execute(f"ALTER TABLE {model.ident} ADD COLUMN IF NOT EXISTS {q(col.name)} {sql_type(col.kind)}")
                    if widened:
                        pointers = {f.name: f.pointer for f in b.fields}
                        actions.extend(f"change column {col.name} of {model.display} from {was} to {sql_type(col.kind)} "
                                       "(recomputed from flow_document)" for col, was in widened)
                        if not req.dry_run:  # one statement: the table is rewritten once
                            con.execute(f"ALTER TABLE {model.ident} " + ", ".join(
                                f"ALTER COLUMN {q(col.name)} TYPE {sql_type(col.kind)} USING {recompute_sql(col, pointers[col.name], con)}"
                                for col, _ in widened))
                if not req.dry_run and req.checkpoint_id:
                    for b in req.bindings:
                        claim_resource(con.execute, "%s", self.rt, self.model(b).display, req.materialization,
                                       req.checkpoint_id)
            return actions

        created: list[tuple] = []
        actions = self.run(body, "apply")
        return Applied("; ".join(actions) or "nothing to do", tuple(created))

    # ------------------------------------------------------ transaction phase
    def open(self, req: Open) -> tuple["PostgresTransactor", Opened]:
        con = self.connect()
        try:
            self.run(lambda: self.ensure_tables(con), "open", con)

            def tx():
                with con.transaction():
                    plan = self.open_range(con, req.materialization, req.range)
                    return plan, backend_pid(con)

            plan, pid = self.run(tx, f"open {req.range.name}", con)
        except BaseException:
            con.close()
            raise
        models = [self.model(b) for b in req.bindings]
        transactor = PostgresTransactor(self, con, req.materialization, req.range, plan.fence, models, backend=pid,
                                        kept=[kept_values(b) for b in req.bindings])
        return transactor, Opened(plan.checkpoint)

    def open_range(self, con, materialization: str, rng: Range):
        """Inside the Open transaction: lock, bump overlapping fences, inherit, insert (see drivers.sql)."""
        con.execute("SELECT pg_advisory_xact_lock(hashtext(%s))", (f"tidemark open {self.settings.schema} {materialization}",))
        over = (materialization, rng.key_begin, rng.key_end)
        rows = con.execute(
            f"SELECT key_begin, key_end, fence, checkpoint FROM {self.ck} WHERE materialization = %s AND key_end >= %s "
            "AND key_begin <= %s ORDER BY key_begin, key_end FOR UPDATE",
            over,
        ).fetchall()
        plan = plan_open(materialization, rng, [CheckpointState(Range(b, e), f, load_checkpoint(c)) for b, e, f, c in rows])
        con.execute(f"UPDATE {self.ck} SET fence = fence + 1 WHERE materialization = %s AND key_end >= %s AND key_begin <= %s", over)
        if plan.insert:
            con.execute(
                f"INSERT INTO {self.ck} (materialization, key_begin, key_end, fence, checkpoint) VALUES (%s, %s, %s, %s, %s::jsonb)",
                (*over, plan.fence, None if plan.checkpoint is None else dumps(plan.checkpoint)),
            )
        elif plan.refresh:
            con.execute(f"UPDATE {self.ck} SET checkpoint = %s::jsonb WHERE materialization = %s AND key_begin = %s "
                        "AND key_end = %s", (dumps(plan.checkpoint), *over))
        return plan

    # ------------------------------------------------------------- inspection
    def dump(self, materialization: str, binding: BindingSpec):
        model = self.model(binding)

        def body():
            if model.delta:
                rows = self.con.execute(f"SELECT {q(DOCUMENT_COLUMN)}::text FROM {model.ident} ORDER BY {q(ROW_ID_COLUMN)}")
                return [json.loads(d) for (d,) in rows]
            cols = ", ".join(q(c.name) for c in model.keys)
            rows = self.con.execute(f"SELECT {cols}, {q(DOCUMENT_COLUMN)}::text FROM {model.ident}").fetchall()
            return {tuple(r[:-1]): json.loads(r[-1]) for r in rows}

        return self.run(body, f"dump {model.display}")

    def drop(self, materialization: str, bindings: Sequence[BindingSpec]) -> list[str]:
        """Drop the bindings' tables and the materialization's checkpoint and quarantine rows."""
        models = [self.model(b) for b in bindings]

        def body() -> list[str]:
            con, done = self.con, []
            with con.transaction():
                con.execute("SELECT pg_advisory_xact_lock(hashtext('tidemark ddl'))")
                for model in models:
                    if con.execute("SELECT to_regclass(%s)", (model.ident,)).fetchone()[0]:
                        con.execute(f"DROP TABLE {model.ident}")
                        done.append(f"dropped table {model.display}")
                if con.execute("SELECT to_regclass(%s)", (self.rt,)).fetchone()[0]:
                    for model in models:
                        con.execute(f"DELETE FROM {self.rt} WHERE resource = %s AND materialization = %s",
                                    (model.display, materialization))
                for table, what in ((self.ck, "checkpoint rows"), (self.qt, "quarantine rows")):
                    if con.execute("SELECT to_regclass(%s)", (table,)).fetchone()[0]:
                        n = con.execute(f"DELETE FROM {table} WHERE materialization = %s", (materialization,)).rowcount
                        if n:
                            done.append(f"deleted {n} {what} of {materialization!r}")
            return done

        return self.run(body, "drop")

    def positions(self, materialization: str, bindings: Sequence[BindingSpec]):
        def body():
            if not self.con.execute("SELECT to_regclass(%s)", (self.rt,)).fetchone()[0]:
                return []
            return self.con.execute(f"SELECT resource, materialization, checkpoint_id FROM {self.rt}").fetchall()

        rows = self.run(body, "positions")
        return super().positions(materialization, bindings) + owner_positions(
            rows, materialization, bindings, lambda b: self.model(b).display)

    def checkpoints(self, materialization: str) -> list[CheckpointRow]:
        def body():
            if not self.con.execute("SELECT to_regclass(%s)", (self.ck,)).fetchone()[0]:
                return []
            return self.con.execute(
                f"SELECT key_begin, key_end, fence, checkpoint FROM {self.ck} WHERE materialization = %s ORDER BY key_begin, key_end",
                (materialization,),
            ).fetchall()

        rows = self.run(body, "checkpoints")
        return [CheckpointRow(materialization, Range(b, e), f, load_checkpoint(c)) for b, e, f, c in rows]


OMITTED_REASON = (f"its name is longer than PostgreSQL's {MAX_IDENTIFIER_BYTES}-byte column names; "
                  f"its value stays in {DOCUMENT_COLUMN}")


def backend_pid(con) -> int:
    """The server process this statement ran in (``pg_backend_pid()``; libpq's own
    ``backend_pid`` is a pooler's, where there is one)."""
    return con.execute("SELECT pg_backend_pid()").fetchone()[0]


class _NoRetry(Exception):
    def __init__(self, error: TidemarkError):
        super().__init__(str(error))
        self.error = error


def create_table_sql(model: TableModel, fillfactor: int = 100) -> str:
    cols = [f"{q(c.name)} {sql_type(c.kind)} NOT NULL" for c in model.keys]
    cols += [f"{q(c.name)} {sql_type(c.kind)}" for c in model.values]
    cols.append(f"{q(DOCUMENT_COLUMN)} jsonb NOT NULL")
    if model.delta:
        cols.insert(0, f"{q(ROW_ID_COLUMN)} bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY")
    else:
        cols.append(f"PRIMARY KEY ({', '.join(q(c.name) for c in model.keys)})")
    options = f" WITH (fillfactor = {int(fillfactor)})" if fillfactor != 100 else ""
    return f"CREATE TABLE IF NOT EXISTS {model.ident} ({', '.join(cols)}){options}"


class PostgresTransactor(ReadCommittedLoads, Transactor):
    """One shard session on its own connection."""

    def __init__(self, driver: PostgresDriver, con, materialization: str, rng: Range, fence: int,
                 models: list[TableModel], backend: Optional[int] = None,
                 kept: Optional[list[Optional[tuple[int, ...]]]] = None):
        self.driver = driver
        self.con = con
        self.kept = kept or [None] * len(models)  # per binding: the value positions that are columns
        self.backend = backend  # pg_backend_pid() at Open: every later transaction must run there
        self.materialization = materialization
        self.range = rng
        self.fence = fence
        self.models = models
        self._acknowledged = False
        self._deferred: list[Load] = []
        self._staged: set[int] = set()
        self._stale: set[int] = set()  # staging tables still holding committed rows (emptied on reuse)
        self._created: set[str] = set()
        self._quarantine: list[dict] = []
        self._seq = 0
        self._hashes: dict[int, set] = {}  # per binding: hashes of stored keys (to skip DISTINCT ON)
        self._dupes: set[int] = set()  # bindings where a key may have been stored twice
        self._deletes: set[int] = set()  # bindings with deletes staged
        self._updates: dict[int, int] = {}  # per binding: staged documents whose key was Loaded

    def _run(self, fn: Callable[[], T], what: str) -> T:
        return self.driver.run(fn, what, self.con)

    def _same_backend(self) -> None:
        """Inside a transaction: refuse to go on in another server process than Open's.

        Staged rows live in this session's temp tables, so a Store, a Load or the commit that
        reaches another process (a pooler in transaction or statement mode hands each
        transaction any server connection) would write or read another session's tables.
        The check runs first in each of those transactions, so nothing of it is done."""
        if self.backend is None:
            return
        now = backend_pid(self.con)
        if now != self.backend:
            s = self.driver.settings
            raise DriverError(
                f"PostgreSQL at {s.where}: this session's transactions reached two server processes (pid "
                f"{self.backend}, then {now}). A connection pooler in transaction or statement mode (PgBouncer's "
                "pool_mode = transaction, say) is between tidemark and PostgreSQL. tidemark stages rows in "
                "temp tables of its own session, so it needs a session of its own: connect to PostgreSQL "
                "directly, or through a pooler in session mode. Nothing of this transaction was committed."
            )

    def _name_nul(self, model: TableModel, keys: Sequence[tuple], docs: Optional[Sequence[Any]] = None) -> None:
        """After PostgreSQL refused a chunk: if a key (or, given ``docs``, a document) in it
        holds U+0000, raise an error that names it (PostgreSQL's own names a line of the COPY)."""
        for i, key in enumerate(keys):
            at = nul_path(list(key))
            what = f"key {list(key)!r}"
            if at is None and docs is not None:
                at = nul_path(docs[i])
                what = f"document of key {list(key)!r} (at {at})"
            if at is not None:
                raise DriverError(
                    f"PostgreSQL at {self.driver.settings.where}: {model.display}: the {what} holds U+0000 (NUL), "
                    "which PostgreSQL cannot store in text or jsonb. Remove or replace it upstream; nothing of "
                    "this shard's transaction was committed."
                )

    def _name_refused(self, model: TableModel, keys: Sequence[tuple], exc: psycopg.DataError) -> None:
        """After PostgreSQL refused a value of the careful COPY text (one line per row, columns
        ``c0…``): raise an error that names the key and the field, not the staging line."""
        found = _COPY_CONTEXT.search(exc.diag.context or "")
        if found is None:
            return
        row, col = int(found.group(1)) - 1, int(found.group(2))
        if not (0 <= row < len(keys) and 0 <= col < len(model.columns)):
            return
        text = redact(exc, self.driver.settings.secrets).strip().splitlines()[0]
        raise DriverError(
            f"PostgreSQL at {self.driver.settings.where}: {model.display}: the document of key {list(keys[row])!r}: "
            f"field {model.columns[col].name!r} ({sql_type(model.columns[col].kind)}) was refused: {text}. "
            "Nothing of this shard's transaction was committed."
        )

    # --------------------------------------------------------------- phases
    def acknowledge(self, msg: Acknowledge) -> Acknowledged:
        # start_commit committed synchronously: the previous transaction is visible.
        self._acknowledged = True
        return Acknowledged()

    def _temp(self, name: str, ddl: str, options: str = "") -> tuple[str, Optional[str]]:
        """A temp table's qualified name, and the statement that creates it if this session
        has not yet: the caller runs it inside its checked transaction, and adds ``name`` to
        ``_created`` once that transaction has committed."""
        create = None if name in self._created else f"CREATE TEMP TABLE IF NOT EXISTS {q(name)} ({ddl}){options}"
        return f"pg_temp.{q(name)}", create

    def _evaluate(self, msg: Load) -> list[Loaded]:
        if not msg.keys:
            return []
        model = self.models[msg.binding]
        kinds = [c.kind for c in model.keys]
        # ON COMMIT DELETE ROWS: each Load's transaction empties it, no TRUNCATE round trip
        name = f"tidemark_load_{msg.binding}"
        lt, create = self._temp(name,
                        ", ".join(["i integer"] + [f"k{j} {sql_type(k)}" for j, k in enumerate(kinds)]),
                        " ON COMMIT DELETE ROWS")
        on = " AND ".join(f"t.{q(c.name)} = l.k{j}" for j, c in enumerate(model.keys))
        if len(kinds) == 1:
            conv = copy_converter(kinds[0])
            payload = "".join([f"{i}\t{conv(key[0])}\n" for i, key in enumerate(msg.keys)])
        else:
            convs = [copy_converter(k) for k in kinds]
            payload = "".join([f"{i}\t" + "\t".join([c(v) for c, v in zip(convs, key)]) + "\n"
                               for i, key in enumerate(msg.keys)])
        con = self.con

        def body():
            with con.transaction():
                self._same_backend()
                if create:
                    con.execute(create)
                with con.cursor() as cur:
                    with cur.copy(f"COPY {lt} FROM STDIN") as copy:
                        copy.write(payload)
                    cur.execute(f"SELECT l.i, t.{q(DOCUMENT_COLUMN)}::text FROM {lt} l JOIN {model.ident} t ON {on}")
                    return cur.fetchall()

        def checked():
            try:
                return body()
            except psycopg.DataError:
                self._name_nul(model, msg.keys)
                raise

        rows = self._run(checked, f"load {model.display}")
        self._created.add(name)
        if not rows:
            return []
        keys = msg.keys
        loads = jsontext.loads
        return [Loaded(msg.binding, tuple([keys[i] for i, _ in rows]), tuple([loads(d) for _, d in rows]))]

    def store(self, msg: Store) -> None:
        if not msg.keys:
            return
        model = self.models[msg.binding]
        n = len(model.columns)
        name = f"tidemark_stage_{msg.binding}"
        st, create = self._temp(
            name,
            ", ".join(["seq bigint", "x boolean", "e boolean"]
                      + [f"c{j} {sql_type(c.kind)}" for j, c in enumerate(model.columns)] + ["d jsonb"]),
        )
        seen = self._hashes.setdefault(msg.binding, set())
        before = len(seen)
        seen.update(map(hash, msg.keys))
        if len(seen) - before != len(msg.keys):
            self._dupes.add(msg.binding)  # a key stored twice (or a hash collision): deduplicate at commit
        if any(msg.deletes):
            self._deletes.add(msg.binding)
        self._updates[msg.binding] = self._updates.get(msg.binding, 0) + sum(
            1 for e, x in zip(msg.exists, msg.deletes) if e and not x)
        seq = self._seq
        self._seq = seq + len(msg.keys)
        dumps_doc = _json_dumps
        values = msg.values
        kept = self.kept[msg.binding]
        if kept is not None:  # fields whose names are too long for a column
            values = [tuple([v[j] for j in kept]) for v in values]
        # Fast path: psycopg formats the COPY rows in C; JSON columns are encoded here.
        json_at = [3 + j for j, c in enumerate(model.columns) if c.kind == JSON]
        rows = [(seq + i, dele, ex, *key, *vals, dumps_doc(doc))
                for i, (key, vals, doc, dele, ex) in enumerate(zip(msg.keys, values, msg.docs, msg.deletes, msg.exists))]
        if json_at:
            rows = [_encode_at(r, json_at) for r in rows]
        con = self.con
        stale = msg.binding in self._stale  # a reused session: empty what the last commit applied
        copy_sql = f"COPY {st} ({', '.join(['seq', 'x', 'e'] + [f'c{j}' for j in range(n)] + ['d'])}) FROM STDIN"

        def careful() -> str:
            """COPY text built value by value (e.g. ``3.0`` in an integer column becomes ``3``)."""
            kc = [copy_converter(c.kind) for c in model.keys]
            vc = [copy_converter(c.kind) for c in model.values]
            lines = ["\t".join([str(seq + i), "t" if dele else "f", "t" if ex else "f", *[c(v) for c, v in zip(kc, key)],
                                *["\\N" if v is None else c(v) for c, v in zip(vc, vals)],
                                dumps_doc(doc).replace("\\", "\\\\")])
                     for i, (key, vals, doc, dele, ex)
                     in enumerate(zip(msg.keys, values, msg.docs, msg.deletes, msg.exists))]
            lines.append("")
            return "\n".join(lines)

        def stage(write_into: Callable[[Any], None]) -> None:
            with con.transaction():
                self._same_backend()
                if create:
                    con.execute(create)
                elif stale:
                    con.execute(f"TRUNCATE {st}")
                with con.cursor() as cur, cur.copy(copy_sql) as copy:
                    write_into(copy)

        def fast(copy) -> None:
            write = copy.write_row
            for r in rows:
                write(r)

        def body() -> None:
            try:
                stage(fast)
            except (psycopg.DataError, psycopg.ProgrammingError):
                # a value psycopg cannot write as the column wants it: nothing was staged
                # (the transaction rolled back); stage the careful text instead
                try:
                    stage(lambda copy: copy.write(careful()))
                except psycopg.DataError as exc:
                    self._name_nul(model, msg.keys, msg.docs)
                    self._name_refused(model, msg.keys, exc)
                    raise

        self._run(body, f"store {model.display}")
        self._created.add(name)
        self._stale.discard(msg.binding)
        self._staged.add(msg.binding)

    def quarantine(self, msg: Quarantine) -> None:
        """Invalid documents for ``tidemark_quarantine``, written by this transaction's commit."""
        self._quarantine.extend(msg.rows)

    def start_commit(self, msg: StartCommit) -> StartedCommit:
        """Commit the transaction.

        Step 1: ``BEGIN``, and check that this is still Open's server process.
        Step 2: write the runtime checkpoint where the fence is still ours; none ⇒ FencedOff
        (this also locks the checkpoint row: a newer Open waits for this commit).
        Step 3: per staged binding: deletes, then the upsert (or the append, delta updates).
        Step 4: dead-letter rows.
        Step 5: ``COMMIT`` (the staging tables are emptied by the next Store, if any)."""
        con = self.con
        cp = msg.runtime_checkpoint
        ck = self.driver.ck

        def body() -> None:
            with con.transaction():  # Step 1 and Step 5
                self._same_backend()
                cur = con.execute(  # Step 2
                    f"UPDATE {ck} SET checkpoint = %s::jsonb WHERE materialization = %s AND key_begin = %s "
                    "AND key_end = %s AND fence = %s",
                    (dumps(cp), self.materialization, self.range.key_begin, self.range.key_end, self.fence),
                )
                if cur.rowcount != 1:
                    raise fenced_off(self.materialization, self.range, self.fence)
                for b in sorted(self._staged):  # Step 3
                    self._apply_staged(b)
                if self._quarantine:  # Step 4
                    with con.cursor() as c:
                        c.executemany(
                            f"INSERT INTO {self.driver.qt} (materialization, batch_id, location, key_json, reason, value) "
                            "VALUES (%s, %s, %s, %s, %s, %s)",
                            quarantine_rows(self.materialization, cp.get("batch_id"), self._quarantine),
                        )
                fault_point("before_endpoint_commit")

        self._run(body, f"commit {self.range.name}")
        fault_point("after_endpoint_commit")
        # The staging tables are emptied lazily, by the next Store of this session: most
        # sessions end here (one per shard and batch), and a TRUNCATE is a catalog change
        # with a WAL flush of its own.
        self._stale |= self._staged
        self._staged.clear()
        self._quarantine = []
        self._acknowledged = False
        self._seq = 0
        self._hashes.clear()
        self._dupes.clear()
        self._deletes.clear()
        self._updates.clear()
        return StartedCommit()

    def _apply_staged(self, binding: int) -> None:
        model = self.models[binding]
        st = f"pg_temp.{q(f'tidemark_stage_{binding}')}"
        n = len(model.keys)
        names = [c.name for c in model.columns] + [DOCUMENT_COLUMN]
        target = ", ".join(q(c) for c in names)
        sources = [f"c{j}" for j in range(len(model.columns))] + ["d"]
        source = ", ".join(sources)
        if model.delta:
            self.con.execute(f"INSERT INTO {model.ident} ({target}) SELECT {source} FROM {st} ORDER BY seq")
            return
        kc = ", ".join(f"c{j}" for j in range(n))
        if binding in self._dupes:  # a key stored twice: its last Store wins
            latest = f"(SELECT DISTINCT ON ({kc}) * FROM {st} ORDER BY {kc}, seq DESC) s"
        else:
            latest = f"{st} s"
        if binding in self._deletes:
            match = " AND ".join(f"t.{q(c.name)} = s.c{j}" for j, c in enumerate(model.keys))
            self.con.execute(f"DELETE FROM {model.ident} t USING {latest} WHERE s.x AND {match}")
        sets = ", ".join(f"{q(c)} = EXCLUDED.{q(c)}" for c in names[n:])
        keys = ", ".join(q(c.name) for c in model.keys)
        upsert = f"INSERT INTO {model.ident} ({target}) SELECT {source} FROM {latest} WHERE NOT s.x"
        updates = self._updates.get(binding, 0)
        if updates and binding not in self._dupes:
            # Keys that Load found are updated in place and the others inserted, as the Store
            # flags say: an UPDATE joined to the staging table is cheaper than an upsert that
            # first tries to insert every row.  The fence keeps other tidemark writers out of
            # this range; if a row was removed behind our back all the same (fewer rows
            # updated than staged), the upsert below writes every staged row again.
            match = " AND ".join(f"t.{q(c.name)} = s.c{j}" for j, c in enumerate(model.keys))
            assign = ", ".join(f"{q(c)} = s.{src}" for c, src in zip(names[n:], sources[n:]))
            cur = self.con.execute(f"UPDATE {model.ident} t SET {assign} FROM {latest} WHERE s.e AND NOT s.x AND {match}")
            if cur.rowcount == updates:
                upsert += " AND NOT s.e"
        self.con.execute(f"{upsert} ON CONFLICT ({keys}) DO UPDATE SET {sets}")

    def close(self) -> None:
        try:
            self.con.close()
        except psycopg.Error:
            pass
