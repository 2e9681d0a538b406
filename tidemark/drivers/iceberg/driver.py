"""Apache Iceberg (pyiceberg, SQL catalog): staged Parquet, applied once per batch by the coordinator.

Config: ``{catalog: {uri: SQLALCHEMY_URL, warehouse: PATH_OR_URL, name: tidemark, ...}, namespace: NAME,
staging: "<warehouse>/_tidemark_staging", retry: {...}}`` (:mod:`.settings`).  Resource: ``{table: NAME}``
(the table ``NAMESPACE.NAME``).

The staged-files base (:mod:`tidemark.drivers.lake.driver`) holds the commit pattern; Iceberg
fills it in:

* **Load**: a scan of the key columns and ``flow_document`` with an ``In`` filter per key
  column (pyiceberg prunes files by it, pyarrow filters rows).
* **Apply of batch N** to a table, in ONE Iceberg transaction (:meth:`IcebergDriver.apply_table`):

  Step 1. load the table; skip it if its property ``tidemark.<materialization>.applied``
          (``{"checkpoint_id", "batch"}``) holds this checkpoint at ``>= N``; refuse
          (``FencedOff``) a table that ``tidemark.owner`` gives to another checkpoint;
  Step 2. one snapshot: standard tables rewrite the data files that hold a changed key
          without it and add the batch's rows (:func:`.apply.replace_keys`); delta-updates
          tables append; a table the batch did not touch gets an empty append.  The
          snapshot's summary carries materialization, checkpoint id and batch;
  Step 3. the same transaction sets the ``applied`` property to N; it commits through the
          catalog's compare-and-swap, and only if the branch still points at the snapshot
          read in step 1.  pyiceberg's own commit retries are off (table property
          ``commit.retry.num-retries = 0``): a lost compare-and-swap goes back to step 1,
          which reloads the table and reads the property again.

  Re-running it any number of times, or two coordinators at once, gives each table one
  snapshot per batch.
"""

from __future__ import annotations

import dataclasses
from functools import partial
from typing import Any, Optional, cast

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.fs as pafs
import pyarrow.parquet as pq
from pyiceberg.exceptions import NoSuchTableError, TableAlreadyExistsError
from pyiceberg.expressions import And, BooleanExpression, In

from tidemark.drivers.base import Capabilities
from tidemark.drivers.common.columns import DOCUMENT_COLUMN, JSON, Column
from tidemark.drivers.common.settings import config_schema
from tidemark.drivers.iceberg.apply import append_rows, conform, replace_keys
from tidemark.drivers.iceberg.settings import SETTINGS, IcebergSettings, resolve_config
from tidemark.drivers.iceberg.tables import (
    RETRIES_PROPERTY,
    SUMMARY_BATCH,
    SUMMARY_CHECKPOINT,
    SUMMARY_MATERIALIZATION,
    applied_property,
    applied_text,
    iceberg_type,
    partition_spec,
    table_batch,
    table_schema,
    translate_error,
)
from tidemark.drivers.lake.driver import CAPABILITIES as LAKE_CAPABILITIES
from tidemark.drivers.lake.driver import StagedFilesDriver
from tidemark.drivers.lake.model import DELETE_COLUMN, LakeTable, lake_table
from tidemark.errors import EndpointUnavailable, IncompatibleSchema, SpecError, TidemarkError
from tidemark.faults import fault_point
from tidemark.protocol.messages import BindingSpec, SpecResponse

CAPABILITIES = LAKE_CAPABILITIES


