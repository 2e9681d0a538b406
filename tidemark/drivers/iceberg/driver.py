"""Apache Iceberg (pyiceberg, SQL catalog): the table format (:class:`IcebergFormat`) and the lake driver over it.

Config: ``{catalog: {uri: SQLALCHEMY_URL, warehouse: PATH_OR_URL, name: tidemark, ...}, namespace: NAME,
staging: "<warehouse>/_tidemark_staging", retry: {...}}`` (:mod:`.settings`).  Resource: ``{table: NAME}``
(the table ``NAMESPACE.NAME``).

The lake driver (:mod:`tidemark.drivers.lake.driver`) holds the commit pattern; Iceberg is:

* **Load**: a scan of the key columns and ``flow_document`` with an ``In`` filter per key
  column (pyiceberg prunes files by it, pyarrow filters rows).
* **Apply of batch N** to a table, in ONE Iceberg transaction (:meth:`IcebergFormat.commit`):

  Step 1. load the table; skip it if its property ``tidemark.<materialization>.applied``
          (``{"checkpoint_id", "batch"}``) holds this checkpoint at ``>= N``; refuse
          (``FencedOff``) a table that ``tidemark.owner`` gives to another checkpoint (the
          lake driver);
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
from typing import Any, Optional, cast

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
from pyiceberg.exceptions import NoSuchTableError, ResolveError, TableAlreadyExistsError
from pyiceberg.expressions import AlwaysTrue, And, BooleanExpression, In
from pyiceberg.schema import promote
from pyiceberg.table import Table as IcebergTable

from tidemark.drivers.common.columns import DOCUMENT_COLUMN, JSON, Column
from tidemark.drivers.common.settings import config_schema
from tidemark.drivers.iceberg.apply import append_rows, conform, replace_keys
from tidemark.drivers.iceberg.settings import SETTINGS, IcebergSettings, resolve_config
from tidemark.drivers.iceberg.tables import (
    RETRIES_PROPERTY,
    applied_property,
    applied_text,
    iceberg_type,
    partition_spec,
    remade,
    snapshot_summary,
    table_batch,
    table_schema,
    translate_error,
)
from tidemark.drivers.lake.driver import CAPABILITIES as LAKE_CAPABILITIES
from tidemark.drivers.lake.driver import LakeDriver
from tidemark.drivers.lake.format import DeadLetters, Staged, Table, run
from tidemark.drivers.lake.model import DELETE_COLUMN, LakeTable, lake_table
from tidemark.errors import EndpointUnavailable, IncompatibleSchema, SpecError, TidemarkError
from tidemark.faults import fault_point
from tidemark.protocol.messages import BindingSpec, SpecResponse

CAPABILITIES = LAKE_CAPABILITIES
RESOURCE = {"table": {"type": "string"}, "partition_by": {"type": "string"}, "document": {"enum": ["lean", "full"]}}

Handle = Table[IcebergTable]


class IcebergFormat:
    """Iceberg tables in one namespace of a catalog (a :class:`~tidemark.drivers.lake.format.TableFormat`)."""

    name = "iceberg"
    label = "iceberg table"
    capabilities = CAPABILITIES
    errors = (Exception,)
    type_of = staticmethod(iceberg_type)
    resolve_config = staticmethod(resolve_config)  # the warehouse, a SQLite catalog file, ``staging``

    def __init__(self, config: dict):
        self.settings = IcebergSettings.from_config(config)
        self.upkeep = {RETRIES_PROPERTY: "0"}  # never let pyiceberg re-commit on its own
        self.quarantine: Optional[DeadLetters] = None
        resource = {"type": "object", "required": ["table"], "properties": RESOURCE}
        self.spec = SpecResponse(config_schema(SETTINGS), resource)
        self._catalog: Any = None

    def __repr__(self) -> str:
        return (
            f"IcebergFormat(catalog={self.settings.shown(self.settings.properties['uri'])!r}, "
            f"namespace={'.'.join(self.settings.namespace)!r})"
        )

    @property
    def catalog(self) -> Any:
        if self._catalog is None:
            uri = self.settings.shown(self.settings.properties["uri"])
            self._catalog = run(self, self.settings.catalog, "connect", uri)
        return self._catalog

    def close(self) -> None:
        catalog, self._catalog = self._catalog, None
        if catalog is not None and hasattr(catalog, "close"):
            catalog.close()

    def translate(self, exc: BaseException, where: str) -> TidemarkError:
        return translate_error(exc, where, self.settings.secrets)

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

    def open(self, name: str) -> Optional[Handle]:
        try:
            table = self.catalog.load_table(tuple(name.split(".")))
        except NoSuchTableError:
            return None
        fields = table.schema().fields
        full = not any(f.name == DOCUMENT_COLUMN and not f.required for f in fields)
        return Table(table, table.properties, {f.name: f.field_type for f in fields}, full)

    def tag(self, materialization: str, checkpoint_id: Any) -> dict:
        return {"checkpoint_id": str(checkpoint_id)}

    def batch(self, table: Handle, materialization: str, tag: dict) -> int:
        return table_batch(table.handle, materialization, tag.get("checkpoint_id"))

    def scan(self, table: Handle, model: LakeTable, values: Optional[list[list]]) -> Optional[pa.Table]:
        names = tuple(dict.fromkeys([c.name for c in model.keys] + model.read_names))
        if values is None:
            return table.handle.scan(selected_fields=names).to_arrow()
        if table.handle.current_snapshot() is None:
            return None
        expr: BooleanExpression | None = None
        for c, vals in zip(model.keys, values):
            term = cast(Any, In)(c.name, set(vals))  # (term, values) positionally: see apply.key_filter
            expr = term if expr is None else And(expr, term)
        return table.handle.scan(row_filter=AlwaysTrue() if expr is None else expr, selected_fields=names).to_arrow()

    def check(self, model: LakeTable, table: Handle, rebuild: bool) -> None:
        """Iceberg keeps a table's partitioning, and changes a column's type in place only by its
        promotions (int -> long, float -> double, a wider decimal); a cut-over makes a date-time
        column anew between text and instant (:func:`.tables.remade`), but for the partition's."""
        want = [f.name for f in partition_spec(model).fields]
        have = [f.name for f in table.handle.spec().fields]
        if have != want:
            raise IncompatibleSchema(
                f"iceberg table {model.name!r} is partitioned by {have}, the binding asks for {want} (partition_by); "
                "tidemark does not repartition a table: keep its partitioning, or drop the table (tidemark reset) "
                "to create it anew"
            )
        if not rebuild:
            return
        for c in model.columns:
            want_type, have_type = iceberg_type(c.kind), table.columns.get(c.name)
            if have_type is None or have_type == want_type:
                continue
            if remade(have_type, want_type) and c.name != model.partition_by:
                continue
            try:
                promote(have_type, want_type)
            except ResolveError:
                raise IncompatibleSchema(
                    f"rebuild: iceberg table {model.name!r} would change column {c.name} from {have_type} to "
                    f"{want_type}, which Iceberg cannot do in place (only int -> long, float -> double and a wider "
                    "decimal). Keep the type, or start the view over with `tidemark reset`. Nothing was changed"
                ) from None

    def schema(self, model: LakeTable, table: Optional[Handle], missing: list[Column], properties: dict) -> None:
        if table is None:
            self.catalog.create_namespace_if_not_exists(self.settings.namespace)
            try:
                self.catalog.create_table(
                    model.identifier,
                    schema=table_schema(model),
                    properties=properties,
                    partition_spec=partition_spec(model),
                )
            except TableAlreadyExistsError as exc:  # created meanwhile: plan again
                raise EndpointUnavailable(f"iceberg table {model.name!r} was created meanwhile") from exc
            return
        with table.handle.transaction() as txn:
            if missing:
                with txn.update_schema() as schema:
                    for col in missing:
                        schema.add_column(col.name, iceberg_type(col.kind))
            if properties:
                txn.set_properties(properties)

    def commit(self, model: LakeTable, table: Handle, staged: Staged, owner: tuple[str, str]) -> None:
        """Steps 2-3 for one table (the lake driver runs step 1, and all again after a lost compare-and-swap)."""
        materialization, checkpoint_id = owner
        handle, batch = table.handle, staged.batch
        if handle.properties.get(RETRIES_PROPERTY) != "0":  # never let pyiceberg re-commit on its own
            with handle.transaction() as txn:
                txn.set_properties({RETRIES_PROPERTY: "0"})
            handle = self.catalog.load_table(model.identifier)
        summary = snapshot_summary(materialization, checkpoint_id, batch)
        txn = handle.transaction()
        changed = False
        if staged.names:
            parts = [pq.read_table(p, filesystem=staged.fs) for p in staged.paths(f"Iceberg table {model.name!r}")]
            rows = pa.concat_tables(parts, promote_options="default") if len(parts) > 1 else parts[0]
            schema = handle.schema().as_arrow()
            if model.delta:
                changed = append_rows(txn, conform(rows, schema), summary)
            else:
                deleted = rows.column(DELETE_COLUMN).fill_null(False)
                keys = rows.select([c.name for c in model.keys])
                kept = conform(rows.filter(pc.invert(deleted)), schema)
                changed = replace_keys(txn, [c.name for c in model.keys], keys, kept, summary)
        if not changed:  # an empty snapshot: the batch is recorded under the same compare-and-swap
            with txn.update_snapshot(snapshot_properties=summary).fast_append():
                pass
        txn.set_properties({applied_property(materialization): applied_text(checkpoint_id, batch)})
        fault_point("mid_apply")
        txn.commit_transaction()
        fault_point("iceberg_after_commit")

    def replace(self, live: LakeTable, shadow: Handle, owner: tuple[str, str], batch: int, properties: dict) -> None:
        """ONE Iceberg transaction: the schema becomes the shadow's (columns added, promoted or
        dropped, the key's columns required and the identifier fields), one overwrite snapshot
        of the shadow's rows (its summary naming owner and batch), and the properties with the
        ``applied`` one -- committed through the catalog's compare-and-swap."""
        materialization, checkpoint_id = owner
        source = shadow.handle
        rows = source.scan().to_arrow()
        summary = snapshot_summary(materialization, checkpoint_id, batch)
        applied = {**properties, applied_property(materialization): applied_text(checkpoint_id, batch)}
        try:
            table = self.catalog.load_table(live.identifier)
        except NoSuchTableError:  # a binding the edit added: created in one transaction with its rows
            txn = self.catalog.create_table_transaction(
                live.identifier, schema=source.schema(), partition_spec=source.spec(), properties=applied
            )
            txn.append(conform(rows, txn.table_metadata.schema().as_arrow()), snapshot_properties=summary)
            fault_point("replace_contents")
            txn.commit_transaction()
            return
        want = source.schema()
        keys = [c.name for c in live.keys]
        txn = table.transaction()
        have = {f.name: f for f in table.schema().fields}
        anew = [f.name for f in want.fields if f.name in have and remade(have[f.name].field_type, f.field_type)]
        if anew:  # dropped here, added back with the shadow's type by the union below
            with txn.update_schema(allow_incompatible_changes=True) as schema:
                for name in anew:
                    schema.delete_column(name)
            have = {f.name: f for f in txn.table_metadata.schema().fields}
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

    def drop(self, model: LakeTable) -> Optional[str]:
        try:
            self.catalog.purge_table(model.identifier)
        except NoSuchTableError:
            return None
        return f"dropped iceberg table {model.name}"


class IcebergDriver(LakeDriver):
    """The lake driver over Iceberg tables."""

    name = "iceberg"
    format_class = IcebergFormat
    format: IcebergFormat

    @property
    def catalog(self) -> Any:
        return self.format.catalog

    def snapshots(self, binding: BindingSpec) -> list[dict]:
        """The table's snapshots, oldest first: ``{"id", "operation", **summary}`` (tests, inspection)."""
        model = self.model(binding)
        table = self.run(lambda: self.catalog.load_table(model.identifier), "snapshots", model.name)
        return [{"id": s.snapshot_id, **(s.summary.model_dump() if s.summary else {})} for s in table.snapshots()]
