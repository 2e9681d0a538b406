"""The kit's shard sessions: open (with the runtime's Opened check), one transaction as a
generator that yields after each phase, crashes (a session dropped without close) and kills."""

from __future__ import annotations

import json
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Callable, Iterator, Optional

from tidemark.drivers.base import Capabilities, Driver
from tidemark.drivers.limits import store_check
from tidemark.errors import FencedOff, RecoveryError
from tidemark.protocol.messages import Acknowledge, Flush, Load, Open, Range, StartCommit, Store, StoreTexts
from tidemark.protocol.state import RuntimeSession
from tidemark.runtime.shard import ShardTask, check_opened
from tidemark.testing.kit import kill as killing
from tidemark.testing.kit.report import Recorder, classify
from tidemark.testing.workload import (
    APPENDS,
    MIRROR,
    REDUCED,
    STANDARD,
    SUMS,
    Event,
    combine,
    deletion_doc,
    deltas,
    key_hash,
    mirror,
)

if TYPE_CHECKING:
    from tidemark.protocol.messages import BindingSpec

VERSION = "v1"


class KitCrash(Exception):
    """The kit's runtime 'died' (its sessions are dropped without close)."""


class ScenarioAbort(Exception):
    """The driver failed in a way that makes the rest of the scenario meaningless (already recorded)."""


class Tracker:
    """What the kit waits for, and the driver programs it runs (for the deadline)."""

    def __init__(self) -> None:
        self.doing = "starting"
        self.since = time.monotonic()
        self.programs: list = []

    def __call__(self, doing: str) -> None:
        self.doing, self.since = doing, time.monotonic()


@dataclass
class Shard:
    index: int
    range: Range
    driver: Driver
    transactor: Any
    opened: Any
    session: RuntimeSession
    task: ShardTask
    skipped: bool = False
    updates: list = field(default_factory=list)
    committed: bool = False  # StartedCommit received
    dead: bool = False

    @property
    def opened_batch(self) -> int:
        cp = self.opened.runtime_checkpoint
        b = cp.get("batch_id", -1) if isinstance(cp, dict) else -1
        return b if isinstance(b, int) else -1


def rk(r: Range) -> tuple[int, int]:
    return (r.key_begin, r.key_end)


