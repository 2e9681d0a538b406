"""The one lake driver (Delta, Iceberg): Apply, the coordinator's apply, inspection, drop and a
rebuild's cut-over, written once over a :class:`~tidemark.drivers.lake.format.TableFormat`
(``open``, ``schema``, ``scan``, ``commit``, ``replace``, ``drop``, ...).

Commit pattern ``idempotent-apply-coordinator`` (see :mod:`tidemark.drivers.base`):

* **Load** runs only after the session's Acknowledged, on the table as it was then
  (read-committed), through the format's ``scan`` (pruned by the chunk's key values), then an
  exact membership test in Arrow.
* **Store** streams each binding's rows (typed columns, the document as JSON, a delete
  marker) into one staged Parquet file per (session, binding) under
  ``STAGING/<materialization>/``.
* **Quarantine** (where the format has a dead-letter table): the batch's invalid documents,
  written at StartCommit into one staged Parquet file.
* **StartCommit** closes the files and returns the patch ``{"stages": {RANGE: {"batch": N,
  TAG..., "files": [[TABLE, FILE, ROWS], ...], "quarantine": [[FILE, ROWS]]}}}`` (``TAG``: the
  format's ``tag``, naming the checkpoint).  Nothing is visible in the tables yet.
* **Coordinator Acknowledge** (:meth:`LakeDriver.coordinator_acknowledge`), after the
  recovery log holds batch N, for every bound table: skip a table that holds batch N of this
  checkpoint, refuse one another checkpoint owns, else the format's ``commit`` -- one commit of
  the batch's staged files that records N with the data -- then, if the batch quarantined
  documents, the dead-letter table's ``apply``; once every table is applied, delete the
  materialization's staged files older than this call (the applied ones and orphans of
  attempts that never reached the recovery log).

An endpoint is a subclass naming its format (``format_class``) and nothing else of the protocol.
"""

from __future__ import annotations

import time
from functools import partial
from typing import Any, Callable, ClassVar, Optional, Sequence, TypeVar

from tidemark.drivers.base import Capabilities, CommitPattern, Driver, Position, ReplaceContents
from tidemark.drivers.common.columns import INSTANT, Column, dumps, key_of
from tidemark.drivers.common.identity import PROPERTY as IDENTITY_PROPERTY
from tidemark.drivers.common.identity import parse_record, record_text
from tidemark.drivers.lake.format import FormatClass, LakeSettings, Table, TableFormat, run
from tidemark.drivers.lake.lean import documents_of
from tidemark.drivers.lake.model import (
    KEY_PROPERTY,
    LEAN_PROPERTY,
    MODE_PROPERTY,
    OWNER_PROPERTY,
    LakeTable,
    TableForm,
    columns_to_add,
    form_line,
    in_form,
    owner_of,
    owner_text,
    stages_of,
    table_form,
)
from tidemark.drivers.lake.transactor import StagedFilesTransactor, StagingArea
from tidemark.errors import DriverError, FencedOff, RecoveryError, TidemarkError
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


