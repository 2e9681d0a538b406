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
* **StartCommit** closes the files and returns the patch
  ``{"stages": {RANGE: {"batch": N, "app": APP_ID, "files": [[TABLE, FILE, ROWS], ...]}}}``.
  Nothing is visible in the tables yet.
* **Coordinator Acknowledge** (:meth:`DeltaDriver.coordinator_acknowledge`), after the
  recovery log holds batch N, for each table named by batch N's stages:

  Step 1. skip the table if ``transaction_version(APP_ID) >= N`` (it is applied);
  Step 2. one MERGE of all shards' staged files (upsert + hard delete; delta-updates
          tables: one append), committed with the app transaction ``(APP_ID, N)``;
          a MERGE that changed nothing still commits the app transaction (empty commit);
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
import uuid
from dataclasses import dataclass
from typing import Any, Callable, Iterator, Optional, Sequence, TypeVar

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.dataset as pds
import pyarrow.fs as pafs
import pyarrow.parquet as pq
from deltalake import CommitProperties, DeltaTable, Field as DeltaField, QueryBuilder, Transaction, write_deltalake
from deltalake.exceptions import CommitFailedError, DeltaError, TableNotFoundError

from tidemark.drivers.base import Capabilities, CommitPattern, Driver, Position, ReadCommittedLoads, Transactor
from tidemark.drivers.sql import (
    BOOLEAN, DOCUMENT_COLUMN, INTEGER, JSON, NUMBER, Column, coerce, dumps, field_kind,
)
from tidemark.errors import (
    DriverError, EndpointUnavailable, FencedOff, IncompatibleSchema, RecoveryError, SpecError, TidemarkError,
)
from tidemark.faults import fault_point
from tidemark.policy import RetryPolicy, retry
from tidemark.protocol.messages import (
    Acknowledge, Acknowledged, Applied, Apply, BindingSpec, Load, Loaded, Open, Opened,
    SpecResponse, StartCommit, StartedCommit, StateUpdate, Store, Validate, Validated, ValidatedBinding,
)

T = TypeVar("T")

DELETE_COLUMN = "_tidemark_delete"  # staged files only
IN_LIST_MAX = 256  # Load chunks up to this size also push an IN list down
KEY_PROPERTY = "tidemark.key"  # table properties written by Apply
MODE_PROPERTY = "tidemark.deltaUpdates"
OWNER_PROPERTY = "tidemark.owner"  # {"materialization", "checkpoint_id"}: the one checkpoint that writes the table

ARROW_TYPES = {INTEGER: pa.int64(), NUMBER: pa.float64(), BOOLEAN: pa.bool_()}  # others: string
DELTA_TYPES = {INTEGER: "long", NUMBER: "double", BOOLEAN: "boolean"}  # others: string


def arrow_type(kind: str) -> pa.DataType:
    return ARROW_TYPES.get(kind, pa.string())


def delta_type(kind: str) -> str:
    return DELTA_TYPES.get(kind, "string")


def ident(name: str) -> str:
    """A DataFusion SQL identifier (case-sensitive, ``"`` doubled)."""
    return '"' + str(name).replace('"', '""') + '"'


def sql_literal(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (int, float)):
        return repr(value)
    return "'" + str(value).replace("'", "''") + "'"


def _is_uri(p: str) -> bool:
    return "://" in p


def _join(root: str, name: str) -> str:
    return root.rstrip("/") + "/" + name if _is_uri(root) else os.path.join(root, name)


def _translate(exc: Exception, where: str) -> TidemarkError:
    if isinstance(exc, TidemarkError):
        return exc
    if isinstance(exc, CommitFailedError):
        return EndpointUnavailable(f"Delta table {where}: concurrent commit: {exc}")
    if isinstance(exc, (OSError, pa.ArrowIOError)) and not isinstance(exc, FileNotFoundError):
        return EndpointUnavailable(f"Delta table {where}: {type(exc).__name__}: {exc}")
    return DriverError(f"Delta table {where}: {type(exc).__name__}: {exc}")


