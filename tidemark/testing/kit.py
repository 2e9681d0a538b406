"""The conformance kit's mini-runtime: drives any Driver through the protocol, like tidemark's
Spark runtime would, and records what it observes against the properties a driver owes.

It keeps its own recovery log (per committed batch: runtime checkpoint, driver checkpoint
merged with RFC 7396 patches, shard layout), fences sessions in that log (a zombie's
commit is ignored), calls :meth:`Driver.coordinator_acknowledge` after each log commit
for ``idempotent-apply-coordinator`` drivers, skips shards whose Opened checkpoint
already has the batch, and changes the shard layout only at a committed and acknowledged
boundary.  A transaction is a generator that yields after each phase, so a scenario can
crash a session at any phase (drop it without close) or interleave two sessions.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any, Callable, Iterator, Optional

from tidemark.drivers.base import CommitPattern, Driver
from tidemark.errors import FencedOff, ProtocolViolation
from tidemark.protocol.messages import (
    Acknowledge,
    Apply,
    Flush,
    Load,
    Open,
    Range,
    StartCommit,
    Store,
)
from tidemark.protocol.state import RuntimeSession
from tidemark.testing.workload import (
    APPENDS,
    SUMS,
    Event,
    Model,
    apply_update,
    bindings as make_bindings,
    combine,
    deletion_doc,
    deltas,
    key_hash,
)

PHASES = ("open", "acknowledge", "load", "flush", "store", "start_commit", "recovery_log")
LOAD_CHUNK = 3
STORE_CHUNK = 4
MAX_EXPLANATIONS = 6

PROPERTIES: dict[str, str] = {
    "protocol": "follows the protocol: replies in order, only for what was asked, no unexpected errors",
    "no-loss": "every committed document is in the view, with its latest values",
    "no-duplicates": "no document or sum is applied twice (also when Acknowledge repeats)",
    "read-committed": "Loads see exactly the committed view (never unapplied or uncommitted state)",
    "conservation-of-sums": "the sums in the views equal the sums of the input",
    "checkpoints-monotonic": "checkpoints never go backwards and commit together with the data",
    "fencing": "a session cannot commit after a newer session opened its range",
    "range-isolation": "checkpoints and fences are kept per key range; ranges do not disturb each other",
    "deletes-applied": "deleted keys are gone from the view",
    "loaded-existing-only": "Loaded answers only keys that exist, with their stored document",
    "at-least-once-honesty": "a driver that claims exactly-once does not double-apply after a crash",
}


class KitCrash(Exception):
    """The kit's runtime 'died' at a phase (its sessions are dropped without close)."""


class ScenarioAbort(Exception):
    """The driver failed in a way that makes the rest of the scenario meaningless."""


@dataclass
class Recorder:
    checks: dict[str, int] = field(default_factory=lambda: {p: 0 for p in PROPERTIES})
    failures: dict[str, list[str]] = field(default_factory=lambda: {p: [] for p in PROPERTIES})
    counts: dict[str, int] = field(default_factory=lambda: {p: 0 for p in PROPERTIES})
    notes: dict[str, list[str]] = field(default_factory=lambda: {p: [] for p in PROPERTIES})
    scenario: str = ""

    def check(self, prop: str, ok: bool, explanation: str | Callable[[], str] = "") -> bool:
        self.checks[prop] += 1
        if not ok:
            self.fail(prop, explanation() if callable(explanation) else explanation)
        return ok

    def fail(self, prop: str, explanation: str) -> None:
        self.counts[prop] += 1
        if len(self.failures[prop]) < MAX_EXPLANATIONS:
            self.failures[prop].append(f"[{self.scenario}] {explanation}")

    def note(self, prop: str, text: str) -> None:
        if text not in self.notes[prop]:
            self.notes[prop].append(text)


@dataclass
class Shard:
    index: int
    range: Range
    driver: Driver
    transactor: Any
    opened: Any
    session: RuntimeSession
    epoch: int
    skipped: bool = False
    updates: list = field(default_factory=list)
    committed: bool = False  # StartedCommit received

    @property
    def opened_batch(self) -> int:
        cp = self.opened.runtime_checkpoint
        return int(cp.get("batch_id", -1)) if isinstance(cp, dict) else -1


def _rk(r: Range) -> tuple[int, int]:
    return (r.key_begin, r.key_end)


