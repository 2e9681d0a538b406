"""Delta Lake (delta-rs, no JVM): staged Parquet, applied once per batch by the coordinator.

Config: ``{path: "/lake/views", staging: "<path>/_tidemark_staging", storage_options: {...},
retry: {...}}``.  Resource: ``{table: NAME}`` (the table ``PATH/NAME``) or ``{path: P}``
(absolute, a URI, or relative to ``path``).

The staged-files base (:mod:`tidemark.drivers.lake.driver`) holds the commit pattern; Delta
fills it in:

* **Load**: one DataFusion query per Load chunk, ``key IN (...)`` plus the chunk's min/max
  bounds so that delta-rs prunes files by their statistics.
* **Apply of batch N** to a table, in :meth:`DeltaDriver.apply_table`: skip the table if
  ``transaction_version(APP_ID) >= N``; else one MERGE of all shards' staged files (upsert +
  hard delete; delta-updates tables: one append), committed with the app transaction
  ``(APP_ID, N)``; a MERGE that changed nothing still commits the app transaction (an empty
  commit).  Invalid documents: steps 1-2 for the dead-letter table ``PATH/tidemark_quarantine``
  (one append, :mod:`tidemark.drivers.delta.quarantine`).  ``APP_ID`` is
  ``tidemark/<materialization>/<checkpoint_id>``, so a new runtime checkpoint (batch ids
  restarting at 0) is never mistaken for one already applied.

Tables are created by Apply from the binding's fields (key columns not null, one typed
column per top-level scalar property, ``flow_document`` with the whole document as JSON)
and gain nullable columns when the schema grows.  ``date-time`` strings stay strings
(lossless); objects, arrays and unions are JSON text.
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

from tidemark.drivers.base import Capabilities, resolve_local_path
from tidemark.drivers.common.columns import DOCUMENT_COLUMN, QUARANTINE_TABLE, Column
from tidemark.drivers.common.settings import config_schema
from tidemark.drivers.delta.quarantine import apply_quarantine, drop_quarantine, move_quarantine, read_quarantine
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
from tidemark.drivers.lake.driver import StagedFilesDriver
from tidemark.drivers.lake.model import DELETE_COLUMN, LakeTable, is_uri, join_path, lake_table
from tidemark.errors import SpecError, TidemarkError
from tidemark.faults import fault_point
from tidemark.protocol.messages import BindingSpec, SpecResponse

CAPABILITIES = dataclasses.replace(
    LAKE_CAPABILITIES,
    quarantine=True,  # PATH/tidemark_quarantine, applied with the batch (drivers/delta/quarantine.py)
)


class DeltaDriver(StagedFilesDriver):
    name = "delta"
    label = "delta table"
    library_errors = (DeltaError, OSError, pa.ArrowException)

    def capabilities(self) -> Capabilities:
        return CAPABILITIES

    def __init__(self, config: dict | None = None):
        super().__init__(config)
        s = DeltaSettings.from_config(self.config)
        self.root, self.staging, self.storage_options, self.policy = s.root, s.staging, s.storage_options, s.policy
        self.quarantine_location = join_path(self.root, QUARANTINE_TABLE)
        self._fs: Optional[tuple[pafs.FileSystem, str]] = None

    @classmethod
    def resolve_config(cls, config: dict, base_dir: str) -> dict:
        """``path`` and ``staging`` relative to the spec's folder (a URI as it is)."""
        return resolve_local_path(resolve_local_path(config, "path", base_dir), "staging", base_dir)

    def __repr__(self) -> str:
        return f"DeltaDriver(path={self.root!r})"

    def spec(self) -> SpecResponse:
        return SpecResponse(
            config_schema=config_schema(SETTINGS),
            resource_schema={
                "type": "object",
                "properties": {
                    "table": {"type": "string"},
                    "path": {"type": "string"},
                    "document": {"enum": ["lean", "full"]},
                },
            },
        )

    # ------------------------------------------------- the staged-files hooks
    def translate(self, exc: BaseException, where: str) -> TidemarkError:
        return translate_error(exc, where)

    def open_staging(self) -> tuple[pafs.FileSystem, str]:
        if not is_uri(self.staging):
            os.makedirs(self.staging, exist_ok=True)
        return pafs.FileSystem.from_uri(self.staging)

    def table(self, location: str) -> DeltaTable:
        return DeltaTable(location, storage_options=self.storage_options)

    def model(self, binding: BindingSpec) -> LakeTable:
        res = binding.resource if isinstance(binding.resource, dict) else {}
        if isinstance(res.get("path"), str) and res["path"]:
            p = res["path"]
            location = p if is_uri(p) or os.path.isabs(p) else join_path(self.root, p)
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
        if (location if is_uri(location) else os.path.normpath(location)) == self.quarantine_location:
            raise SpecError(f"delta table {location!r} is the endpoint's dead-letter table; bind another table")
        return lake_table(self.label, location, binding)

    def open_table(self, name: str) -> Optional[DeltaTable]:
        try:
            return self.table(name)
        except TableNotFoundError:
            return None

    def table_properties(self, table: DeltaTable) -> dict:
        return table.metadata().configuration or {}

    def column_types(self, table: DeltaTable) -> dict:
        return {f.name: str(getattr(f.type, "type", f.type)) for f in table.schema().fields}

    def type_of(self, kind: str) -> str:
        return delta_type(kind)

    def document_required(self, table: DeltaTable) -> bool:
        return not any(f.name == DOCUMENT_COLUMN and f.nullable for f in table.schema().fields)

    def table_batch(self, table: DeltaTable, materialization: str, checkpoint_id: str) -> int:
        return applied_batch(table, app_id(materialization, checkpoint_id))

    def stage_tag(self, materialization: str, checkpoint_id: Any) -> dict:
        return {"app": app_id(materialization, checkpoint_id)}

    def stage_batch(self, table: DeltaTable, materialization: str, stage: dict) -> int:
        return applied_batch(table, str(stage.get("app", "")))

    def scan_keys(self, table: DeltaTable, model: LakeTable, values: list[list]) -> pa.Table:
        """One DataFusion query: the chunk's min/max bounds per key column (delta-rs prunes files
        by their statistics), plus ``IN (...)`` for small chunks."""
        from deltalake import QueryBuilder

        where = []
        for c, vals in zip(model.keys, values):
            if c.kind != "boolean" and len({type(v) for v in vals}) == 1:
                where.append(
                    f"{ident(c.name)} >= {sql_literal(vals[0])} AND {ident(c.name)} <= {sql_literal(vals[-1])}"
                )
            if len(vals) <= IN_LIST_MAX:
                where.append(f"{ident(c.name)} IN ({', '.join(sql_literal(v) for v in vals)})")
        cols = ", ".join(ident(n) for n in dict.fromkeys([c.name for c in model.keys] + model.read_names))
        sql = f"SELECT {cols} FROM t WHERE {' AND '.join(where) or 'true'}"
        return pa.table(QueryBuilder().register("t", table).execute(sql).read_all())

    def read_columns(self, model: LakeTable, names: list[str]) -> pa.Table:
        return self.table(model.name).to_pyarrow_table(columns=names)

    def create_table(self, model: LakeTable, properties: dict) -> None:
        DeltaTable.create(
            model.name,
            schema=model.arrow_schema(),
            mode="ignore",
            configuration=properties,
            storage_options=self.storage_options,
            raise_if_key_not_exists=False,
        )

    def alter_table(self, model: LakeTable, table: DeltaTable, missing: list[Column], properties: dict) -> None:
        if missing:
            # cast: delta-rs takes a type's name, where its stub says DataType
            table.alter.add_columns([DeltaField(c.name, cast(Any, delta_type(c.kind)), nullable=True) for c in missing])
        if properties:
            # tidemark's own properties are not Delta's: delta-rs refuses a key it does not know
            # unless told (raise_if_not_exists=False), as DeltaTable.create is
            self.table(model.name).alter.set_table_properties(properties, raise_if_not_exists=False)

    def apply_table(self, model: LakeTable, names: list[str], owner: tuple[str, str], batch: int) -> None:
        table = self.table(model.name)
        if not self.should_apply(model, table, owner, batch):
            return
        commit = CommitProperties(app_transactions=[Transaction(app_id(*owner), batch)])
        if not names:
            table.create_write_transaction([], mode="append", schema=table.schema(), commit_properties=commit)
            return
        paths = self.staged_paths(f"Delta table {model.name!r}", names, batch)
        source = pds.dataset(paths, format="parquet", filesystem=self.fs[0])
        if model.delta:
            write_deltalake(
                table,
                staged_reader(source, drop=DELETE_COLUMN, like=pa.schema(table.schema().to_arrow())),
                mode="append",
                commit_properties=commit,
                storage_options=self.storage_options,
            )
        else:
            self._merge(table, model, staged_reader(source), commit)
        table = self.table(model.name)
        if self.table_batch(table, *owner) < batch:  # the MERGE changed nothing, so committed nothing: record the batch
            table.create_write_transaction([], mode="append", schema=table.schema(), commit_properties=commit)

    def _merge(self, dt: DeltaTable, model: LakeTable, source: pa.RecordBatchReader, commit) -> None:
        names = [f.name for f in source.schema if f.name != DELETE_COLUMN]
        on = " AND ".join(f"t.{ident(c.name)} = s.{ident(c.name)}" for c in model.keys)
        key_names = {c.name for c in model.keys}
        sets = {ident(n): f"s.{ident(n)}" for n in names if n not in key_names}
        (
            dt.merge(
                source, predicate=on, source_alias="s", target_alias="t", streamed_exec=True, commit_properties=commit
            )
            .when_matched_delete(predicate=f"s.{ident(DELETE_COLUMN)}")
            .when_matched_update(updates=sets)
            .when_not_matched_insert(
                updates={ident(n): f"s.{ident(n)}" for n in names}, predicate=f"NOT s.{ident(DELETE_COLUMN)}"
            )
            .execute()
        )

    # ------------------------------------------------------------- rebuild
    def shadow_resource(self, resource: dict, tag: str) -> Optional[dict]:
        if isinstance(resource.get("path"), str) and resource["path"]:
            return {**resource, "path": f"{resource['path'].rstrip('/')}__{tag}"}
        return super().shadow_resource(resource, tag)

    def replace_table(self, live: LakeTable, shadow: DeltaTable, owner: tuple[str, str], batch: int, properties: dict):
        """Commit 1: an overwrite of the rows and the schema (``schema_mode="overwrite"``) with
        the app transaction ``(APP_ID, batch)`` -- what readers see change, at once.  Commit 2:
        the table properties (delta-rs keeps a table's configuration on an overwrite). Between
        the two the live run is stopped (the rebuild holds its lease); a kill there is finished
        by calling this again, which skips commit 1."""
        table = self.open_table(live.name)
        rows = shadow.to_pyarrow_dataset().scanner().to_reader()
        commit = CommitProperties(app_transactions=[Transaction(app_id(*owner), batch)])
        if table is None or self.table_batch(table, *owner) < 0:
            write_deltalake(
                live.name if table is None else table,
                rows,
                mode="overwrite",
                schema_mode="overwrite",
                # (the properties in commit 2, also for a table the edit added: delta-rs refuses
                # configuration keys it does not know on a write)
                commit_properties=commit,
                storage_options=self.storage_options,
            )
        fault_point("replace_contents")  # between the rows and the properties
        table = self.table(live.name)
        changed = {k: v for k, v in properties.items() if self.table_properties(table).get(k) != v}
        if changed:
            table.alter.set_table_properties(changed, raise_if_not_exists=False)

    def shadow_quarantined(self, shadow: str) -> bool:
        return self._exists(self.quarantine_location) and bool(read_quarantine(self, shadow))

    def replace_quarantine(self, materialization: str, shadow: str) -> Optional[str]:
        if not self._exists(self.quarantine_location):
            return None
        return move_quarantine(self, shadow, materialization)

    def apply_quarantine(self, names: list[str], owner: tuple[str, str], batch: int) -> None:
        apply_quarantine(self, names, app_id(*owner), batch)

    def drop_table(self, model: LakeTable) -> Optional[str]:
        location = model.name
        fs, path = pafs.FileSystem.from_uri(location) if is_uri(location) else (pafs.LocalFileSystem(), location)
        if fs.get_file_info(path).type == pafs.FileType.NotFound:
            return None
        fs.delete_dir(path)
        return f"deleted delta table {location}"

    def drop_quarantine(self, materialization: str) -> list[str]:
        if not self._exists(self.quarantine_location):
            return []
        n = self.run(lambda: drop_quarantine(self, materialization), "drop quarantine", self.quarantine_location)
        return [f"deleted {n} quarantine rows of {materialization!r}"] if n else []

    # ------------------------------------------------------------ inspection
    def read_rows(self, source: str) -> list[dict]:
        """The rows of an existing Delta table: ``source`` is its path or URI (a relative path
        is under the endpoint's ``path``), read with the endpoint's ``storage_options``."""
        location = source if is_uri(source) or os.path.isabs(source) else join_path(self.root, source)
        return self.run(lambda: self.table(location).to_pyarrow_table().to_pylist(), "read", location)

    def _exists(self, location: str) -> bool:
        try:
            return DeltaTable.is_deltatable(location, storage_options=self.storage_options)
        except Exception:  # noqa: BLE001 - an unreachable store is reported by the next call
            return False

    def quarantined(self, materialization: str) -> list[dict]:
        """The materialization's rows of the dead-letter table (tests, inspection)."""
        return self.run(lambda: read_quarantine(self, materialization), "read quarantine", self.quarantine_location)
