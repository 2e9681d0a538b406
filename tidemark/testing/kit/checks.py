"""What the kit compares against its model: Opened, Loaded, the checkpoint rows and the views.

A mixin of :class:`~tidemark.testing.kit.runtime.KitRuntime` (it uses the runtime's model,
recorder and what it saw of the endpoint)."""

from __future__ import annotations

import json
import re
from collections import Counter
from typing import TYPE_CHECKING, Any, Callable, Optional, cast

from tidemark.protocol.messages import Range
from tidemark.testing.workload import APPENDS, MIRROR, REDUCED, SUMS, canon

if TYPE_CHECKING:
    from tidemark.drivers.base import Driver
    from tidemark.protocol.messages import BindingSpec
    from tidemark.runtime.recovery_log import LogEntry
    from tidemark.testing.kit.report import Recorder
    from tidemark.testing.kit.sessions import Shard, Tracker
    from tidemark.testing.workload import Model

PADDING = "kit_padding"  # the large-checkpoint scenario's member of every runtime checkpoint


def fmt_key(k: str) -> str:
    return json.dumps([k], ensure_ascii=False)


def batch_of(doc: Any) -> Optional[int]:
    """The batch whose event wrote ``doc["last"]`` (the kit's ``last`` values are ``b<N>.<i>``,
    the ``mirror`` binding's ``m:b<N>.<i>`` padded with ``~``)."""
    last = doc.get("last") if isinstance(doc, dict) else None
    m = re.fullmatch(r"(?:m:)?b(\d+)\.\d+~*", last) if isinstance(last, str) else None
    return int(m.group(1)) if m else None


def short(doc: Any) -> str:
    """A document as a message shows it: at most 160 characters (the kit's may be 900 KB)."""
    text = repr(doc)
    return text if len(text) <= 160 else f"{text[:120]}… ({len(text)} characters)"


BINDING_NAMES = {SUMS: "sums", MIRROR: "mirror"}


def foreign(binding: int, doc: Any) -> bool:
    """True when ``doc`` is a document of the other standard binding (``mirror``'s ``last``
    starts with ``m:``, ``sums``' never does)."""
    last = doc.get("last") if isinstance(doc, dict) else None
    return isinstance(last, str) and last.startswith("m:") != (binding == MIRROR)


def held(doc: Any) -> str:
    last = doc.get("last") if isinstance(doc, dict) else None
    return f"the first {len(last)}" if isinstance(last, str) else f"{short(doc)}, none"


BIG = 8 * 1024  # a ``last`` this long makes a document one that a size limit may cut


def cut(doc: Any, want: dict) -> bool:
    """True when ``want`` is a big document and ``doc`` lacks its ``last``, or holds a shorter
    one that begins it: cut short (a size limit), not an old version (whose ``last`` differs)."""
    wanted = want.get("last") if isinstance(want, dict) else None
    if not isinstance(wanted, str) or len(wanted) < BIG:
        return False
    last = doc.get("last") if isinstance(doc, dict) else None
    return last is None or (isinstance(last, str) and len(last) < len(wanted) and wanted.startswith(last))


SPILL_HINT = (
    "keep a transaction's Stores where neither Loads nor readers see them until StartCommit commits "
    "them, also a large transaction that does not fit in memory (stage it, do not write it early)"
)
TRUNCATION_HINT = (
    "answer every existing key of a Load, however many (up to the max_load_keys you declare): "
    "split the answer over several Loaded messages if you must, but drop none (a LIMIT, page or "
    "batch size cut it?)"
)


