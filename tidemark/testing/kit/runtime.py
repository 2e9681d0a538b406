"""The kit's runtime: tidemark's own commit path, driven without Spark.

Per scenario the kit keeps a checkpoint folder and writes Spark's part of it itself
(``spark/metadata`` with the query id, ``spark/offsets/N`` before batch N), so that the
real :class:`~tidemark.runtime.coordinator.Coordinator` runs it: start-up (capabilities,
positions, Validate, dry-run Apply, Apply, the Acknowledge of the last batch), per batch
``begin`` (replay check, layout intent), ``commit`` (recovery-log append, then the
coordinator Acknowledge or the Acknowledge per shard).  Driver-checkpoint updates are
merged by :func:`tidemark.runtime.shard.merge_updates` (RFC 7396,
:mod:`tidemark.runtime.merge_patch`) and every Opened goes through
:func:`tidemark.runtime.shard.check_opened`.

The kit drives the shard sessions itself: a transaction is a generator that yields after
each phase, so a scenario can crash the runtime at any phase (its sessions are dropped
without close), kill the driver inside a request (:mod:`.kill`), race sessions
(:mod:`.race`) or keep a zombie session to commit later.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import tempfile
import uuid
from typing import Callable, Iterator, Optional, cast

from tidemark.drivers.base import CommitPattern, Driver
from tidemark.errors import FencedOff, RecoveryError
from tidemark.protocol.messages import Range
from tidemark.runtime.coordinator import BatchStart, Coordinator
from tidemark.runtime.ownership import owner_fields
from tidemark.runtime.recovery_log import LogEntry
from tidemark.runtime.shard import ShardResult, ShardTask, merge_updates
from tidemark.runtime.view_identity import endpoint_record
from tidemark.testing.kit.checks import PADDING, Checks
from tidemark.testing.kit.report import Recorder, classify
from tidemark.testing.kit.sessions import VERSION, KitCrash, ScenarioAbort, Sessions, Shard, Tracker, rk
from tidemark.testing.workload import Event, Model
from tidemark.testing.workload import bindings as make_bindings

PHASES = ("open", "acknowledge", "load", "flush", "store", "start_commit", "recovery_log")
LOAD_CHUNK = 3  # small chunks in the ordinary scenarios: many messages per transaction
STORE_CHUNK = 4


class KitCoordinator(Coordinator):
    """The real coordinator; the kit can make it die between the recovery log and Acknowledge."""

    crash_after_log = False
    skip_shard_apply = False  # pipelined sessions acknowledge the batch themselves

    def acknowledge(self, entry) -> None:
        if self.crash_after_log:
            self.crash_after_log = False
            raise KitCrash("the runtime died between the recovery log append and Acknowledge")
        if self.skip_shard_apply and self.caps.commit_pattern is CommitPattern.IDEMPOTENT_APPLY_SHARD:
            return
        super().acknowledge(entry)


def _scratch() -> Optional[str]:
    """Where the kit keeps its checkpoint folders: memory-backed when there is one (the kit's
    recovery log need not survive the machine, and its fsyncs are then free)."""
    shm = "/dev/shm"
    return shm if os.path.isdir(shm) and os.access(shm, os.W_OK) else None


class KitRuntime(Sessions, Checks):
    """One materialization, driven through the real coordinator by the kit."""

    def __init__(
        self,
        factory: Callable[[], Driver],
        recorder: Recorder,
        tag: str,
        capabilities,
        *,
        driver_name: str = "driver",
        tracker: Optional[Tracker] = None,
    ):
        self.factory = factory
        self.rec = recorder
        self.tag = tag
        self.materialization = tag
        self.bindings = make_bindings(tag, capabilities.endpoint_reduce)
        self.caps = capabilities
        self.pattern: CommitPattern = capabilities.commit_pattern
        self.driver_name = driver_name
        self.tracker = tracker or Tracker()
        self.folder = tempfile.mkdtemp(prefix=f"tidemark-{tag}-", dir=_scratch())
        self._write(("spark", "metadata"), json.dumps({"id": str(uuid.uuid4())}) + "\n")
        self.shards = 1
        self.load_chunk = min(LOAD_CHUNK, capabilities.max_load_keys)
        self.store_chunk = min(STORE_CHUNK, capabilities.max_store_docs)
        self.coord: Optional[KitCoordinator] = None
        self.model = Model()
        self.crashed = False  # a crash (or kill) happened in this scenario
        self.dirty: set[str] = set()  # at-least-once: keys a crashed attempt may have half-written
        self.endpoint_commits: dict[tuple[int, int], int] = {}  # range -> batch (StartedCommit seen)
        self.observed: dict[tuple[int, int], tuple[int, str]] = {}  # range -> (batch, what the kit saw) at a kill
        self.started: set[int] = set()  # batches some session committed (StartedCommit, or killed inside StartCommit)
        self.last_checkpoint_rows: dict[tuple[int, int], int] = {}
        self.first_records: Optional[list[dict]] = None  # the view-identity records of the first start-up
        self.live: list[Shard] = []  # open sessions (dropped when the runtime dies)
        self.events: dict[int, list[Event]] = {}
        self.checkpoint_padding = ""  # a member every runtime checkpoint carries (the large-checkpoint scenario)

    # ------------------------------------------------------------- the coordinator
    @property
    def exactly_once(self) -> bool:
        return self.pattern.exactly_once

    @property
    def store_authoritative(self) -> bool:
        return self.pattern is CommitPattern.STORE_AUTHORITATIVE

    def _write(self, parts: tuple, text: str) -> None:
        path = os.path.join(self.folder, *parts)
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with open(path, "w", encoding="utf-8") as f:
            f.write(text)

    def coordinator(self, driver: Driver) -> KitCoordinator:
        """The real coordinator of this runtime's view, over ``driver``."""
        return KitCoordinator(
            materialization=self.materialization,
            driver=driver,
            driver_name=self.driver_name,
            driver_config=dict(driver.config),
            bindings=self.bindings,
            version=VERSION,
            checkpoint_location=self.folder,
            shards=self.shards,
        )

    def start(self) -> None:
        """A runtime process starts: a new coordinator, start-up (Step 5 re-runs the last Acknowledge)."""
        driver = self.factory()
        coord = self.coordinator(driver)
        self.tracker("start-up of the coordinator (Validate, Apply, the Acknowledge of the last batch)")
        try:
            coord.start_up()
        except RecoveryError as exc:
            driver.close()
            prop, hint = classify(exc)
            self.rec.fail(prop, f"the runtime's start-up refuses the endpoint: {exc}", hint)
            raise ScenarioAbort(str(exc)) from exc
        except BaseException:
            driver.close()
            raise
        if self.coord is not None:
            self.coord.driver.close()
        self.coord = coord
        self.check_identity_records(coord)

    restart = start

    def check_identity_records(self, coord: KitCoordinator) -> None:
        """The records the endpoint keeps are those the first start-up's Apply gave, unchanged
        by later start-ups (a driver that keeps none returns None and is not checked)."""
        self.tracker("identities() (list_identities)")
        kept = coord.driver.identities(self.materialization, self.bindings)
        if kept is None:
            return
        if self.first_records is None:
            self.first_records = [
                endpoint_record(i, self.materialization, coord.checkpoint_id, 0, self.folder) for i in coord.identities
            ]
        if not self.rec.check(
            "identity-records",
            isinstance(kept, list) and len(kept) == len(self.bindings),
            lambda: f"identities() returned {kept!r}, not one record per binding",
        ):
            return
        for i, (got, want) in enumerate(zip(kept, self.first_records)):
            plain = {k: v for k, v in got.items() if k != "resolved"} if isinstance(got, dict) else got
            self.rec.check(
                "identity-records",
                plain == want
                and isinstance(cast(dict, got).get("resolved"), str)
                and bool(cast(dict, got)["resolved"]),
                lambda got=got, i=i, want=want: (
                    f"binding {i}: identities() returned {got!r}, but Apply gave {want!r} (plus 'resolved')"
                ),
            )

    def progress(self) -> list[tuple]:
        """What the endpoint records of this view's progress: (place, checkpoint, batch) sorted."""
        driver = self.factory()
        try:
            positions = driver.positions(self.materialization, self.bindings) or []
            return sorted((p.place, p.materialization, p.checkpoint_id or "", p.batch_id) for p in positions)
        finally:
            driver.close()

    def intrude(self, same_resources: bool, events: list[Event]) -> None:
        """Another job's view of this name (a checkpoint folder of its own; this view's resources,
        or resources of its own) starts, runs a batch where it is let, and resets: each step may
        be refused, none may change this view's progress (its rows: the next ``check_views``)."""
        from tidemark.ops_reset import reset_view

        before = self.progress()
        other = KitRuntime(
            self.factory,
            self.rec,
            self.tag + ("" if same_resources else "_other"),
            self.caps,
            driver_name=self.driver_name,
            tracker=self.tracker,
        )
        other.materialization = self.materialization
        if same_resources:
            other.bindings = self.bindings
        what = "over this view's resources" if same_resources else "over resources of its own"
        refused = []
        driver = self.factory()
        try:
            coord = other.coordinator(driver)
            self.tracker(f"start-up of another checkpoint's view of this name, {what}")
            try:
                coord.start_up()
                other.coord = coord
                other.run_batch(0, events)
            except RecoveryError:
                refused.append("run")
            self.tracker(f"reset of another checkpoint's view of this name, {what}")
            try:
                reset_view(other.materialization, self.driver_name, {}, other.bindings, other.folder, driver=driver)
            except RecoveryError:
                refused.append("reset")
        finally:
            other.coord = None
            other.close()
            driver.close()
        after = self.progress()
        self.rec.check(
            "ownership",
            after == before,
            lambda: (
                f"another checkpoint's view of this name, {what}, changed this view's progress "
                f"(refused: {', '.join(refused) or 'nothing'}): {before} became {after}"
            ),
        )

    def close(self) -> None:
        """End the scenario (its views stay in the endpoint, under names of their own)."""
        for shard in list(self.live):
            self.drop(shard)
        if self.coord is not None:
            self.coord.driver.close()
        shutil.rmtree(self.folder, ignore_errors=True)

    def set_layout(self, n: int) -> None:
        """Shard count for the next batch (a batch re-run keeps the layout it started with)."""
        self.shards = n
        if self.coord is not None:
            self.coord.shards = n

    @property
    def last(self) -> Optional[LogEntry]:
        assert self.coord is not None
        return self.coord.log.last()

    @property
    def last_batch(self) -> int:
        last = self.last
        return last.batch_id if last is not None else -1

    def register(self, batch_id: int, events: list[Event]) -> None:
        """Spark writes ``offsets/N`` before batch N runs; a re-run reads the same file."""
        self.events[batch_id] = events
        if not os.path.exists(os.path.join(self.folder, "spark", "offsets", str(batch_id))):
            digest = hashlib.sha256(repr(events).encode("utf-8")).hexdigest()
            self._write(("spark", "offsets", str(batch_id)), f'v1\n{{"batchWatermarkMs":0}}\n{{"kit":"{digest}"}}\n')

    def checkpoint_for(self, batch_id: int) -> dict:
        """The runtime checkpoint ``begin`` gives batch N (for a stale session of an old layout)."""
        assert self.coord is not None
        return {
            "checkpoint_id": self.coord.checkpoint_id,
            **owner_fields(self.folder),
            "materialization": self.materialization,
            "version": VERSION,
            **self.coord.identity(batch_id).as_checkpoint(),
        }

    def task(self, batch_id: int, layout: list[Range], runtime_checkpoint: dict) -> ShardTask:
        last = self.last
        assert self.coord is not None
        if self.checkpoint_padding:  # as a runtime's own members would make it large (offsets of many files)
            runtime_checkpoint = {**runtime_checkpoint, PADDING: self.checkpoint_padding}
        return ShardTask(
            self.materialization,
            VERSION,
            self.driver_name,
            {},
            self.bindings,
            (),
            self.coord.checkpoint_id,
            batch_id,
            tuple(layout),
            last.driver_checkpoint if last is not None else None,
            runtime_checkpoint,
            committed_batch=last.batch_id if last is not None else -1,
            capabilities=self.caps,
        )

    def begin(self, batch_id: int, events: list[Event]) -> tuple[BatchStart, list[Range], Optional[ShardTask]]:
        self.register(batch_id, events)
        self.tracker(f"the coordinator's begin of batch {batch_id}")
        assert self.coord is not None
        start = self.coord.begin(batch_id)
        if start.replayed:
            return start, [], None
        layout = [Range(*r) for r in start.layout]
        return start, layout, self.task(batch_id, layout, start.runtime_checkpoint)

    def commit(
        self, start: BatchStart, events: list[Event], shards: list[Shard], crash_after_log: bool = False
    ) -> None:
        """Step 3 and 4: merge the live sessions' updates, append to the log, acknowledge."""
        results = [ShardResult(s.index, s.range, s.skipped, [u for u in s.updates if u is not None]) for s in shards]
        state = merge_updates(start.last.driver_checkpoint if start.last is not None else None, results)
        assert self.coord is not None
        self.coord.crash_after_log = crash_after_log
        self.tracker(f"the recovery log append and Acknowledge of batch {start.batch_id}")
        try:
            self.coord.commit(start, state, {"shards": len(shards)})
        except KitCrash:
            self.model.commit(start.batch_id, events)
            self.die(events, logged=True)
        self.model.commit(start.batch_id, events)

    # ------------------------------------------------------------------- batches
    def run_batch(
        self,
        batch_id: int,
        events: list[Event],
        crash: Optional[tuple[str, int]] = None,
        zombie: Optional[tuple[int, str]] = None,
        kill: Optional[tuple[str, int]] = None,
    ) -> None:
        """One batch on the layout the coordinator gives it.

        ``crash=(phase, shard)`` kills the runtime after ``phase`` of shard ``shard`` (raising
        :class:`KitCrash`); ``kill=(request, shard)`` kills the driver inside ``request``
        (``start_commit`` or ``acknowledge``) once the endpoint shows its effect;
        ``zombie=(shard, "early" | "late")`` runs an older session of that shard up to
        StartCommit and commits it after the newer session opened ("early") or after the
        batch is in the log ("late")."""
        start, layout, task = self.begin(batch_id, events)
        if start.replayed:
            return
        assert task is not None  # begin gives a task unless the batch is replayed
        crash_phase, crash_shard = crash if crash else (None, None)
        kill_request, kill_shard = kill if kill else (None, None)
        z = z_steps = None
        if zombie is not None:
            z = self.open_shard(zombie[0], layout[zombie[0]], task)
            z_steps = self.transaction(z, events)
            self.advance(z_steps, "ready")
        shards: list[Shard] = []
        for i, key_range in enumerate(layout):
            shards.append(self.open_shard(i, key_range, task, kill=kill_request if kill_shard == i else None))
            if crash_phase == "open" and crash_shard == i:
                self.die(events)
        if z is not None and zombie is not None and zombie[1] == "early":
            assert z_steps is not None
            self.zombie_commit(z, z_steps, [z.range])
        for shard in shards:
            if not shard.skipped:
                self.run_shard(
                    shard,
                    events,
                    crash_phase if crash_shard == shard.index else None,
                    kill_request if kill_shard == shard.index else None,
                )
            self.finish(shard)
        self.commit(start, events, shards, crash_after_log=crash_phase == "recovery_log")
        if z is not None and zombie is not None and zombie[1] == "late":
            assert z_steps is not None
            self.zombie_commit(z, z_steps, [z.range])
        self.check_checkpoint_rows()

    def run_pipelined(self, batches: list[tuple[int, list[Event]]]) -> None:
        """Several transactions in one session per shard (StartedCommit loops to Acknowledge)."""
        shards: list[Shard] = []
        for n, (batch_id, events) in enumerate(batches):
            start, layout, task = self.begin(batch_id, events)
            if not shards:
                shards = [self.open_shard(i, key_range, cast(ShardTask, task)) for i, key_range in enumerate(layout)]
            for shard in shards:
                shard.task, shard.updates, shard.committed = cast(ShardTask, task), [], False
                self.run_shard(shard, events)
            assert self.coord is not None
            self.coord.skip_shard_apply = n < len(batches) - 1
            try:
                self.commit(start, events, shards)
            finally:
                self.coord.skip_shard_apply = False
            self.check_checkpoint_rows()
        for shard in shards:
            self.finish(shard)

    def open_stale(
        self, index: int, key_range: Range, batch_id: int, events: list[Event]
    ) -> tuple[Shard, Iterator[str]]:
        """A session of the current layout for batch N, run up to StartCommit, that will outlive
        a layout change (a zombie of the old layout)."""
        self.register(batch_id, events)
        task = self.task(batch_id, [key_range], self.checkpoint_for(batch_id))
        z = self.open_shard(index, key_range, task)
        steps = self.transaction(z, events)
        self.advance(steps, "ready")
        return z, steps

    def zombie_commit(self, z: Shard, steps: Iterator[str], newer: list[Range]) -> None:
        """A zombie tries to commit: it must get FencedOff where the store is authoritative."""
        try:
            for _ in steps:
                pass
        except FencedOff:
            self.rec.check("fencing", True)
            return
        finally:
            self.finish(z)
        if not self.store_authoritative:
            self.rec.check("fencing", True)  # the recovery log fences: the zombie's update is never logged
            return
        if newer == [z.range]:
            self.rec.fail(
                "fencing",
                f"an older session on range {z.range.name} committed batch {z.task.batch_id} "
                "after a newer session opened the same range",
                "start_commit verifies the fence inside the endpoint transaction and raises FencedOff",
                cause=True,
            )
        else:
            self.rec.fail(
                "fencing",
                f"a session of the old layout on range {z.range.name} committed batch "
                f"{z.task.batch_id} after the re-sharded sessions on "
                f"{', '.join(r.name for r in newer)} (which overlap it) had opened",
                "Open bumps the fence of its range and of every overlapping range (a split or merge "
                "leaves zombies of the old layout), not only its own",
                cause=True,
            )


__all__ = ["KitRuntime", "KitCoordinator", "KitCrash", "ScenarioAbort", "PHASES", "Shard", "Tracker", "rk"]
