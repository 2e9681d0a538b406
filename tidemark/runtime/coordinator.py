"""The commit path of one materialization, with no Spark in it.

The Spark adapter (:mod:`tidemark.spark.processor`) plans each batch and runs the shard
sessions; everything that decides *whether* a batch runs, on which layout, and what is
durable when, is here.

Start-up (:meth:`Coordinator.start_up`), before anything is written anywhere:

Step 0. The endpoint's capabilities (read once, here) cover the spec: quarantine for
        ``on_invalid: quarantine``, delta or standard updates per binding.
Step 1. Spark's checkpoint is the one that wrote the recovery log: its query id
        (``<checkpoint>/spark/metadata``) equals the one recorded with the log's last batch.
Step 2. The driver ends what this checkpoint's dead writers left open (``Driver.recover``:
        Kafka fences this checkpoint's producers, aborting what they left open; nothing of
        this run is live yet, and nothing committed changes). Then: the endpoint belongs
        to this checkpoint and is where the log says: every place the
        endpoint records (ranges, tables) names this checkpoint; store-authoritative ranges of
        the last layout hold the log's last batch (or the next one, committed partially);
        coordinator-applied tables hold the last batch or the one before it.
Step 3. Validate, then a dry-run Apply: a resource that the last batch wrote and that Apply
        would now create was dropped, and is refused.
Step 4. Apply (the checkpoint id goes with it: the endpoint records its owner).
Step 5. Re-run the coordinator Acknowledge of the last committed batch (idempotent).

Per batch N (:meth:`Coordinator.begin` and :meth:`Coordinator.commit`):

Step 0. N's identity is (Spark query, N, digest of N's source offsets).  If the log holds N
        with the same identity, it is a re-run: only acknowledged.  A log entry for N (or a
        later batch) with another identity is refused: the input the log recorded is not
        the input Spark is about to give.
Step 1. The layout: what N started with (its intent), else a pending scale request, the
        auto policy, or the configured shard count (:mod:`tidemark.runtime.rescale`);
        recorded before any shard runs, so a re-run of N uses the same ranges.  Before a
        layout changes, a coordinator-apply endpoint must hold the last batch everywhere.
Step 2. (the adapter runs the shard sessions)
Step 3. Merge the shards' driver-checkpoint updates and append N to the recovery log.
Step 4. Acknowledge for drivers that apply after commit: once on the coordinator, or (apply
        per shard) a session per range that only acknowledges.
Step 5. Return: Spark writes ``commits/N``.

Every refusal is a :class:`~tidemark.errors.RecoveryError` that says what differs and what
to do, and names ``tidemark reset`` where starting over is the way forward.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from typing import Any, Optional, Sequence

from tidemark.drivers.base import CommitPattern, Driver, Position, capabilities_of
from tidemark.errors import RecoveryError, reset_hint
from tidemark.faults import fault_point
from tidemark.protocol.messages import Acknowledge, Apply, BindingSpec, JsonObject, Open, Range, Validate
from tidemark.runtime.adoption import refuse_unfinished
from tidemark.runtime.identity import BatchIdentity, SparkCheckpoint
from tidemark.runtime.lease import Lease, stop_request
from tidemark.runtime.ownership import owner_fields, refuse_foreign
from tidemark.runtime.rebuild import refuse_unfinished as refuse_unfinished_rebuild
from tidemark.runtime.recovery_log import Layout, LogEntry, RecoveryLog
from tidemark.runtime.rescale import AutoShards, Rescale, configured_of
from tidemark.runtime.spec_changes import changes_since
from tidemark.runtime.startup_checks import check_capabilities, check_position, refuse_gone
from tidemark.runtime.versions import FORMAT
from tidemark.runtime.view_identity import binding_identity, check_endpoint_records, check_identities, endpoint_record

log = logging.getLogger("tidemark")

# Reductions that are not idempotent: applied twice after a crash, they change the result.
UNSAFE_AT_LEAST_ONCE = ("sum", "append")


def even_layout(shards: int) -> list[list[int]]:
    return [[r.key_begin, r.key_end] for r in Range.split(shards)]


@dataclass(frozen=True)
class BatchStart:
    """What Step 0 and 1 decided for batch N."""

    batch_id: int
    replayed: bool
    layout: Layout = field(default_factory=list)
    runtime_checkpoint: JsonObject = field(default_factory=dict)
    last: Optional[LogEntry] = None


class Coordinator:
    def __init__(
        self,
        *,
        materialization: str,
        driver: Driver,
        driver_name: str,
        driver_config: JsonObject,
        bindings: Sequence[BindingSpec],
        version: str,
        checkpoint_location: str,
        shards: int,
        strategies: Sequence[Sequence[str]] = (),
        on_invalid: str = "fail",
        reductions: Sequence[JsonObject] = (),
        auto: Optional[AutoShards] = None,
        sources: Sequence[Optional[str]] = (),
        adopting: bool = False,
    ):
        self.name = materialization
        self.driver = driver
        self.driver_name = driver_name
        self.driver_config = driver_config
        self.caps = capabilities_of(driver)  # read once; carried to the shard sessions
        self.on_invalid = on_invalid
        self.bindings = tuple(bindings)
        self.version = version
        self.shards = shards
        self.auto = auto  # shards: {auto: ...}; None: a fixed count
        self.strategies = tuple(tuple(s) for s in strategies)
        self.reductions = list(reductions)  # per binding, recorded in each log entry (runtime.spec_changes)
        sources = list(sources) + [None] * (len(self.bindings) - len(sources))
        # per binding, recorded in each log entry and compared at start-up (runtime.view_identity)
        self.identities = [binding_identity(b, src) for b, src in zip(self.bindings, sources)]
        self.lease: Optional[Lease] = None  # one live run per checkpoint, taken at start-up (runtime.lease)
        self._said_held = False  # a scale request's count outlives the spec's: said once per run
        self.log = RecoveryLog(checkpoint_location, materialization, create=False)  # created once start-up passes
        self.rescale = Rescale(self.log)
        self.spark = SparkCheckpoint(checkpoint_location.rstrip("/") + "/spark")
        self.checkpoint_location = checkpoint_location
        self.adopting = adopting  # tidemark adopt runs batch 0 (runtime.adoption)

    @property
    def checkpoint_id(self) -> str:
        """This checkpoint's id; the recovery log's folder is created on first use, so a
        start-up that refuses leaves no new checkpoint folder behind."""
        if self.log.checkpoint_id is None:
            self.log.create()
        assert self.log.checkpoint_id is not None  # create() sets it
        return self.log.checkpoint_id

    # ------------------------------------------------------------------ start-up
    def start_up(self) -> None:
        check_capabilities(
            self.caps,
            materialization=self.name,
            driver_name=self.driver_name,
            bindings=self.bindings,
            on_invalid=self.on_invalid,
        )
        self.warn_unsafe()
        if not self.adopting:
            refuse_unfinished(self.name, self.checkpoint_location)
        refuse_unfinished_rebuild(self.name, self.checkpoint_location)
        last = self.log.last()
        check_identities(self.name, last, self.identities)
        # Step 1
        self.check_spark(last)
        # One live run per checkpoint: taken before anything is written, given back on a refusal
        self.lease = Lease(self.checkpoint_location, self.name)
        self.lease.acquire()
        try:
            self._start_up(last)
        except BaseException:
            self.lease.release()
            raise

    def _start_up(self, last: Optional[LogEntry]) -> None:
        # Step 2 (first, what this checkpoint's dead writers left open: nothing of this run is live yet)
        for action in self.driver.recover(self.name, self.log.checkpoint_id, self.known_ranges(last)):
            log.info("materialization %s: %s", self.name, action)
        self.check_positions(last)
        check_endpoint_records(
            self.name,
            self.driver_name,
            self.driver.identities(self.name, self.bindings),
            self.identities,
            self.log.checkpoint_id,
            checkpoint_location=self.checkpoint_location,
        )
        # Step 3
        self.driver.validate(Validate(self.name, self.driver_config, self.bindings))
        dry = self.driver.apply(
            Apply(
                self.name,
                self.driver_config,
                self.bindings,
                version=self.version,
                dry_run=True,
                checkpoint_id=self.log.checkpoint_id,
            )
        )
        refuse_gone(self.name, self.driver_name, last, dry.created)
        # Step 4
        created_at = 0 if last is None else last.batch_id + 1
        records = tuple(
            endpoint_record(i, self.name, self.checkpoint_id, created_at, self.checkpoint_location)
            for i in self.identities
        )
        applied = self.driver.apply(
            Apply(
                self.name,
                self.driver_config,
                self.bindings,
                version=self.version,
                checkpoint_id=self.checkpoint_id,
                identities=records,
            )
        )
        log.info("materialization %s: apply: %s", self.name, applied.action_description)
        # Step 5
        if last is not None:
            if last.version != self.version:
                changed = changes_since(last.reductions, self.reductions)
                log.info(
                    "materialization %s: the spec changed since batch %s (version %s -> %s)%s",
                    self.name,
                    last.batch_id,
                    last.version,
                    self.version,
                    "" if changed else "; its bindings, keys and reductions are the same, so the view goes on as it is",
                )
                if changed:
                    log.warning(
                        "materialization %s: a reduce strategy changed since batch %s, so stored documents "
                        "were reduced the old way: %s (`tidemark check` refuses this spec)",
                        self.name,
                        last.batch_id,
                        "; ".join(changed),
                    )
            self.acknowledge(last)

    def known_ranges(self, last: Optional[LogEntry]) -> list[Range]:
        """The ranges of the last committed batch's layout and of the batch in flight (its
        intent), if any: those whose sessions may have died inside an endpoint transaction."""
        if self.log.checkpoint_id is None:
            return []
        layouts = [last.layout] if last is not None else []
        in_flight = self.log.intent_record(last.batch_id + 1 if last is not None else 0)
        if in_flight is not None:
            layouts.append(in_flight["layout"])
        return sorted(
            {Range(int(b), int(e)) for layout in layouts for b, e in layout}, key=lambda r: (r.key_begin, r.key_end)
        )

    def warn_unsafe(self) -> None:
        if self.caps.commit_pattern is not CommitPattern.AT_LEAST_ONCE:
            return
        for binding, strategies in zip(self.bindings, self.strategies or [()] * len(self.bindings)):
            where = "/".join(binding.resource_path)
            if binding.delta_updates:
                log.warning(
                    "binding %s: delta updates into an at-least-once endpoint (%s) may write a batch's "
                    "rows twice after a crash",
                    where,
                    self.driver_name,
                )
                continue
            bad = [s for s in UNSAFE_AT_LEAST_ONCE if s in strategies]
            if bad:
                log.warning(
                    "binding %s uses %s reductions, which an at-least-once endpoint (%s) may apply twice after a crash",
                    where,
                    ", ".join(bad),
                    self.driver_name,
                )

    def check_spark(self, last: Optional[LogEntry]) -> None:
        if last is None or not last.query_id:
            return
        spark_dir = self.spark.location
        qid = self.spark.query_id()
        if qid is None:
            raise RecoveryError(
                f"materialization {self.name!r}: Spark's checkpoint {spark_dir} is missing, but the recovery log "
                f"beside it holds batches up to {last.batch_id} of Spark query {last.query_id}. Spark would start "
                "over at batch 0 and tidemark cannot tell which input the view already holds. Restore "
                f"{spark_dir} from where it was, or start the view over with {reset_hint(self.name)}. "
                "Nothing was changed"
            )
        self._check_query(qid, last)

    def positions(self) -> Optional[list[Position]]:
        return self.driver.positions(self.name, self.bindings)

    def check_positions(self, last: Optional[LogEntry]) -> None:
        positions = self.positions()
        if positions is None:
            return
        owned = [*positions, *self.driver.owners(self.name)]
        refuse_foreign(self.name, self.driver_name, owned, self.log.checkpoint_id, last, self.checkpoint_location)
        held = [p for p in positions if p.batch_id >= 0]
        p: Optional[Position]  # a held position, then a range's (None: the range holds none)
        if last is None:
            if self.caps.commit_pattern is CommitPattern.STORE_AUTHORITATIVE:
                # A crash after the endpoint committed the first batch, before the log did:
                # a range may hold batch 0 (one ahead of "none"); its re-run is skipped.
                held = [p for p in held if p.batch_id > 0]
            if held:
                p = max(held, key=lambda p: p.batch_id)
                raise RecoveryError(
                    f"materialization {self.name!r}: {p.place} of endpoint {self.driver_name!r} holds batch "
                    f"{p.batch_id} of this checkpoint, but its recovery log ({self.log.root}) holds none (were its "
                    f"entries deleted?). Restore the checkpoint folder, or start over with {reset_hint(self.name)}. "
                    "Nothing was changed"
                )
            return
        pattern = self.caps.commit_pattern
        if pattern is CommitPattern.STORE_AUTHORITATIVE:
            by_range = {(p.range.key_begin, p.range.key_end): p for p in positions if p.range is not None}
            for b, e in last.layout:
                p = by_range.get((b, e))
                at = -1 if p is None else p.batch_id
                self._compare(f"range {Range(b, e).name}", at, last, ahead_ok=1)
        elif pattern is CommitPattern.IDEMPOTENT_APPLY_COORDINATOR:
            written = {tuple(r) for r in last.resources}
            for p in positions:
                if p.resource is not None and tuple(p.resource) in written:
                    # a crash between the log and the apply leaves the table one batch behind:
                    # Step 5 applies it
                    self._compare(p.place, p.batch_id, last, behind_ok=1)

    def _compare(self, place: str, at: int, last: LogEntry, *, ahead_ok: int = 0, behind_ok: int = 0) -> None:
        check_position(self.name, self.driver_name, place, at, last.batch_id, ahead_ok=ahead_ok, behind_ok=behind_ok)

    # ------------------------------------------------------------------ per batch
    def identity(self, batch_id: int) -> BatchIdentity:
        return self.spark.identity(batch_id)

    def begin(self, batch_id: int) -> BatchStart:
        request = stop_request(self.checkpoint_location)
        if request is not None:  # (the run's on_stop, if it has one, stops it between batches first)
            raise RecoveryError(
                f"materialization {self.name!r}: {request.get('by', 'another process')} asked this run to stop at a "
                f"batch boundary, so batch {batch_id} did not start (it runs next time). Run the view again once "
                "that is done"
            )
        ident = self.identity(batch_id)
        last = self.log.last()
        # Step 0
        if last is not None:
            self._check_query(ident.query_id, last)
            if batch_id <= last.batch_id:
                entry = self.log.get(batch_id)
                if entry is None:
                    raise RecoveryError(
                        f"materialization {self.name!r}: Spark runs batch {batch_id} again, which the recovery log "
                        f"compacted away (it holds batches from {self.log.batches()[0]} to {last.batch_id}); "
                        "Spark's checkpoint is older than the recovery log. Restore both from one copy, or start "
                        f"over with {reset_hint(self.name)}"
                    )
                logged = BatchIdentity.of(entry.runtime_checkpoint)
                diff = logged.differences(ident) if logged else []
                if diff:
                    raise RecoveryError(
                        f"materialization {self.name!r}: Spark runs batch {batch_id} with another identity than the "
                        f"recovery log's ({'; '.join(diff)}): the input differs from what the view already holds. "
                        f"Restore Spark's checkpoint ({self.spark.location}), or start over with "
                        f"{reset_hint(self.name)}. Nothing was changed"
                    )
                if batch_id == last.batch_id:
                    self.acknowledge(last)
                return BatchStart(batch_id, True, last=last)
        # Step 1
        fault_point("plan")
        layout = self.layout_for(batch_id, last)
        cp = {
            "checkpoint_id": self.checkpoint_id,
            **owner_fields(self.checkpoint_location),
            "materialization": self.name,
            "version": self.version,
            "format": FORMAT,
            **ident.as_checkpoint(),
        }
        return BatchStart(batch_id, False, layout, cp, last)

    def _check_query(self, query_id: Optional[str], last: LogEntry) -> None:
        """Spark's query must be the one that wrote the log (at start-up and per batch)."""
        if last.query_id and query_id and last.query_id != query_id:
            raise RecoveryError(
                f"materialization {self.name!r}: Spark's checkpoint {self.spark.location} belongs to Spark query "
                f"{query_id}, but the recovery log's batches up to {last.batch_id} came from query {last.query_id} "
                "(was Spark's checkpoint deleted or replaced?). tidemark cannot tell which input the view already "
                f"holds. Restore it, or start the view over with {reset_hint(self.name)}. Nothing was changed"
            )

    def layout_for(self, batch_id: int, last: Optional[LogEntry] = None) -> list[list[int]]:
        """The layout of batch N: what it started with (a re-run keeps it), else what
        :meth:`Rescale.decide` chooses; recorded as N's intent before any shard runs."""
        configured = configured_of(self.shards, self.auto)
        record = self.log.intent_record(batch_id)
        if record is not None:
            self.rescale.settle(record.get("reason"), batch_id, configured=configured)  # after a crash
            layout: Layout = record["layout"]
            return layout
        shards, reason = self.rescale.decide(last, self.shards, self.auto)
        if reason.get("held") and shards != self.shards and not self._said_held:
            self._said_held = True
            log.warning(
                "materialization %s: runs on %d shard(s), as `tidemark scale` asked (request %s), not on the "
                "spec's shards: %d; the spec's count applies again once you change it in the spec, or "
                "`tidemark scale --shards %d`",
                self.name,
                shards,
                reason["held"],
                self.shards,
                self.shards,
            )
        layout = even_layout(shards)
        if last is not None and layout != last.layout:
            self.acknowledged_everywhere(last)
            log.info(
                "materialization %s: batch %s runs on %d shard(s) (was %d; %s)",
                self.name,
                batch_id,
                shards,
                len(last.layout),
                reason["by"],
            )
        self.log.write_intent(batch_id, layout, reason)
        self.rescale.settle(reason, batch_id, configured=configured)
        return layout

    def acknowledged_everywhere(self, last: LogEntry) -> None:
        """Before a layout changes: a coordinator-apply endpoint holds the last batch in every
        table it wrote (the apply is re-run, idempotently, where one lags); else refuse."""
        if self.caps.commit_pattern is not CommitPattern.IDEMPOTENT_APPLY_COORDINATOR:
            return
        behind = self._behind(last)
        if behind:
            log.warning(
                "materialization %s: %s not yet applied batch %s; applying it before the layout changes",
                self.name,
                ", ".join(p.place for p in behind),
                last.batch_id,
            )
            self.acknowledge(last)
            behind = self._behind(last)
        if behind:
            p = behind[0]
            raise RecoveryError(
                f"materialization {self.name!r}: {p.place} of endpoint {self.driver_name!r} holds batch {p.batch_id}, "
                f"not the recovery log's batch {last.batch_id}, after re-applying it; the layout does not change "
                "until every table holds it. Check that the endpoint is writable, then run again"
            )

    def _behind(self, last: LogEntry) -> list[Position]:
        written = {tuple(r) for r in last.resources}
        return [
            p
            for p in self.positions() or ()
            if p.resource is not None and tuple(p.resource) in written and p.batch_id < last.batch_id
        ]

    def commit(self, start: BatchStart, state: Any, counts: JsonObject) -> LogEntry:
        # Step 3
        entry = LogEntry(
            start.batch_id,
            start.runtime_checkpoint,
            state,
            [list(x) for x in start.layout],
            self.version,
            counts,
            [list(b.resource_path) for b in self.bindings],
            self.reductions,
            self.identities,
        )
        if self.lease is not None:
            self.lease.check()
        fault_point("before_recovery_log")
        self.log.append(entry)
        fault_point("after_recovery_log")
        # Step 4
        self.acknowledge(entry)
        return entry

    def acknowledge(self, entry: LogEntry) -> None:
        """Apply what batch ``entry`` staged (idempotent; run after the log append and again
        at start-up).  ``idempotent-apply-coordinator``: once, over all shards.
        ``idempotent-apply-shard``: a session per range of the batch's layout, Opened and
        Acknowledged at once, so that the last batch of a stream that stops is applied too
        (not only when a next batch's sessions acknowledge it)."""
        pattern = self.caps.commit_pattern
        if pattern is CommitPattern.IDEMPOTENT_APPLY_COORDINATOR:
            self.driver.coordinator_acknowledge(
                self.name, entry.driver_checkpoint, entry.runtime_checkpoint, self.bindings
            )
            fault_point("after_apply")
        elif pattern is CommitPattern.IDEMPOTENT_APPLY_SHARD:
            for b, e in entry.layout:
                transactor, _opened = self.driver.open(
                    Open(
                        self.name,
                        self.version,
                        Range(b, e),
                        state=entry.driver_checkpoint,
                        config=self.driver_config,
                        bindings=self.bindings,
                    )
                )
                try:
                    transactor.acknowledge(Acknowledge(state=entry.driver_checkpoint))
                finally:
                    transactor.close()
            fault_point("after_apply")


__all__ = [
    "Coordinator",
    "BatchStart",
    "even_layout",
    "UNSAFE_AT_LEAST_ONCE",
    "reset_hint",
]
