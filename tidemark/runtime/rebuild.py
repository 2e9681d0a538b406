"""Changing a live view without taking it away (``tidemark rebuild``): build a shadow, replace in one transaction.

A rebuild is a second materialization the runtime already knows how to run: the spec as
edited, named ``NAME__rebuild``, writing **shadow resources** (``Driver.shadow_resource``: a
SQL table ``T__tm_rebuild`` beside ``T``) under a checkpoint folder of its own
(``<checkpoints>/NAME__rebuild``). It is built from the sources' start while the live view
keeps running the old spec; nothing in the commit path is new for it (its own fences,
recovery log and identity records).

The **cut-over**, once the shadow is built:

1. the live view's lease is taken: a live run holding it is asked to stop at its next batch
   boundary (:func:`tidemark.runtime.lease.request_stop`) and given ``wait`` seconds;
2. the shadow runs once more, to the end of the input;
3. ``<checkpoints>/NAME.next``: a copy of the shadow's checkpoint folder whose recovery log
   names the live view (its name, its resources, their identities); the record says
   ``cutting`` (fault point ``before_cutover``);
4. ONE endpoint transaction (``Driver.replace_contents``; the lakes: one per table, the
   store: one folder exchange): each live resource takes its shadow's contents; the shadow's
   checkpoints, fenced above every live fence, its owner and identity records become the
   live view's (fault point ``replace_contents``, inside it);
5. the folders switch (fault point ``after_cutover`` before): the live one moves to
   ``NAME.before-<id>`` (kept for the operator; nothing reads it), ``NAME.next`` takes its
   place; the shadow's folder and the record go.

A kill anywhere leaves the old view intact or the new one complete, never a mix: the only
change to a live resource is the transaction of step 4, and whether it committed is read
back from the endpoint (``Driver.cut_over_state``: ``none``, ``done``, or ``partial`` for an
endpoint that replaces in more than one step, which ``replace_contents`` again finishes). The
next ``rebuild`` finishes a committed cut-over (step 5) or goes on building; ``run`` refuses the
view while a cut-over is unfinished (:func:`refuse_unfinished`). ``--abandon`` drops only the
shadow (``Driver.drop`` of the shadow name, which owns nothing else) and its folders.

An adopted view's shadow starts from the adopted rows (:func:`tidemark.runtime.adoption.seed`
copies them into its folder; the Spark runner runs its batch 0 through ``adopt``).

Without Spark: the caller gives ``run_view(spec, name)``, which runs a materialization of a
spec to the end of its input (``tidemark.spark`` through :func:`tidemark.rebuild`; the
plain runner in the kill matrix).
"""

from __future__ import annotations

import dataclasses
import json
import logging
import os
import shutil
import time
import uuid
from dataclasses import asdict, dataclass
from typing import Callable, Optional, Sequence

from tidemark.drivers.base import Driver, ReplaceContents
from tidemark.errors import RecoveryError, SpecError
from tidemark.faults import fault_point
from tidemark.files import write_atomically
from tidemark.protocol.messages import BindingSpec, JsonObject
from tidemark.runtime.adoption import read_record as adopted
from tidemark.runtime.adoption import seed
from tidemark.runtime.adoption import write_record as write_adoption
from tidemark.runtime.lease import Lease, clear_stop, request_stop, stop_request
from tidemark.runtime.ownership import REBUILD_SUFFIX
from tidemark.runtime.recovery_log import RecoveryLog
from tidemark.runtime.versions import FORMAT, refuse_newer
from tidemark.runtime.view_identity import binding_identity, endpoint_record, source_location
from tidemark.spec import BindingConfig, MaterializationSpec, TidemarkSpec

log = logging.getLogger("tidemark")

SUFFIX = REBUILD_SUFFIX  # the shadow materialization's name: NAME__rebuild
TAG = "tm_rebuild"  # what the endpoint puts in a shadow resource's name (T__tm_rebuild)
BUILDING, CUTTING = "building", "cutting"
DEFAULT_WAIT = 600.0  # seconds the cut-over waits for the live run to stop at a batch boundary


@dataclass
class RebuildRecord:
    """``<checkpoints>/NAME.rebuild.json``: a rebuild in progress."""

    id: str
    materialization: str
    shadow: str
    version: str  # the edited spec's version the shadow is built from
    phase: str = BUILDING
    started_at: float = 0.0
    shadow_checkpoint_id: str = ""  # set at the cut-over
    format: int = FORMAT


