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

from typing import Optional

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.dataset as pds
from deltalake import CommitProperties, DeltaTable, Transaction, write_deltalake
from deltalake.exceptions import TableNotFoundError

from tidemark.drivers.delta.tables import app_id, applied_batch, ident, sql_literal, staged_reader
from tidemark.drivers.lake.format import Staged
from tidemark.drivers.lake.quarantine import COLUMNS, SCHEMA

TABLE_PROPERTY = "tidemark.quarantine"  # marks the table as tidemark's dead-letter table


class DeltaQuarantine:
    """The dead-letter table at ``location`` (the lake format's ``DeadLetters``)."""

    location: str

    def __init__(self, location: str, storage_options: Optional[dict]):
        self.location = location
        self.storage_options = storage_options

    def table(self) -> DeltaTable:
        return DeltaTable(self.location, storage_options=self.storage_options)

    def exists(self) -> bool:
        try:
            return DeltaTable.is_deltatable(self.location, storage_options=self.storage_options)
        except Exception:  # noqa: BLE001 - an unreachable store is reported by the next call
            return False

    def apply(self, staged: Staged, owner: tuple[str, str]) -> None:
        """Append the batch's staged quarantine files once (the app transaction ``(APP_ID, batch)``)."""
        DeltaTable.create(
            self.location,
            schema=SCHEMA,
            mode="ignore",
            configuration={TABLE_PROPERTY: "true"},
            storage_options=self.storage_options,
            raise_if_key_not_exists=False,
        )
        delta_table, app = self.table(), app_id(*owner)
        if applied_batch(delta_table, app) >= staged.batch:  # Step 1, as for the data tables
            return
        paths = staged.paths(f"Delta quarantine table {self.location!r}")
        source = pds.dataset(paths, format="parquet", filesystem=staged.fs, schema=SCHEMA)
        write_deltalake(
            delta_table,
            staged_reader(source),
            mode="append",
            storage_options=self.storage_options,
            commit_properties=CommitProperties(app_transactions=[Transaction(app, staged.batch)]),
        )

    def read(self, materialization: str) -> list[dict]:
        """The quarantined rows of a materialization, by batch and location (tests, inspection)."""
        try:
            delta_table = self.table()
        except TableNotFoundError:
            return []
        table = delta_table.to_pyarrow_table(columns=list(COLUMNS))
        rows = [r for r in table.to_pylist() if r["materialization"] == materialization]
        return sorted(rows, key=lambda r: (r["batch_id"] if r["batch_id"] is not None else -1, r["location"] or ""))

    def drop(self, materialization: str) -> list[str]:
        """Delete the materialization's rows from the quarantine table."""
        if not self.exists():
            return []
        metrics = self.table().delete(f"{ident('materialization')} = {sql_literal(materialization)}")
        n = int(metrics.get("num_deleted_rows") or 0)
        return [f"deleted {n} quarantine rows of {materialization!r}"] if n else []

    def move(self, shadow: str, materialization: str) -> Optional[str]:
        """A rebuild's cut-over: the rows of ``shadow`` become ``materialization``'s, in place of its
        own, in one commit (an overwrite of the rows of both names)."""
        if not self.exists():
            return None
        quarantine = self.table()
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
            storage_options=self.storage_options,
        )
        return f"the quarantine of {materialization!r} is now the rebuild's ({rows.num_rows} documents; {old} before)"
