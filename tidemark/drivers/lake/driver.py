"""The staged-files base of the lake endpoints (Delta, Iceberg): what they share of Apply, the
coordinator's apply, inspection and clean-up.  An endpoint fills in its table format through
the hooks below (``open_table``, ``scan_keys``, ``apply_table``, ...).

Commit pattern ``idempotent-apply-coordinator`` (see :mod:`tidemark.drivers.base`):

* **Load** runs only after the session's Acknowledged, on the table as it was then
  (read-committed), through the endpoint's ``scan_keys`` (pruned by the chunk's key values),
  then an exact membership test in Arrow.
* **Store** streams each binding's rows (typed columns, the document as JSON, a delete
  marker) into one staged Parquet file per (session, binding) under
  ``STAGING/<materialization>/``.
* **Quarantine** (where the endpoint has a dead-letter table): the batch's invalid documents,
  written at StartCommit into one staged Parquet file.
* **StartCommit** closes the files and returns the patch ``{"stages": {RANGE: {"batch": N,
  TAG..., "files": [[TABLE, FILE, ROWS], ...], "quarantine": [[FILE, ROWS]]}}}`` (``TAG``: the
  endpoint's ``stage_tag``, naming the checkpoint).  Nothing is visible in the tables yet.
* **Coordinator Acknowledge** (:meth:`StagedFilesDriver.coordinator_acknowledge`), after the
  recovery log holds batch N, for every bound table: the endpoint's ``apply_table`` --
  skip a table that holds batch N of this checkpoint, refuse one another checkpoint owns,
  else one commit of the batch's staged files that records N with the data -- then, if the
  batch quarantined documents, the endpoint's ``apply_quarantine``; once every table is
  applied, delete the materialization's staged files older than this call (the applied ones
  and orphans of attempts that never reached the recovery log).
"""

from __future__ import annotations

import json
import time
import urllib.parse
from functools import partial
from typing import Any, Callable, Optional, Sequence, TypeVar

import pyarrow as pa
import pyarrow.fs as pafs

from tidemark.drivers.base import Capabilities, CommitPattern, Driver, Position, ReplaceContents
from tidemark.drivers.common.columns import Column, dumps, key_of
from tidemark.drivers.common.identity import PROPERTY as IDENTITY_PROPERTY
from tidemark.drivers.common.identity import parse_record, record_text
from tidemark.drivers.lake.lean import documents_of
from tidemark.drivers.lake.model import (
    KEY_PROPERTY,
    LEAN_PROPERTY,
    MODE_PROPERTY,
    OWNER_PROPERTY,
    LakeTable,
    columns_to_add,
    form_line,
    in_form,
    owner_of,
    owner_text,
    stages_of,
    table_form,
)
from tidemark.drivers.lake.transactor import StagedFilesTransactor
from tidemark.errors import DriverError, FencedOff, RecoveryError, TidemarkError
from tidemark.policy import retry
from tidemark.protocol.messages import (
    Applied,
    Apply,
    BindingSpec,
    Open,
    Opened,
    Validate,
    Validated,
    ValidatedBinding,
)

OWNERS = "-owners"  # beside the staging folder: <staging>-owners/<view>.json, the checkpoint that owns a view's staging

T = TypeVar("T")

CAPABILITIES = Capabilities(
    commit_pattern=CommitPattern.IDEMPOTENT_APPLY_COORDINATOR,
    delta_updates=True,
    max_load_keys=10_000,
    max_store_docs=10_000,
    concurrent_shards=True,
)


