"""Apache Iceberg (pyiceberg, SQL catalog): staged Parquet, applied once per batch by the coordinator.

Config: ``{catalog: {uri: SQLALCHEMY_URL, warehouse: PATH_OR_URL, name: tidemark, ...}, namespace: NAME,
staging: "<warehouse>/_tidemark_staging", retry: {...}}`` (:mod:`.settings`).  Resource: ``{table: NAME}``
(the table ``NAMESPACE.NAME``).

Commit pattern ``idempotent-apply-coordinator`` (see :mod:`tidemark.drivers.base`):

* **Load** runs only after the session's Acknowledged, on the table's snapshot loaded then
  (read-committed): a scan of the key columns and ``flow_document`` with an ``In`` filter
  per key column.
* **Store** streams each binding's rows (typed columns, the document as JSON, a delete
  marker) into one staged Parquet file per (session, binding) under
  ``STAGING/<materialization>/``.
* **StartCommit** closes the files and returns the patch ``{"stages": {RANGE: {"batch": N,
  "checkpoint_id": C, "files": [[TABLE, FILE, ROWS], ...]}}}``.  Nothing is visible yet.
* **Coordinator Acknowledge** (:meth:`IcebergDriver.coordinator_acknowledge`), after the
  recovery log holds batch N, for every bound table, in ONE Iceberg transaction per table:

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
          which reloads the table and reads the property again;
  Step 4. once every table is applied, delete the materialization's staged files older
          than this call (applied ones and orphans of attempts that never reached the log).

  Re-running it any number of times, or two coordinators at once, gives each table one
  snapshot per batch.
"""

from __future__ import annotations

import json
import time
import urllib.parse
from typing import Any, Callable, Optional, Sequence, TypeVar

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.fs as pafs
import pyarrow.parquet as pq
from pyiceberg.exceptions import NoSuchTableError, TableAlreadyExistsError

from tidemark.drivers.base import Capabilities, CommitPattern, Driver, Position
from tidemark.drivers.common.columns import DOCUMENT_COLUMN, JSON, Column, columns_to_add, dumps, field_kind
from tidemark.drivers.common.identity import PROPERTY as IDENTITY_PROPERTY
from tidemark.drivers.common.identity import parse_record, record_text
from tidemark.drivers.common.settings import config_schema
from tidemark.drivers.iceberg.apply import append_rows, conform, replace_keys
from tidemark.drivers.iceberg.settings import SETTINGS, IcebergSettings, resolve_config
from tidemark.drivers.iceberg.tables import (
    DELETE_COLUMN,
    KEY_PROPERTY,
    MODE_PROPERTY,
    OWNER_PROPERTY,
    RETRIES_PROPERTY,
    SUMMARY_BATCH,
    SUMMARY_CHECKPOINT,
    SUMMARY_MATERIALIZATION,
    TableModel,
    applied_property,
    applied_text,
    iceberg_type,
    key_of,
    owner_of,
    owner_text,
    stages_of,
    table_batch,
    translate_error,
)
from tidemark.drivers.iceberg.transactor import IcebergTransactor
from tidemark.errors import EndpointUnavailable, FencedOff, IncompatibleSchema, RecoveryError, SpecError
from tidemark.faults import fault_point
from tidemark.policy import retry
from tidemark.protocol.messages import (
    Applied,
    Apply,
    BindingSpec,
    Open,
    Opened,
    SpecResponse,
    Validate,
    Validated,
    ValidatedBinding,
)

T = TypeVar("T")

CAPABILITIES = Capabilities(
    commit_pattern=CommitPattern.IDEMPOTENT_APPLY_COORDINATOR,
    delta_updates=True,
    max_load_keys=10_000,
    max_store_docs=10_000,
    concurrent_shards=True,
)