def record_path(location: str) -> str:
    return location.rstrip("/") + ".rebuild.json"


def next_path(location: str) -> str:
    return location.rstrip("/") + ".next"


def read_record(location: str) -> Optional[RebuildRecord]:
    if "://" in location:
        return None
    try:
        with open(record_path(location), encoding="utf-8") as f:
            raw = json.load(f)
    except FileNotFoundError:
        return None
    refuse_newer(raw, f"the rebuild record {record_path(location)}")
    names = {f.name for f in dataclasses.fields(RebuildRecord)}
    return RebuildRecord(**{k: v for k, v in raw.items() if k in names})


def write_record(location: str, record: RebuildRecord) -> None:
    write_atomically(record_path(location), (json.dumps(asdict(record), indent=1) + "\n").encode("utf-8"))


def refuse_unfinished(materialization: str, location: str) -> None:
    """A view whose rebuild's cut-over did not finish is not run: its endpoint may already hold
    the rebuilt view, which the checkpoint folder beside it does not know yet."""
    request = stop_request(location)
    if request is not None:
        raise RecoveryError(
            f"materialization {materialization!r}: {request.get('by', 'another process')} is cutting over and asked "
            "the live run to stop; wait for it to finish, then run the view with the edited spec. Nothing was changed"
        )
    record = read_record(location)
    if record is not None and record.phase == CUTTING:
        raise RecoveryError(
            f"materialization {materialization!r}: the cut-over of its rebuild {record.id} did not finish, so the "
            f"endpoint may hold the rebuilt view already. Finish it with `tidemark rebuild SPEC -m {materialization}` "
            "(with the edited spec). Nothing was changed"
        )


def shadow_spec(spec: TidemarkSpec, name: str, driver: Driver) -> tuple[TidemarkSpec, MaterializationSpec]:
    """The edited spec with one more materialization: the shadow of ``name``."""
    mat = spec.materializations[name]
    shadow = name + SUFFIX
    if shadow in spec.materializations:
        raise SpecError(
            f"materialization {shadow!r} is the name a rebuild of {name!r} takes; rename it", file=spec.file
        )
    bindings = []
    for b in mat.bindings:
        res = driver.shadow_resource(b.resource, TAG)
        if res is None:
            raise SpecError(
                f"materialization {name!r}: endpoint {mat.driver_name!r} cannot rebuild a view in place: "
                f"{driver.rebuild_refusal}. Start it over with `tidemark reset SPEC -m {name}`. Nothing was changed"
            )
        bindings.append(BindingConfig(b.source, res, b.delta_updates))
    smat = dataclasses.replace(mat, name=shadow, bindings=tuple(bindings))
    return (
        TidemarkSpec(
            spec.collections, {**spec.materializations, shadow: smat}, spec.checkpoint, spec.file, spec.base_dir
        ),
        smat,
    )


def spark_files_read(location: str) -> list[str]:
    """The input files Spark's file sources of a checkpoint folder recorded as read."""
    out: list[str] = []
    root = os.path.join(location, "spark", "sources")
    for source in sorted(os.listdir(root)) if os.path.isdir(root) else []:
        folder = os.path.join(root, source)
        for name in sorted(os.listdir(folder)):
            if name.startswith(".") or name.endswith((".tmp", ".crc")):
                continue
            with open(os.path.join(folder, name), encoding="utf-8") as f:
                for line in f.read().splitlines()[1:]:  # "v1", then one JSON object per file
                    try:
                        path = json.loads(line).get("path")
                    except (ValueError, AttributeError):
                        continue
                    if isinstance(path, str):
                        out.append(path)
    return sorted(set(out))


def missing_input(location: str, sources: Optional[Sequence[Optional[str]]] = None) -> list[str]:
    """Files the live view read that its source folders no longer hold (a rebuild could not
    read them again); with ``sources`` (the edited spec's source folders), only files under
    one of them: a source moved elsewhere in the edit is read from its new place."""
    missing = []
    roots = None if sources is None else [s.rstrip("/") + "/" for s in sources if s]
    for uri in spark_files_read(location):
        path = uri[len("file:") :] if uri.startswith("file:") else uri
        path = "/" + path.lstrip("/") if uri.startswith("file:") else path
        if roots is not None and not any(path.startswith(r) for r in roots):
            continue
        if "://" not in path and not os.path.exists(path):
            missing.append(path)
    return missing


