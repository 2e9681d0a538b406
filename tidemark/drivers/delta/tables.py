"""Delta tables: the binding's table model, Arrow/Delta types, identifiers, app transactions."""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from typing import Any, Iterator, Optional

import pyarrow as pa
import pyarrow.dataset as pds
from deltalake import DeltaTable
from deltalake.exceptions import CommitFailedError

from tidemark.drivers.common.columns import (  # noqa: F401  (re-exported)
    ARROW_TYPES,
    BOOLEAN,
    DECIMAL_PRECISION,
    DELETE_COLUMN,
    DOCUMENT_COLUMN,
    INTEGER,
    KEY_PROPERTY,
    MODE_PROPERTY,
    NUMBER,
    OWNER_PROPERTY,
    Column,
    arrow_type,
    base_kind,
    column,
    key_of,
    scale_of_kind,
    stages_of,
)
from tidemark.drivers.common.identity import PROPERTY as IDENTITY_PROPERTY
from tidemark.drivers.common.identity import parse_record
from tidemark.errors import DriverError, EndpointUnavailable, TidemarkError
from tidemark.faults import fault_point

IN_LIST_MAX = 256  # Load chunks up to this size also push an IN list down

DELTA_TYPES = {INTEGER: "long", NUMBER: "double", BOOLEAN: "boolean"}  # others: string


def delta_type(kind: str) -> str:
    scale = scale_of_kind(kind)
    if scale is not None:
        return f"decimal({DECIMAL_PRECISION},{scale})"
    return DELTA_TYPES.get(base_kind(kind), "string")


def ident(name: str) -> str:
    """A DataFusion SQL identifier (case-sensitive, ``"`` doubled)."""
    return '"' + str(name).replace('"', '""') + '"'


def sql_literal(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (int, float)):
        return repr(value)
    return "'" + str(value).replace("'", "''") + "'"


def is_uri(p: str) -> bool:
    return "://" in p


def join_path(root: str, name: str) -> str:
    return root.rstrip("/") + "/" + name if is_uri(root) else os.path.join(root, name)


def translate_error(exc: Exception, where: str) -> TidemarkError:
    if isinstance(exc, TidemarkError):
        return exc
    if isinstance(exc, CommitFailedError):
        return EndpointUnavailable(f"Delta table {where}: concurrent commit: {exc}")
    if isinstance(exc, (OSError, pa.ArrowIOError)) and not isinstance(exc, FileNotFoundError):
        return EndpointUnavailable(f"Delta table {where}: {type(exc).__name__}: {exc}")
    return DriverError(f"Delta table {where}: {type(exc).__name__}: {exc}")


@dataclass(frozen=True, slots=True)
class TableModel:
    """One binding's Delta table."""

    location: str
    keys: tuple[Column, ...]
    values: tuple[Column, ...]
    delta: bool

    @property
    def columns(self) -> tuple[Column, ...]:
        return self.keys + self.values

    def arrow_schema(self) -> pa.Schema:
        """The table's schema (keys not null, the document not null)."""
        fields = [pa.field(c.name, arrow_type(c.kind), nullable=not c.is_key) for c in self.columns]
        return pa.schema(fields + [pa.field(DOCUMENT_COLUMN, pa.string(), nullable=False)])

    def staged_schema(self) -> pa.Schema:
        fields = [pa.field(c.name, arrow_type(c.kind)) for c in self.columns]
        return pa.schema(fields + [pa.field(DOCUMENT_COLUMN, pa.string()), pa.field(DELETE_COLUMN, pa.bool_())])


def app_id(materialization: str, checkpoint_id: Any) -> str:
    return f"tidemark/{materialization}/{checkpoint_id}"


def owner_of(dt: DeltaTable) -> Optional[tuple[str, str]]:
    """(materialization, checkpoint id) of the table's owner property, or None."""
    text = (dt.metadata().configuration or {}).get(OWNER_PROPERTY)
    if not text:
        return None
    try:
        obj = json.loads(text)
        return str(obj["materialization"]), str(obj["checkpoint_id"])
    except (ValueError, KeyError, TypeError):
        return None


def identity_of(dt: DeltaTable) -> Optional[dict]:
    """The table's view-identity record, or None."""
    return parse_record((dt.metadata().configuration or {}).get(IDENTITY_PROPERTY))


def applied_batch(dt: DeltaTable, app: str) -> int:
    """The last batch of ``app`` committed to the table, or -1."""
    v = dt.transaction_version(app)
    return -1 if v is None else int(v)


def staged_reader(
    source: pds.Dataset, drop: Optional[str] = None, like: Optional[pa.Schema] = None
) -> pa.RecordBatchReader:
    """The staged rows as a stream; the ``mid_apply`` fault point fires while delta-rs reads it.
    ``like``: the table's schema, whose column types the rows take (an exact decimal staged for
    a table whose column is a double, as tidemark made them before 2026-11-28)."""
    schema = source.schema if drop is None else pa.schema([f for f in source.schema if f.name != drop])
    if like is not None:
        schema = pa.schema([f.with_type(like.field(f.name).type) if f.name in like.names else f for f in schema])

    def batches() -> Iterator[pa.RecordBatch]:
        for i, batch in enumerate(source.to_batches()):
            if drop is not None:
                batch = batch.drop_columns([drop])
            if like is not None:
                batch = batch.cast(schema)
            yield batch
            if i == 0:
                fault_point("mid_apply")

    return pa.RecordBatchReader.from_batches(schema, batches())