def _fmt_key(k: str) -> str:
    return json.dumps([k], ensure_ascii=False)


class KitRuntime:
    """One materialization driven through the protocol by the kit."""

    def __init__(self, factory: Callable[[], Driver], recorder: Recorder, tag: str, capabilities):
        self.factory = factory
        self.rec = recorder
        self.tag = tag
        self.materialization = f"{tag}"
        self.checkpoint_id = f"{tag}-cp"
        self.bindings = make_bindings(tag)
        self.caps = capabilities
        self.pattern: CommitPattern = capabilities.commit_pattern
        self.layout: list[Range] = [Range()]
        self.log: list[dict] = []
        self.driver_state: Any = None
        self.model = Model()
        self.crashed = False  # a crash happened in this scenario
        self.dirty: set[str] = set()  # at-least-once: keys a crashed attempt may have half-written
        self.endpoint_commits: dict[tuple[int, int], int] = {}  # range -> batch (StartedCommit seen)
        self.epochs: dict[tuple[int, int], int] = {}  # range -> newest session number
        self.last_checkpoint_rows: dict[tuple[int, int], int] = {}
        self._epoch = 0
        self._events: dict[int, list[Event]] = {}

    # ---------------------------------------------------------------- helpers
    @property
    def exactly_once(self) -> bool:
        return self.pattern.exactly_once

    @property
    def store_authoritative(self) -> bool:
        return self.pattern is CommitPattern.STORE_AUTHORITATIVE

    @property
    def last_batch(self) -> int:
        return self.log[-1]["batch_id"] if self.log else -1

    def runtime_checkpoint(self, batch_id: int) -> dict:
        return {"checkpoint_id": self.checkpoint_id, "batch_id": batch_id, "materialization": self.materialization}

    def apply(self) -> None:
        driver = self.factory()
        try:
            driver.apply(Apply(self.materialization, dict(driver.config), self.bindings, version="v1"))
        finally:
            driver.close()

    # ------------------------------------------------------------- sessions
    def open_shard(self, index: int, rng: Range) -> Shard:
        driver = self.factory()
        transactor, opened = driver.open(
            Open(self.materialization, "v1", rng, state=self.driver_state, config=dict(driver.config),
                 bindings=self.bindings)
        )
        self._epoch += 1
        self.epochs[_rk(rng)] = self._epoch
        shard = Shard(index, rng, driver, transactor, opened, RuntimeSession(transactor, self.bindings), self._epoch)
        self.check_opened(shard)
        return shard

    def check_opened(self, shard: Shard) -> None:
        cp = shard.opened.runtime_checkpoint
        if cp is not None and not isinstance(cp, dict):
            self.rec.fail("protocol", f"Opened.runtime_checkpoint must be an object or null, got {cp!r}")
            return
        if not self.store_authoritative:
            return
        if cp is not None:
            self.rec.check(
                "range-isolation",
                cp.get("checkpoint_id") == self.checkpoint_id and cp.get("materialization") == self.materialization,
                lambda: f"Opened on range {shard.range.name} returned a checkpoint of another materialization: {cp!r}",
            )
        got = shard.opened_batch
        overlapping = [b for r, b in self.endpoint_commits.items() if Range(*r).overlaps(shard.range)]
        expected = max(overlapping, default=-1)
        self.rec.check(
            "checkpoints-monotonic",
            got >= expected,
            lambda: f"Opened on range {shard.range.name} returned batch {got if got >= 0 else 'none'}, but the "
            f"endpoint had already committed batch {expected} there (StartedCommit was returned): the runtime "
            "checkpoint must commit in the same endpoint transaction as the data",
        )
        self.rec.check(
            "range-isolation",
            got <= expected,
            lambda: f"Opened on range {shard.range.name} returned batch {got}, but sessions on ranges overlapping "
            f"it committed only up to batch {expected}: the checkpoint came from another key range "
            "(keep one checkpoint per (materialization, range); inherit only from covering ranges)",
        )

    def drop(self, shard: Shard) -> None:
        """A crash: the session disappears without close."""

    def finish(self, shard: Shard) -> None:
        try:
            shard.session.close()
        finally:
            shard.driver.close()

    def transaction(self, shard: Shard, batch_id: int, events: list[Event]) -> Iterator[str]:
        """One transaction on ``shard``; yields the name of each phase once it is done."""
        rng = shard.range
        mine = [e for e in events if rng.contains(key_hash((e.key,)))]
        sess = shard.session
        # Acknowledge: the previous transaction is in the recovery log.
        acked = sess.acknowledge(Acknowledge(state=self.driver_state))
        shard.updates.append(acked.state)
        yield "acknowledge"
        # Load the keys of the standard binding, in several Load messages.
        combined = combine(mine)
        keys = sorted(combined)
        loaded: dict[str, Any] = {}

        def take(replies):
            for r in replies:
                if r.binding != SUMS:
                    self.rec.fail("protocol", f"Loaded for binding {r.binding}, which is delta-updates")
                    continue
                for key, doc in zip(r.keys, r.docs):
                    loaded[key[0]] = doc

        for i in range(0, len(keys), LOAD_CHUNK):
            take(sess.load(Load(SUMS, tuple((k,) for k in keys[i:i + LOAD_CHUNK]))))
            yield "load"
        late, flushed = sess.flush(Flush())
        take(late)
        shard.updates.append(flushed.state)
        self.check_loaded(rng, keys, loaded)
        yield "flush"
        # Store: loaded ⊕ combined for sums; the transaction's deltas for appends.
        stores: list[tuple[int, tuple, tuple, Any, bool, bool]] = []
        for k in keys:
            prior = loaded.get(k)
            doc = combined[k].over(k, prior)
            if doc is None:
                if prior is not None:
                    stores.append((SUMS, (k,), (None, None), deletion_doc(k), True, True))
            else:
                stores.append((SUMS, (k,), (doc["n"], doc["last"]), doc, prior is not None, False))
        for k, doc in sorted(deltas(mine).items()):
            stores.append((APPENDS, (k,), (doc["n"], doc["last"]), doc, False, False))
        for binding in (SUMS, APPENDS):
            rows = [s for s in stores if s[0] == binding]
            for i in range(0, len(rows), STORE_CHUNK):
                chunk = rows[i:i + STORE_CHUNK]
                sess.store(Store(binding, tuple(r[1] for r in chunk), tuple(r[2] for r in chunk),
                                 tuple(r[3] for r in chunk), tuple(r[4] for r in chunk), tuple(r[5] for r in chunk)))
                yield "store"
        yield "ready"
        started = sess.start_commit(StartCommit(self.runtime_checkpoint(batch_id)))
        shard.updates.append(started.state)
        shard.committed = True
        if self.store_authoritative:
            self.endpoint_commits[_rk(rng)] = max(batch_id, self.endpoint_commits.get(_rk(rng), -1))
        yield "start_commit"

    def check_loaded(self, rng: Range, keys: list[str], loaded: dict[str, Any]) -> None:
        committed = self.model.view
        for k in keys:
            doc = loaded.get(k)
            want = committed.get(k)
            if doc is not None:
                self.rec.check(
                    "loaded-existing-only",
                    isinstance(doc, dict) and doc.get("k") == k and isinstance(doc.get("n"), int),
                    lambda: f"Loaded key {_fmt_key(k)} with {doc!r}, which is not a stored document of that key",
                )
                if want is None and k not in self.dirty:
                    self.rec.fail(
                        "loaded-existing-only",
                        f"Loaded key {_fmt_key(k)} (doc {doc!r}), which does not exist in the committed view"
                        + (" (it was deleted)" if k in self.model.deleted else "")
                        + ": answer Loaded only for keys that exist",
                    )
                    continue
            if not self.exactly_once and k in self.dirty:
                continue
            if want is None:
                continue
            if doc is None:
                self.rec.fail(
                    "read-committed",
                    f"Load of key {_fmt_key(k)} found nothing, but the committed view has {want!r}: the Load was "
                    "evaluated before the previous transaction was visible (evaluate Loads only after Acknowledged "
                    "returned, and only once staged work is applied)",
                )
            elif isinstance(doc, dict) and (doc.get("n"), doc.get("last")) != (want["n"], want["last"]):
                self.rec.fail(
                    "read-committed",
                    f"Load of key {_fmt_key(k)} returned n={doc.get('n')!r}, last={doc.get('last')!r}, but the "
                    f"committed view has n={want['n']}, last={want['last']!r}: the Load saw unapplied or "
                    "uncommitted state",
                )
            else:
                self.rec.check("read-committed", True)

    # --------------------------------------------------------------- batches
    def run_batch(
        self,
        batch_id: int,
        events: list[Event],
        crash: Optional[tuple[str, int]] = None,
        zombie: Optional[tuple[int, str]] = None,
    ) -> None:
        """Run one batch on the current layout.

        ``crash=(phase, shard)`` kills the runtime after ``phase`` of shard ``shard``
        (raising :class:`KitCrash`); ``zombie=(shard, "early" | "late")`` runs an older
        session of that shard up to StartCommit and commits it after the newer session
        opened ("early") or after the batch is in the log ("late")."""
        self._events[batch_id] = events
        if batch_id <= self.last_batch:
            self.post_commit()  # already in the log: only acknowledge
            return
        crash_phase, crash_shard = crash if crash else (None, None)
        z_shard = z_steps = None
        if zombie is not None:
            z_index, z_when = zombie
            z_shard = self.open_shard(z_index, self.layout[z_index])
            if z_shard.opened_batch >= batch_id:
                z_shard = None
            else:
                z_steps = self.transaction(z_shard, batch_id, events)
                for phase in z_steps:
                    if phase == "ready":
                        break
        # Step 1: open every shard (Spark starts the tasks together); newer sessions fence older ones.
        shards: list[Shard] = []
        for i, rng in enumerate(self.layout):
            shards.append(self.open_shard(i, rng))
            if crash_phase == "open" and crash_shard == i:
                self.die(events)
        if z_shard is not None and zombie[1] == "early":
            self.zombie_commit(z_shard, z_steps)
        # Step 2: each shard's transaction; skip shards whose endpoint has the batch.
        for shard in shards:
            if shard.opened_batch >= batch_id:
                shard.skipped = True
                self.finish(shard)
                continue
            try:
                for phase in self.transaction(shard, batch_id, events):
                    if crash_phase == phase and crash_shard == shard.index:
                        self.die(events)
            except FencedOff as exc:
                self.unexpected_fence(shard, exc)
            self.finish(shard)
        # Step 3: the recovery log commit (fenced: only the newest session of each range counts).
        self.commit_log(batch_id, events, shards)
        if crash_phase == "recovery_log":
            self.die(events, logged=True)
        # Step 4: acknowledge (coordinator apply).
        self.post_commit()
        if z_shard is not None and zombie[1] == "late":
            self.zombie_commit(z_shard, z_steps)
        self.check_checkpoint_rows()

    def run_pipelined(self, batches: list[tuple[int, list[Event]]]) -> None:
        """Several transactions in one session per shard (StartedCommit loops to Acknowledge)."""
        shards = [self.open_shard(i, rng) for i, rng in enumerate(self.layout)]
        for batch_id, events in batches:
            self._events[batch_id] = events
            for shard in shards:
                shard.updates, shard.committed = [], False
                try:
                    for _ in self.transaction(shard, batch_id, events):
                        pass
                except FencedOff as exc:
                    self.unexpected_fence(shard, exc)
            self.commit_log(batch_id, events, shards)
            self.post_commit()
            self.check_checkpoint_rows()
        for shard in shards:
            self.finish(shard)

    def die(self, events: list[Event], logged: bool = False) -> None:
        self.crashed = True
        if not self.exactly_once and not logged:
            self.dirty.update(e.key for e in events)
        raise KitCrash()

    def unexpected_fence(self, shard: Shard, exc: FencedOff) -> None:
        others = [r for r in self.layout if r != shard.range]
        if others:
            self.rec.fail(
                "range-isolation",
                f"the session on range {shard.range.name} was fenced off ({exc}) although only sessions on other "
                f"ranges ({', '.join(r.name for r in others)}) opened after it: fence per (materialization, range)",
            )
        else:
            self.rec.fail("fencing", f"the only session on range {shard.range.name} was fenced off ({exc})")
        raise ScenarioAbort(str(exc))

    def zombie_commit(self, z: Shard, steps: Iterator[str]) -> None:
        try:
            for _ in steps:
                pass
        except FencedOff:
            self.rec.check("fencing", True)
            return
        finally:
            self.finish(z)
        if self.store_authoritative:
            self.rec.fail(
                "fencing",
                f"an older session on range {z.range.name} committed after a newer session opened the same range: "
                "start_commit must verify the fence inside the endpoint transaction and raise FencedOff",
            )
        else:
            # The recovery log fences: the zombie's driver-checkpoint update is not logged.
            self.rec.check("fencing", True)

    def commit_log(self, batch_id: int, events: list[Event], shards: list[Shard]) -> None:
        state = self.driver_state
        for shard in shards:
            if shard.skipped or not shard.committed:
                continue
            if self.epochs.get(_rk(shard.range)) != shard.epoch:
                continue  # a zombie: the recovery log fences it off
            for upd in shard.updates:
                state = apply_update(state, upd)
        self.driver_state = state
        self.log.append({
            "batch_id": batch_id,
            "runtime_checkpoint": self.runtime_checkpoint(batch_id),
            "driver_checkpoint": state,
            "layout": [_rk(r) for r in self.layout],
        })
        self.model.commit(batch_id, events)

    def post_commit(self) -> None:
        if self.pattern is CommitPattern.IDEMPOTENT_APPLY_COORDINATOR and self.log:
            driver = self.factory()
            try:
                driver.coordinator_acknowledge(self.materialization, self.driver_state,
                                               self.log[-1]["runtime_checkpoint"], self.bindings)
            finally:
                driver.close()

    def acknowledge_all(self) -> None:
        """Acknowledge the last logged batch everywhere (start-up, or before a layout change)."""
        if not self.log:
            return
        if self.pattern is CommitPattern.IDEMPOTENT_APPLY_COORDINATOR:
            self.post_commit()
            return
        for i, rng in enumerate(self.layout):
            shard = self.open_shard(i, rng)
            shard.session.acknowledge(Acknowledge(state=self.driver_state))
            self.finish(shard)

    def restart(self) -> None:
        """A new runtime process: re-run the Acknowledge of the last committed batch."""
        self.acknowledge_all()

    def set_layout(self, n: int) -> None:
        if n == len(self.layout):
            return
        self.acknowledge_all()
        self.layout = Range.split(n)

    def check_checkpoint_rows(self) -> None:
        if not self.store_authoritative or not self.log:
            return
        driver = self.factory()
        try:
            rows = driver.checkpoints(self.materialization)
        finally:
            driver.close()
        by_range = {}
        for row in rows:
            cp = row.runtime_checkpoint
            b = int(cp.get("batch_id", -1)) if isinstance(cp, dict) else -1
            by_range[_rk(row.range)] = b
            prev = self.last_checkpoint_rows.get(_rk(row.range), -1)
            self.rec.check(
                "checkpoints-monotonic",
                b >= prev,
                lambda: f"the checkpoint of range {row.range.name} went back from batch {prev} to {b}",
            )
            self.last_checkpoint_rows[_rk(row.range)] = max(prev, b)
        last = self.last_batch
        for rng in self.layout:
            have = by_range.get(_rk(rng))
            if have is None:
                self.rec.fail(
                    "range-isolation",
                    f"checkpoints() has no row for range {rng.name} after batch {last} committed on it "
                    f"(rows: {', '.join(Range(*r).name for r in by_range) or 'none'}): keep a checkpoint per range",
                )
            else:
                self.rec.check(
                    "checkpoints-monotonic",
                    have >= last,
                    lambda: f"after batch {last} committed, the checkpoint of range {rng.name} is at batch "
                    f"{have if have >= 0 else 'none'}: data committed without its checkpoint",
                )

    # ------------------------------------------------------------------ views
    def check_views(self, repeated_ack: bool = False) -> None:
        """Compare the dumps with the model, once the last batch is acknowledged everywhere."""
        self.acknowledge_all()
        driver = self.factory()
        try:
            view = driver.dump(self.materialization, self.bindings[SUMS])
            rows = driver.dump(self.materialization, self.bindings[APPENDS])
        finally:
            driver.close()
        self._check_sums(view, repeated_ack)
        self._check_appends(rows, repeated_ack)
        if self.exactly_once and self.crashed:
            self.rec.check("at-least-once-honesty", True)

    def _excess(self, what: str, repeated_ack: bool) -> str:
        if self.exactly_once and self.crashed:
            return "at-least-once-honesty"
        return "no-duplicates"

    def _check_sums(self, view: Any, repeated_ack: bool) -> None:
        rec, want = self.rec, self.model.view
        if not isinstance(view, dict):
            rec.fail("protocol", f"dump() of a standard binding must return {{key: doc}}, got {type(view).__name__}")
            return
        got = {}
        for key, doc in view.items():
            k = key[0] if isinstance(key, (tuple, list)) and len(key) == 1 else key
            got[k] = doc
        why = " after Acknowledge was repeated (Acknowledge must be idempotent)" if repeated_ack else ""
        crash = " after a crash, although the driver declares exactly-once" if self.exactly_once and self.crashed else ""
        for k, w in sorted(want.items()):
            d = got.get(k)
            if d is None:
                rec.fail("no-loss", f"key {_fmt_key(k)} is missing from the view (expected n={w['n']}, last={w['last']!r})")
                continue
            n, last = (d.get("n"), d.get("last")) if isinstance(d, dict) else (None, None)
            if not isinstance(n, int):
                rec.fail("no-loss", f"key {_fmt_key(k)} holds {d!r}, expected n={w['n']}, last={w['last']!r}")
                continue
            rec.check("no-loss", last == w["last"],
                      lambda: f"key {_fmt_key(k)} has last={last!r}, expected {w['last']!r}: an update was lost")
            if n < w["n"]:
                rec.fail("no-loss", f"key {_fmt_key(k)} has n={n}, expected {w['n']}: a committed update was lost")
            elif n > w["n"]:
                if self.exactly_once:
                    rec.fail(self._excess("sum", repeated_ack),
                             f"key {_fmt_key(k)} has n={n}, expected {w['n']}: a sum was applied twice{why}{crash}")
                else:
                    rec.note("at-least-once-honesty", "the driver declares at-least-once: sums were re-applied after "
                             "crashes, as it warns")
            else:
                rec.check("no-duplicates", True)
        for k, d in sorted(got.items(), key=lambda kv: str(kv[0])):
            if k in want:
                continue
            if k in self.model.deleted:
                rec.fail("deletes-applied", f"key {_fmt_key(k)} was deleted but is still in the view as {d!r}")
            else:
                rec.fail("no-duplicates", f"key {_fmt_key(k)} is in the view ({d!r}) but was never committed")
        rec.check("deletes-applied", True)
        total = sum(d.get("n", 0) for d in got.values() if isinstance(d, dict) and isinstance(d.get("n"), int))
        expect = sum(w["n"] for w in want.values())
        ok = total == expect if self.exactly_once else total >= expect
        rec.check("conservation-of-sums", ok,
                  lambda: f"the view's sums add up to {total}, the input's to {expect}{why}{crash}")

    def _check_appends(self, rows: Any, repeated_ack: bool) -> None:
        from collections import Counter

        from tidemark.testing.workload import canon

        rec = self.rec
        if not isinstance(rows, list):
            rec.fail("protocol", f"dump() of a delta-updates binding must return a list, got {type(rows).__name__}")
            return
        got = Counter(canon({"k": r.get("k"), "n": r.get("n"), "last": r.get("last")}) if isinstance(r, dict)
                      else canon(r) for r in rows)
        want = self.model.appends
        missing = want - got
        extra = got - want
        if missing:
            sample = next(iter(missing))
            rec.fail("no-loss", f"{sum(missing.values())} delta-update rows are missing, e.g. {sample}")
        else:
            rec.check("no-loss", True)
        if extra:
            sample = next(iter(extra))
            if self.exactly_once:
                rec.fail(self._excess("row", repeated_ack),
                         f"{sum(extra.values())} delta-update rows are extra (appended twice or never committed), "
                         f"e.g. {sample}")
            else:
                rec.note("at-least-once-honesty", "delta-update rows were re-appended after crashes (at-least-once)")
        total = sum(r.get("n", 0) for r in rows if isinstance(r, dict) and isinstance(r.get("n"), int))
        ok = total == self.model.appended_sum if self.exactly_once else total >= self.model.appended_sum
        rec.check("conservation-of-sums", ok,
                  lambda: f"the delta-update rows add up to {total}, the input's to {self.model.appended_sum}")


__all__ = ["KitRuntime", "KitCrash", "ScenarioAbort", "Recorder", "PROPERTIES", "PHASES", "Shard"]