class IcebergDriver(Driver):
    name = "iceberg"
    reports_created = True

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

    def __getstate__(self):
        return {"config": self.config}

    def __setstate__(self, st):
        self.__init__(st["config"])

    # -------------------------------------------------------------- plumbing
    def run(self, fn: Callable[[], T], what: str, where: str, *, idempotent: bool = True) -> T:
        """Run ``fn`` translating library errors (passwords masked); retry transient ones
        under the policy if ``fn`` may run twice."""

        def attempt() -> T:
            try:
                return fn()
            except Exception as exc:
                raise translate_error(exc, where, self.settings.secrets) from exc

        return retry(attempt, self.policy, what=f"iceberg {what}") if idempotent else attempt()

    @property
    def catalog(self):
        if self._catalog is None:
            self._catalog = self.run(
                self.settings.catalog, "connect", self.settings.shown(self.settings.properties["uri"])
            )
        return self._catalog

    @property
    def fs(self) -> tuple[pafs.FileSystem, str]:
        """The staging file system and its base path."""
        if self._fs is None:
            self._fs = self.run(self.settings.staging_fs, "staging", self.staging)
        return self._fs

    def stage_dir(self, materialization: str) -> str:
        return f"{self.fs[1]}/{urllib.parse.quote(materialization, safe='')}"

    def model(self, binding: BindingSpec) -> TableModel:
        res = binding.resource if isinstance(binding.resource, dict) else {}
        name = res.get("table")
        if not isinstance(name, str) or not name:
            raise SpecError(
                f"binding of {binding.collection!r}: resource needs {{table: NAME}}, got {binding.resource!r}"
            )
        if any(ch in name for ch in "./\\\x00") or name.strip() != name:
            raise SpecError(f"iceberg: invalid table name {name!r} (no '.', '/', '\\', or surrounding spaces)")
        keys = tuple(Column(f.name, field_kind(f), True) for f in binding.key_fields)
        if not keys:
            raise SpecError(f"iceberg table {name!r}: no key fields")
        values = tuple(Column(f.name, field_kind(f)) for f in binding.value_fields)
        names = [c.name for c in keys + values] + [DOCUMENT_COLUMN, DELETE_COLUMN]
        dup = sorted({n for n in names if names.count(n) > 1})
        if dup:
            raise IncompatibleSchema(
                f"iceberg table {name!r}: column names collide: {dup} "
                f"({DOCUMENT_COLUMN!r} and {DELETE_COLUMN!r} are reserved)"
            )
        part = res.get("partition_by")
        if part is not None:
            kinds = {c.name: c.kind for c in keys + values}
            if not isinstance(part, str) or kinds.get(part) in (None, JSON):
                scalars = sorted(n for n, k in kinds.items() if k != JSON)
                raise SpecError(
                    f"iceberg table {name!r}: partition_by must name one of its scalar columns "
                    f"({', '.join(scalars)}), got {part!r}"
                )
        return TableModel(self.settings.namespace + (name,), keys, values, bool(binding.delta_updates), part)

    def load(self, model: TableModel):
        """The table as the catalog has it now (raises NoSuchTableError)."""
        return self.catalog.load_table(model.identifier)

    def _load_or_none(self, model: TableModel):
        try:
            return self.load(model)
        except NoSuchTableError:
            return None

    # ----------------------------------------------------------- setup phase
    def spec(self) -> SpecResponse:
        return SpecResponse(
            config_schema=config_schema(SETTINGS),
            resource_schema={
                "type": "object",
                "required": ["table"],
                "properties": {"table": {"type": "string"}, "partition_by": {"type": "string"}},
            },
        )

    def _check(self, model: TableModel, table) -> list[Column]:
        """The columns to add to an existing table; raises IncompatibleSchema."""
        existing = {f.name: f.field_type for f in table.schema().fields}
        return columns_to_add(
            f"iceberg table {model.name!r}",
            model.keys,
            model.columns,
            model.delta,
            table.properties,
            existing,
            iceberg_type,
        )

    def validate(self, req: Validate) -> Validated:
        for b in req.bindings:
            model = self.model(b)

            def body(model=model) -> None:
                table = self._load_or_none(model)
                if table is not None:
                    self._check(model, table)

            self.run(body, "validate", model.name)
        return Validated(tuple(ValidatedBinding(b.resource_path, b.delta_updates) for b in req.bindings))

    def apply(self, req: Apply) -> Applied:
        actions: list[str] = []
        created: list[tuple] = []
        owner = (req.materialization, str(req.checkpoint_id)) if req.checkpoint_id else None
        models = [(b, self.model(b)) for b in req.bindings]
        if models and not req.dry_run:
            self.run(
                lambda: self.catalog.create_namespace_if_not_exists(self.settings.namespace),
                "apply",
                ".".join(self.settings.namespace),
            )
        for i, (b, model) in enumerate(models):
            record = record_text(req.identities[i], model.name) if owner and i < len(req.identities) else None

            def body(model=model, b=b, record=record) -> None:
                table = self._load_or_none(model)
                if table is None:
                    actions.append(f"create iceberg table {model.name}")
                    created.append(b.resource_path)
                    if not req.dry_run:
                        props = {
                            KEY_PROPERTY: dumps([c.name for c in model.keys]),
                            RETRIES_PROPERTY: "0",
                            MODE_PROPERTY: "true" if model.delta else "false",
                        }
                        if owner:
                            props[OWNER_PROPERTY] = owner_text(*owner)
                        if record:
                            props[IDENTITY_PROPERTY] = record
                        try:
                            self.catalog.create_table(
                                model.identifier,
                                schema=model.schema(),
                                properties=props,
                                partition_spec=model.partition_spec(),
                            )
                        except TableAlreadyExistsError as exc:  # created meanwhile: plan again
                            actions.pop()
                            created.pop()
                            raise EndpointUnavailable(f"iceberg table {model.name!r} was created meanwhile") from exc
                    return
                missing = self._check(model, table)
                want = [f.name for f in model.partition_spec().fields]
                if [f.name for f in table.spec().fields] != want:
                    raise IncompatibleSchema(
                        f"iceberg table {model.name!r} is partitioned by {[f.name for f in table.spec().fields]}, the "
                        f"binding asks for {want} (partition_by); tidemark does not repartition a table: keep its "
                        "partitioning, or drop the table (tidemark reset) to create it anew"
                    )
                have = owner_of(table.properties)
                if owner and have is not None and have != owner:
                    raise RecoveryError(
                        f"iceberg table {model.name!r} belongs to materialization {have[0]!r} of tidemark checkpoint "
                        f"{have[1]}, not to this one ({owner[1]}). Nothing was changed"
                    )
                updates = {}
                if owner and have is None:  # a table of an older run without an owner: this checkpoint takes it
                    updates[OWNER_PROPERTY] = owner_text(*owner)
                if record and not table.properties.get(IDENTITY_PROPERTY):
                    updates[IDENTITY_PROPERTY] = record
                if table.properties.get(RETRIES_PROPERTY) != "0":
                    updates[RETRIES_PROPERTY] = "0"
                for col in missing:
                    actions.append(f"add column {col.name} {iceberg_type(col.kind)} to {model.name}")
                if (missing or updates) and not req.dry_run:
                    with table.transaction() as txn:
                        if missing:
                            with txn.update_schema() as schema:
                                for col in missing:
                                    schema.add_column(col.name, iceberg_type(col.kind))
                        if updates:
                            txn.set_properties(updates)

            self.run(body, "apply", model.name)
        return Applied("; ".join(actions) or "nothing to do", tuple(created))

    # ----------------------------------------------------- transaction phase
    def open(self, req: Open) -> tuple[IcebergTransactor, Opened]:
        models = [self.model(b) for b in req.bindings]
        return IcebergTransactor(self, req, models), Opened(None)  # the recovery log is authoritative

    def coordinator_acknowledge(
        self, materialization: str, state: Any, runtime_checkpoint: dict, bindings: Sequence[BindingSpec]
    ) -> None:
        """Apply batch N's staged files to every bound table, once (see the module docstring)."""
        started = time.time()
        batch = int(runtime_checkpoint["batch_id"])
        checkpoint_id = str(runtime_checkpoint.get("checkpoint_id"))
        files: dict[str, list[str]] = {}
        for stage in stages_of(state):
            if stage.get("batch") != batch or str(stage.get("checkpoint_id")) != checkpoint_id:
                continue  # an earlier batch (applied before this one was staged) or a stale range
            for name, path, rows in stage.get("files") or ():
                if rows:
                    files.setdefault(name, []).append(path)
        models = {m.name: m for m in (self.model(b) for b in bindings)}
        unbound = []
        for name in sorted(set(files) - set(models)):
            model = TableModel(tuple(name.split(".")), (), (), False)
            table = self.run(lambda model=model: self._load_or_none(model), "apply batch", name)
            if table is None or table_batch(table, materialization, checkpoint_id) < batch:
                unbound.append(name)
        if unbound:
            raise RecoveryError(
                f"batch {batch} of {materialization!r} staged data for Iceberg tables that are no "
                f"longer bound: {unbound}; restore the bindings to apply it"
            )
        owner = (materialization, checkpoint_id)
        for name in sorted(models):  # every bound table records the batch, with data or without
            self.run(
                lambda name=name: self._apply_table(models[name], files.get(name, []), owner, batch),
                "apply batch",
                name,
            )
        # Step 4: the staged files of every applied or abandoned attempt.
        self.run(lambda: self._remove_staged(materialization, before=started), "clean staging", self.staging)

    def _apply_table(self, model: TableModel, names: list[str], owner: tuple[str, str], batch: int) -> bool:
        """Steps 1-3 for one table; False if it already holds the batch.  Runs again (from the
        reload) after a lost compare-and-swap."""
        materialization, checkpoint_id = owner
        table = self.load(model)
        if table_batch(table, materialization, checkpoint_id) >= batch:
            return False
        have = owner_of(table.properties)
        if have is not None and have != owner:  # the fence between two jobs on one table
            raise FencedOff(
                f"iceberg table {model.name!r} now belongs to materialization {have[0]!r} of tidemark "
                f"checkpoint {have[1]}; batch {batch} of {materialization!r} was not applied to it"
            )
        if table.properties.get(RETRIES_PROPERTY) != "0":  # never let pyiceberg re-commit on its own
            with table.transaction() as txn:
                txn.set_properties({RETRIES_PROPERTY: "0"})
            table = self.load(model)
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
        return True

    def _staged(self, model: TableModel, names: list[str], batch: int) -> pa.Table:
        fs, base = self.fs
        paths = [f"{base}/{n}" for n in names]
        lost = [p for p, info in zip(paths, fs.get_file_info(paths)) if info.type != pafs.FileType.File]
        if lost:
            raise RecoveryError(
                f"Iceberg table {model.name!r}: batch {batch} is in the recovery log but not "
                f"applied, and its staged files are gone: {lost}"
            )
        parts = [pq.read_table(p, filesystem=fs) for p in paths]
        return pa.concat_tables(parts, promote_options="default") if len(parts) > 1 else parts[0]

    def _remove_staged(self, materialization: str, before: float) -> int:
        fs, _ = self.fs
        infos = fs.get_file_info(pafs.FileSelector(self.stage_dir(materialization), allow_not_found=True))
        n = 0
        for info in infos:
            if info.type == pafs.FileType.File and (info.mtime is None or info.mtime.timestamp() < before):
                try:
                    fs.delete_file(info.path)
                    n += 1
                except FileNotFoundError:
                    pass
        return n

    # ------------------------------------------------------------ inspection
    def dump(self, materialization: str, binding: BindingSpec):
        model = self.model(binding)
        cols = tuple(c.name for c in model.keys) + (DOCUMENT_COLUMN,)
        table = self.run(lambda: self.load(model).scan(selected_fields=cols).to_arrow(), "dump", model.name)
        docs = [json.loads(d) for d in table.column(DOCUMENT_COLUMN).to_pylist()]
        if model.delta:
            return docs
        keys = zip(*(table.column(c.name).to_pylist() for c in model.keys))
        return {key_of(model, k): d for k, d in zip(keys, docs)}

    def identities(self, materialization: str, bindings: Sequence[BindingSpec]) -> list[Optional[dict]]:
        out: list[Optional[dict]] = []
        for b in bindings:
            model = self.model(b)
            table = self.run(lambda model=model: self._load_or_none(model), "identities", model.name)
            out.append(None if table is None else parse_record(table.properties.get(IDENTITY_PROPERTY)))
        return out

    def positions(self, materialization: str, bindings: Sequence[BindingSpec]) -> list[Position]:
        """Per bound table that exists: its owner (a table property) and the last batch of the
        owner it holds (:func:`.tables.table_batch`: its ``applied`` property, or less if the
        table was rolled back)."""
        out = []
        for b in bindings:
            model = self.model(b)
            table = self.run(lambda model=model: self._load_or_none(model), "positions", model.name)
            if table is None:
                continue
            place = f"iceberg table {model.name}"
            have = owner_of(table.properties)
            if have is None:
                out.append(Position(place, materialization, None, -1, resource=b.resource_path))
            else:
                out.append(Position(place, have[0], have[1], table_batch(table, *have), resource=b.resource_path))
        return out

    def snapshots(self, binding: BindingSpec) -> list[dict]:
        """The table's snapshots, oldest first: ``{"id", "operation", **summary}`` (tests, inspection)."""
        table = self.run(lambda: self.load(self.model(binding)), "snapshots", self.model(binding).name)
        return [{"id": s.snapshot_id, **(s.summary.model_dump() if s.summary else {})} for s in table.snapshots()]

    def drop(self, materialization: str, bindings: Sequence[BindingSpec]) -> list[str]:
        """Drop the bindings' tables (with their files) and delete the materialization's staged files."""
        done = []
        for b in bindings:
            model = self.model(b)

            def purge(model=model) -> bool:
                try:
                    self.catalog.purge_table(model.identifier)
                except NoSuchTableError:
                    return False
                return True

            if self.run(purge, "drop", model.name):
                done.append(f"dropped iceberg table {model.name}")
        fs, _ = self.fs
        stage = self.stage_dir(materialization)
        if fs.get_file_info(stage).type != pafs.FileType.NotFound:
            fs.delete_dir(stage)
            done.append(f"deleted staged files of {materialization!r}")
        return done

    def staged_files(self, materialization: str) -> list[str]:
        """Names of the staged files of a materialization (tests, ``tidemark status``)."""
        fs, _ = self.fs
        infos = fs.get_file_info(pafs.FileSelector(self.stage_dir(materialization), allow_not_found=True))
        return sorted(i.base_name for i in infos if i.type == pafs.FileType.File)

    def close(self) -> None:
        catalog, self._catalog = self._catalog, None
        if catalog is not None and hasattr(catalog, "close"):
            catalog.close()