class Sessions:
    """A mixin of :class:`~tidemark.testing.kit.runtime.KitRuntime`."""

    # what KitRuntime gives this mixin (declarations for the type checker)
    factory: Callable[[], Driver]
    caps: Capabilities
    rec: Recorder
    tracker: Tracker
    materialization: str
    bindings: tuple[BindingSpec, ...]
    live: list[Shard]
    crashed: bool
    dirty: set[str]
    load_chunk: int
    store_chunk: int
    started: set[int]
    endpoint_commits: dict[tuple[int, int], int]

    if TYPE_CHECKING:

        @property
        def exactly_once(self) -> bool: ...

        @property
        def store_authoritative(self) -> bool: ...

        def check_opened_extra(self, shard: Shard) -> None: ...

        def check_loaded(
            self, key_range: Range, requests: list[list[str]], loaded: dict[str, Any], binding: int = SUMS
        ) -> None: ...

    def open_shard(
        self, index: int, key_range: Range, task: ShardTask, *, kill: Optional[str] = None, check: bool = True
    ) -> Shard:
        driver = self.factory()
        if kill is not None and not killing.is_process_driver(driver):
            driver = killing.crashing(driver, kill)
        self.tracker(f"Opened of range {key_range.name} (batch {task.batch_id})")
        try:
            transactor, opened = driver.open(
                Open(
                    self.materialization,
                    VERSION,
                    key_range,
                    state=task.driver_checkpoint,
                    config=dict(driver.config),
                    bindings=self.bindings,
                )
            )
        except BaseException:
            driver.close()
            raise
        program = killing.program_of(transactor)
        if program is not None:
            self.tracker.programs.append(program)
        limited = store_check(
            self.caps.limits, self.bindings
        )  # keys beyond the declared limits: refused, as the runtime does
        session = RuntimeSession(transactor, self.bindings, check_store=limited)
        shard = Shard(index, key_range, driver, transactor, opened, session, task)
        self.live.append(shard)
        if check:
            self.check_opened(shard)
        return shard

    def check_opened(self, shard: Shard, extra: bool = True) -> None:
        """The kit's own checks, then the runtime's (:func:`tidemark.runtime.shard.check_opened`)."""
        cp = shard.opened.runtime_checkpoint
        if cp is not None and not isinstance(cp, dict):
            self.rec.fail("protocol", f"Opened.runtime_checkpoint must be an object or null, got {cp!r}")
            raise ScenarioAbort("bad Opened")
        before = self.rec.total_failures()
        if extra:
            self.check_opened_extra(shard)
        try:
            shard.skipped = check_opened(shard.task, shard.range, cp, self.store_authoritative)
        except RecoveryError as exc:
            if self.rec.total_failures() == before:
                prop, hint = classify(exc)
                self.rec.fail(
                    prop, f"Opened on range {shard.range.name} returned {cp!r}, which the runtime refuses: {exc}", hint
                )
            raise ScenarioAbort(str(exc)) from exc

    def drop(self, shard: Shard) -> None:
        """A crash: the session disappears without close (a program gets end of input)."""
        shard.dead = True
        if shard in self.live:
            self.live.remove(shard)
        killing.drop(shard.transactor)

    def finish(self, shard: Shard) -> None:
        if shard in self.live:
            self.live.remove(shard)
        try:
            if not shard.dead:
                shard.session.close()
        except Exception:  # noqa: BLE001 - a session that failed may not close cleanly
            killing.drop(shard.transactor)
        finally:
            shard.driver.close()

    def die(self, events: list[Event], logged: bool = False) -> None:
        self.crashed = True
        if not self.exactly_once and not logged:
            self.dirty.update(e.key for e in events)
        for shard in list(self.live):
            self.drop(shard)
        raise KitCrash()

    def transaction(self, shard: Shard, events: list[Event], kill: Optional[str] = None) -> Iterator[str]:
        """One transaction on ``shard``; yields the name of each phase once it is done (``ready``:
        every Store is sent, StartCommit is next).  ``kill``: the request inside which the driver dies."""
        key_range, task, sess = shard.range, shard.task, shard.session
        where = f"range {key_range.name}, batch {task.batch_id}"
        mine = [e for e in events if key_range.contains(key_hash((e.key,)))]
        ack = Acknowledge(state=task.driver_checkpoint)
        if kill == "acknowledge":
            killing.kill_inside(self, shard, lambda: sess.acknowledge(ack), "Acknowledge", events)
        self.tracker(f"Acknowledged ({where})")
        shard.updates.append(sess.acknowledge(ack).state)
        yield "acknowledge"
        combined = {SUMS: combine(mine), MIRROR: combine([mirror(e) for e in mine])}
        keys = sorted(combined[SUMS])
        loaded: dict[int, dict[str, Any]] = {b: {} for b in STANDARD}
        requests: dict[int, list[list[str]]] = {b: [] for b in STANDARD}

        def take(replies):
            for r in replies:
                if r.binding not in STANDARD:
                    self.rec.fail(
                        "protocol",
                        f"Loaded for binding {r.binding}, which is delta-updates",
                        "delta-updates bindings get no Load, so never a Loaded",
                    )
                    continue
                for key, doc in zip(r.keys, r.docs):
                    loaded[r.binding][key[0]] = doc

        for binding in STANDARD:
            for i in range(0, len(keys), self.load_chunk):
                chunk = keys[i : i + self.load_chunk]
                requests[binding].append(chunk)
                self.tracker(f"the answer to a Load of {len(chunk)} keys ({where})")
                take(sess.load(Load(binding, tuple((k,) for k in chunk))))
                yield "load"
        self.tracker(f"Flushed ({where})")
        late, flushed = sess.flush(Flush())
        take(late)
        shard.updates.append(flushed.state)
        for binding in STANDARD:
            self.check_loaded(key_range, requests[binding], loaded[binding], binding)
        yield "flush"
        stores: list[tuple[int, tuple, tuple, Any, bool, bool]] = []
        for binding in STANDARD:
            for k in keys:
                prior = loaded[binding].get(k)
                doc = combined[binding][k].over(k, prior)
                if doc is None:
                    if prior is not None:
                        stores.append((binding, (k,), (None, None), deletion_doc(k), True, True))
                else:
                    stores.append((binding, (k,), (doc["n"], doc["last"]), doc, prior is not None, False))
        for k, doc in sorted(deltas(mine).items()):
            stores.append((APPENDS, (k,), (doc["n"], doc["last"]), doc, False, False))
        if len(self.bindings) > REDUCED:  # the endpoint reduces: each combined delta as JSON text
            for k, doc in sorted(deltas(mine).items()):
                stores.append((REDUCED, (k,), (), json.dumps(doc, ensure_ascii=False), False, False))
        for binding in range(len(self.bindings)):
            rows = [s for s in stores if s[0] == binding]
            for i in range(0, len(rows), self.store_chunk):
                part = rows[i : i + self.store_chunk]
                self.tracker(f"the driver reading a Store of {len(part)} documents ({where})")
                if binding == REDUCED:
                    sess.store(StoreTexts(binding, tuple(r[1] for r in part), tuple(r[3] for r in part)))
                else:
                    sess.store(
                        Store(
                            binding,
                            tuple(r[1] for r in part),
                            tuple(r[2] for r in part),
                            tuple(r[3] for r in part),
                            tuple(r[4] for r in part),
                            tuple(r[5] for r in part),
                        )
                    )
                yield "store"
        yield "ready"
        msg = StartCommit(task.runtime_checkpoint)
        if kill == "start_commit":
            killing.kill_inside(self, shard, lambda: sess.start_commit(msg), "StartCommit", events)
        self.tracker(f"StartedCommit ({where})")
        started = sess.start_commit(msg)
        shard.updates.append(started.state)
        shard.committed = True
        self.started.add(task.batch_id)
        if self.store_authoritative:
            self.endpoint_commits[rk(key_range)] = max(task.batch_id, self.endpoint_commits.get(rk(key_range), -1))
        yield "start_commit"

    def run_shard(
        self, shard: Shard, events: list[Event], crash_phase: Optional[str] = None, kill: Optional[str] = None
    ) -> None:
        try:
            for phase in self.transaction(shard, events, kill):
                if phase == crash_phase:
                    self.die(events)
        except FencedOff as exc:
            self.unexpected_fence(shard, exc)

    @staticmethod
    def advance(steps: Iterator[str], until: str) -> None:
        for phase in steps:
            if phase == until:
                return

    def unexpected_fence(self, shard: Shard, exc: FencedOff) -> None:
        others = [r for r in shard.task.ranges if r != shard.range]
        if others:
            self.rec.fail(
                "range-isolation",
                f"the session on range {shard.range.name} was fenced off ({exc}) although only sessions on "
                f"other ranges ({', '.join(r.name for r in others)}) opened after it",
                "fence per (materialization, range): opening one range must not fence a disjoint one",
            )
        else:
            self.rec.fail(
                "fencing",
                f"the only session on range {shard.range.name} was fenced off ({exc})",
                "only a newer session on the same or an overlapping range may fence a session off",
            )
        self.drop(shard)
        raise ScenarioAbort(str(exc))


__all__ = ["Sessions", "Shard", "Tracker", "KitCrash", "ScenarioAbort", "rk", "VERSION"]
