"""PostgreSQL settings: the config (URL and/or fields, TLS, retry, fillfactor) parsed into
a conninfo string and what messages may show, and psycopg errors as tidemark's."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, cast

import psycopg
from psycopg import conninfo as pg_conninfo
from psycopg import errors as pg_errors

from tidemark.drivers.common.redact import redact
from tidemark.drivers.common.settings import Setting, read
from tidemark.drivers.postgres.dialect import check_name_length
from tidemark.drivers.sql.connection import connection_settings
from tidemark.errors import (
    AuthenticationFailed,
    DriverError,
    EndpointRefused,
    EndpointUnavailable,
    SpecError,
    TidemarkError,
)
from tidemark.policy import RetryPolicy

SSL_MODES = ("disable", "allow", "prefer", "require", "verify-ca", "verify-full")
# Free space left in each page of a view table so that updates stay on their page (HOT:
# no new index entry, old versions pruned in place).  Measured in docs/benchmarks.md.
DEFAULT_FILLFACTOR = 70
SETTINGS = (
    *connection_settings("postgresql://user@host:port/database"),
    Setting("schema", default="public", description="the schema of the view tables and tidemark's own"),
    Setting("sslmode", choices=SSL_MODES),
    Setting("sslrootcert"),
    Setting("sslcert"),
    Setting("sslkey"),
    Setting("application_name", default="tidemark"),
    Setting("retry", "retry"),
    Setting(
        "fillfactor",
        "integer",
        default=DEFAULT_FILLFACTOR,
        minimum=10,
        maximum=100,
        description="percent of each page of a view table to fill",
    ),
)
_AUTH_HINTS = (
    "password authentication failed",
    "authentication failed",
    "no pg_hba.conf entry",
    "pg_hba.conf rejects",
    "no password supplied",
    "password is required",
    "permission denied for database",
    'role "',
)
# libpq reports TLS misconfiguration without a SQLSTATE: a terminal error, not "unreachable"
_TLS_HINTS = (
    "does not support ssl",
    "certificate",
    "private key",
    "invalid sslmode",
    "sslcert",
    "sslkey",
    "sslrootcert",
)


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
    def from_config(config: dict) -> "PgSettings":
        v = read("postgres", config, SETTINGS)
        fields = {
            k: str(v[k])
            for k in ("host", "port", "user", "password", "sslmode", "sslrootcert", "sslcert", "sslkey")
            if v[k] is not None
        }
        if v["database"] is not None:
            fields["dbname"] = v["database"]
        fields["application_name"] = v["application_name"]
        url = v["url"] or ""
        secrets = tuple(s for s in (fields.get("password"),) if s)
        try:
            conninfo = pg_conninfo.make_conninfo(url, **fields)
            params = pg_conninfo.conninfo_to_dict(conninfo)
        except psycopg.ProgrammingError as exc:
            raise SpecError("postgres: invalid url or connection settings: " + redact(exc, secrets)) from None
        secrets += tuple(cast(str, s) for s in (params.get("password"),) if s)  # parsed from the conninfo text
        schema = v["schema"] or "public"
        check_name_length("postgres", "schema", schema)
        return PgSettings(
            conninfo=conninfo,
            schema=schema,
            host=str(params.get("host") or "localhost"),
            port=str(params.get("port") or "5432"),
            database=str(params.get("dbname") or params.get("user") or ""),
            user=str(params.get("user") or ""),
            secrets=secrets,
            policy=v["retry"],
            fillfactor=v["fillfactor"],
        )


def parse_fillfactor(value: Any, where: str) -> int:
    """A table fillfactor: an integer percentage from 10 to 100 (PostgreSQL's range)."""
    if (
        isinstance(value, bool)
        or not isinstance(value, (int, str))
        or not str(value).strip().isdecimal()
        or not 10 <= int(value) <= 100
    ):
        raise SpecError(f"{where} must be an integer from 10 to 100 (percent of each page to fill), got {value!r}")
    return int(value)


def translate(exc: BaseException, s: PgSettings, what: str) -> TidemarkError:
    """A psycopg error as a tidemark error, its text redacted."""
    text = redact(exc, s.secrets).strip()
    if isinstance(exc, (pg_errors.InvalidPassword, pg_errors.InvalidAuthorizationSpecification)):
        return AuthenticationFailed(f"PostgreSQL at {s.where} refused user {s.user!r}: {text}")
    if isinstance(
        exc,
        (
            pg_errors.SerializationFailure,
            pg_errors.DeadlockDetected,
            pg_errors.LockNotAvailable,
            pg_errors.QueryCanceled,
            pg_errors.AdminShutdown,
            pg_errors.CannotConnectNow,
        ),
    ):
        return EndpointUnavailable(f"PostgreSQL at {s.where}: {what}: transient {type(exc).__name__}: {text}")
    if (getattr(exc, "sqlstate", None) or "").startswith(
        "54"
    ):  # program_limit_exceeded: a limit, not a passing failure
        return EndpointRefused(f"PostgreSQL at {s.where}: {what}: beyond a limit of PostgreSQL: {text}")
    if isinstance(exc, psycopg.OperationalError):
        low = text.lower()
        if exc.sqlstate is None and any(h in low for h in _AUTH_HINTS):  # libpq reports these without a code
            return AuthenticationFailed(f"PostgreSQL at {s.where} refused user {s.user!r}: {text}")
        if exc.sqlstate is None and 'database "' in low and "does not exist" in low:
            return DriverError(f"PostgreSQL at {s.host}:{s.port}: database {s.database!r} does not exist")
        if exc.sqlstate is None and any(h in low for h in _TLS_HINTS):
            return DriverError(
                f"PostgreSQL at {s.host}:{s.port}: TLS settings refused ({what}): {text} "
                "(check sslmode, sslrootcert, sslcert and sslkey)"
            )
        if exc.sqlstate is None:
            return EndpointUnavailable(f"PostgreSQL at {s.host}:{s.port} is unreachable ({what}): {text}")
        return EndpointUnavailable(f"PostgreSQL at {s.where}: {what}: {text}")
    return DriverError(f"PostgreSQL at {s.where}: {what}: {type(exc).__name__}: {text}")
