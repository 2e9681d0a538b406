"""Iceberg tables: types, schema and partitioning of a binding's table, the batch applied per
materialization (a table property and snapshot summaries), error translation."""

from __future__ import annotations

from typing import Any, Iterable, Optional

import pyarrow as pa
from pyiceberg.exceptions import CommitFailedException
from pyiceberg.schema import Schema
from pyiceberg.types import (
    BooleanType,
    DecimalType,
    DoubleType,
    IcebergType,
    LongType,
    NestedField,
    StringType,
    TimestamptzType,
)

from tidemark.drivers.common.columns import (
    BOOLEAN,
    DECIMAL_PRECISION,
    DOCUMENT_COLUMN,
    INSTANT,
    INTEGER,
    NUMBER,
    base_kind,
    dumps,
    scale_of_kind,
)
from tidemark.drivers.common.redact import redact
from tidemark.drivers.lake.model import LakeTable, json_property
from tidemark.errors import DriverError, EndpointUnavailable, TidemarkError

RETRIES_PROPERTY = "commit.retry.num-retries"  # pyiceberg's automatic commit retries: kept at 0
# snapshot summary properties of every apply
SUMMARY_MATERIALIZATION, SUMMARY_CHECKPOINT, SUMMARY_BATCH = (
    "tidemark.materialization",
    "tidemark.checkpoint-id",
    "tidemark.batch",
)

ICEBERG_TYPES: dict[str, IcebergType] = {
    INTEGER: LongType(),
    NUMBER: DoubleType(),
    BOOLEAN: BooleanType(),
    INSTANT: TimestamptzType(),
}


def iceberg_type(kind: str) -> IcebergType:
    scale = scale_of_kind(kind)
    if scale is not None:
        return DecimalType(DECIMAL_PRECISION, scale)
    return ICEBERG_TYPES.get(base_kind(kind), StringType())


def remade(have: IcebergType, want: IcebergType) -> bool:
    """Whether a cut-over makes a column anew, with a new field id (earlier snapshots read their
    own): a date-time between its text (a table made before timestamp columns) and its instant."""
    return {type(have), type(want)} == {StringType, TimestamptzType}


def applied_property(materialization: str) -> str:
    """The table property recording the last batch of ``materialization`` applied to it."""
    return f"tidemark.{materialization}.applied"


def table_schema(model: LakeTable) -> Schema:
    """The table's schema: keys required (and the identifier fields of a standard table), one
    optional typed column per value, the document required (optional in a lean table)."""
    fields = [NestedField(i + 1, c.name, iceberg_type(c.kind), required=c.is_key) for i, c in enumerate(model.columns)]
    fields.append(NestedField(len(fields) + 1, DOCUMENT_COLUMN, StringType(), required=not model.lean))
    ids = [] if model.delta else list(range(1, len(model.keys) + 1))
    return Schema(*fields, identifier_field_ids=ids)


def partition_spec(model: LakeTable):
    """The table's partitioning: unpartitioned, or identity partitions of one column."""
    from pyiceberg.partitioning import UNPARTITIONED_PARTITION_SPEC, PartitionField, PartitionSpec
    from pyiceberg.transforms import IdentityTransform

    if model.partition_by is None:
        return UNPARTITIONED_PARTITION_SPEC
    source = 1 + [c.name for c in model.columns].index(model.partition_by)
    return PartitionSpec(
        PartitionField(source_id=source, field_id=1000, transform=IdentityTransform(), name=model.partition_by)
    )


def applied_batch(properties: dict, materialization: str, checkpoint_id: Any) -> int:
    """The last batch of (materialization, checkpoint) applied to the table, or -1 (none, or
    another checkpoint's: batch ids restart at 0 with a new checkpoint)."""
    obj = json_property(properties, applied_property(materialization))
    if not obj or str(obj.get("checkpoint_id")) != str(checkpoint_id):
        return -1
    batch = obj.get("batch")
    return batch if isinstance(batch, int) else -1


def snapshot_batch(table, materialization: str, checkpoint_id: Any) -> Optional[int]:
    """The batch in the summary of the newest snapshot of the table's history (current
    snapshot, then its parents) that ``materialization`` wrote: -1 if that was another
    checkpoint, None if there is none (never written, or expired)."""
    snap = table.current_snapshot()
    while snap is not None:
        summary = snap.summary
        if summary is not None and summary[SUMMARY_MATERIALIZATION] == materialization:
            if summary[SUMMARY_CHECKPOINT] != str(checkpoint_id):
                return -1
            try:
                return int(summary[SUMMARY_BATCH])
            except (TypeError, ValueError):
                return -1
        parent = snap.parent_snapshot_id
        snap = table.snapshot_by_id(parent) if parent is not None else None
    return None


def table_batch(table, materialization: str, checkpoint_id: Any) -> int:
    """The last batch of (materialization, checkpoint) the table holds: its ``applied``
    property, unless the data say less -- a table rolled back to an older snapshot keeps its
    properties, but its current snapshot's history ends at an older batch."""
    have = applied_batch(table.properties, materialization, checkpoint_id)
    data = snapshot_batch(table, materialization, checkpoint_id)
    return have if data is None else min(have, data)


def snapshot_summary(materialization: str, checkpoint_id: Any, batch: int) -> dict[str, str]:
    """What every apply's snapshot summary says: materialization, checkpoint id and batch."""
    return {SUMMARY_MATERIALIZATION: materialization, SUMMARY_CHECKPOINT: str(checkpoint_id), SUMMARY_BATCH: str(batch)}


def applied_text(checkpoint_id: Any, batch: int) -> str:
    return dumps({"checkpoint_id": str(checkpoint_id), "batch": int(batch)})


def translate_error(exc: BaseException, where: str, secrets: Iterable[Optional[str]] = ()) -> TidemarkError:
    """A library error as tidemark's, its message without passwords.  A lost compare-and-swap
    (``CommitFailedException``) is transient: the caller reloads the table and checks again."""
    if isinstance(exc, TidemarkError):
        return exc
    text = redact(f"{type(exc).__name__}: {exc}", secrets)
    if isinstance(exc, CommitFailedException):
        return EndpointUnavailable(f"Iceberg table {where}: concurrent commit: {text}")
    try:
        from sqlalchemy.exc import DBAPIError, OperationalError
    except ImportError:  # pragma: no cover - sqlalchemy comes with pyiceberg[sql-sqlite]
        DBAPIError = OperationalError = ()  # type: ignore[assignment,misc]
    if isinstance(exc, OperationalError) or (isinstance(exc, DBAPIError) and exc.connection_invalidated):
        return EndpointUnavailable(f"Iceberg catalog ({where}): {text}")
    if isinstance(exc, (OSError, pa.ArrowIOError)) and not isinstance(exc, FileNotFoundError):
        return EndpointUnavailable(f"Iceberg table {where}: {text}")
    return DriverError(f"Iceberg table {where}: {text}")
