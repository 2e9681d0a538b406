"""PostgreSQL: a store-authoritative endpoint over psycopg 3, on the SQL skeleton.

Config: ``{url: "postgresql://user@host:5432/db"}`` and/or the fields ``host, port,
user, password, database, schema (default public), sslmode, sslrootcert, sslcert,
sslkey, application_name, fillfactor``, plus ``retry: {...}``
(:class:`~tidemark.policy.RetryPolicy`; ``connect_timeout`` and ``lock_timeout`` live
there).  Fields override the URL.  Resource: ``{table: NAME}`` (optionally ``schema:
NAME``, ``fillfactor: N``).

Passwords are never printed: ``repr``, errors and log lines are redacted, and library
errors are translated with ``from None`` so their text cannot leak a connection string.

The modules: :mod:`.settings` (config, TLS, error translation), :mod:`.dialect` (types,
identifiers, catalogs), :mod:`.copytext` (COPY encoding), :mod:`.ddl` (the migrations: fillfactor,
widening), :mod:`.copy` (the session's COPY row writer) and :mod:`.driver` (the client:
connections, the pooler check; the endpoint's parts).  Fencing, checkpoints, Apply, the commit steps
and the inspection calls are the skeleton's (:mod:`tidemark.drivers.sql`).
"""

try:
    import psycopg
except ImportError as exc:  # pragma: no cover - the registry turns this into a fix
    raise ImportError(
        "psycopg is required for the postgres driver: pip install 'tidemark[postgres]'", name="psycopg"
    ) from exc
del psycopg  # the modules below import it themselves

from tidemark.drivers.postgres.copy import CopyWriter, backend_pid
from tidemark.drivers.postgres.copytext import copy_converter, copy_text, nul_path
from tidemark.drivers.postgres.ddl import recompute_sql
from tidemark.drivers.postgres.dialect import (
    DIALECT,
    MAX_IDENTIFIER_BYTES,
    SQL_TYPES,
    PostgresDialect,
    check_name_length,
    sql_type,
    too_long,
    widens,
)
from tidemark.drivers.postgres.driver import PostgresClient, PostgresDriver
from tidemark.drivers.postgres.settings import (
    DEFAULT_FILLFACTOR,
    SETTINGS,
    SSL_MODES,
    PgSettings,
    parse_fillfactor,
    translate,
)

__all__ = [
    "PostgresClient",
    "SETTINGS",
    "DEFAULT_FILLFACTOR",
    "DIALECT",
    "MAX_IDENTIFIER_BYTES",
    "SQL_TYPES",
    "SSL_MODES",
    "PgSettings",
    "PostgresDialect",
    "PostgresDriver",
    "CopyWriter",
    "backend_pid",
    "check_name_length",
    "copy_converter",
    "copy_text",
    "nul_path",
    "parse_fillfactor",
    "recompute_sql",
    "sql_type",
    "too_long",
    "translate",
    "widens",
]