class StagedFilesDriver(Driver):
    """A lake endpoint: staged Parquet, applied once per batch by the coordinator."""

    label = "lake table"  # how messages name a table: "delta table", "iceberg table"
    library_errors: tuple[type[BaseException], ...] = (Exception,)  # what ``run`` translates
    reports_created = True
    staging: str
    policy: Any
    _fs: Optional[tuple[pafs.FileSystem, str]] = None  # opened on first use (:attr:`fs`)

    def __getstate__(self):
        return {"config": self.config}

    def __setstate__(self, st):
        self.__init__(st["config"])

    # ------------------------------------------------------ the endpoint's part
    def translate(self, exc: BaseException, where: str) -> TidemarkError:
        raise NotImplementedError

    def open_staging(self) -> tuple[pafs.FileSystem, str]:
        """The staging file system and its base path."""
        raise NotImplementedError

    def model(self, binding: BindingSpec) -> LakeTable:
        raise NotImplementedError

    def open_table(self, name: str) -> Any:
        """The table ``name`` as it is now, or None if there is none."""
        raise NotImplementedError

    def table_properties(self, table: Any) -> dict:
        raise NotImplementedError

    def column_types(self, table: Any) -> dict:
        """Column name -> its type, as ``type_of`` gives them."""
        raise NotImplementedError

    def document_required(self, table: Any) -> bool:
        """Whether the table's ``flow_document`` is required (the full form)."""
        raise NotImplementedError

    def type_of(self, kind: str) -> Any:
        raise NotImplementedError

    def table_batch(self, table: Any, materialization: str, checkpoint_id: str) -> int:
        """The last batch of (materialization, checkpoint) the table holds, or -1."""
        raise NotImplementedError

    def stage_tag(self, materialization: str, checkpoint_id: Any) -> dict:
        """What a stage records of its checkpoint, beside its batch."""
        raise NotImplementedError

    def stage_batch(self, table: Any, materialization: str, stage: dict) -> int:
        """The last batch of the stage's checkpoint the table holds."""
        raise NotImplementedError

    def scan_keys(self, table: Any, model: LakeTable, values: list[list]) -> Optional[pa.Table]:
        """The rows whose key columns hold one of ``values`` (a list per key column; may
        over-select): the key columns and ``model.read_names``."""
        raise NotImplementedError

    def read_columns(self, model: LakeTable, names: list[str]) -> pa.Table:
        raise NotImplementedError

    def create_table(self, model: LakeTable, properties: dict) -> None:
        raise NotImplementedError

    def alter_table(self, model: LakeTable, table: Any, missing: list[Column], properties: dict) -> None:
        """Add ``missing`` columns and set ``properties``."""
        raise NotImplementedError

    def upkeep_properties(self, properties: dict) -> dict:
        """Properties Apply keeps set on every table of the endpoint, where they differ."""
        return {}

    def apply_table(self, model: LakeTable, names: list[str], owner: tuple[str, str], batch: int) -> None:
        """Apply batch ``batch``'s staged files ``names`` to the table once (see the module docstring)."""
        raise NotImplementedError

    def apply_quarantine(self, names: list[str], owner: tuple[str, str], batch: int) -> None:
        raise DriverError(f"{self.name}: batch {batch} staged invalid documents, but the endpoint has no quarantine")

    def drop_table(self, model: LakeTable) -> Optional[str]:
        """Delete the table with its files: what was done, or None if there was no table."""
        raise NotImplementedError

    def drop_quarantine(self, materialization: str) -> list[str]:
        return []

    # -------------------------------------------------------------- plumbing
    def run(self, fn: Callable[[], T], what: str, where: str, *, idempotent: bool = True) -> T:
        """Run ``fn`` translating library errors; retry transient ones under the policy if
        ``fn`` may run twice (not a write into an open staged file)."""

        def attempt() -> T:
            try:
                return fn()
            except self.library_errors as exc:
                raise self.translate(exc, where) from exc

        return retry(attempt, self.policy, what=f"{self.name} {what}") if idempotent else attempt()

    @property
    def fs(self) -> tuple[pafs.FileSystem, str]:
        """The staging file system and its base path."""
        fs = self._fs
        if fs is None:
            fs = self._fs = self.run(self.open_staging, "staging", self.staging)
        return fs

    def stage_dir(self, materialization: str) -> str:
        return f"{self.fs[1].rstrip('/')}/{urllib.parse.quote(materialization, safe='')}"

    def stage_owner(self, materialization: str) -> Optional[dict]:
        """The checkpoint that owns the materialization's staging folder (a view name's staged
        files are one folder: another checkpoint's view of the name must not share it)."""
        fs, _ = self.fs
        try:
            with fs.open_input_stream(self.stage_owner_path(materialization)) as f:
                owner = json.loads(f.read().decode("utf-8"))
        except (FileNotFoundError, ValueError):
            return None
        return owner if isinstance(owner, dict) and owner.get("checkpoint_id") else None

    def own_stage(self, materialization: str, checkpoint_id: str, identities: Sequence[dict], replace: bool) -> None:
        """Record ``checkpoint_id`` as the staging folder's owner (where none is, or ``replace``:
        a rebuild's cut-over, after which the shadow's checkpoint owns the view)."""
        if not replace and self.stage_owner(materialization) is not None:
            return
        first = identities[0] if identities else {}
        owner = {k: first.get(k) for k in ("checkpoint_location", "host")}
        owner.update(materialization=materialization, checkpoint_id=checkpoint_id)
        fs, base = self.fs
        fs.create_dir(base.rstrip("/") + OWNERS, recursive=True)
        with fs.open_output_stream(self.stage_owner_path(materialization)) as f:
            f.write(dumps(owner).encode("utf-8"))

    def stage_owner_path(self, materialization: str) -> str:
        return f"{self.fs[1].rstrip('/')}{OWNERS}/{urllib.parse.quote(materialization, safe='')}.json"

    def staged_paths(self, where: str, names: list[str], batch: int) -> list[str]:
        """The staged files ``names`` of batch ``batch`` (paths in :attr:`fs`); refuses if one is gone."""
        fs, base = self.fs
        paths = [f"{base.rstrip('/')}/{n}" for n in names]
        lost = [p for p, info in zip(paths, fs.get_file_info(paths)) if info.type != pafs.FileType.File]
        if lost:
            raise RecoveryError(
                f"{where}: batch {batch} is in the recovery log but not applied, and its staged files are gone: {lost}"
            )
        return paths

    def should_apply(self, model: LakeTable, table: Any, owner: tuple[str, str], batch: int) -> bool:
        """False if the table holds the batch; refuses (FencedOff) a table another checkpoint owns."""
        if self.table_batch(table, *owner) >= batch:
            return False
        have = owner_of(self.table_properties(table))
        if have is not None and have != owner:  # the fence between two jobs on one table
            raise FencedOff(
                f"{self.label} {model.name!r} now belongs to materialization {have[0]!r} of tidemark "
                f"checkpoint {have[1]}; batch {batch} of {owner[0]!r} was not applied to it"
            )
        return True

    # --------------------------------------------------------------- forms
    def form_of(self, table: Any) -> Optional[tuple[str, dict]]:
        """The form of a table as ``open_table`` gave it (None: no table)."""
        if table is None:
            return None
        return table_form(self.document_required(table), self.table_properties(table))

    def form_model(self, binding: BindingSpec) -> LakeTable:
        """The binding's table model in the form its table has (read once per table and
        driver), or for a table not made yet the form the binding asks for."""
        base = self.model(binding)
        if base.delta:
            return base
        forms = self.__dict__.setdefault("_forms", {})
        form = forms.get(base.name)
        if form is None:
            table = self.run(partial(self.open_table, base.name), "read the table's form", base.name)
            form = self.form_of(table)
            if form is not None:
                forms[base.name] = form
        return in_form(self.label, base, binding, form)

    def row_forms(self, bindings: Sequence[BindingSpec]) -> list[str]:
        out = []
        for b in bindings:
            base = self.model(b)
            table = self.run(partial(self.open_table, base.name), "read the table's form", base.name)
            form = self.form_of(table)
            out.append(form_line(self.label, in_form(self.label, base, b, form), form, b))
        return out

    # ----------------------------------------------------------- setup phase
    def check_table(self, model: LakeTable, table: Any) -> list[Column]:
        """The columns to add to an existing table; raises IncompatibleSchema."""
        return columns_to_add(
            f"{self.label} {model.name!r}",
            model.keys,
            model.columns,
            model.delta,
            self.table_properties(table),
            self.column_types(table),
            self.type_of,
        )

    def validate(self, req: Validate) -> Validated:
        for b in req.bindings:
            model = self.model(b)

            def body(model=model, b=b) -> None:
                table = self.open_table(model.name)
                if table is not None:
                    self.check_table(in_form(self.label, model, b, self.form_of(table)), table)

            self.run(body, "validate", model.name)
        return Validated(tuple(ValidatedBinding(b.resource_path, b.delta_updates) for b in req.bindings))

    def apply(self, req: Apply) -> Applied:
        actions: list[str] = []
        created: list[tuple] = []
        owner = (req.materialization, str(req.checkpoint_id)) if req.checkpoint_id else None
        self.__dict__.pop("_forms", None)  # Apply makes or changes tables
        for i, b in enumerate(req.bindings):
            base = self.model(b)
            record = record_text(req.identities[i], base.name) if owner and i < len(req.identities) else None

            def body(base=base, b=b, record=record) -> None:
                table = self.open_table(base.name)
                model = in_form(self.label, base, b, self.form_of(table))
                if table is None:
                    actions.append(f"create {self.label} {model.name}")
                    created.append(b.resource_path)
                    if not req.dry_run:
                        props = {KEY_PROPERTY: dumps([c.name for c in model.keys])}
                        props[MODE_PROPERTY] = "true" if model.delta else "false"
                        props.update(self.upkeep_properties({}))
                        if owner:
                            props[OWNER_PROPERTY] = owner_text(*owner)
                        if record:
                            props[IDENTITY_PROPERTY] = record
                        if model.lean:
                            props[LEAN_PROPERTY] = model.lean_text()
                        try:
                            self.create_table(model, props)
                        except TidemarkError:  # e.g. created meanwhile: plan again
                            actions.pop()
                            created.pop()
                            raise
                    return
                missing = self.check_table(model, table)
                props = self.table_properties(table)
                have = owner_of(props)
                if owner and have is not None and have != owner:
                    raise RecoveryError(
                        f"{self.label} {model.name!r} belongs to materialization {have[0]!r} of tidemark checkpoint "
                        f"{have[1]}, not to this one ({owner[1]}). Nothing was changed"
                    )
                updates = self.upkeep_properties(props)
                if owner and have is None:  # a table of an older run without an owner: this checkpoint takes it
                    updates[OWNER_PROPERTY] = owner_text(*owner)
                if record and not props.get(IDENTITY_PROPERTY):
                    updates[IDENTITY_PROPERTY] = record
                    if req.dry_run:  # a table of a tidemark before identity records: the run records it
                        actions.append(f"record the view's identity on {model.name}")
                if model.lean and props.get(LEAN_PROPERTY) != model.lean_text():
                    updates[LEAN_PROPERTY] = model.lean_text()
                for col in missing:
                    actions.append(f"add column {col.name} {self.type_of(col.kind)} to {model.name}")
                if (missing or updates) and not req.dry_run:
                    self.alter_table(model, table, missing, updates)

            self.run(body, "apply", base.name)
        if owner and not req.dry_run:
            self.run(lambda: self.own_stage(*owner, req.identities, False), "apply", self.staging)
        self.__dict__.pop("_forms", None)
        return Applied("; ".join(actions) or "nothing to do", tuple(created))

    # ----------------------------------------------------- transaction phase
    def open(self, req: Open) -> tuple[StagedFilesTransactor, Opened]:
        models = [self.form_model(b) for b in req.bindings]
        return StagedFilesTransactor(self, req, models), Opened(None)  # the recovery log is authoritative

    def coordinator_acknowledge(
        self, materialization: str, state: Any, runtime_checkpoint: dict, bindings: Sequence[BindingSpec]
    ) -> None:
        """Apply batch N's staged files to every bound table, once (see the module docstring)."""
        started = time.time()
        batch = int(runtime_checkpoint["batch_id"])
        owner = (materialization, str(runtime_checkpoint.get("checkpoint_id")))
        tag = self.stage_tag(*owner)
        stages = [
            s
            for s in stages_of(state)
            if s.get("batch") == batch and all(str(s.get(k)) == str(v) for k, v in tag.items())
        ]  # not: an earlier batch (applied before this one was staged) or a stale range
        files: dict[str, list[str]] = {}
        for stage in stages:
            for name, path, rows in stage.get("files") or ():
                if rows:
                    files.setdefault(name, []).append(path)
        models = {m.name: m for m in (self.model(b) for b in bindings)}
        unbound = []
        for name in sorted(set(files) - set(models)):
            table = self.run(partial(self.open_table, name), "apply batch", name)
            if table is None or self.table_batch(table, *owner) < batch:
                unbound.append(name)
        if unbound:
            raise RecoveryError(
                f"batch {batch} of {materialization!r} staged data for {self.label}s that are no "
                f"longer bound: {unbound}; restore the bindings to apply it"
            )
        for name in sorted(models):  # every bound table records the batch, with data or without
            self.run(partial(self.apply_table, models[name], files.get(name, []), owner, batch), "apply batch", name)
        quarantined = [name for stage in stages for name, rows in stage.get("quarantine") or () if rows]
        if quarantined:  # the batch's invalid documents, by the same rule
            self.run(lambda: self.apply_quarantine(quarantined, owner, batch), "apply quarantine", self.name)
        # the staged files of every applied or abandoned attempt
        self.run(lambda: self._remove_staged(materialization, before=started), "clean staging", self.staging)

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

    # ------------------------------------------------------------- rebuild
    rebuild_refusal = "its tables cannot be replaced in place"

    def shadow_resource(self, resource: dict, tag: str) -> Optional[dict]:
        """``{table: T, ...}`` -> ``{table: T__<tag>, ...}`` beside it (Delta: ``{path: P}`` ->
        ``{path: P__<tag>}``, a sibling folder)."""
        if isinstance(resource.get("table"), str):
            return {**resource, "table": f"{resource['table']}__{tag}"}
        return None

    def replace_table(self, live: LakeTable, shadow: Any, owner: tuple[str, str], batch: int, properties: dict):
        """Make table ``live`` hold the shadow table's (``shadow``, as ``open_table`` gave it) rows and schema, recording batch ``batch``
        of ``owner`` with the data and setting ``properties``: in one commit where the format
        allows it.  Idempotent (a kill between two commits is finished by calling it again)."""
        raise NotImplementedError

    def replaced(self, live: LakeTable, owner: tuple[str, str], properties: dict) -> str:
        """``"done"``, ``"none"`` or ``"partial"`` for one table (see :meth:`cut_over_state`)."""
        table = self.open_table(live.name)
        if table is None or self.table_batch(table, *owner) < 0:
            return "none"
        have = self.table_properties(table)
        return "done" if all(have.get(k) == v for k, v in properties.items()) else "partial"

    def replace_quarantine(self, materialization: str, shadow: str) -> Optional[str]:
        """The shadow's quarantined documents become the view's (the endpoint's quarantine)."""
        return None

    def shadow_quarantined(self, shadow: str) -> bool:
        return False

    def _cut_over_plan(self, req: ReplaceContents):
        owner = (req.materialization, str(req.checkpoint_id))
        for i, (live_b, shadow_b) in enumerate(req.pairs):
            live, shadow = self.model(live_b), self.model(shadow_b)
            properties = {
                KEY_PROPERTY: dumps([c.name for c in live.keys]),
                MODE_PROPERTY: "true" if live.delta else "false",
                OWNER_PROPERTY: owner_text(*owner),
            }
            if i < len(req.identities):
                properties[IDENTITY_PROPERTY] = record_text(req.identities[i], live.name)
            yield live, shadow, owner, properties

    def rebuilt_state(self, state: Any, req: ReplaceContents) -> Any:
        """The stages' tables and checkpoint tag, renamed from the shadow's to the live view's."""
        if not isinstance(state, dict) or not isinstance(state.get("stages"), dict):
            return state
        names = {self.model(shadow).name: self.model(live).name for live, shadow in req.pairs}
        old, new = self.stage_tag(req.shadow, req.checkpoint_id), self.stage_tag(req.materialization, req.checkpoint_id)
        stages = {}
        for rng, stage in state["stages"].items():
            if isinstance(stage, dict):
                stage = {
                    **stage,
                    **{k: new[k] for k in old if str(stage.get(k)) == str(old[k])},
                    "files": [[names.get(f[0], f[0]), *f[1:]] for f in stage.get("files") or ()],
                }
            stages[rng] = stage
        return {**state, "stages": stages}

    def cut_over_state(self, req: ReplaceContents) -> str:
        states = {
            self.run(partial(self.replaced, live, owner, props), "read the cut-over", live.name)
            for live, _, owner, props in self._cut_over_plan(req)
        }
        if states == {"done"}:
            return (
                "partial" if self.run(partial(self.shadow_quarantined, req.shadow), "quarantine", self.name) else "done"
            )
        return "none" if states == {"none"} else "partial"

    def replace_contents(self, req: ReplaceContents) -> list[str]:
        """The cut-over, table by table: each live table's rows, schema and properties become its
        shadow's (the shadow's last batch recorded with the data: the table now belongs to the
        shadow's checkpoint under the live name), then the quarantine.  A table's earlier
        versions stay readable (time travel)."""
        done: list[str] = []
        for live, shadow, owner, properties in self._cut_over_plan(req):

            def body(live=live, shadow=shadow, owner=owner, properties=properties) -> None:
                if self.replaced(live, owner, properties) == "done":
                    return
                source = self.open_table(shadow.name)
                if source is None:
                    raise RecoveryError(
                        f"rebuild: the shadow {self.label} {shadow.name!r} is gone; abandon the rebuild "
                        "(`tidemark rebuild SPEC -m NAME --abandon`) and start it again. The live view is as it was"
                    )
                batch = self.table_batch(source, req.shadow, str(req.checkpoint_id))
                lean = self.table_properties(source).get(LEAN_PROPERTY)
                if lean and not self.document_required(source):  # the live table takes the shadow's form
                    properties = {**properties, LEAN_PROPERTY: lean}
                self.replace_table(live, source, owner, batch, properties)
                done.append(f"replaced the contents of {self.label} {live.name} with {shadow.name} (batch {batch})")

            self.run(body, "cut over", live.name)
        self.__dict__.pop("_forms", None)
        owner = (req.materialization, str(req.checkpoint_id))
        self.run(lambda: self.own_stage(*owner, req.identities, True), "cut over", self.staging)
        moved = self.run(lambda: self.replace_quarantine(req.materialization, req.shadow), "quarantine", self.name)
        return done + ([moved] if moved else [])

    # ------------------------------------------------------------ inspection
    def dump(self, materialization: str, binding: BindingSpec):
        model = self.form_model(binding)
        names = list(dict.fromkeys([c.name for c in model.keys] + model.read_names))
        table = self.run(lambda: self.read_columns(model, names), "dump", model.name)
        docs = documents_of(table, model.held, model.lean)
        if model.delta:
            return docs
        keys = zip(*(table.column(c.name).to_pylist() for c in model.keys))
        return {key_of(model, k): d for k, d in zip(keys, docs)}

    def identities(self, materialization: str, bindings: Sequence[BindingSpec]) -> list[Optional[dict]]:
        out: list[Optional[dict]] = []
        for b in bindings:
            name = self.model(b).name
            table = self.run(partial(self.open_table, name), "identities", name)
            out.append(None if table is None else parse_record(self.table_properties(table).get(IDENTITY_PROPERTY)))
        return out

    def positions(self, materialization: str, bindings: Sequence[BindingSpec]) -> list[Position]:
        """Per bound table that exists: its owner (a table property) and the last batch of the
        owner it holds."""
        out = []
        for b in bindings:
            name = self.model(b).name
            table = self.run(partial(self.open_table, name), "positions", name)
            if table is None:
                continue
            place = f"{self.label} {name}"
            properties = self.table_properties(table)
            have = owner_of(properties)
            if have is None:
                out.append(Position(place, materialization, None, -1, resource=b.resource_path))
            else:
                record = parse_record(properties.get(IDENTITY_PROPERTY))
                owner = record if isinstance(record, dict) and record.get("checkpoint_id") == have[1] else {}
                out.append(
                    Position(
                        place,
                        have[0],
                        have[1],
                        self.table_batch(table, *have),
                        resource=b.resource_path,
                        location=owner.get("checkpoint_location"),  # the owner's folder (its identity record)
                        host=owner.get("host"),
                    )
                )
        return out

    def owners(self, materialization: str) -> list[Position]:
        """The checkpoint that owns the view's staging folder (kept by the view's name)."""
        staging = self.run(lambda: self.stage_owner(materialization), "owners", self.staging)
        if not staging:
            return []
        place = f"staging folder {self.stage_dir(materialization)}"
        loc, host = staging.get("checkpoint_location"), staging.get("host")
        return [Position(place, materialization, str(staging["checkpoint_id"]), -1, location=loc, host=host)]

    def drop(self, materialization: str, bindings: Sequence[BindingSpec]) -> list[str]:
        """Delete the bindings' tables (with their files), the materialization's staged files and
        its quarantined rows."""
        done = []
        self.__dict__.pop("_forms", None)
        for b in bindings:
            model = self.model(b)
            action = self.run(partial(self.drop_table, model), "drop", model.name)
            if action:
                done.append(action)
        fs, _ = self.fs
        stage = self.stage_dir(materialization)
        if fs.get_file_info(stage).type != pafs.FileType.NotFound:
            fs.delete_dir(stage)
            done.append(f"deleted staged files of {materialization!r}")
        if fs.get_file_info(self.stage_owner_path(materialization)).type != pafs.FileType.NotFound:
            fs.delete_file(self.stage_owner_path(materialization))
        return done + self.drop_quarantine(materialization)

    def staged_files(self, materialization: str) -> list[str]:
        """Names of the staged files of a materialization (tests, ``tidemark status``)."""
        fs, _ = self.fs
        infos = fs.get_file_info(pafs.FileSelector(self.stage_dir(materialization), allow_not_found=True))
        return sorted(i.base_name for i in infos if i.type == pafs.FileType.File)
