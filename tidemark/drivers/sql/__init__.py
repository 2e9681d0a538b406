"""The SQL skeleton: what every store-authoritative SQL endpoint shares, written once.

* :mod:`~tidemark.drivers.sql.model` — column kinds, the table of a binding
  (:class:`TableModel`), schema checks, value coercion, quarantine rows;
* :mod:`~tidemark.drivers.common.fences` — the fenced checkpoints' Open rule (:func:`plan_open`);
* :mod:`~tidemark.drivers.sql.dialect` — :class:`Dialect`: placeholders, identifiers and
  their limits, types, upserts, DDL, catalogs;
* :mod:`~tidemark.drivers.sql.driver` — :class:`SqlDriver`: own tables, Validate, Apply,
  Open, dump, checkpoints, positions, drop;
* :mod:`~tidemark.drivers.sql.transactor` — :class:`SqlTransactor`: Load, Store,
  quarantine and the commit (steps 1-5), one class for every SQL endpoint;
* :mod:`~tidemark.drivers.sql.writer` — :class:`RowWriter`: how rows reach a session's temp
  tables (an endpoint's bulk path is a subclass);
* :mod:`~tidemark.drivers.common.redact` — passwords out of messages.

An endpoint adds a dialect, its connection code and, for a bulk path, a row writer
(``drivers/sqlite/driver.py``, ``drivers/postgres/``); ``docs/dev/sql-skeleton.md`` says
what exactly.
"""

from tidemark.drivers.common.fences import (
    CheckpointState,
    OpenPlan,
    fenced_off,
    identity,
    load_checkpoint,
    plan_open,
)
from tidemark.drivers.common.redact import REDACTED, redact
from tidemark.drivers.sql.dialect import Dialect
from tidemark.drivers.sql.driver import SqlDriver, sql_capabilities
from tidemark.drivers.sql.model import (
    BOOLEAN,
    CHECKPOINTS_TABLE,
    DOCUMENT_COLUMN,
    INTEGER,
    JSON,
    NUMBER,
    QUARANTINE_TABLE,
    RESOURCES_TABLE,
    ROW_ID_COLUMN,
    TEXT,
    TIMESTAMP,
    Column,
    TableModel,
    check_columns,
    coerce,
    dumps,
    field_kind,
    quarantine_rows,
    quote_ident,
)
from tidemark.drivers.sql.plan import TablePlan, check_identifier
from tidemark.drivers.sql.transactor import SqlTransactor

__all__ = [
    "BOOLEAN",
    "CHECKPOINTS_TABLE",
    "DOCUMENT_COLUMN",
    "INTEGER",
    "JSON",
    "NUMBER",
    "QUARANTINE_TABLE",
    "RESOURCES_TABLE",
    "REDACTED",
    "ROW_ID_COLUMN",
    "TEXT",
    "TIMESTAMP",
    "CheckpointState",
    "Column",
    "Dialect",
    "OpenPlan",
    "SqlDriver",
    "SqlTransactor",
    "TableModel",
    "TablePlan",
    "check_columns",
    "check_identifier",
    "coerce",
    "dumps",
    "fenced_off",
    "field_kind",
    "identity",
    "load_checkpoint",
    "plan_open",
    "quarantine_rows",
    "quote_ident",
    "redact",
    "sql_capabilities",
]
