"""Delta Lake (delta-rs, no JVM): the table format (:class:`DeltaFormat`) and the lake driver over it.

Config: ``{path: "/lake/views", staging: "<path>/_tidemark_staging", storage_options: {...},
retry: {...}}``.  Resource: ``{table: NAME}`` (the table ``PATH/NAME``) or ``{path: P}``
(absolute, a URI, or relative to ``path``).

The lake driver (:mod:`tidemark.drivers.lake.driver`) holds the commit pattern; Delta is:

* **Load**: one DataFusion query per Load chunk, ``key IN (...)`` plus the chunk's min/max
  bounds so that delta-rs prunes files by their statistics.
* **Apply of batch N** to a table, in :meth:`DeltaFormat.commit`: skip the table if
  ``transaction_version(APP_ID) >= N``; else one MERGE of all shards' staged files (upsert +
  hard delete; delta-updates tables: one append), committed with the app transaction
  ``(APP_ID, N)``; a MERGE that changed nothing still commits the app transaction (an empty
  commit).  Invalid documents: steps 1-2 for the dead-letter table ``PATH/tidemark_quarantine``
  (one append, :mod:`tidemark.drivers.delta.quarantine`).  ``APP_ID`` is
  ``tidemark/<materialization>/<checkpoint_id>``, so a new runtime checkpoint (batch ids
  restarting at 0) is never mistaken for one already applied.

Tables are created by Apply from the binding's fields (key columns not null, one typed
column per top-level scalar property, ``flow_document`` with the whole document as JSON)
and gain nullable columns when the schema grows.  A ``date-time`` is a ``timestamp`` column
(UTC, microseconds) in a lean table, its text in the remainder where the instant does not
give it back (:mod:`tidemark.drivers.lake.lean`), and a string in a full table, a key, and
the lean tables made before; objects, arrays and unions are JSON text.
"""

from __future__ import annotations

import dataclasses
import os
from typing import Any, Optional, cast

import pyarrow as pa
import pyarrow.dataset as pds
import pyarrow.fs as pafs
from deltalake import CommitProperties, DeltaTable, Transaction, write_deltalake
from deltalake import Field as DeltaField
from deltalake.exceptions import DeltaError, TableNotFoundError

from tidemark.drivers.base import resolve_local_path
from tidemark.drivers.common.columns import DOCUMENT_COLUMN, QUARANTINE_TABLE, Column
from tidemark.drivers.common.settings import config_schema
from tidemark.drivers.delta.quarantine import DeltaQuarantine
from tidemark.drivers.delta.settings import SETTINGS, DeltaSettings
from tidemark.drivers.delta.tables import (
    IN_LIST_MAX,
    app_id,
    applied_batch,
    delta_type,
    ident,
    sql_literal,
    staged_reader,
    translate_error,
)
from tidemark.drivers.lake.driver import CAPABILITIES as LAKE_CAPABILITIES
from tidemark.drivers.lake.driver import LakeDriver
from tidemark.drivers.lake.format import Staged, Table
from tidemark.drivers.lake.model import DELETE_COLUMN, LakeTable, is_uri, join_path, lake_table
from tidemark.errors import SpecError, TidemarkError
from tidemark.faults import fault_point
from tidemark.protocol.messages import BindingSpec, SpecResponse

RESOURCE = {"table": {"type": "string"}, "path": {"type": "string"}, "document": {"enum": ["lean", "full"]}}
CAPABILITIES = dataclasses.replace(
    LAKE_CAPABILITIES,
    quarantine=True,  # PATH/tidemark_quarantine, applied with the batch (drivers/delta/quarantine.py)
)


