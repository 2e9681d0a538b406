"""Delta Lake (delta-rs, no JVM): staged Parquet, applied once per batch by the coordinator.

Config: ``{path: "/lake/views", staging: "<path>/_tidemark_staging", storage_options: {...},
retry: {...}}``.  Resource: ``{table: NAME}`` (the table ``PATH/NAME``) or ``{path: P}``
(absolute, a URI, or relative to ``path``).

Commit pattern ``idempotent-apply-coordinator`` (see :mod:`tidemark.drivers.base`):

* **Load** runs only after the session's Acknowledged, on a snapshot of the table taken
  then: one DataFusion query per Load chunk, ``key IN (...)`` plus the chunk's min/max
  bounds so that delta-rs prunes files by their statistics.
* **Store** streams each binding's rows (typed columns, the document as JSON, a delete
  marker) into one staged Parquet file per (session, binding) under
  ``STAGING/<materialization>/``.
* **Quarantine** (``on_invalid: quarantine``): the batch's invalid documents, kept by the
  session and written at StartCommit into one staged Parquet file.
* **StartCommit** closes the files and returns the patch
  ``{"stages": {RANGE: {"batch": N, "app": APP_ID, "files": [[TABLE, FILE, ROWS], ...],
  "quarantine": [[FILE, ROWS]]}}}``.  Nothing is visible in the tables yet.
* **Coordinator Acknowledge** (:meth:`DeltaDriver.coordinator_acknowledge`), after the
  recovery log holds batch N, for each table named by batch N's stages:

  Step 1. skip the table if ``transaction_version(APP_ID) >= N`` (it is applied);
  Step 2. one MERGE of all shards' staged files (upsert + hard delete; delta-updates
          tables: one append), committed with the app transaction ``(APP_ID, N)``;
          a MERGE that changed nothing still commits the app transaction (empty commit);
          then, if batch N quarantined documents, steps 1-2 for the dead-letter table
          ``PATH/tidemark_quarantine`` (one append, :mod:`tidemark.drivers.delta.quarantine`);
  Step 3. once every table is applied, delete the staged files of the materialization
          older than this call: the applied ones and orphans of attempts that never
          reached the recovery log (a crashed or fenced shard, a re-run batch).

  Re-running it any number of times gives the same tables: each commit carries its
  batch, and a table at ``>= N`` is skipped.  ``APP_ID`` is
  ``tidemark/<materialization>/<checkpoint_id>``, so a new runtime checkpoint (batch ids
  restarting at 0) is never mistaken for one already applied.

Tables are created by Apply from the binding's fields (key columns not null, one typed
column per top-level scalar property, ``flow_document`` with the whole document as JSON)
and gain nullable columns when the schema grows.  ``date-time`` strings stay strings
(lossless); objects, arrays and unions are JSON text.
"""

from __future__ import annotations

import json
import os
import time
import urllib.parse
from typing import Any, Callable, Optional, Sequence, TypeVar

import pyarrow as pa
import pyarrow.dataset as pds
import pyarrow.fs as pafs
from deltalake import CommitProperties, DeltaTable, Transaction, write_deltalake
from deltalake import Field as DeltaField
from deltalake.exceptions import DeltaError, TableNotFoundError

from tidemark.drivers.base import Capabilities, CommitPattern, Driver, Position, resolve_local_path
from tidemark.drivers.common.columns import DOCUMENT_COLUMN, QUARANTINE_TABLE, Column, columns_to_add, dumps, field_kind
from tidemark.drivers.common.identity import PROPERTY as IDENTITY_PROPERTY
from tidemark.drivers.common.identity import record_text
from tidemark.drivers.common.settings import config_schema
from tidemark.drivers.delta.quarantine import apply_quarantine, drop_quarantine, read_quarantine
from tidemark.drivers.delta.settings import SETTINGS, DeltaSettings
from tidemark.drivers.delta.tables import (
    DELETE_COLUMN,
    KEY_PROPERTY,
    MODE_PROPERTY,
    OWNER_PROPERTY,
    TableModel,
    app_id,
    applied_batch,
    delta_type,
    ident,
    identity_of,
    is_uri,
    join_path,
    key_of,
    owner_of,
    staged_reader,
    stages_of,
    translate_error,
)
from tidemark.drivers.delta.transactor import DeltaTransactor
from tidemark.errors import FencedOff, IncompatibleSchema, RecoveryError, SpecError, TidemarkError
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
    quarantine=True,  # PATH/tidemark_quarantine, applied with the batch (drivers/delta/quarantine.py)
)


