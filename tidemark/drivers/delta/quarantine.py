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

from typing import Any, Optional, Protocol

import pyarrow.dataset as pds
from deltalake import CommitProperties, DeltaTable, Transaction, write_deltalake
from deltalake.exceptions import TableNotFoundError

from tidemark.drivers.common.columns import QUARANTINE_TABLE
from tidemark.drivers.delta.tables import applied_batch, ident, sql_literal, staged_reader
from tidemark.drivers.lake.quarantine import COLUMNS, SCHEMA


class QuarantineHost(Protocol):
    """What the quarantine table's functions use of the Delta driver."""

    quarantine_location: str
    storage_options: Optional[dict]

    @property
    def fs(self) -> tuple[Any, str]: ...

    def table(self, location: str) -> DeltaTable: ...

    def staged_paths(self, where: str, names: list[str], batch: int) -> list[str]: ...


TABLE_PROPERTY = "tidemark.quarantine"  # marks the table as tidemark's dead-letter table

__all__ = [
    "COLUMNS",
    "QUARANTINE_TABLE",
    "SCHEMA",
    "apply_quarantine",
    "drop_quarantine",
    "move_quarantine",
    "read_quarantine",
]


def apply_quarantine(driver: QuarantineHost, names: list[str], app: str, batch: int) -> None:
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
    paths = driver.staged_paths(f"Delta quarantine table {location!r}", names, batch)
    source = pds.dataset(paths, format="parquet", filesystem=driver.fs[0], schema=SCHEMA)
    write_deltalake(
        dt,
        staged_reader(source),
        mode="append",
        storage_options=driver.storage_options,
        commit_properties=CommitProperties(app_transactions=[Transaction(app, batch)]),
    )


def read_quarantine(driver: QuarantineHost, materialization: str) -> list[dict]:
    """The quarantined rows of a materialization, by batch and location (tests, inspection)."""
    try:
        dt = driver.table(driver.quarantine_location)
    except TableNotFoundError:
        return []
    table = dt.to_pyarrow_table(columns=list(COLUMNS))
    rows = [r for r in table.to_pylist() if r["materialization"] == materialization]
    return sorted(rows, key=lambda r: (r["batch_id"] if r["batch_id"] is not None else -1, r["location"] or ""))


def drop_quarantine(driver: QuarantineHost, materialization: str) -> int:
    """Delete the materialization's rows from the quarantine table; how many."""
    try:
        dt = driver.table(driver.quarantine_location)
    except TableNotFoundError:
        return 0
    metrics = dt.delete(f"{ident('materialization')} = {sql_literal(materialization)}")
    return int(metrics.get("num_deleted_rows") or 0)


def move_quarantine(driver: QuarantineHost, shadow: str, materialization: str) -> str | None:
    """A rebuild's cut-over: the rows of ``shadow`` become ``materialization``'s, in place of its
    own, in one commit (an overwrite of the rows of both names)."""
    import pyarrow as pa
    import pyarrow.compute as pc

    quarantine = driver.table(driver.quarantine_location)
    table = quarantine.to_pyarrow_table()
    names = table.column("materialization")
    mine = pc.equal(names, shadow)
    old = pc.sum(pc.equal(names, materialization).cast("int64")).as_py() or 0
    rows = table.filter(mine)
    if not rows.num_rows and not old:
        return None
    i = rows.schema.get_field_index("materialization")
    rows = rows.set_column(i, rows.schema.field(i), pa.array([materialization] * rows.num_rows, pa.string()))
    write_deltalake(
        quarantine,
        rows,
        mode="overwrite",
        predicate=f"{ident('materialization')} IN ({sql_literal(materialization)}, {sql_literal(shadow)})",
        storage_options=driver.storage_options,
    )
    return f"the quarantine of {materialization!r} is now the rebuild's ({rows.num_rows} documents; {old} before)"