class DeltaFormat:
    """Delta Lake tables under one root (a :class:`~tidemark.drivers.lake.format.TableFormat`)."""

    name = "delta"
    label = "delta table"
    capabilities = CAPABILITIES
    errors: tuple[type[BaseException], ...] = (DeltaError, OSError, pa.ArrowException)
    type_of = staticmethod(delta_type)
    settings: DeltaSettings
    quarantine: DeltaQuarantine
    spec: SpecResponse

    def __init__(self, config: dict):
        self.settings = s = DeltaSettings.from_config(config)
        self.root, self.storage_options = s.root, s.storage_options
        self.quarantine = DeltaQuarantine(join_path(self.root, QUARANTINE_TABLE), s.storage_options)
        self.upkeep: dict[str, str] = {}
        self.spec = SpecResponse(config_schema(SETTINGS), {"type": "object", "properties": RESOURCE})

    @staticmethod
    def resolve_config(config: dict, base_dir: str) -> dict:
        """``path`` and ``staging`` relative to the spec's folder (a URI as it is)."""
        return resolve_local_path(resolve_local_path(config, "path", base_dir), "staging", base_dir)

    def __repr__(self) -> str:
        return f"DeltaFormat(path={self.root!r})"

    def translate(self, exc: BaseException, where: str) -> TidemarkError:
        return translate_error(exc, where)

    def table(self, location: str) -> DeltaTable:
        return DeltaTable(location, storage_options=self.storage_options)

    def model(self, binding: BindingSpec) -> LakeTable:
        res = binding.resource if isinstance(binding.resource, dict) else {}
        if isinstance(res.get("path"), str) and res["path"]:
            location = self.location(res["path"])
        elif isinstance(res.get("table"), str) and res["table"]:
            name = res["table"]
            if "\x00" in name or name in (".", "..") or "/" in name or "\\" in name:
                raise SpecError(f"delta: invalid table name {name!r} (use resource.path for nested locations)")
            location = join_path(self.root, name)
        else:
            raise SpecError(
                f"binding of {binding.collection!r}: resource needs {{table: NAME}} or {{path: P}}, "
                f"got {binding.resource!r}"
            )
        if (location if is_uri(location) else os.path.normpath(location)) == self.quarantine.location:
            raise SpecError(f"delta table {location!r} is the endpoint's dead-letter table; bind another table")
        return lake_table(self.label, location, binding)

    def open(self, name: str) -> Optional[Table[DeltaTable]]:
        try:
            delta_table = self.table(name)
        except TableNotFoundError:
            return None
        fields = delta_table.schema().fields
        columns = {f.name: str(getattr(f.type, "type", f.type)) for f in fields}
        full = not any(f.name == DOCUMENT_COLUMN and f.nullable for f in fields)
        return Table(delta_table, delta_table.metadata().configuration or {}, columns, full)

    def tag(self, materialization: str, checkpoint_id: Any) -> dict:
        return {"app": app_id(materialization, checkpoint_id)}

    def batch(self, table: Table[DeltaTable], materialization: str, tag: dict) -> int:
        return applied_batch(table.handle, str(tag.get("app", "")))

    def scan(self, table: Table[DeltaTable], model: LakeTable, values: Optional[list[list]]) -> pa.Table:
        """One DataFusion query: the chunk's min/max bounds per key column (delta-rs prunes files
        by their statistics), plus ``IN (...)`` for small chunks."""
        from deltalake import QueryBuilder

        names = list(dict.fromkeys([c.name for c in model.keys] + model.read_names))
        if values is None:
            return table.handle.to_pyarrow_table(columns=names)
        where = []
        for c, vals in zip(model.keys, values):
            if c.kind != "boolean" and len({type(v) for v in vals}) == 1:
                where.append(
                    f"{ident(c.name)} >= {sql_literal(vals[0])} AND {ident(c.name)} <= {sql_literal(vals[-1])}"
                )
            if len(vals) <= IN_LIST_MAX:
                where.append(f"{ident(c.name)} IN ({', '.join(sql_literal(v) for v in vals)})")
        sql = f"SELECT {', '.join(ident(n) for n in names)} FROM t WHERE {' AND '.join(where) or 'true'}"
        return pa.table(QueryBuilder().register("t", table.handle).execute(sql).read_all())

    def check(self, model: LakeTable, table: Table[DeltaTable], rebuild: bool) -> None: ...  # a cut-over overwrites

    def schema(
        self, model: LakeTable, table: Optional[Table[DeltaTable]], missing: list[Column], properties: dict
    ) -> None:
        if table is None:
            DeltaTable.create(
                model.name,
                schema=model.arrow_schema(),
                mode="ignore",
                configuration=properties,
                storage_options=self.storage_options,
                raise_if_key_not_exists=False,
            )
            return
        if missing:
            # cast: delta-rs takes a type's name, where its stub says DataType
            fields = [DeltaField(c.name, cast(Any, delta_type(c.kind)), nullable=True) for c in missing]
            table.handle.alter.add_columns(fields)
        if properties:
            # tidemark's own properties are not Delta's: delta-rs refuses a key it does not know
            # unless told (raise_if_not_exists=False), as DeltaTable.create is
            self.table(model.name).alter.set_table_properties(properties, raise_if_not_exists=False)

    def commit(self, model: LakeTable, table: Table[DeltaTable], staged: Staged, owner: tuple[str, str]) -> None:
        delta_table, batch = table.handle, staged.batch
        commit = CommitProperties(app_transactions=[Transaction(app_id(*owner), batch)])
        if not staged.names:
            delta_table.create_write_transaction(
                [], mode="append", schema=delta_table.schema(), commit_properties=commit
            )
            return
        source = pds.dataset(staged.paths(f"Delta table {model.name!r}"), format="parquet", filesystem=staged.fs)
        if model.delta:
            write_deltalake(
                delta_table,
                staged_reader(source, drop=DELETE_COLUMN, like=pa.schema(delta_table.schema().to_arrow())),
                mode="append",
                commit_properties=commit,
                storage_options=self.storage_options,
            )
        else:
            self._merge(delta_table, model, staged_reader(source), commit)
        delta_table = self.table(model.name)
        if (
            applied_batch(delta_table, app_id(*owner)) < batch
        ):  # the MERGE changed nothing, so committed nothing: record it
            delta_table.create_write_transaction(
                [], mode="append", schema=delta_table.schema(), commit_properties=commit
            )

    def _merge(self, delta_table: DeltaTable, model: LakeTable, source: pa.RecordBatchReader, commit) -> None:
        names = [f.name for f in source.schema if f.name != DELETE_COLUMN]
        on = " AND ".join(f"t.{ident(c.name)} = s.{ident(c.name)}" for c in model.keys)
        key_names = {c.name for c in model.keys}
        sets = {ident(n): f"s.{ident(n)}" for n in names if n not in key_names}
        (
            delta_table.merge(
                source, predicate=on, source_alias="s", target_alias="t", streamed_exec=True, commit_properties=commit
            )
            .when_matched_delete(predicate=f"s.{ident(DELETE_COLUMN)}")
            .when_matched_update(updates=sets)
            .when_not_matched_insert(
                updates={ident(n): f"s.{ident(n)}" for n in names}, predicate=f"NOT s.{ident(DELETE_COLUMN)}"
            )
            .execute()
        )

    def replace(
        self, live: LakeTable, shadow: Table[DeltaTable], owner: tuple[str, str], batch: int, properties: dict
    ) -> None:
        """Commit 1: an overwrite of the rows and the schema (``schema_mode="overwrite"``) with
        the app transaction ``(APP_ID, batch)`` -- what readers see change, at once.  Commit 2:
        the table properties (delta-rs keeps a table's configuration on an overwrite). Between
        the two the live run is stopped (the rebuild holds its lease); a kill there is finished
        by calling this again, which skips commit 1."""
        table = self.open(live.name)
        rows = shadow.handle.to_pyarrow_dataset().scanner().to_reader()
        commit = CommitProperties(app_transactions=[Transaction(app_id(*owner), batch)])
        if table is None or applied_batch(table.handle, app_id(*owner)) < 0:
            write_deltalake(
                live.name if table is None else table.handle,
                rows,
                mode="overwrite",
                schema_mode="overwrite",
                # (the properties in commit 2, also for a table the edit added: delta-rs refuses
                # configuration keys it does not know on a write)
                commit_properties=commit,
                storage_options=self.storage_options,
            )
        fault_point("replace_contents")  # between the rows and the properties
        delta_table = self.table(live.name)
        have = delta_table.metadata().configuration or {}
        changed = {k: v for k, v in properties.items() if have.get(k) != v}
        if changed:
            delta_table.alter.set_table_properties(changed, raise_if_not_exists=False)

    def drop(self, model: LakeTable) -> Optional[str]:
        location = model.name
        fs, path = pafs.FileSystem.from_uri(location) if is_uri(location) else (pafs.LocalFileSystem(), location)
        if fs.get_file_info(path).type == pafs.FileType.NotFound:
            return None
        fs.delete_dir(path)
        return f"deleted delta table {location}"

    def close(self) -> None: ...  # nothing to release

    def location(self, path: str) -> str:
        """A table's path or URI; a relative path is under ``path``."""
        return path if is_uri(path) or os.path.isabs(path) else join_path(self.root, path)


class DeltaDriver(LakeDriver):
    """The lake driver over Delta tables."""

    name = "delta"
    format_class = DeltaFormat
    format: DeltaFormat

    @property
    def root(self) -> str:
        return self.format.root

    @property
    def quarantine_location(self) -> str:
        return self.format.quarantine.location

    def read_rows(self, source: str) -> list[dict]:
        """The rows of an existing Delta table (``tidemark adopt``): ``source`` is its path or URI
        (a relative path is under the endpoint's ``path``), read with its ``storage_options``."""
        location = self.format.location(source)
        return self.run(lambda: self.format.table(location).to_pyarrow_table().to_pylist(), "read", location)
