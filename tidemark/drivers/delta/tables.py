"""Delta tables: Delta types, identifiers, app transactions, the staged rows as a stream."""

from __future__ import annotations

from typing import Any, Iterator, Optional

import pyarrow as pa
import pyarrow.dataset as pds
from deltalake import DeltaTable
from deltalake.exceptions import CommitFailedError

from tidemark.drivers.common.columns import (
    BOOLEAN,
    DECIMAL_PRECISION,
    INSTANT,
    INTEGER,
    NUMBER,
    base_kind,
    scale_of_kind,
)
from tidemark.errors import DriverError, EndpointUnavailable, TidemarkError
from tidemark.faults import fault_point

IN_LIST_MAX = 256  # Load chunks up to this size also push an IN list down

DELTA_TYPES = {INTEGER: "long", NUMBER: "double", BOOLEAN: "boolean", INSTANT: "timestamp"}  # others: string


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


def translate_error(exc: BaseException, where: str) -> TidemarkError:
    if isinstance(exc, TidemarkError):
        return exc
    if isinstance(exc, CommitFailedError):
        return EndpointUnavailable(f"Delta table {where}: concurrent commit: {exc}")
    if isinstance(exc, (OSError, pa.ArrowIOError)) and not isinstance(exc, FileNotFoundError):
        return EndpointUnavailable(f"Delta table {where}: {type(exc).__name__}: {exc}")
    return DriverError(f"Delta table {where}: {type(exc).__name__}: {exc}")


def app_id(materialization: str, checkpoint_id: Any) -> str:
    return f"tidemark/{materialization}/{checkpoint_id}"


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
