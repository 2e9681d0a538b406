"""The Delta dead-letter table: ``PATH/tidemark_quarantine``, one row per invalid document.

Columns as the SQL endpoints' ``tidemark_quarantine``: ``materialization``, ``batch_id``,
``location`` (file:line), ``key_json``, ``reason``, ``value`` (the line as read).  One table
serves every materialization of the endpoint.

Exactly once, as the data: the shard that receives ``Quarantine`` writes the rows into a
staged Parquet file at StartCommit and names it in its stage (``"quarantine": [[FILE,
ROWS]]``); the coordinator apply appends the batch's files to the table in one commit
carrying the app transaction ``(APP_ID, N)``, and skips the table when it is already at
``>= N`` -- so a re-run of the apply neither writes the rows twice nor loses them.
"""

from __future__ import annotations

from typing import Iterable

import pyarrow as pa
import pyarrow.dataset as pds
import pyarrow.fs as pafs
import pyarrow.parquet as pq
from deltalake import CommitProperties, DeltaTable, Transaction, write_deltalake
from deltalake.exceptions import TableNotFoundError

from tidemark.drivers.base import Driver  # the DeltaDriver
from tidemark.drivers.common.columns import QUARANTINE_TABLE, quarantine_rows
from tidemark.drivers.delta.tables import applied_batch, ident, sql_literal, staged_reader
from tidemark.errors import RecoveryError

COLUMNS = ("materialization", "batch_id", "location", "key_json", "reason", "value")
SCHEMA = pa.schema(
    [
        pa.field("materialization", pa.string(), nullable=False),
        pa.field("batch_id", pa.int64()),
        pa.field("location", pa.string()),
        pa.field("key_json", pa.string()),
        pa.field("reason", pa.string(), nullable=False),
        pa.field("value", pa.string()),
    ]
)
TABLE_PROPERTY = "tidemark.quarantine"  # marks the table as tidemark's dead-letter table

__all__ = [
    "COLUMNS",
    "QUARANTINE_TABLE",
    "SCHEMA",
    "apply_quarantine",
    "drop_quarantine",
    "read_quarantine",
    "stage_quarantine",
]


def stage_quarantine(fs: pafs.FileSystem, path: str, materialization: str, batch_id: int, rows: Iterable[dict]) -> int:
    """Write the invalid documents of one transaction to the staged file ``path``; the row count."""
    tuples = quarantine_rows(materialization, batch_id, rows)
    table = pa.Table.from_pylist([dict(zip(COLUMNS, t)) for t in tuples], schema=SCHEMA)
    with fs.open_output_stream(path) as stream:
        pq.write_table(table, stream, compression="snappy")
    return table.num_rows


def apply_quarantine(driver: Driver, names: list[str], app: str, batch: int) -> None:
    """Append batch ``batch``'s staged quarantine files once (the app transaction ``(app, batch)``)."""
    location = driver.quarantine_location
    DeltaTable.create(
        location,
        schema=SCHEMA,
        mode="ignore",
        configuration={TABLE_PROPERTY: "true"},
        storage_options=driver.storage_options,
        raise_if_key_not_exists=False,
    )
    dt = driver.table(location)
    if applied_batch(dt, app) >= batch:  # Step 1, as for the data tables
        return
    fs, base = driver.fs
    paths = [f"{base.rstrip('/')}/{n}" for n in names]
    lost = [p for p, info in zip(paths, fs.get_file_info(paths)) if info.type != pafs.FileType.File]
    if lost:
        raise RecoveryError(
            f"Delta quarantine table {location!r}: batch {batch} is in the recovery log but its "
            f"invalid documents are not applied, and their staged files are gone: {lost}"
        )
    source = pds.dataset(paths, format="parquet", filesystem=fs, schema=SCHEMA)
    write_deltalake(
        dt,
        staged_reader(source),
        mode="append",
        storage_options=driver.storage_options,
        commit_properties=CommitProperties(app_transactions=[Transaction(app, batch)]),
    )


def read_quarantine(driver: Driver, materialization: str) -> list[dict]:
    """The quarantined rows of a materialization, by batch and location (tests, inspection)."""
    try:
        dt = driver.table(driver.quarantine_location)
    except TableNotFoundError:
        return []
    table = dt.to_pyarrow_table(columns=list(COLUMNS))
    rows = [r for r in table.to_pylist() if r["materialization"] == materialization]
    return sorted(rows, key=lambda r: (r["batch_id"] if r["batch_id"] is not None else -1, r["location"] or ""))


def drop_quarantine(driver: Driver, materialization: str) -> int:
    """Delete the materialization's rows from the quarantine table; how many."""
    try:
        dt = driver.table(driver.quarantine_location)
    except TableNotFoundError:
        return 0
    metrics = dt.delete(f"{ident('materialization')} = {sql_literal(materialization)}")
    return int(metrics.get("num_deleted_rows") or 0)