class IcebergDriver(StagedFilesDriver):
    name = "iceberg"
    label = "iceberg table"

    def capabilities(self) -> Capabilities:
        return CAPABILITIES

    def __init__(self, config: dict | None = None):
        super().__init__(config)
        self.settings = IcebergSettings.from_config(self.config)
        self.staging = self.settings.staging
        self.policy = self.settings.policy
        self._catalog = None
        self._fs: Optional[tuple[pafs.FileSystem, str]] = None

    @classmethod
    def resolve_config(cls, config: dict, base_dir: str) -> dict:
        """The warehouse, a SQLite catalog file and ``staging`` relative to the spec's folder."""
        return resolve_config(config, base_dir)

    def __repr__(self) -> str:
        return (
            f"IcebergDriver(catalog={self.settings.shown(self.settings.properties['uri'])!r}, "
            f"namespace={'.'.join(self.settings.namespace)!r})"
        )

    def spec(self) -> SpecResponse:
        return SpecResponse(
            config_schema=config_schema(SETTINGS),
            resource_schema={
                "type": "object",
                "required": ["table"],
                "properties": {
                    "table": {"type": "string"},
                    "partition_by": {"type": "string"},
                    "document": {"enum": ["lean", "full"]},
                },
            },
        )

    @property
    def catalog(self):
        if self._catalog is None:
            self._catalog = self.run(
                self.settings.catalog, "connect", self.settings.shown(self.settings.properties["uri"])
            )
        return self._catalog

    def close(self) -> None:
        catalog, self._catalog = self._catalog, None
        if catalog is not None and hasattr(catalog, "close"):
            catalog.close()

    # ------------------------------------------------- the staged-files hooks
    def translate(self, exc: BaseException, where: str) -> TidemarkError:
        return translate_error(exc, where, self.settings.secrets)

    def open_staging(self) -> tuple[pafs.FileSystem, str]:
        return self.settings.staging_fs()

    def model(self, binding: BindingSpec) -> LakeTable:
        res = binding.resource if isinstance(binding.resource, dict) else {}
        name = res.get("table")
        if not isinstance(name, str) or not name:
            raise SpecError(
                f"binding of {binding.collection!r}: resource needs {{table: NAME}}, got {binding.resource!r}"
            )
        if any(ch in name for ch in "./\\\x00") or name.strip() != name:
            raise SpecError(f"iceberg: invalid table name {name!r} (no '.', '/', '\\', or surrounding spaces)")
        identifier = self.settings.namespace + (name,)
        model = lake_table(self.label, ".".join(identifier), binding, identifier=identifier)
        part = res.get("partition_by")
        if part is not None:
            kinds = {c.name: c.kind for c in model.columns}
            if not isinstance(part, str) or kinds.get(part) in (None, JSON):
                scalars = sorted(n for n, k in kinds.items() if k != JSON)
                raise SpecError(
                    f"iceberg table {name!r}: partition_by must name one of its scalar columns "
                    f"({', '.join(scalars)}), got {part!r}"
                )
        return dataclasses.replace(model, partition_by=part)

    def open_table(self, name: str):
        try:
            return self.catalog.load_table(tuple(name.split(".")))
        except NoSuchTableError:
            return None

    def table_properties(self, table) -> dict:
        return table.properties

    def column_types(self, table) -> dict:
        return {f.name: f.field_type for f in table.schema().fields}

    def type_of(self, kind: str):
        return iceberg_type(kind)

    def document_required(self, table) -> bool:
        return not any(f.name == DOCUMENT_COLUMN and not f.required for f in table.schema().fields)

    def table_batch(self, table, materialization: str, checkpoint_id: str) -> int:
        return table_batch(table, materialization, checkpoint_id)

    def stage_tag(self, materialization: str, checkpoint_id: Any) -> dict:
        return {"checkpoint_id": str(checkpoint_id)}

    def stage_batch(self, table, materialization: str, stage: dict) -> int:
        return table_batch(table, materialization, stage.get("checkpoint_id"))

    def scan_keys(self, table, model: LakeTable, values: list[list]) -> Optional[pa.Table]:
        if table.current_snapshot() is None:
            return None
        expr: BooleanExpression | None = None
        for c, vals in zip(model.keys, values):
            term = cast(Any, In)(c.name, set(vals))  # (term, values) positionally: see apply.key_filter
            expr = term if expr is None else And(expr, term)
        names = tuple(dict.fromkeys([c.name for c in model.keys] + model.read_names))
        return table.scan(row_filter=expr, selected_fields=names).to_arrow()

    def read_columns(self, model: LakeTable, names: list[str]) -> pa.Table:
        return self.catalog.load_table(model.identifier).scan(selected_fields=tuple(names)).to_arrow()

    def check_table(self, model: LakeTable, table) -> list[Column]:
        missing = super().check_table(model, table)
        self.check_partitioning(model, table)
        return missing

    def check_partitioning(self, model: LakeTable, table) -> None:
        want = [f.name for f in partition_spec(model).fields]
        if [f.name for f in table.spec().fields] != want:
            raise IncompatibleSchema(
                f"iceberg table {model.name!r} is partitioned by {[f.name for f in table.spec().fields]}, the "
                f"binding asks for {want} (partition_by); tidemark does not repartition a table: keep its "
                "partitioning, or drop the table (tidemark reset) to create it anew"
            )

    def upkeep_properties(self, properties: dict) -> dict:
        return {} if properties.get(RETRIES_PROPERTY) == "0" else {RETRIES_PROPERTY: "0"}

    def apply(self, req):
        if req.bindings and not req.dry_run:
            self.run(
                lambda: self.catalog.create_namespace_if_not_exists(self.settings.namespace),
                "apply",
                ".".join(self.settings.namespace),
            )
        return super().apply(req)

    def create_table(self, model: LakeTable, properties: dict) -> None:
        try:
            self.catalog.create_table(
                model.identifier,
                schema=table_schema(model),
                properties=properties,
                partition_spec=partition_spec(model),
            )
        except TableAlreadyExistsError as exc:  # created meanwhile: plan again
            raise EndpointUnavailable(f"iceberg table {model.name!r} was created meanwhile") from exc

    def alter_table(self, model: LakeTable, table, missing: list[Column], properties: dict) -> None:
        with table.transaction() as txn:
            if missing:
                with txn.update_schema() as schema:
                    for col in missing:
                        schema.add_column(col.name, iceberg_type(col.kind))
            if properties:
                txn.set_properties(properties)

    def apply_table(self, model: LakeTable, names: list[str], owner: tuple[str, str], batch: int) -> None:
        """Steps 1-3 for one table.  Runs again (from the reload) after a lost compare-and-swap."""
        materialization, checkpoint_id = owner
        table = self.catalog.load_table(model.identifier)
        if not self.should_apply(model, table, owner, batch):
            return
        if table.properties.get(RETRIES_PROPERTY) != "0":  # never let pyiceberg re-commit on its own
            with table.transaction() as txn:
                txn.set_properties({RETRIES_PROPERTY: "0"})
            table = self.catalog.load_table(model.identifier)
        summary = {
            SUMMARY_MATERIALIZATION: materialization,
            SUMMARY_CHECKPOINT: checkpoint_id,
            SUMMARY_BATCH: str(batch),
        }
        txn = table.transaction()
        changed = False
        if names:
            staged = self._staged(model, names, batch)
            schema = table.schema().as_arrow()
            if model.delta:
                changed = append_rows(txn, conform(staged, schema), summary)
            else:
                deleted = staged.column(DELETE_COLUMN).fill_null(False)
                keys = staged.select([c.name for c in model.keys])
                rows = conform(staged.filter(pc.invert(deleted)), schema)
                changed = replace_keys(txn, [c.name for c in model.keys], keys, rows, summary)
        if not changed:  # an empty snapshot: the batch is recorded under the same compare-and-swap
            with txn.update_snapshot(snapshot_properties=summary).fast_append():
                pass
        txn.set_properties({applied_property(materialization): applied_text(checkpoint_id, batch)})
        fault_point("mid_apply")
        txn.commit_transaction()
        fault_point("iceberg_after_commit")

    # ------------------------------------------------------------- rebuild
    def check_rebuild(self, bindings, old_keys) -> None:
        """Iceberg changes a column's type in place only by its promotions (int -> long,
        float -> double, a wider decimal), and keeps a table's partitioning."""
        from pyiceberg.exceptions import ResolveError
        from pyiceberg.schema import promote

        for b in bindings:
            model = self.model(b)
            table = self.run(partial(self.open_table, model.name), "check", model.name)
            if table is None:
                continue
            self.check_partitioning(model, table)
            have = self.column_types(table)
            for c in model.columns:
                want = iceberg_type(c.kind)
                if c.name not in have or have[c.name] == want:
                    continue
                try:
                    promote(have[c.name], want)
                except ResolveError:
                    raise IncompatibleSchema(
                        f"rebuild: iceberg table {model.name!r} would change column {c.name} from {have[c.name]} to "
                        f"{want}, which Iceberg cannot do in place (only int -> long, float -> double and a wider "
                        "decimal). Keep the type, or start the view over with `tidemark reset`. Nothing was changed"
                    ) from None

    def replace_table(self, live: LakeTable, shadow, owner: tuple[str, str], batch: int, properties: dict):
        """ONE Iceberg transaction: the schema becomes the shadow's (columns added, promoted or
        dropped, the key's columns required and the identifier fields), one overwrite snapshot
        of the shadow's rows (its summary naming owner and batch), and the properties with the
        ``applied`` one -- committed through the catalog's compare-and-swap."""
        materialization, checkpoint_id = owner
        rows = shadow.scan().to_arrow()
        summary = {
            SUMMARY_MATERIALIZATION: materialization,
            SUMMARY_CHECKPOINT: checkpoint_id,
            SUMMARY_BATCH: str(batch),
        }
        applied = {**properties, applied_property(materialization): applied_text(checkpoint_id, batch)}
        try:
            table = self.catalog.load_table(live.identifier)
        except NoSuchTableError:  # a binding the edit added: created in one transaction with its rows
            txn = self.catalog.create_table_transaction(
                live.identifier, schema=shadow.schema(), partition_spec=shadow.spec(), properties=applied
            )
            txn.append(conform(rows, txn.table_metadata.schema().as_arrow()), snapshot_properties=summary)
            fault_point("replace_contents")
            txn.commit_transaction()
            return
        want = shadow.schema()
        keys = [c.name for c in live.keys]
        txn = table.transaction()
        have = {f.name: f for f in table.schema().fields}
        with txn.update_schema(allow_incompatible_changes=True) as schema:
            schema.union_by_name(want)
            for name in sorted(set(have) - {f.name for f in want.fields}):
                schema.delete_column(name)
            for f in want.fields:
                if f.name in have and have[f.name].required != f.required:
                    schema.update_column(f.name, required=f.required)
            schema.set_identifier_fields(*([] if live.delta else keys))
        txn.overwrite(conform(rows, txn.table_metadata.schema().as_arrow()), snapshot_properties=summary)
        txn.set_properties(applied)
        fault_point("replace_contents")  # inside the replacing transaction
        txn.commit_transaction()

    def _staged(self, model: LakeTable, names: list[str], batch: int) -> pa.Table:
        fs, _ = self.fs
        paths = self.staged_paths(f"Iceberg table {model.name!r}", names, batch)
        parts = [pq.read_table(p, filesystem=fs) for p in paths]
        return pa.concat_tables(parts, promote_options="default") if len(parts) > 1 else parts[0]

    def drop_table(self, model: LakeTable) -> Optional[str]:
        try:
            self.catalog.purge_table(model.identifier)
        except NoSuchTableError:
            return None
        return f"dropped iceberg table {model.name}"

    # ------------------------------------------------------------ inspection
    def snapshots(self, binding: BindingSpec) -> list[dict]:
        """The table's snapshots, oldest first: ``{"id", "operation", **summary}`` (tests, inspection)."""
        model = self.model(binding)
        table = self.run(lambda: self.catalog.load_table(model.identifier), "snapshots", model.name)
        return [{"id": s.snapshot_id, **(s.summary.model_dump() if s.summary else {})} for s in table.snapshots()]