@dataclass(frozen=True, slots=True)
class TableModel:
    """One binding's Delta table."""

    location: str
    keys: tuple[Column, ...]
    values: tuple[Column, ...]
    delta: bool

    @property
    def columns(self) -> tuple[Column, ...]:
        return self.keys + self.values

    def arrow_schema(self) -> pa.Schema:
        """The table's schema (keys not null, the document not null)."""
        fields = [pa.field(c.name, arrow_type(c.kind), nullable=not c.is_key) for c in self.columns]
        return pa.schema(fields + [pa.field(DOCUMENT_COLUMN, pa.string(), nullable=False)])

    def staged_schema(self) -> pa.Schema:
        fields = [pa.field(c.name, arrow_type(c.kind)) for c in self.columns]
        return pa.schema(fields + [pa.field(DOCUMENT_COLUMN, pa.string()), pa.field(DELETE_COLUMN, pa.bool_())])


# -------------------------------------------------------------------------- driver


CAPABILITIES = Capabilities(
    commit_pattern=CommitPattern.IDEMPOTENT_APPLY_COORDINATOR,
    delta_updates=True,
    max_load_keys=10_000,
    max_store_docs=10_000,
    concurrent_shards=True,
)


class DeltaDriver(Driver):
    name = "delta"

    def capabilities(self) -> Capabilities:
        return CAPABILITIES

    def __init__(self, config: dict | None = None):
        super().__init__(config)
        path = self.config.get("path")
        if not isinstance(path, str) or not path:
            raise SpecError("delta endpoint needs {path: DIRECTORY_OR_URI}")
        self.root = path if _is_uri(path) else os.path.abspath(path)
        staging = str(self.config.get("staging") or _join(self.root, "_tidemark_staging"))
        self.staging = staging if _is_uri(staging) else os.path.abspath(staging)
        self.storage_options = {str(k): str(v) for k, v in (self.config.get("storage_options") or {}).items()} or None
        self.policy = RetryPolicy.from_config(self.config.get("retry"))
        self._fs: Optional[tuple[pafs.FileSystem, str]] = None

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
                raise _translate(exc, where) from exc

        return retry(attempt, self.policy, what=f"delta {what}") if idempotent else attempt()

    @property
    def fs(self) -> tuple[pafs.FileSystem, str]:
        """The staging file system and its base path."""
        if self._fs is None:
            if not _is_uri(self.staging):
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
            location = p if _is_uri(p) or os.path.isabs(p) else _join(self.root, p)
        elif isinstance(res.get("table"), str) and res["table"]:
            name = res["table"]
            if "\x00" in name or name in (".", "..") or "/" in name or "\\" in name:
                raise SpecError(f"delta: invalid table name {name!r} (use resource.path for nested locations)")
            location = _join(self.root, name)
        else:
            raise SpecError(f"binding of {binding.collection!r}: resource needs {{table: NAME}} or {{path: P}}, "
                            f"got {binding.resource!r}")
        keys = tuple(Column(f.name, field_kind(f), True) for f in binding.key_fields)
        if not keys:
            raise SpecError(f"delta table {location!r}: no key fields")
        values = tuple(Column(f.name, field_kind(f)) for f in binding.value_fields)
        names = [c.name for c in keys + values] + [DOCUMENT_COLUMN, DELETE_COLUMN]
        dup = sorted({n for n in names if names.count(n) > 1})
        if dup:
            raise IncompatibleSchema(f"delta table {location!r}: column names collide: {dup} "
                                     f"({DOCUMENT_COLUMN!r} and {DELETE_COLUMN!r} are reserved)")
        return TableModel(location, keys, values, bool(binding.delta_updates))

    # ----------------------------------------------------------- setup phase
    def spec(self) -> SpecResponse:
        return SpecResponse(
            config_schema={"type": "object", "required": ["path"], "properties": {
                "path": {"type": "string"}, "staging": {"type": "string"},
                "storage_options": {"type": "object"}, "retry": {"type": "object"}}},
            resource_schema={"type": "object", "properties": {"table": {"type": "string"}, "path": {"type": "string"}}},
        )

    def _plan(self, model: TableModel) -> Optional[list[Column]]:
        """None: create the table; else the columns to add. Raises IncompatibleSchema."""
        try:
            dt = self.table(model.location)
        except TableNotFoundError:
            return None
        where = f"delta table {model.location!r}"
        conf = dt.metadata().configuration or {}
        if MODE_PROPERTY in conf and (conf[MODE_PROPERTY] == "true") != model.delta:
            mode = "delta-updates" if model.delta else "standard"
            raise IncompatibleSchema(f"{where} exists in the other mode; cannot switch it to {mode} updates "
                                     "(drop the table or use another one)")
        if KEY_PROPERTY in conf and json.loads(conf[KEY_PROPERTY]) != [c.name for c in model.keys]:
            raise IncompatibleSchema(f"{where}: key is {conf[KEY_PROPERTY]}, the binding's key is "
                                     f"{[c.name for c in model.keys]}; the key cannot change")
        existing = {f.name: str(getattr(f.type, "type", f.type)) for f in dt.schema().fields}
        if DOCUMENT_COLUMN not in existing:
            raise IncompatibleSchema(f"{where} has no {DOCUMENT_COLUMN!r} column: not a tidemark table")
        missing = []
        for col in model.columns:
            have = existing.get(col.name)
            if have is None:
                if col.is_key:
                    raise IncompatibleSchema(f"{where}: key column {col.name!r} is missing; the key cannot change")
                missing.append(col)
            elif have != delta_type(col.kind):
                raise IncompatibleSchema(f"{where}: column {col.name!r} is {have}, the binding needs "
                                         f"{delta_type(col.kind)} (an incompatible type change)")
        return missing

    def validate(self, req: Validate) -> Validated:
        for b in req.bindings:
            self.run(lambda: self._plan(self.model(b)), "validate", repr(b.resource))
        return Validated(tuple(ValidatedBinding(b.resource_path, b.delta_updates) for b in req.bindings))

    def apply(self, req: Apply) -> Applied:
        actions: list[str] = []
        created: list[tuple] = []
        owner = dumps({"materialization": req.materialization, "checkpoint_id": req.checkpoint_id}) \
            if req.checkpoint_id else None
        for b in req.bindings:
            model = self.model(b)

            def body(model=model, b=b) -> None:
                missing = self._plan(model)
                if missing is None:
                    actions.append(f"create delta table {model.location}")
                    created.append(b.resource_path)
                    if not req.dry_run:
                        conf = {KEY_PROPERTY: dumps([c.name for c in model.keys]),
                                MODE_PROPERTY: "true" if model.delta else "false"}
                        if owner:
                            conf[OWNER_PROPERTY] = owner
                        DeltaTable.create(
                            model.location, schema=model.arrow_schema(), mode="ignore", configuration=conf,
                            storage_options=self.storage_options, raise_if_key_not_exists=False,
                        )
                    return
                for col in missing:
                    actions.append(f"add column {col.name} {delta_type(col.kind)} to {model.location}")
                if missing and not req.dry_run:
                    self.table(model.location).alter.add_columns(
                        [DeltaField(c.name, delta_type(c.kind), nullable=True) for c in missing])
                if owner and not req.dry_run:
                    have = owner_of(self.table(model.location))
                    if have is None:  # a table of an older tidemark: this checkpoint takes it
                        self.table(model.location).alter.set_table_properties({OWNER_PROPERTY: owner})
                    elif have != (req.materialization, req.checkpoint_id):
                        raise RecoveryError(
                            f"delta table {model.location!r} belongs to materialization {have[0]!r} of tidemark "
                            f"checkpoint {have[1]}, not to this one ({req.checkpoint_id}); nothing was changed")

            self.run(body, "apply", model.location)
        return Applied("; ".join(actions) or "nothing to do", tuple(created))

    # ----------------------------------------------------- transaction phase
    def open(self, req: Open) -> tuple["DeltaTransactor", Opened]:
        models = [self.model(b) for b in req.bindings]
        return DeltaTransactor(self, req, models), Opened(None)  # the recovery log is authoritative

    def coordinator_acknowledge(self, materialization: str, state: Any, runtime_checkpoint: dict,
                                bindings: Sequence[BindingSpec]) -> None:
        """Apply batch N's staged files to every table, once (see the module docstring)."""
        started = time.time()
        batch = int(runtime_checkpoint["batch_id"])
        app = app_id(materialization, runtime_checkpoint.get("checkpoint_id"))
        files: dict[str, list[str]] = {}
        for stage in _stages(state):
            if stage.get("batch") != batch:
                continue  # an earlier batch (applied before this one was staged) or a stale range
            for location, name, rows in stage.get("files") or ():
                if rows:
                    files.setdefault(location, []).append(name)
        models = {m.location: m for m in (self.model(b) for b in bindings)}
        unbound = [loc for loc in sorted(set(files) - set(models)) if applied_batch(self.table(loc), app) < batch]
        if unbound:
            raise RecoveryError(f"batch {batch} of {materialization!r} staged data for Delta tables that are no "
                                f"longer bound: {unbound}; restore the bindings to apply it")
        owner = (materialization, runtime_checkpoint.get("checkpoint_id"))
        for location in sorted(models):  # every bound table records the batch, with data or without
            self.run(lambda: self._apply_table(models[location], files.get(location, []), app, batch, owner),
                     "apply batch", location)
        # Step 3: the staged files of every applied or abandoned attempt.
        self.run(lambda: self._remove_staged(materialization, before=started), "clean staging", self.staging)

    def _apply_table(self, model: TableModel, names: list[str], app: str, batch: int, owner: tuple) -> None:
        # Step 1
        dt = self.table(model.location)
        if applied_batch(dt, app) >= batch:
            return
        have = owner_of(dt)
        if have is not None and have != owner:  # the fence between two jobs on one table
            raise FencedOff(f"delta table {model.location!r} now belongs to materialization {have[0]!r} of tidemark "
                            f"checkpoint {have[1]}; batch {batch} of {owner[0]!r} was not applied to it")
        if not names:
            dt.create_write_transaction([], mode="append", schema=dt.schema(),
                                        commit_properties=CommitProperties(app_transactions=[Transaction(app, batch)]))
            return
        fs, _ = self.fs
        paths = [f"{self.fs[1].rstrip('/')}/{n}" for n in names]
        lost = [p for p, info in zip(paths, fs.get_file_info(paths)) if info.type != pafs.FileType.File]
        if lost:
            raise RecoveryError(f"Delta table {model.location!r}: batch {batch} is in the recovery log but not "
                                f"applied, and its staged files are gone: {lost}")
        source = pds.dataset(paths, format="parquet", filesystem=fs)
        commit = CommitProperties(app_transactions=[Transaction(app, batch)])
        # Step 2
        if model.delta:
            write_deltalake(dt, _reader(source, drop=DELETE_COLUMN), mode="append", commit_properties=commit,
                            storage_options=self.storage_options)
        else:
            self._merge(dt, model, _reader(source), commit)
        dt = self.table(model.location)
        if applied_batch(dt, app) < batch:  # the MERGE changed nothing, so committed nothing: record the batch
            dt.create_write_transaction([], mode="append", schema=dt.schema(), commit_properties=commit)

    def _merge(self, dt: DeltaTable, model: TableModel, source: pa.RecordBatchReader, commit) -> None:
        names = [f.name for f in source.schema if f.name != DELETE_COLUMN]
        on = " AND ".join(f"t.{ident(c.name)} = s.{ident(c.name)}" for c in model.keys)
        key_names = {c.name for c in model.keys}
        sets = {ident(n): f"s.{ident(n)}" for n in names if n not in key_names}
        (
            dt.merge(source, predicate=on, source_alias="s", target_alias="t", streamed_exec=True,
                     commit_properties=commit)
            .when_matched_delete(predicate=f"s.{ident(DELETE_COLUMN)}")
            .when_matched_update(updates=sets)
            .when_not_matched_insert(updates={ident(n): f"s.{ident(n)}" for n in names},
                                     predicate=f"NOT s.{ident(DELETE_COLUMN)}")
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
    def dump(self, materialization: str, binding: BindingSpec):
        model = self.model(binding)
        cols = [c.name for c in model.keys] + [DOCUMENT_COLUMN]
        table = self.run(lambda: self.table(model.location).to_pyarrow_table(columns=cols), "dump", model.location)
        docs = [json.loads(d) for d in table.column(DOCUMENT_COLUMN).to_pylist()]
        if model.delta:
            return docs
        keys = zip(*(table.column(c.name).to_pylist() for c in model.keys))
        return {key_of(model, k): d for k, d in zip(keys, docs)}

    def positions(self, materialization: str, bindings: Sequence[BindingSpec]) -> list[Position]:
        """Per bound table that exists: its owner (a table property) and the last batch of the
        owner's app transaction."""
        out = []
        for b in bindings:
            model = self.model(b)
            try:
                dt = self.run(lambda: self.table(model.location), "positions", model.location)
            except (TableNotFoundError, TidemarkError):
                if not self._exists(model.location):
                    continue
                raise
            have = owner_of(dt)
            if have is None:
                out.append(Position(f"delta table {model.location}", materialization, None, -1,
                                    resource=b.resource_path))
                continue
            out.append(Position(f"delta table {model.location}", have[0], have[1],
                                applied_batch(dt, app_id(*have)), resource=b.resource_path))
        return out

    def _exists(self, location: str) -> bool:
        try:
            return DeltaTable.is_deltatable(location, storage_options=self.storage_options)
        except Exception:  # noqa: BLE001 - an unreachable store is reported by the next call
            return False

    def drop(self, materialization: str, bindings: Sequence[BindingSpec]) -> list[str]:
        """Delete the bindings' tables (their folders) and the materialization's staged files."""
        done = []
        for b in bindings:
            location = self.model(b).location
            fs, path = pafs.FileSystem.from_uri(location) if _is_uri(location) else (pafs.LocalFileSystem(), location)
            if fs.get_file_info(path).type != pafs.FileType.NotFound:
                fs.delete_dir(path)
                done.append(f"deleted delta table {location}")
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


def app_id(materialization: str, checkpoint_id: Any) -> str:
    return f"tidemark/{materialization}/{checkpoint_id}"


def owner_of(dt: DeltaTable) -> Optional[tuple[str, str]]:
    """(materialization, checkpoint id) of the table's owner property, or None."""
    text = (dt.metadata().configuration or {}).get(OWNER_PROPERTY)
    if not text:
        return None
    try:
        obj = json.loads(text)
        return str(obj["materialization"]), str(obj["checkpoint_id"])
    except (ValueError, KeyError, TypeError):
        return None


def applied_batch(dt: DeltaTable, app: str) -> int:
    """The last batch of ``app`` committed to the table, or -1."""
    v = dt.transaction_version(app)
    return -1 if v is None else int(v)


def _stages(state: Any) -> list[dict]:
    stages = state.get("stages") if isinstance(state, dict) else None
    return [s for s in (stages or {}).values() if isinstance(s, dict)]


def _reader(source: pds.Dataset, drop: Optional[str] = None) -> pa.RecordBatchReader:
    """The staged rows as a stream; the ``mid_apply`` fault point fires while delta-rs reads it."""
    schema = source.schema if drop is None else pa.schema([f for f in source.schema if f.name != drop])

    def batches() -> Iterator[pa.RecordBatch]:
        for i, rb in enumerate(source.to_batches()):
            if drop is not None:
                rb = rb.drop_columns([drop])
            yield rb
            if i == 0:
                fault_point("mid_apply")

    return pa.RecordBatchReader.from_batches(schema, batches())


def column(kind: str, values: list) -> pa.Array:
    """A typed column of JSON values (JSON kinds as text)."""
    if kind != JSON:
        try:
            return pa.array(values, arrow_type(kind))
        except (pa.ArrowInvalid, pa.ArrowTypeError, TypeError):
            pass  # e.g. 3.0 for an integer, an object in a scalar column
    return pa.array([coerce(kind, v) for v in values], arrow_type(kind))


def key_of(model: TableModel, values: Sequence[Any]) -> tuple:
    out = []
    for col, v in zip(model.keys, values):
        if col.kind == JSON and isinstance(v, str):
            v = json.loads(v)
        out.append(v)
    return tuple(out)


# ---------------------------------------------------------------------- session


class DeltaTransactor(ReadCommittedLoads, Transactor):
    """One shard session: Loads read the committed table, Stores go to staged Parquet."""

    def __init__(self, driver: DeltaDriver, req: Open, models: list[TableModel]):
        self.driver = driver
        self.materialization = req.materialization
        self.range = req.range
        self.models = models
        self.session = uuid.uuid4().hex[:12]
        self._acknowledged = False
        self._deferred: list[Load] = []
        self._snapshots: dict[int, DeltaTable] = {}
        self._state: Any = req.state
        self._writers: dict[int, tuple[Any, pq.ParquetWriter, str]] = {}
        self._rows: dict[int, int] = {}
        self._seq = 0

    # ------------------------------------------------------------- phases
    def acknowledge(self, msg: Acknowledge) -> Acknowledged:
        # The coordinator applied the previous batch before this transaction started.
        if msg.state is not None:
            self._state = msg.state
        self._snapshots = {}
        self._acknowledged = True
        return Acknowledged()

    def _snapshot(self, binding: int) -> DeltaTable:
        """The table as of this transaction, checked against the batches the log says are applied."""
        dt = self._snapshots.get(binding)
        if dt is None:
            model = self.models[binding]
            dt = self.driver.run(lambda: self.driver.table(model.location), "load", model.location)
            for stage in _stages(self._state):
                if any(loc == model.location and rows for loc, _n, rows in stage.get("files") or ()):
                    have = applied_batch(dt, str(stage.get("app", "")))
                    if have < int(stage.get("batch", -1)):
                        raise RecoveryError(
                            f"Delta table {model.location!r} is at batch {have} of {stage.get('app')!r}, but the "
                            f"recovery log says batch {stage.get('batch')} was applied to it (was the table "
                            "replaced?); Loads would not be read-committed")
            self._snapshots[binding] = dt
        return dt

    def _evaluate(self, msg: Load) -> list[Loaded]:
        """One chunk of keys: a DataFusion scan whose predicate prunes files by their key
        statistics (the chunk's min/max, plus ``IN (...)`` for small chunks), then an
        exact membership test in Arrow."""
        if not msg.keys:
            return []
        model = self.models[msg.binding]
        dt = self._snapshot(msg.binding)
        wanted: dict[tuple, tuple] = {}
        for key in msg.keys:
            wanted[tuple(coerce(c.kind, v) for c, v in zip(model.keys, key))] = tuple(key)
        where, value_sets = [], []
        for j, c in enumerate(model.keys):
            vals = sorted({k[j] for k in wanted}, key=lambda v: (type(v).__name__, v))
            value_sets.append(pa.array(vals, arrow_type(c.kind)))
            if c.kind != BOOLEAN and len({type(v) for v in vals}) == 1:
                where.append(f"{ident(c.name)} >= {sql_literal(vals[0])} AND {ident(c.name)} <= {sql_literal(vals[-1])}")
            if len(vals) <= IN_LIST_MAX:
                where.append(f"{ident(c.name)} IN ({', '.join(sql_literal(v) for v in vals)})")
        cols = ", ".join(ident(c.name) for c in model.keys)
        sql = f"SELECT {cols}, {ident(DOCUMENT_COLUMN)} FROM t WHERE {' AND '.join(where) or 'true'}"

        def query() -> pa.Table:
            return pa.table(QueryBuilder().register("t", dt).execute(sql).read_all())

        table = self.driver.run(query, "load", model.location)
        n = len(model.keys)
        key_cols = [table.column(j).cast(arrow_type(c.kind)) for j, c in enumerate(model.keys)]
        mask = None
        for col, vs in zip(key_cols, value_sets):
            m = pc.is_in(col, value_set=vs)
            mask = m if mask is None else pc.and_(mask, m)
        idx = pc.indices_nonzero(mask) if mask is not None else pa.array([], pa.uint64())
        if not len(idx):
            return []
        docs = table.column(n).cast(pa.string()).take(idx).to_pylist()
        found = {}
        for i, row in enumerate(zip(*(col.take(idx).to_pylist() for col in key_cols))):
            key = wanted.get(tuple(row))
            if key is not None:  # multi-column keys: a test per column over-selects
                found[key] = json.loads(docs[i])
        if not found:
            return []
        keys = [k for k in msg.keys if tuple(k) in found]
        return [Loaded(msg.binding, tuple(keys), tuple(found[tuple(k)] for k in keys))]

    def store(self, msg: Store) -> None:
        if not msg.keys:
            return
        model = self.models[msg.binding]
        schema = model.staged_schema()
        arrays = [column(c.kind, [k[j] for k in msg.keys]) for j, c in enumerate(model.keys)]
        arrays += [column(c.kind, [v[j] for v in msg.values]) for j, c in enumerate(model.values)]
        arrays.append(pa.array([dumps(d) for d in msg.docs], pa.string()))
        arrays.append(pa.array([bool(x) for x in msg.deletes], pa.bool_()))
        batch = pa.RecordBatch.from_arrays(arrays, schema=schema)
        self.driver.run(lambda: self._writer(msg.binding, schema).write_batch(batch), "store", self.driver.staging,
                        idempotent=False)
        self._rows[msg.binding] = self._rows.get(msg.binding, 0) + len(msg.keys)

    def _writer(self, binding: int, schema: pa.Schema) -> pq.ParquetWriter:
        if binding not in self._writers:
            fs, _ = self.driver.fs
            directory = self.driver.stage_dir(self.materialization)
            fs.create_dir(directory, recursive=True)
            self._seq += 1
            name = f"{self.range.name}-{self.session}-{self._seq:04d}-b{binding}.parquet"
            stream = fs.open_output_stream(f"{directory}/{name}")
            self._writers[binding] = (stream, pq.ParquetWriter(stream, schema, compression="snappy"), name)
        return self._writers[binding][1]

    def start_commit(self, msg: StartCommit) -> StartedCommit:
        """Close the staged files; name them in the driver checkpoint (applied after the log commits)."""
        cp = msg.runtime_checkpoint
        files = []
        writers, self._writers = self._writers, {}
        quoted = urllib.parse.quote(self.materialization, safe="")
        for binding, (stream, writer, name) in sorted(writers.items()):
            self.driver.run(lambda: (writer.close(), stream.close()), "stage", self.driver.staging, idempotent=False)
            files.append([self.models[binding].location, f"{quoted}/{name}", self._rows.get(binding, 0)])
        fault_point("before_endpoint_commit")
        self._rows = {}
        self._acknowledged = False
        self._snapshots = {}
        stage = {"batch": int(cp["batch_id"]), "app": app_id(self.materialization, cp.get("checkpoint_id")),
                 "files": files}
        fault_point("after_endpoint_commit")
        return StartedCommit(StateUpdate({"stages": {self.range.name: stage}}, merge_patch=True))

    def close(self) -> None:
        for stream, writer, _ in self._writers.values():
            try:
                writer.close()
                stream.close()
            except Exception:  # noqa: BLE001 - an abandoned attempt; its files are orphans
                pass
        self._writers = {}


__all__ = ["DeltaDriver", "DeltaTransactor", "app_id"]