class Checks:
    """A mixin of :class:`~tidemark.testing.kit.runtime.KitRuntime`."""

    # what KitRuntime gives this mixin (declarations for the type checker)
    factory: Callable[[], Driver]
    rec: Recorder
    tracker: Tracker
    materialization: str
    bindings: tuple[BindingSpec, ...]
    model: Model
    crashed: bool
    dirty: set[str]
    started: set[int]
    endpoint_commits: dict[tuple[int, int], int]
    observed: dict[tuple[int, int], tuple[int, str]]
    last_checkpoint_rows: dict[tuple[int, int], int]
    checkpoint_padding: str

    if TYPE_CHECKING:

        @property
        def exactly_once(self) -> bool: ...

        @property
        def store_authoritative(self) -> bool: ...

        @property
        def last(self) -> Optional[LogEntry]: ...

    # ------------------------------------------------------------------ Opened
    def check_opened_extra(self, shard: Shard) -> None:
        if not self.store_authoritative:
            return
        cp = shard.opened.runtime_checkpoint
        rec, key_range = self.rec, shard.range
        if cp is not None and self.checkpoint_padding and shard.opened_batch >= 0:
            kept = cp.get(PADDING)
            rec.check(
                "whole-checkpoints",
                kept == self.checkpoint_padding,
                lambda: (
                    f"Opened on range {key_range.name} returned the runtime checkpoint with its "
                    f"{len(self.checkpoint_padding.encode())}-byte member {PADDING!r} "
                    + ("missing" if kept is None else f"changed ({len(str(kept).encode())} bytes)")
                ),
            )
        if cp is not None:
            rec.check(
                "range-isolation",
                cp.get("materialization") == self.materialization,
                lambda: f"Opened on range {key_range.name} returned a checkpoint of another materialization: {cp!r}",
                "keep checkpoints per (materialization, range)",
            )
        got = shard.opened_batch
        expected = max((b for r, b in self.endpoint_commits.items() if Range(*r).overlaps(key_range)), default=-1)
        seen, how = max(
            ((b, how) for r, (b, how) in self.observed.items() if Range(*r).overlaps(key_range)), default=(-1, "")
        )
        if seen > got and seen > expected:
            rec.fail(
                "checkpoints-monotonic",
                f"{how}, but after the restart Opened on range {key_range.name} returns batch "
                f"{got if got >= 0 else 'none'}: the data committed without its runtime checkpoint, so the batch "
                "runs again",
                "write the data, the runtime checkpoint and the fence check in ONE endpoint transaction (not the "
                "checkpoint in a second one)",
                cause=True,
            )
            return
        rec.check(
            "checkpoints-monotonic",
            got >= expected,
            lambda: (
                f"Opened on range {key_range.name} returned batch {got if got >= 0 else 'none'}, but the endpoint had "
                f"already committed batch {expected} there (StartedCommit was returned)"
            ),
        )
        rec.check(
            "range-isolation",
            got <= max(expected, seen),
            lambda: (
                f"Opened on range {key_range.name} returned batch {got}, but sessions on ranges overlapping it "
                f"committed only up to batch {expected}: the checkpoint came from another key range"
            ),
        )

    # ------------------------------------------------------------------ Loaded
    def check_loaded(
        self, key_range: Range, requests: list[list[str]], loaded: dict[str, Any], binding: int = SUMS
    ) -> None:
        rec = self.rec
        committed, deleted = self.model.views(binding)
        name = BINDING_NAMES.get(binding, str(binding))

        def counted(k: str) -> bool:
            return self.exactly_once or k not in self.dirty

        truncated: set[str] = set()
        for chunk in requests:
            existing = [k for k in chunk if k in committed and counted(k)]
            answered = [k for k in existing if k in loaded]
            if existing and 0 < len(answered) < len(existing) and len(existing) >= 10:
                missing = [k for k in existing if k not in loaded]
                truncated.update(missing)
                rec.fail(
                    "read-committed",
                    f"a Load of {len(chunk)} keys of binding {name} on range {key_range.name}, {len(existing)} "
                    f"of which exist in the committed view, was answered for only {len(answered)} of them (e.g. "
                    f"{fmt_key(missing[0])} is missing): the answer was cut short",
                    TRUNCATION_HINT,
                    cause=True,
                )
        for k in sorted(k for chunk in requests for k in chunk):
            doc, want = loaded.get(k), committed.get(k)
            if doc is not None and foreign(binding, doc):
                rec.fail(
                    "binding-isolation",
                    f"a Load of key {fmt_key(k)} for binding {name} returned {short(doc)}, a document of the other "
                    f"binding that holds the same key (binding {name} holds {short(want)})",
                    cause=True,
                )
                continue
            if doc is not None and want is not None and cut(doc, want):
                rec.fail(
                    "whole-documents",
                    f"a Load of key {fmt_key(k)} for binding {name} returned {held(doc)} of the "
                    f"{len(want['last'])} characters stored in its 'last': the document was cut short",
                    cause=True,
                )
                continue
            origin = batch_of(doc)
            uncommitted = origin is not None and origin not in self.model.batches and origin not in self.started
            if doc is not None and uncommitted and counted(k):
                rec.fail(
                    "read-committed",
                    f"Load of key {fmt_key(k)} returned {short(doc)}, written by batch {origin}, which never "
                    f"committed (the kit crashed or fenced that transaction before its commit finished; the "
                    f"committed view has {short(want)}): the transaction's Stores reached the endpoint before "
                    "StartCommit",
                    SPILL_HINT,
                    cause=True,
                )
                continue
            if doc is not None:
                rec.check(
                    "loaded-existing-only",
                    isinstance(doc, dict) and doc.get("k") == k and isinstance(doc.get("n"), int),
                    lambda doc=doc, k=k: (
                        f"Loaded key {fmt_key(k)} with {short(doc)}, which is not a stored document of that key"
                    ),
                )
                if want is None and counted(k):
                    rec.fail(
                        "loaded-existing-only",
                        f"Loaded key {fmt_key(k)} (doc {short(doc)}) of binding {name}, which does not exist in "
                        "the committed view" + (" (it was deleted)" if k in deleted else ""),
                    )
                    continue
            if want is None or not counted(k) or k in truncated:
                continue
            if doc is None:
                rec.fail(
                    "read-committed",
                    f"Load of key {fmt_key(k)} of binding {name} found nothing, but the committed view has "
                    f"{short(want)}: the Load was evaluated before the previous transaction was visible",
                    "evaluate Loads only after Acknowledged returned, and only once staged work is applied",
                )
            elif isinstance(doc, dict) and (doc.get("n"), doc.get("last")) != (want["n"], want["last"]):
                rec.fail(
                    "read-committed",
                    f"Load of key {fmt_key(k)} of binding {name} returned n={doc.get('n')!r}, "
                    f"last={short(doc.get('last'))}, but the committed view has n={want['n']}, "
                    f"last={short(want['last'])}: the Load saw unapplied or uncommitted state",
                )
            else:
                rec.check("read-committed", True)
                rec.check("binding-isolation", True)
                rec.check("whole-documents", True)

    # -------------------------------------------------------------- checkpoints
    def check_checkpoint_rows(self) -> None:
        last = self.last
        if not self.store_authoritative or last is None:
            return
        driver = self.factory()
        try:
            self.tracker("checkpoints() (list_checkpoints)")
            rows = driver.checkpoints(self.materialization)
        finally:
            driver.close()
        by_range = {}
        for row in rows:
            cp = row.runtime_checkpoint
            b = cp.get("batch_id", -1) if isinstance(cp, dict) else -1
            b = b if isinstance(b, int) else -1
            key = (row.range.key_begin, row.range.key_end)
            by_range[key] = b
            prev = self.last_checkpoint_rows.get(key, -1)
            self.rec.check(
                "checkpoints-monotonic",
                b >= prev,
                lambda b=b, prev=prev, row=row: (
                    f"the checkpoint of range {row.range.name} went back from batch {prev} to {b}"
                ),
                "never overwrite a range's checkpoint with an older one: fence zombies, and commit the "
                "checkpoint with the data",
            )
            self.last_checkpoint_rows[key] = max(prev, b)
        for begin, end in last.layout:
            key_range = Range(begin, end)
            have = by_range.get((begin, end))
            if have is None:
                self.rec.fail(
                    "range-isolation",
                    f"checkpoints() has no row for range {key_range.name} after batch {last.batch_id} committed on "
                    f"it (rows: {', '.join(Range(*r).name for r in by_range) or 'none'})",
                    "keep a checkpoint row per (materialization, range) and list it in checkpoints()",
                )
            else:
                self.rec.check(
                    "checkpoints-monotonic",
                    have >= last.batch_id,
                    lambda have=have, key_range=key_range: (
                        f"after batch {last.batch_id} committed, the checkpoint of range {key_range.name} is at "
                        f"batch {have if have >= 0 else 'none'}: data committed without its checkpoint"
                    ),
                )

    # ------------------------------------------------------------------- views
    def check_views(self, repeated_ack: bool = False) -> None:
        """Compare the dumps with the model (the coordinator acknowledged the last batch)."""
        driver = self.factory()
        try:
            self.tracker("dump() of every binding")
            view = driver.dump(self.materialization, self.bindings[SUMS])
            rows = driver.dump(self.materialization, self.bindings[APPENDS])
            mirrored = driver.dump(self.materialization, self.bindings[MIRROR])
            reduced = (
                driver.dump(self.materialization, self.bindings[REDUCED]) if len(self.bindings) > REDUCED else None
            )
        finally:
            driver.close()
        self._check_sums(view, repeated_ack)
        self._check_sums(mirrored, repeated_ack, MIRROR)
        self._check_appends(rows)
        if reduced is not None:
            self._check_reduced(reduced, repeated_ack)
        if self.exactly_once and self.crashed:
            self.rec.check("at-least-once-honesty", True)

    def check_keys_exact(self, confusable: list[str]) -> None:
        """Keys that a folding collation or encoding would take for one another each keep their
        own document (``keys-exact``): compared with the model, key by key."""
        driver = self.factory()
        try:
            self.tracker("dump() of the standard binding (keys that differ only in case, normalization, spaces)")
            view = driver.dump(self.materialization, self.bindings[SUMS])
        finally:
            driver.close()
        # a standard binding's dump is {key: doc}
        got = {k[0] if isinstance(k, (tuple, list)) and len(k) == 1 else k: d for k, d in cast(dict, view).items()}
        want, _ = self.model.views(SUMS)
        for key in confusable:
            if key not in want:
                continue
            kept = got.get(key)
            self.rec.check(
                "keys-exact",
                isinstance(kept, dict) and kept.get("n") == want[key].get("n"),
                lambda key=key, kept=kept: (
                    f"key {key!r} ({key.encode()!r}) "
                    + (
                        "is missing from the view"
                        if kept is None
                        else f"holds n={kept.get('n') if isinstance(kept, dict) else kept!r}, "
                        f"expected {want[key].get('n')}"
                    )
                    + f": keys that differ only in case, normalization or trailing spaces are "
                    f"{[k for k in confusable if k in want]!r}, each with its own document"
                ),
            )

    def _excess(self) -> tuple[str, Optional[str]]:
        if self.exactly_once and self.crashed:
            return "at-least-once-honesty", (
                "an exactly-once driver must survive a crash at any point (also inside "
                "a request) without applying anything twice; or declare at-least-once"
            )
        return "no-duplicates", None

    def _check_sums(self, view: Any, repeated_ack: bool, binding: int = SUMS) -> None:
        rec = self.rec
        want, deleted = self.model.views(binding)
        of = "" if binding == SUMS else f" of binding {BINDING_NAMES.get(binding, binding)}"
        if not isinstance(view, dict):
            rec.fail("protocol", f"dump() of a standard binding must return {{key: doc}}, got {type(view).__name__}")
            return
        got = {}
        for key, doc in view.items():
            got[key[0] if isinstance(key, (tuple, list)) and len(key) == 1 else key] = doc
        why = " after Acknowledge was repeated (Acknowledge must be idempotent)" if repeated_ack else ""
        crash = (
            " after a crash, although the driver declares exactly-once" if self.exactly_once and self.crashed else ""
        )
        for k, w in sorted(want.items()):
            d = got.get(k)
            if d is None:
                rec.fail(
                    "no-loss",
                    f"key {fmt_key(k)} is missing from the view{of} (expected n={w['n']}, last={short(w['last'])})",
                )
                continue
            if foreign(binding, d):
                rec.fail(
                    "binding-isolation",
                    f"key {fmt_key(k)} of the view{of} holds {short(d)}, a document of the "
                    "other binding that holds the same key",
                )
                continue
            if cut(d, w):
                rec.fail(
                    "whole-documents",
                    f"key {fmt_key(k)} of the view{of} holds {held(d)} of the "
                    f"{len(w['last'])} characters stored in its 'last': the document was cut "
                    "short",
                )
                continue
            n, last = (d.get("n"), d.get("last")) if isinstance(d, dict) else (None, None)
            if not isinstance(n, int):
                rec.fail(
                    "no-loss", f"key {fmt_key(k)}{of} holds {short(d)}, expected n={w['n']}, last={short(w['last'])}"
                )
                continue
            rec.check(
                "no-loss",
                last == w["last"],
                lambda k=k, last=last, w=w: (
                    f"key {fmt_key(k)}{of} has last={short(last)}, expected {short(w['last'])}: an update was lost"
                ),
            )
            if n < w["n"]:
                rec.fail("no-loss", f"key {fmt_key(k)}{of} has n={n}, expected {w['n']}: a committed update was lost")
            elif n > w["n"]:
                if self.exactly_once:
                    prop, hint = self._excess()
                    rec.fail(
                        prop,
                        f"key {fmt_key(k)}{of} has n={n}, expected {w['n']}: a sum was applied twice{why}{crash}",
                        hint,
                    )
                else:
                    rec.note(
                        "at-least-once-honesty",
                        "the driver declares at-least-once: sums were re-applied after crashes, as it warns",
                    )
            else:
                rec.check("no-duplicates", True)
        for k, d in sorted(got.items(), key=lambda kv: str(kv[0])):
            if k in want:
                continue
            if k in deleted:
                rec.fail("deletes-applied", f"key {fmt_key(k)} was deleted but is still in the view{of} as {short(d)}")
            else:
                rec.fail("no-duplicates", f"key {fmt_key(k)} is in the view{of} ({short(d)}) but was never committed")
        rec.check("deletes-applied", True)
        total = sum(d.get("n", 0) for d in got.values() if isinstance(d, dict) and isinstance(d.get("n"), int))
        expect = sum(w["n"] for w in want.values())
        ok = total == expect if self.exactly_once else total >= expect
        rec.check(
            "conservation-of-sums",
            ok,
            lambda: f"the view's sums{of} add up to {total}, the input's to {expect}{why}{crash}",
            self._excess()[1] if crash else None,
        )

    def _check_reduced(self, view: Any, repeated_ack: bool) -> None:
        """The binding the endpoint reduces itself: each key's sum and last value."""
        rec, want = self.rec, self.model.reduced
        if not isinstance(view, dict):
            rec.fail("protocol", f"dump() of a standard binding must return {{key: doc}}, got {type(view).__name__}")
            return
        got = {(k[0] if isinstance(k, (tuple, list)) and len(k) == 1 else k): d for k, d in view.items()}
        why = " after Acknowledge was repeated" if repeated_ack else ""
        for k, w in sorted(want.items()):
            d = got.get(k)
            n = d.get("n") if isinstance(d, dict) else None
            if d is None or not isinstance(n, int) or n < w["n"] or d.get("last") != w["last"]:
                rec.fail(
                    "no-loss",
                    f"reduced binding: key {fmt_key(k)} holds {d!r}, expected n={w['n']}, "
                    f"last={w['last']!r}: a committed update was lost{why}",
                )
            elif n > w["n"]:
                if self.exactly_once:
                    prop, hint = self._excess()
                    rec.fail(
                        prop,
                        f"reduced binding: key {fmt_key(k)} has n={n}, expected {w['n']}: the endpoint "
                        f"reduced a batch twice{why}",
                        hint,
                    )
                else:
                    rec.note("at-least-once-honesty", "the endpoint re-reduced batches after crashes (at-least-once)")
            else:
                rec.check("no-duplicates", True)
        for k, d in sorted(got.items(), key=lambda kv: str(kv[0])):
            if k not in want:
                rec.fail(
                    "no-duplicates", f"reduced binding: key {fmt_key(k)} is in the view ({d!r}) but was never committed"
                )

    def _check_appends(self, rows: Any) -> None:
        rec = self.rec
        if not isinstance(rows, list):
            rec.fail("protocol", f"dump() of a delta-updates binding must return a list, got {type(rows).__name__}")
            return
        got = Counter(
            canon({"k": r.get("k"), "n": r.get("n"), "last": r.get("last")}) if isinstance(r, dict) else canon(r)
            for r in rows
        )
        want = self.model.appends
        missing, extra = want - got, got - want
        if missing:
            rec.fail("no-loss", f"{sum(missing.values())} delta-update rows are missing, e.g. {next(iter(missing))}")
        else:
            rec.check("no-loss", True)
        if extra:
            if self.exactly_once:
                prop, hint = self._excess()
                rec.fail(
                    prop,
                    f"{sum(extra.values())} delta-update rows are extra (appended twice or never "
                    f"committed), e.g. {next(iter(extra))}",
                    hint,
                )
            else:
                rec.note("at-least-once-honesty", "delta-update rows were re-appended after crashes (at-least-once)")
        total = sum(r.get("n", 0) for r in rows if isinstance(r, dict) and isinstance(r.get("n"), int))
        ok = total == self.model.appended_sum if self.exactly_once else total >= self.model.appended_sum
        rec.check(
            "conservation-of-sums",
            ok,
            lambda: f"the delta-update rows add up to {total}, the input's to {self.model.appended_sum}",
            self._excess()[1],
        )


__all__ = ["Checks", "fmt_key", "batch_of", "SPILL_HINT", "TRUNCATION_HINT"]
