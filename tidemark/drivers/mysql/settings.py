"""MySQL settings: the config (URL and/or fields, retry, bulk mode) parsed into connection
arguments and what messages may show, and PyMySQL errors as tidemark's."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Optional
from urllib.parse import parse_qsl, unquote, urlsplit

from tidemark.drivers.common.redact import redact
from tidemark.drivers.common.settings import Setting, read
from tidemark.drivers.mysql.dialect import MAX_IDENTIFIER_CHARS
from tidemark.drivers.sql.connection import connection_settings
from tidemark.errors import AuthenticationFailed, DriverError, EndpointUnavailable, SpecError, TidemarkError
from tidemark.policy import RetryPolicy

SCHEMES = ("mysql", "mariadb")
BULK_MODES = ("infile", "insert")  # Store and Load: LOAD DATA LOCAL INFILE, or multi-row INSERT statements
SETTINGS = (
    *connection_settings("mysql://user@host:3306/database[?ssl_ca=PATH]"),
    Setting("schema", description="the database of the view tables and tidemark's own (default: database)"),
    Setting("bulk", default="infile", choices=BULK_MODES, description="LOAD DATA LOCAL INFILE, or multi-row INSERTs"),
    Setting("ssl_ca", description="a CA certificate file: connect with TLS"),
    Setting("retry", "retry"),
)

# Server error codes (https://mariadb.com/kb/en/mariadb-error-codes/)
AUTH_CODES = {1044, 1045, 1698, 1251}  # access denied (to the database), auth plugin
UNREACHABLE_CODES = {2002, 2003, 2005, 2006, 2013, 2055}  # client: no server, gone, lost
TRANSIENT_CODES = {1040, 1053, 1205, 1213, 1290, 1927, 1317, 3024, 4031}  # too many connections, shutdown,
# lock wait timeout, deadlock, read-only (fail-over), connection killed, query interrupted, timeout, idle kill
LOST_CODES = {2006, 2013, 2055, 1927, 4031, 1053}  # the session (and its temp tables) is gone


@dataclass(frozen=True)
class MySqlSettings:
    """The parsed config: PyMySQL's connect arguments (with the password) and what messages may show."""

    host: str
    port: int
    user: str
    database: str  # the connection's database (temp tables live there)
    schema: str  # where tidemark's tables and the views live (a database; default: ``database``)
    bulk: str
    policy: RetryPolicy
    secrets: tuple[str, ...] = field(default=(), repr=False)
    password: str = field(default="", repr=False)
    ssl_ca: Optional[str] = None

    def __repr__(self) -> str:
        return (
            f"MySqlSettings(host={self.host!r}, port={self.port}, database={self.database!r}, "
            f"user={self.user!r}, schema={self.schema!r}, bulk={self.bulk!r})"
        )

    @property
    def where(self) -> str:
        return f"{self.host}:{self.port}/{self.database}"

    def connect_args(self) -> dict[str, Any]:
        args: dict[str, Any] = dict(
            host=self.host,
            port=self.port,
            user=self.user,
            password=self.password,
            database=self.database,
            charset="utf8mb4",
            autocommit=True,
            connect_timeout=max(1, int(self.policy.connect_timeout)),
            local_infile=self.bulk == "infile",
        )
        if self.ssl_ca:
            args["ssl"] = {"ca": self.ssl_ca}
        return args

    @staticmethod
    def from_config(config: dict) -> "MySqlSettings":
        v = read("mysql", config, SETTINGS)
        policy = v["retry"]
        fields: dict[str, Any] = {}
        url = v["url"]
        if url:
            try:
                parts = urlsplit(str(url))
                port = parts.port
            except ValueError as exc:
                raise SpecError(f"mysql: invalid url: {redact(exc)}") from None
            if parts.scheme not in SCHEMES:
                raise SpecError(
                    f"mysql: url must start with mysql:// (e.g. mysql://user@host:3306/db), got scheme {parts.scheme!r}"
                )
            fields.update(
                host=parts.hostname,
                port=port,
                user=unquote(parts.username or "") or None,
                password=unquote(parts.password) if parts.password is not None else None,
                database=unquote(parts.path.lstrip("/")) or None,
            )
            query = dict(parse_qsl(parts.query))
            if query.get("ssl_ca"):
                fields["ssl_ca"] = query["ssl_ca"]
        for k in ("host", "port", "user", "password", "database", "ssl_ca"):
            if v[k] is not None:
                fields[k] = v[k]
        password = str(fields.get("password") or "")
        secrets = (password,) if password else ()
        port = int(fields.get("port") or 3306)
        database = str(fields.get("database") or "")
        schema = str(v["schema"] or database)
        if not database:
            raise SpecError("mysql: no database: give it in the url (mysql://user@host:3306/DATABASE) or as database")
        for what, name in (("database", database), ("schema", schema)):
            if len(name) > MAX_IDENTIFIER_CHARS:
                raise SpecError(
                    f"mysql: {what} name {name!r} is {len(name)} characters; MySQL allows "
                    f"{MAX_IDENTIFIER_CHARS}. Choose a shorter one."
                )
        bulk = v["bulk"]
        return MySqlSettings(
            host=str(fields.get("host") or "localhost"),
            port=port,
            user=str(fields.get("user") or "root"),
            database=database,
            schema=schema,
            bulk=bulk,
            policy=policy,
            secrets=secrets,
            password=password,
            ssl_ca=str(fields["ssl_ca"]) if fields.get("ssl_ca") else None,
        )


def error_code(exc: BaseException) -> Optional[int]:
    args = getattr(exc, "args", ())
    return args[0] if args and isinstance(args[0], int) else None


def is_lost(exc: BaseException) -> bool:
    """The error ended the session: its temp tables are gone with it."""
    return error_code(exc) in LOST_CODES


def translate(exc: BaseException, s: MySqlSettings, what: str) -> TidemarkError:
    """A PyMySQL error as a tidemark error, its text redacted."""
    code = error_code(exc)
    args: tuple[Any, ...] = getattr(exc, "args", ())
    text = redact(args[1] if len(args) > 1 else exc, s.secrets).strip()
    if code in AUTH_CODES:
        return AuthenticationFailed(f"MySQL at {s.where} refused user {s.user!r} ({code}): {text}")
    if code in UNREACHABLE_CODES:
        return EndpointUnavailable(f"MySQL at {s.host}:{s.port} is unreachable ({what}; {code}): {text}")
    if code in TRANSIENT_CODES:
        return EndpointUnavailable(f"MySQL at {s.where}: {what}: transient error {code}: {text}")
    if code == 1049:
        return DriverError(
            f"MySQL at {s.host}:{s.port}: database {s.database!r} does not exist: create it "
            f"(CREATE DATABASE `{s.database}`) or name another in the url"
        )
    if code == 1665:
        return DriverError(
            f"MySQL at {s.where}: {what}: the server logs statements (binlog_format = STATEMENT), "
            "which cannot log READ COMMITTED writes; set binlog_format = ROW or MIXED"
        )
    if code in (1148, 2068, 3948, 3950):
        return DriverError(
            f"MySQL at {s.where}: {what}: the server refuses LOAD DATA LOCAL INFILE ({code}: {text}); "
            "set local_infile=ON on the server, or bulk: insert in the endpoint config"
        )
    return DriverError(f"MySQL at {s.where}: {what}: {type(exc).__name__} {code or ''}: {text}".replace(" :", ":"))