class DeltaDriver(Driver):
    name = "delta"
    reports_created = True

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

    def __getstate__(self):
        return {"config": self.config}

    def __setstate__(self, st):
        self.__init__(st["config"])

    # -------------------------------------------------------------- plumbing
    def run(self, fn: Callable[[], T], what: str, where: str, *, idempotent: bool = True) -> T:
        """Run ``fn`` translating library errors; retry transient ones under the policy if
        ``fn`` may run twice (not a write into an open staged file)."""

        def attempt() -> T:
            try:
                return fn()
            except (DeltaError, OSError, pa.ArrowException) as exc:
                raise translate_error(exc, where) from exc

        return retry(attempt, self.policy, what=f"delta {what}") if idempotent else attempt()

    @property
    def fs(self) -> tuple[pafs.FileSystem, str]:
        """The staging file system and its base path."""
        if self._fs is None:
            if not is_uri(self.staging):
                os.makedirs(self.staging, exist_ok=True)
            self._fs = pafs.FileSystem.from_uri(self.staging)
        return self._fs

    def stage_dir(self, materialization: str) -> str:
        fs, base = self.fs
        return f"{base.rstrip('/')}/{urllib.parse.quote(materialization, safe='')}"

    def table(self, location: str) -> DeltaTable:
        return DeltaTable(location, storage_options=self.storage_options)

    def model(self, binding: BindingSpec) -> TableModel:
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
        keys = tuple(Column(f.name, field_kind(f), True) for f in binding.key_fields)
        if not keys:
            raise SpecError(f"delta table {location!r}: no key fields")
        values = tuple(Column(f.name, field_kind(f)) for f in binding.value_fields)
        names = [c.name for c in keys + values] + [DOCUMENT_COLUMN, DELETE_COLUMN]
        dup = sorted({n for n in names if names.count(n) > 1})
        if dup:
            raise IncompatibleSchema(
                f"delta table {location!r}: column names collide: {dup} "
                f"({DOCUMENT_COLUMN!r} and {DELETE_COLUMN!r} are reserved)"
            )
        return TableModel(location, keys, values, bool(binding.delta_updates))

    # ----------------------------------------------------------- setup phase
    def spec(self) -> SpecResponse:
        return SpecResponse(
            config_schema=config_schema(SETTINGS),
            resource_schema={"type": "object", "properties": {"table": {"type": "string"}, "path": {"type": "string"}}},
        )

    def _plan(self, model: TableModel) -> Optional[list[Column]]:
        """None: create the table; else the columns to add. Raises IncompatibleSchema."""
        try:
            dt = self.table(model.location)
        except TableNotFoundError:
            return None
        existing = {f.name: str(getattr(f.type, "type", f.type)) for f in dt.schema().fields}
        return columns_to_add(
            f"delta table {model.location!r}",
            model.keys,
            model.columns,
            model.delta,
            dt.metadata().configuration or {},
            existing,
            delta_type,
        )

    def validate(self, req: Validate) -> Validated:
        for b in req.bindings:
            self.run(lambda b=b: self._plan(self.model(b)), "validate", repr(b.resource))
        return Validated(tuple(ValidatedBinding(b.resource_path, b.delta_updates) for b in req.bindings))

    def apply(self, req: Apply) -> Applied:
        actions: list[str] = []
        created: list[tuple] = []
        owner = (
            dumps({"materialization": req.materialization, "checkpoint_id": req.checkpoint_id})
            if req.checkpoint_id
            else None
        )
        for i, b in enumerate(req.bindings):
            model = self.model(b)
            record = None
            if owner and i < len(req.identities):
                record = record_text(req.identities[i], model.location)

            def body(model=model, b=b, record=record) -> None:
                missing = self._plan(model)
                if missing is None:
                    actions.append(f"create delta table {model.location}")
                    created.append(b.resource_path)
                    if not req.dry_run:
                        conf = {
                            KEY_PROPERTY: dumps([c.name for c in model.keys]),
                            MODE_PROPERTY: "true" if model.delta else "false",
                        }
                        if owner:
                            conf[OWNER_PROPERTY] = owner
                        if record:
                            conf[IDENTITY_PROPERTY] = record
                        DeltaTable.create(
                            model.location,
                            schema=model.arrow_schema(),
                            mode="ignore",
                            configuration=conf,
                            storage_options=self.storage_options,
                            raise_if_key_not_exists=False,
                        )
                    return
                for col in missing:
                    actions.append(f"add column {col.name} {delta_type(col.kind)} to {model.location}")
                if missing and not req.dry_run:
                    self.table(model.location).alter.add_columns(
                        [DeltaField(c.name, delta_type(c.kind), nullable=True) for c in missing]
                    )
                if owner and not req.dry_run:
                    have = owner_of(self.table(model.location))
                    # tidemark's own properties are not Delta's: delta-rs refuses a key it does
                    # not know unless told (raise_if_not_exists=False), as DeltaTable.create is
                    if have is None:  # a table of an older tidemark: this checkpoint takes it
                        self.table(model.location).alter.set_table_properties(
                            {OWNER_PROPERTY: owner}, raise_if_not_exists=False
                        )
                    elif have != (req.materialization, req.checkpoint_id):
                        raise RecoveryError(
                            f"delta table {model.location!r} belongs to materialization {have[0]!r} of tidemark "
                            f"checkpoint {have[1]}, not to this one ({req.checkpoint_id}); nothing was changed"
                        )
                    if record and identity_of(self.table(model.location)) is None:
                        self.table(model.location).alter.set_table_properties(
                            {IDENTITY_PROPERTY: record}, raise_if_not_exists=False
                        )
                if record and req.dry_run and identity_of(self.table(model.location)) is None:
                    # a table of a tidemark before identity records: the run records it
                    actions.append(f"record the view's identity on {model.location}")

            self.run(body, "apply", model.location)
        return Applied("; ".join(actions) or "nothing to do", tuple(created))

    # ----------------------------------------------------- transaction phase
    def open(self, req: Open) -> tuple[DeltaTransactor, Opened]:
        models = [self.model(b) for b in req.bindings]
        return DeltaTransactor(self, req, models), Opened(None)  # the recovery log is authoritative

    def coordinator_acknowledge(
        self, materialization: str, state: Any, runtime_checkpoint: dict, bindings: Sequence[BindingSpec]
    ) -> None:
        """Apply batch N's staged files to every table, once (see the module docstring)."""
        started = time.time()
        batch = int(runtime_checkpoint["batch_id"])
        app = app_id(materialization, runtime_checkpoint.get("checkpoint_id"))
        files: dict[str, list[str]] = {}
        for stage in stages_of(state):
            if stage.get("batch") != batch:
                continue  # an earlier batch (applied before this one was staged) or a stale range
            for location, name, rows in stage.get("files") or ():
                if rows:
                    files.setdefault(location, []).append(name)
        models = {m.location: m for m in (self.model(b) for b in bindings)}
        unbound = [loc for loc in sorted(set(files) - set(models)) if applied_batch(self.table(loc), app) < batch]
        if unbound:
            raise RecoveryError(
                f"batch {batch} of {materialization!r} staged data for Delta tables that are no "
                f"longer bound: {unbound}; restore the bindings to apply it"
            )
        owner = (materialization, runtime_checkpoint.get("checkpoint_id"))
        for location in sorted(models):  # every bound table records the batch, with data or without
            self.run(
                lambda location=location: self._apply_table(
                    models[location], files.get(location, []), app, batch, owner
                ),
                "apply batch",
                location,
            )
        quarantined = [
            name
            for stage in stages_of(state)
            if stage.get("batch") == batch
            for name, rows in stage.get("quarantine") or ()
            if rows
        ]
        if quarantined:  # the batch's invalid documents, by the same rule
            self.run(
                lambda: apply_quarantine(self, quarantined, app, batch), "apply quarantine", self.quarantine_location
            )
        # Step 3: the staged files of every applied or abandoned attempt.
        self.run(lambda: self._remove_staged(materialization, before=started), "clean staging", self.staging)

    def _apply_table(self, model: TableModel, names: list[str], app: str, batch: int, owner: tuple) -> None:
        # Step 1
        dt = self.table(model.location)
        if applied_batch(dt, app) >= batch:
            return
        have = owner_of(dt)
        if have is not None and have != owner:  # the fence between two jobs on one table
            raise FencedOff(
                f"delta table {model.location!r} now belongs to materialization {have[0]!r} of tidemark "
                f"checkpoint {have[1]}; batch {batch} of {owner[0]!r} was not applied to it"
            )
        if not names:
            dt.create_write_transaction(
                [],
                mode="append",
                schema=dt.schema(),
                commit_properties=CommitProperties(app_transactions=[Transaction(app, batch)]),
            )
            return
        fs, _ = self.fs
        paths = [f"{self.fs[1].rstrip('/')}/{n}" for n in names]
        lost = [p for p, info in zip(paths, fs.get_file_info(paths)) if info.type != pafs.FileType.File]
        if lost:
            raise RecoveryError(
                f"Delta table {model.location!r}: batch {batch} is in the recovery log but not "
                f"applied, and its staged files are gone: {lost}"
            )
        source = pds.dataset(paths, format="parquet", filesystem=fs)
        commit = CommitProperties(app_transactions=[Transaction(app, batch)])
        # Step 2
        if model.delta:
            write_deltalake(
                dt,
                staged_reader(source, drop=DELETE_COLUMN, like=pa.schema(dt.schema().to_arrow())),
                mode="append",
                commit_properties=commit,
                storage_options=self.storage_options,
            )
        else:
            self._merge(dt, model, staged_reader(source), commit)
        dt = self.table(model.location)
        if applied_batch(dt, app) < batch:  # the MERGE changed nothing, so committed nothing: record the batch
            dt.create_write_transaction([], mode="append", schema=dt.schema(), commit_properties=commit)

    def _merge(self, dt: DeltaTable, model: TableModel, source: pa.RecordBatchReader, commit) -> None:
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
    def read_rows(self, source: str) -> list[dict]:
        """The rows of an existing Delta table: ``source`` is its path or URI (a relative path
        is under the endpoint's ``path``), read with the endpoint's ``storage_options``."""
        location = source if is_uri(source) or os.path.isabs(source) else join_path(self.root, source)
        return self.run(lambda: self.table(location).to_pyarrow_table().to_pylist(), "read", location)

    def dump(self, materialization: str, binding: BindingSpec):
        model = self.model(binding)
        cols = [c.name for c in model.keys] + [DOCUMENT_COLUMN]
        table = self.run(lambda: self.table(model.location).to_pyarrow_table(columns=cols), "dump", model.location)
        docs = [json.loads(d) for d in table.column(DOCUMENT_COLUMN).to_pylist()]
        if model.delta:
            return docs
        keys = zip(*(table.column(c.name).to_pylist() for c in model.keys))
        return {key_of(model, k): d for k, d in zip(keys, docs)}

    def identities(self, materialization: str, bindings: Sequence[BindingSpec]) -> list[Optional[dict]]:
        out: list[Optional[dict]] = []
        for b in bindings:
            location = self.model(b).location
            if not self._exists(location):
                out.append(None)
                continue
            out.append(identity_of(self.run(lambda location=location: self.table(location), "identities", location)))
        return out

    def positions(self, materialization: str, bindings: Sequence[BindingSpec]) -> list[Position]:
        """Per bound table that exists: its owner (a table property) and the last batch of the
        owner's app transaction."""
        out = []
        for b in bindings:
            model = self.model(b)
            try:
                dt = self.run(lambda model=model: self.table(model.location), "positions", model.location)
            except (TableNotFoundError, TidemarkError):
                if not self._exists(model.location):
                    continue
                raise
            have = owner_of(dt)
            if have is None:
                out.append(
                    Position(f"delta table {model.location}", materialization, None, -1, resource=b.resource_path)
                )
                continue
            out.append(
                Position(
                    f"delta table {model.location}",
                    have[0],
                    have[1],
                    applied_batch(dt, app_id(*have)),
                    resource=b.resource_path,
                )
            )
        return out

    def _exists(self, location: str) -> bool:
        try:
            return DeltaTable.is_deltatable(location, storage_options=self.storage_options)
        except Exception:  # noqa: BLE001 - an unreachable store is reported by the next call
            return False

    def quarantined(self, materialization: str) -> list[dict]:
        """The materialization's rows of the dead-letter table (tests, inspection)."""
        return self.run(lambda: read_quarantine(self, materialization), "read quarantine", self.quarantine_location)

    def drop(self, materialization: str, bindings: Sequence[BindingSpec]) -> list[str]:
        """Delete the bindings' tables (their folders), the materialization's staged files and its
        rows of the quarantine table."""
        done = []
        for b in bindings:
            location = self.model(b).location
            fs, path = pafs.FileSystem.from_uri(location) if is_uri(location) else (pafs.LocalFileSystem(), location)
            if fs.get_file_info(path).type != pafs.FileType.NotFound:
                fs.delete_dir(path)
                done.append(f"deleted delta table {location}")
        fs, _ = self.fs
        stage = self.stage_dir(materialization)
        if fs.get_file_info(stage).type != pafs.FileType.NotFound:
            fs.delete_dir(stage)
            done.append(f"deleted staged files of {materialization!r}")
        if self._exists(self.quarantine_location):
            n = self.run(lambda: drop_quarantine(self, materialization), "drop quarantine", self.quarantine_location)
            if n:
                done.append(f"deleted {n} quarantine rows of {materialization!r}")
        return done

    def staged_files(self, materialization: str) -> list[str]:
        """Names of the staged files of a materialization (tests, ``tidemark status``)."""
        fs, _ = self.fs
        infos = fs.get_file_info(pafs.FileSelector(self.stage_dir(materialization), allow_not_found=True))
        return sorted(i.base_name for i in infos if i.type == pafs.FileType.File)