class LakeDriver(Driver):
    """A lake endpoint: staged Parquet, applied once per batch by the coordinator, over the
    table format its class names."""

    format_class: ClassVar[FormatClass]
    reports_created = True
    rebuild_refusal = "its tables cannot be replaced in place"

    def __init__(self, config: dict | None = None):
        self.config = dict(config or {})
        self.format: TableFormat[Any] = self.format_class(self.config)
        self.settings: LakeSettings = self.format.settings
        self.area = StagingArea(self.format)

    @classmethod
    def resolve_config(cls, config: dict, base_dir: str) -> dict:
        return cls.format_class.resolve_config(config, base_dir)

    def __getstate__(self):
        return {"config": self.config}

    def __setstate__(self, st):
        self.__init__(st["config"])

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.format!r})"

    def capabilities(self) -> Capabilities:
        return self.format.capabilities

    def spec(self) -> SpecResponse:
        return self.format.spec

    def close(self) -> None:
        self.format.close()

    # -------------------------------------------------------------- plumbing
    @property
    def staging(self) -> str:
        return self.settings.staging

    def run(self, fn: Callable[[], T], what: str, where: str, *, idempotent: bool = True) -> T:
        return run(self.format, fn, what, where, idempotent=idempotent)

    def model(self, binding: BindingSpec) -> LakeTable:
        return self.format.model(binding)

    def open_table(self, name: str) -> Any:
        """The format's handle of table ``name`` (None: no table): tests, inspection."""
        return getattr(self.format.open(name), "handle", None)

    def _table(self, name: str) -> Table[Any]:
        table = self.format.open(name)
        if table is None:
            raise DriverError(f"{self.format.label} {name!r} does not exist (dropped after Apply?)")
        return table

    def _batch(self, table: Table[Any], owner: tuple[str, str]) -> int:
        """The last batch of ``owner`` (materialization, checkpoint) the table holds, or -1."""
        return self.format.batch(table, owner[0], self.format.tag(*owner))

    def should_apply(self, model: LakeTable, table: Table[Any], owner: tuple[str, str], batch: int) -> bool:
        """False if the table holds the batch; refuses (FencedOff) a table another checkpoint owns."""
        if self._batch(table, owner) >= batch:
            return False
        have = owner_of(table.properties)
        if have is not None and have != owner:  # the fence between two jobs on one table
            raise FencedOff(
                f"{self.format.label} {model.name!r} now belongs to materialization {have[0]!r} of tidemark "
                f"checkpoint {have[1]}; batch {batch} of {owner[0]!r} was not applied to it"
            )
        return True

    # --------------------------------------------------------------- forms
    def form_model(self, binding: BindingSpec) -> LakeTable:
        """The binding's table model in the form its table has (read once per table and
        driver), or for a table not made yet the form the binding asks for."""
        base = self.model(binding)
        if base.delta:
            return base
        forms = self.__dict__.setdefault("_forms", {})
        form = forms.get(base.name)
        if form is None:
            form = _form(
                self.format, self.run(partial(self.format.open, base.name), "read the table's form", base.name)
            )
            if form is not None:
                forms[base.name] = form
        return in_form(self.format.label, base, binding, form)

    def row_forms(self, bindings: Sequence[BindingSpec]) -> list[str]:
        out, label = [], self.format.label
        for b in bindings:
            base = self.model(b)
            form = _form(
                self.format, self.run(partial(self.format.open, base.name), "read the table's form", base.name)
            )
            out.append(form_line(label, in_form(label, base, b, form), form, b))
        return out

    # ----------------------------------------------------------- setup phase
    def check_table(self, model: LakeTable, table: Table[Any]) -> list[Column]:
        """The columns to add to an existing table; raises IncompatibleSchema."""
        fmt = self.format
        missing = columns_to_add(f"{fmt.label} {model.name!r}", model, table.properties, table.columns, fmt.type_of)
        self.format.check(model, table, False)
        return missing

    def validate(self, req: Validate) -> Validated:
        for b in req.bindings:
            model = self.model(b)

            def body(model=model, b=b) -> None:
                table = self.format.open(model.name)
                if table is not None:
                    self.check_table(in_form(self.format.label, model, b, _form(self.format, table)), table)

            self.run(body, "validate", model.name)
        return Validated(tuple(ValidatedBinding(b.resource_path, b.delta_updates) for b in req.bindings))

    def apply(self, req: Apply) -> Applied:
        actions: list[str] = []
        created: list[tuple] = []
        owner = (req.materialization, str(req.checkpoint_id)) if req.checkpoint_id else None
        label, upkeep = self.format.label, self.format.upkeep
        self.__dict__.pop("_forms", None)  # Apply makes or changes tables
        for i, b in enumerate(req.bindings):
            base = self.model(b)
            record = record_text(req.identities[i], base.name) if owner and i < len(req.identities) else None

            def body(base=base, b=b, record=record) -> None:
                table = self.format.open(base.name)
                model = in_form(label, base, b, _form(self.format, table))
                if table is None:
                    actions.append(f"create {label} {model.name}")
                    created.append(b.resource_path)
                    if not req.dry_run:
                        props = {KEY_PROPERTY: dumps([c.name for c in model.keys])}
                        props[MODE_PROPERTY] = "true" if model.delta else "false"
                        props.update(upkeep)
                        if owner:
                            props[OWNER_PROPERTY] = owner_text(*owner)
                        if record:
                            props[IDENTITY_PROPERTY] = record
                        if model.lean:
                            props[LEAN_PROPERTY] = model.lean_text()
                        try:
                            self.format.schema(model, None, [], props)
                        except TidemarkError:  # e.g. created meanwhile: plan again
                            actions.pop()
                            created.pop()
                            raise
                    return
                missing = self.check_table(model, table)
                props = table.properties
                have = owner_of(props)
                if owner and have is not None and have != owner:
                    raise RecoveryError(
                        f"{label} {model.name!r} belongs to materialization {have[0]!r} of tidemark checkpoint "
                        f"{have[1]}, not to this one ({owner[1]}). Nothing was changed"
                    )
                updates = {k: v for k, v in upkeep.items() if props.get(k) != v}
                if owner and have is None:  # a table of an older run without an owner: this checkpoint takes it
                    updates[OWNER_PROPERTY] = owner_text(*owner)
                if record and not props.get(IDENTITY_PROPERTY):
                    updates[IDENTITY_PROPERTY] = record
                    if req.dry_run:  # a table of a tidemark before identity records: the run records it
                        actions.append(f"record the view's identity on {model.name}")
                if model.lean and props.get(LEAN_PROPERTY) != model.lean_text():
                    updates[LEAN_PROPERTY] = model.lean_text()
                for col in missing:
                    actions.append(f"add column {col.name} {self.format.type_of(col.kind)} to {model.name}")
                if (missing or updates) and not req.dry_run:
                    self.format.schema(model, table, missing, updates)

            self.run(body, "apply", base.name)
        if owner and not req.dry_run:
            self.run(lambda: self.area.own(*owner, req.identities, False), "apply", self.staging)
        self.__dict__.pop("_forms", None)
        return Applied("; ".join(actions) or "nothing to do", tuple(created))

    # ----------------------------------------------------- transaction phase
    def open(self, req: Open) -> tuple[StagedFilesTransactor, Opened]:
        models = [self.form_model(b) for b in req.bindings]
        return StagedFilesTransactor(self.format, self.area, req, models), Opened(None)  # the log is authoritative

    def coordinator_acknowledge(
        self, materialization: str, state: Any, runtime_checkpoint: dict, bindings: Sequence[BindingSpec]
    ) -> None:
        """Apply batch N's staged files to every bound table, once (see the module docstring)."""
        started = time.time()
        batch = int(runtime_checkpoint["batch_id"])
        owner = (materialization, str(runtime_checkpoint.get("checkpoint_id")))
        tag = self.format.tag(*owner)
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
            table = self.run(partial(self.format.open, name), "apply batch", name)
            if table is None or self._batch(table, owner) < batch:
                unbound.append(name)
        if unbound:
            raise RecoveryError(
                f"batch {batch} of {materialization!r} staged data for {self.format.label}s that are no "
                f"longer bound: {unbound}; restore the bindings to apply it"
            )
        for name in sorted(models):  # every bound table records the batch, with data or without
            self.run(partial(self._apply_table, models[name], files.get(name, []), owner, batch), "apply batch", name)
        quarantined = [name for stage in stages for name, rows in stage.get("quarantine") or () if rows]
        if quarantined:  # the batch's invalid documents, by the same rule
            if (dead := self.format.quarantine) is None:
                raise DriverError(
                    f"{self.name}: batch {batch} staged invalid documents, but the endpoint has no quarantine"
                )
            self.run(lambda: dead.apply(self.area.staged(quarantined, batch), owner), "apply quarantine", self.name)
        # the staged files of every applied or abandoned attempt
        self.run(lambda: self.area.remove(materialization, before=started), "clean staging", self.staging)

    def _apply_table(self, model: LakeTable, names: list[str], owner: tuple[str, str], batch: int) -> None:
        """Batch ``batch``'s staged files ``names`` into the table once (again from the reload after a lost commit)."""
        table = self._table(model.name)
        if self.should_apply(model, table, owner, batch):
            self.format.commit(model, table, self.area.staged(names, batch), owner)

    # ------------------------------------------------------------- rebuild
    def shadow_resource(self, resource: dict, tag: str) -> Optional[dict]:
        """``{table: T, ...}`` -> ``{table: T__<tag>, ...}`` beside it; where the format's resources
        may be paths (Delta), ``{path: P}`` -> ``{path: P__<tag>}``, a sibling folder."""
        path = resource.get("path")
        if "path" in self.format.spec.resource_schema.get("properties", {}) and isinstance(path, str) and path:
            return {**resource, "path": f"{path.rstrip('/')}__{tag}"}
        if isinstance(resource.get("table"), str):
            return {**resource, "table": f"{resource['table']}__{tag}"}
        return None

    def check_rebuild(self, bindings: Sequence[BindingSpec], old_keys: Sequence[Optional[list]]) -> None:
        """What the format cannot change of an existing table in a cut-over (Iceberg: its
        partitioning, a column's type but by a promotion) to the shadow's (a new table's) columns."""
        for b in bindings:
            model = in_form(self.format.label, self.model(b), b, None)
            table = self.run(partial(self.format.open, model.name), "check", model.name)
            if table is not None:
                self.format.check(model, table, True)

    def replaced(self, live: LakeTable, owner: tuple[str, str], properties: dict) -> str:
        """``"done"``, ``"none"`` or ``"partial"`` for one table (see :meth:`cut_over_state`)."""
        table = self.format.open(live.name)
        if table is None or self._batch(table, owner) < 0:
            return "none"
        return "done" if all(table.properties.get(k) == v for k, v in properties.items()) else "partial"

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
        tag = self.format.tag
        old, new = tag(req.shadow, req.checkpoint_id), tag(req.materialization, req.checkpoint_id)
        stages = {}
        for key_range, stage in state["stages"].items():
            if isinstance(stage, dict):
                stage = {
                    **stage,
                    **{k: new[k] for k in old if str(stage.get(k)) == str(old[k])},
                    "files": [[names.get(f[0], f[0]), *f[1:]] for f in stage.get("files") or ()],
                }
            stages[key_range] = stage
        return {**state, "stages": stages}

    def cut_over_state(self, req: ReplaceContents) -> str:
        states = {
            self.run(partial(self.replaced, live, owner, props), "read the cut-over", live.name)
            for live, _, owner, props in self._cut_over_plan(req)
        }
        if states == {"done"}:
            dead = self.format.quarantine
            quarantined = dead is not None and self.run(partial(dead.read, req.shadow), "quarantine", self.name)
            return "partial" if quarantined else "done"
        return "none" if states == {"none"} else "partial"

    def replace_contents(self, req: ReplaceContents) -> list[str]:
        """The cut-over, table by table: each live table's rows, schema and properties become its
        shadow's (the shadow's last batch recorded with the data: the table now belongs to the
        shadow's checkpoint under the live name), then the quarantine.  A table's earlier
        versions stay readable (time travel)."""
        done: list[str] = []
        label = self.format.label
        for live, shadow, owner, properties in self._cut_over_plan(req):

            def body(live=live, shadow=shadow, owner=owner, properties=properties) -> None:
                if self.replaced(live, owner, properties) == "done":
                    return
                source = self.format.open(shadow.name)
                if source is None:
                    raise RecoveryError(
                        f"rebuild: the shadow {label} {shadow.name!r} is gone; abandon the rebuild "
                        "(`tidemark rebuild SPEC -m NAME --abandon`) and start it again. The live view is as it was"
                    )
                batch = self._batch(source, (req.shadow, str(req.checkpoint_id)))
                lean = source.properties.get(LEAN_PROPERTY)
                if lean and not source.document_required:  # the live table takes the shadow's form
                    properties = {**properties, LEAN_PROPERTY: lean}
                self.format.replace(live, source, owner, batch, properties)
                done.append(f"replaced the contents of {label} {live.name} with {shadow.name} (batch {batch})")

            self.run(body, "cut over", live.name)
        self.__dict__.pop("_forms", None)
        owner = (req.materialization, str(req.checkpoint_id))
        self.run(lambda: self.area.own(*owner, req.identities, True), "cut over", self.staging)
        dead = self.format.quarantine
        moved = (
            None
            if dead is None
            else self.run(lambda: dead.move(req.shadow, req.materialization), "quarantine", self.name)
        )
        return done + ([moved] if moved else [])

    # ------------------------------------------------------------ inspection
    def dump(self, materialization: str, binding: BindingSpec):
        model = self.form_model(binding)
        table = self.run(lambda: self.format.scan(self._table(model.name), model, None), "dump", model.name)
        if table is None:
            return [] if model.delta else {}
        docs = documents_of(table, model.held, model.lean)
        if model.delta:
            return docs
        keys = zip(*(table.column(c.name).to_pylist() for c in model.keys))
        return {key_of(model, k): d for k, d in zip(keys, docs)}

    def identities(self, materialization: str, bindings: Sequence[BindingSpec]) -> list[Optional[dict]]:
        out: list[Optional[dict]] = []
        for b in bindings:
            name = self.model(b).name
            table = self.run(partial(self.format.open, name), "identities", name)
            out.append(None if table is None else parse_record(table.properties.get(IDENTITY_PROPERTY)))
        return out

    def positions(self, materialization: str, bindings: Sequence[BindingSpec]) -> list[Position]:
        """Per bound table that exists: its owner (a table property) and the last batch of the
        owner it holds."""
        out = []
        for b in bindings:
            name = self.model(b).name
            table = self.run(partial(self.format.open, name), "positions", name)
            if table is None:
                continue
            place = f"{self.format.label} {name}"
            have = owner_of(table.properties)
            if have is None:
                out.append(Position(place, materialization, None, -1, resource=b.resource_path))
            else:
                record = parse_record(table.properties.get(IDENTITY_PROPERTY))
                owner = record if isinstance(record, dict) and record.get("checkpoint_id") == have[1] else {}
                loc, host = owner.get("checkpoint_location"), owner.get("host")  # the owner's (its identity record)
                batch = self._batch(table, have)
                out.append(Position(place, *have, batch, resource=b.resource_path, location=loc, host=host))
        return out

    def owners(self, materialization: str) -> list[Position]:
        """The checkpoint that owns the view's staging folder (kept by the view's name)."""
        staging = self.run(lambda: self.area.owner(materialization), "owners", self.staging)
        if not staging:
            return []
        place = f"staging folder {self.area.dir(materialization)}"
        loc, host = staging.get("checkpoint_location"), staging.get("host")
        return [Position(place, materialization, str(staging["checkpoint_id"]), -1, location=loc, host=host)]

    def drop(self, materialization: str, bindings: Sequence[BindingSpec]) -> list[str]:
        """Delete the bindings' tables (with their files), the materialization's staged files and
        its quarantined rows."""
        done = []
        self.__dict__.pop("_forms", None)
        for b in bindings:
            model = self.model(b)
            action = self.run(partial(self.format.drop, model), "drop", model.name)
            if action:
                done.append(action)
        done += self.area.drop(materialization)
        dead = self.format.quarantine
        return done + (
            [] if dead is None else self.run(partial(dead.drop, materialization), "drop quarantine", dead.location)
        )

    def quarantined(self, materialization: str) -> list[dict]:
        """The materialization's rows of the dead-letter table (tests, inspection)."""
        dead = self.format.quarantine
        if dead is None:
            return Driver.quarantined(self, materialization)  # the contract's answer: none kept here
        return self.run(partial(dead.read, materialization), "read quarantine", dead.location)

    def staged_files(self, materialization: str) -> list[str]:
        """Names of the staged files of a materialization (tests, ``tidemark status``)."""
        return sorted(i.base_name for i in self.area.files(materialization))


def _form(fmt: TableFormat[Any], table: Optional[Table[Any]]) -> Optional[TableForm]:
    """The form of a table as ``fmt`` opened it (None: no table)."""
    if table is None:
        return None
    instant = fmt.type_of(INSTANT)
    timestamps = {name: have == instant for name, have in table.columns.items()}
    return table_form(table.document_required, table.properties, timestamps)
