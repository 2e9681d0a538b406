"""MySQL and MariaDB: a store-authoritative endpoint over PyMySQL, on the SQL skeleton.

Config: ``{url: "mysql://user:password@host:3306/database"}`` and/or the fields ``host,
port, user, password, database, schema`` (the database of the views and tidemark's own
tables; default: the connection's), ``bulk`` (``infile``: ``LOAD DATA LOCAL INFILE``, the
default; ``insert``: multi-row statements), ``ssl_ca``, plus ``retry: {...}``
(:class:`~tidemark.policy.RetryPolicy`; ``connect_timeout`` and ``lock_timeout`` live
there).  Fields override the URL.  Resource: ``{table: NAME}`` (optionally ``schema: DATABASE``).

The modules: :mod:`.settings` (config, error translation), :mod:`.dialect` (types,
identifiers, collations, catalogs), :mod:`.bulk` (the row writer: bulk Load and
Store) and :mod:`.driver` (connections, Apply hooks).  Fencing, checkpoints, Apply, the
commit steps and the inspection calls are the skeleton's (:mod:`tidemark.drivers.sql`).
"""

try:
    import pymysql
except ImportError as exc:  # pragma: no cover - the registry turns this into a fix
    raise ImportError(
        "PyMySQL is required for the mysql driver: pip install 'tidemark[mysql]'", name="pymysql"
    ) from exc
del pymysql  # the modules below import it themselves

from tidemark.drivers.mysql.bulk import BulkWriter
from tidemark.drivers.mysql.dialect import (
    KEY_CHARS,
    MARIADB,
    MAX_IDENTIFIER_CHARS,
    MYSQL,
    SQL_TYPES,
    MySqlDialect,
    dialect_for,
)
from tidemark.drivers.mysql.driver import MySqlClient, MySqlDriver
from tidemark.drivers.mysql.settings import BULK_MODES, SETTINGS, MySqlSettings, translate

__all__ = [
    "BULK_MODES",
    "MySqlClient",
    "SETTINGS",
    "KEY_CHARS",
    "MARIADB",
    "MAX_IDENTIFIER_CHARS",
    "MYSQL",
    "SQL_TYPES",
    "MySqlDialect",
    "MySqlDriver",
    "MySqlSettings",
    "BulkWriter",
    "dialect_for",
    "translate",
]