class Rebuild:
    """One rebuild of materialization ``name`` of ``spec`` (the edited spec)."""

    def __init__(
        self,
        spec: TidemarkSpec,
        name: str,
        run_view: Callable[[TidemarkSpec, str], None],
        say: Callable[[str], None] = log.info,
        wait: float = DEFAULT_WAIT,
    ) -> None:
        from tidemark.drivers.registry import load_driver

        if name not in spec.materializations:
            raise SpecError(f"unknown materialization {name!r} (known: {', '.join(sorted(spec.materializations))})")
        self.spec, self.name, self.run_view, self.say, self.wait = spec, name, run_view, say, float(wait)
        self.mat = spec.materializations[name]
        self.location = spec.checkpoint_location(name)
        if "://" in self.location:
            raise SpecError(
                f"materialization {name!r}: a rebuild switches checkpoint folders, which needs a local (or mounted) "
                f"file system; {self.location} is not one. Nothing was changed"
            )
        self.driver: Driver = load_driver(self.mat.driver_name, self.mat.driver_config)
        try:
            self.shadow_spec, self.shadow = shadow_spec(spec, name, self.driver)
        except BaseException:
            self.driver.close()
            raise
        self.shadow_location = spec.checkpoint_location(self.shadow.name)

    def close(self) -> None:
        self.driver.close()

    # ------------------------------------------------------------------ the steps
    def start(self) -> RebuildRecord:
        """The record of the rebuild in progress, or a new one after the checks."""
        record = read_record(self.location)
        version = self.shadow.version(self.shadow_spec)
        if record is not None:
            if record.phase == BUILDING and record.version != version:
                raise SpecError(
                    f"materialization {self.name!r}: rebuild {record.id} was started from another edit of the spec; "
                    f"finish it with that spec, or abandon it (`tidemark rebuild SPEC -m {self.name} --abandon`) "
                    "and start again. Nothing was changed"
                )
            return record
        live = RecoveryLog(self.location, self.name, create=False)
        if live.checkpoint_id is None:
            raise SpecError(
                f"materialization {self.name!r} has no view to rebuild yet (no checkpoint at {self.location}): "
                "`tidemark run` builds it from the edited spec. Nothing was changed"
            )
        self._refuse_foreign_live(live.checkpoint_id)
        adoption = adopted(self.location)
        if adoption is not None and not adoption.done:
            raise SpecError(
                f"materialization {self.name!r}: its `tidemark adopt` did not finish; finish it (the same command) "
                "before rebuilding the view. Nothing was changed"
            )
        logged = list(getattr(live.last(), "identities", None) or [])
        self.driver.check_rebuild(
            self._bindings(self.spec, self.mat),
            [logged[i].get("key") if i < len(logged) else None for i in range(len(self.mat.bindings))],
        )
        missing = missing_input(self.location, [i.get("source") for i in self._identities()])
        if missing:
            shown = ", ".join(missing[:3]) + (f" and {len(missing) - 3} more" if len(missing) > 3 else "")
            raise SpecError(
                f"materialization {self.name!r}: the view holds what was read from {len(missing)} file(s) its source "
                f"no longer has ({shown}); a rebuild from the source would lose them. Put them back, or keep the "
                "view as it is. Nothing was changed"
            )
        from tidemark.sources.origin import carry_to_rebuild

        carry_to_rebuild(self.spec, self.mat, self.location, self.shadow_location)  # a log source: from its origin
        record = RebuildRecord(uuid.uuid4().hex[:12], self.name, self.shadow.name, version, started_at=time.time())
        if adoption is not None:  # the shadow starts from the adopted rows, as the live view did
            shutil.rmtree(self.shadow_location, ignore_errors=True)
            seed(adoption, self.location, self.shadow_location, self.shadow.name)
        write_record(self.location, record)
        return record

    def build(self) -> None:
        """The shadow, from the sources' start (or where it got to), to the end of the input."""
        self.run_view(self.shadow_spec, self.shadow.name)

    def progress(self) -> str:
        shadow = RecoveryLog(self.shadow_location, self.shadow.name, create=False)
        live = RecoveryLog(self.location, self.name, create=False)
        s, _ = shadow.peek_last() if shadow.checkpoint_id else (None, None)
        lv, _ = live.peek_last()
        return (
            f"shadow {self.shadow.name} at batch {'-' if s is None else s.batch_id}, "
            f"live {self.name} at batch {'-' if lv is None else lv.batch_id}"
        )

    def run(self) -> str:
        """Build, then cut over (or finish a cut-over a kill interrupted). Returns what was done."""
        record = self.start()
        if record.phase == CUTTING:
            lease = Lease(self.location, self.name)
            lease.acquire()  # (run refuses the view while the record says cutting; this is the rebuild's)
            try:
                if self._finish_committed(record):
                    return self._finish(record)
            finally:
                lease.release()
            self.say("the cut-over did not commit: the live view is as it was; building on")
            shutil.rmtree(next_path(self.location), ignore_errors=True)
            record.phase = BUILDING
            write_record(self.location, record)
        self.say(f"rebuild {record.id}: building {self.shadow.name} from the sources' start")
        self.build()
        self.say(f"rebuild {record.id}: built ({self.progress()}); cutting over")
        lease = self._stop_live_run(record)
        try:
            self.build()  # the last batches, with the live view stopped
            return self._cut_over(record)
        finally:
            clear_stop(self.location)
            lease.release()

    def _stop_live_run(self, record: RebuildRecord) -> Lease:
        """The live view's lease: at once, or -- a live run holds it -- once that run stopped at a
        batch boundary, which it does when asked (:func:`tidemark.runtime.lease.request_stop`),
        within ``wait`` seconds."""
        lease = Lease(self.location, self.name)
        try:
            lease.acquire()
            return lease
        except RecoveryError as exc:
            held = exc
        if self.wait > 0:
            request_stop(self.location, by=f"rebuild {record.id}")
            self.say(
                f"rebuild {record.id}: asked the live run to stop at its next batch boundary (waiting up to "
                f"{self.wait:.0f} s); start it again with the edited spec once the rebuild is done"
            )
            deadline = time.monotonic() + self.wait
            while time.monotonic() < deadline:
                try:
                    lease.acquire()
                    return lease
                except RecoveryError as exc:
                    held = exc
                time.sleep(0.2)  # (a lease has no notification; a stopped run gives it back at once)
            clear_stop(self.location)
        raise RecoveryError(
            f"{held}. The shadow is built ({self.progress()})"
            + (f"; the live run did not stop within {self.wait:.0f} s" if self.wait > 0 else "")
            + f". Stop the live run (Ctrl-C stops it at a batch boundary) and run `tidemark rebuild SPEC -m "
            f"{self.name}` again to cut over"
        ) from None

    def _cut_over(self, record: RebuildRecord) -> str:
        shadow_log = RecoveryLog(self.shadow_location, self.shadow.name, create=False)
        if shadow_log.last() is None:
            raise RecoveryError(f"rebuild {record.id}: the shadow holds no batch (no input?). Nothing was changed")
        fault_point("before_cutover")
        nxt = next_path(self.location)
        shutil.rmtree(nxt, ignore_errors=True)
        shutil.copytree(self.shadow_location, nxt, ignore=shutil.ignore_patterns("tidemark.lease*"))
        record.shadow_checkpoint_id = shadow_log.checkpoint_id or ""
        req = self._request(record)
        self._rename_log(nxt, req)
        adoption = adopted(nxt)
        if adoption is not None:
            adoption.materialization = self.name
            write_adoption(nxt, adoption)
        record.phase = CUTTING
        write_record(self.location, record)
        done = self.driver.replace_contents(req)
        for line in done:
            self.say(line)
        fault_point("after_cutover")
        return self._finish(record)

    def _finish(self, record: RebuildRecord) -> str:
        """Step 5, idempotent: the folders switch, the shadow's folder and the record go."""
        nxt, before = next_path(self.location), f"{self.location.rstrip('/')}.before-{record.id}"
        if os.path.isdir(nxt):
            live_id = RecoveryLog(self.location, self.name, create=False).checkpoint_id
            if os.path.isdir(self.location) and live_id != record.shadow_checkpoint_id:
                os.replace(self.location, before)
            os.replace(nxt, self.location)
        for line in self._drop_shadow():
            self.say(line)  # what a cut-over left of the shadow (MariaDB drops its table after the commit)
        shutil.rmtree(self.shadow_location, ignore_errors=True)
        os.remove(record_path(self.location))
        return (
            f"rebuild {record.id}: {self.name} now holds the view of the edited spec (the old checkpoint folder "
            f"is kept as {before})"
        )

    def abandon(self) -> str:
        record = read_record(self.location)
        if record is None:
            return f"materialization {self.name!r} has no rebuild in progress"
        if record.phase == CUTTING and self._finish_committed(record):
            return self._finish(record) + " (the cut-over had committed, so it was finished, not abandoned)"
        done = self._drop_shadow()
        shutil.rmtree(self.shadow_location, ignore_errors=True)
        shutil.rmtree(next_path(self.location), ignore_errors=True)
        os.remove(record_path(self.location))
        return f"rebuild {record.id} abandoned: " + ("; ".join(done) or "nothing was built yet")

    # ------------------------------------------------------------------ helpers
    def _refuse_foreign_live(self, live_id: Optional[str]) -> None:
        """The cut-over replaces the live view's contents and progress: refuse, before anything
        is built, a live view of this name that another checkpoint (another spec's folder)
        writes in the endpoint."""
        from tidemark.runtime.ownership import Owner, refuse_foreign_owners

        mine = Owner.here(self.name, live_id, self.location)
        bindings = self._bindings(self.spec, self.mat)
        refuse_foreign_owners(self.driver, self.mat.driver_name, mine, bindings, action="this rebuild")

    def _drop_shadow(self) -> list[str]:
        """Drop what the endpoint keeps of this rebuild's shadow, refused (nothing dropped) when
        another checkpoint owns any of it: another spec's rebuild of a view of this name."""
        from tidemark.runtime.ownership import Owner, refuse_foreign_owners

        bindings = self._bindings(self.shadow_spec, self.shadow)
        shadow_id = RecoveryLog(self.shadow_location, self.shadow.name, create=False).checkpoint_id
        mine = Owner.here(self.shadow.name, shadow_id, self.shadow_location)
        # a cut-over may leave the live view's old contents under the shadow's name (the store swaps them)
        live = tuple(Owner.here(name, None, self.location) for name in (self.shadow.name, self.name))
        action = "dropping the rebuild's shadow"
        refuse_foreign_owners(self.driver, self.mat.driver_name, mine, bindings, action=action, also=live)
        return self.driver.drop(self.shadow.name, bindings)

    def _bindings(self, spec: TidemarkSpec, mat: MaterializationSpec) -> tuple[BindingSpec, ...]:
        from tidemark.collection.collection import Collection

        return tuple(Collection(spec.collections[b.source]).binding_spec(b) for b in mat.bindings)

    def _identities(self) -> list[JsonObject]:
        sources = [
            source_location(self.spec.collections[b.source].source, self.spec.base_dir) for b in self.mat.bindings
        ]
        return [binding_identity(b, s) for b, s in zip(self._bindings(self.spec, self.mat), sources)]

    def _request(self, record: RebuildRecord) -> ReplaceContents:
        live = RecoveryLog(self.location, self.name, create=False)
        # the bindings past the live view's are added by the edit (no live log, or one without
        # identity records: none is taken for added)
        logged = len(getattr(live.peek_last()[0], "identities", None) or []) if live.checkpoint_id else 0
        return ReplaceContents(
            self.name,
            self.shadow.name,
            tuple(zip(self._bindings(self.spec, self.mat), self._bindings(self.shadow_spec, self.shadow))),
            record.shadow_checkpoint_id,
            tuple(
                {**endpoint_record(i, self.name, record.shadow_checkpoint_id, 0, self.location), "rebuilt": record.id}
                for i in self._identities()
            ),
            tuple(range(logged, len(self.mat.bindings))) if logged else (),
        )

    def _finish_committed(self, record: RebuildRecord) -> bool:
        """After a kill in the cut-over: True if it committed (an endpoint that replaces each
        resource on its own and got part of the way is taken the rest of it first)."""
        req = self._request(record)
        state = self.driver.cut_over_state(req)
        if state == "partial":
            self.say("the cut-over had replaced part of the view: replacing the rest")
            for line in self.driver.replace_contents(req):
                self.say(line)
        return state != "none"

    def _rename_log(self, folder: str, req: ReplaceContents) -> None:
        """The copied shadow log, as the live view's: its name, resources, identities and what
        the endpoint's driver checkpoint names of the shadow (:meth:`Driver.rebuilt_state`)."""
        live = [list(b.resource_path) for b in self._bindings(self.spec, self.mat)]
        identities = self._identities()
        RecoveryLog(folder, self.shadow.name, create=False).rewrite_as(
            self.name,
            lambda entry: {
                **entry,
                "runtime_checkpoint": {**entry.get("runtime_checkpoint", {}), "materialization": self.name},
                "resources": live,
                "identities": identities,
                "driver_checkpoint": self.driver.rebuilt_state(entry.get("driver_checkpoint"), req),
            },
        )


__all__ = ["Rebuild", "RebuildRecord", "missing_input", "read_record", "refuse_unfinished", "shadow_spec"]
