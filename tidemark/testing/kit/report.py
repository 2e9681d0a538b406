"""What the kit checks and how it reports: the properties, a hint per kind of failure, the
recorder the scenarios write to, and the report (text and a rich table)."""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Optional, Protocol

MAX_EXPLANATIONS = 6

PROPERTIES: dict[str, str] = {
    "protocol": "follows the protocol: replies in order, only for what was asked, no unexpected errors",
    "liveness": "answers every request before the run's deadline",
    "no-loss": "every committed document is in the view, with its latest values",
    "no-duplicates": "no document or sum is applied twice (also when Acknowledge repeats)",
    "read-committed": "Loads see exactly the committed view (never unapplied or uncommitted state)",
    "conservation-of-sums": "the sums in the views equal the sums of the input",
    "checkpoints-monotonic": "checkpoints never go backwards and commit together with the data",
    "fencing": "a session cannot commit after a newer session opened its range (or an overlapping one)",
    "range-isolation": "checkpoints and fences are kept per key range; ranges do not disturb each other",
    "deletes-applied": "deleted keys are gone from the view",
    "loaded-existing-only": "Loaded answers only keys that exist, with their stored document",
    "binding-isolation": "each binding's resource is its own: a Load reads, a Store writes only that binding's",
    "whole-documents": "documents come back whole, however large (here up to 900 KB)",
    "at-least-once-honesty": "a driver that claims exactly-once does not double-apply after a crash",
    "identity-records": "keeps each resource's view-identity record as Apply gave it, and returns it unchanged",
    "keys-exact": "keys that differ only in letter case, Unicode normalization, trailing spaces or past a long "
    "shared prefix stay apart",
    "whole-checkpoints": "runtime checkpoints come back whole, however large (here 96 KiB)",
    "ownership": "what a view's checkpoint wrote is never changed by another checkpoint's view of the same name",
    "round-trip": "every JSON value comes back as stored (null beside absent, 17-digit floats, big integers, "
    "every Unicode plane, 4 KiB keys, 3 MiB documents), through Loads, dumps and crashes",
    "limits": "a value beyond a limit the driver declares is refused, naming its key, with nothing committed",
}

# The fix a driver author most likely needs, per property (a failure may give a closer one).
HINTS: dict[str, str] = {
    "protocol": "answer each request with the reply docs/protocol.md names, in order; raise tidemark.errors "
    "classes (FencedOff, EndpointUnavailable, ...) rather than other exceptions",
    "liveness": "every request needs an answer in bounded time; a slow endpoint should fail with "
    "EndpointUnavailable rather than hang (or raise the kit's --deadline)",
    "no-loss": "write every Store of the transaction in its commit, also when a transaction spans several "
    "Store messages",
    "no-duplicates": "apply staged work once (keyed by batch or stage id), however often Acknowledge repeats",
    "read-committed": "evaluate Loads only after your own Acknowledged, against committed and applied state",
    "conservation-of-sums": "every sum of the input must reach the views exactly once (the no-loss and no-duplicates "
    "failures say which keys differ)",
    "checkpoints-monotonic": "commit the runtime checkpoint in the same endpoint transaction as the data",
    "fencing": "Open bumps the fence of its range and every overlapping range; start_commit verifies it "
    "inside the commit transaction and raises FencedOff",
    "range-isolation": "keep checkpoints and fences per (materialization, key range); inherit only from "
    "covering or merged ranges",
    "deletes-applied": "Store.deletes[i] asks to remove the key: delete it, do not store the deletion document",
    "loaded-existing-only": "answer Loaded only for requested keys that exist, with their stored document",
    "binding-isolation": "look a Load's keys up in the resource of Load.binding only: two bindings may hold the "
    "same keys with other documents",
    "whole-documents": "store and return each document whole: no column, field or message size limit may cut it "
    "(store big ones in a large-object type, or split them and join them again)",
    "at-least-once-honesty": "a driver that can double-apply after a crash declares at-least-once",
    "keys-exact": "compare and store keys byte for byte: a binary collation without trailing-space padding "
    "(not MySQL's default *_ci, SQLite's NOCASE or a normalizing hash), and no case folding in key encodings",
    "whole-checkpoints": "store StartCommit.runtime_checkpoint whole (a large-object or longtext column, not a "
    "64 KiB text or a capped field) and return it unchanged in Opened",
    "ownership": "report each place's writer in positions() (the runtime checkpoint's checkpoint_id), and drop in "
    "drop() only what the named view keeps: another spec's view of the same name may share the endpoint",
    "round-trip": "store each document's JSON as given and return it unchanged: keep null members, empty "
    "strings, 64-bit floats and integers of any size (a JSON text or an exact numeric, not a 4-byte REAL or a "
    "BIGINT); or declare what the endpoint cannot hold in Capabilities.limits and refuse it",
    "limits": "refuse, before anything commits, a value beyond a limit you declare (an error naming the key)",
    "identity-records": "in Apply, keep Apply.identities[i] (plus 'resolved', your name for the resource) with "
    "binding i's resource where none is kept, never overwrite it, and return it from identities() "
    "(external drivers: list_identities)",
}


class Explanation(Protocol):
    """A failure's explanation, made only when the check fails: called with no arguments (a
    lambda may bind loop variables as defaults, which mypy cannot infer against ``Callable[[], str]``)."""

    def __call__(self) -> str: ...


@dataclass
class Recorder:
    """Counts checks and failures per property; every failure carries its scenario and a hint."""

    checks: dict[str, int] = field(default_factory=lambda: {p: 0 for p in PROPERTIES})
    failures: dict[str, list[str]] = field(default_factory=lambda: {p: [] for p in PROPERTIES})
    counts: dict[str, int] = field(default_factory=lambda: {p: 0 for p in PROPERTIES})
    notes: dict[str, list[str]] = field(default_factory=lambda: {p: [] for p in PROPERTIES})
    scenario: str = ""
    closed: bool = False  # the run is over (a stalled scenario that wakes up later is not counted)
    cause: Optional[tuple[str, str]] = None  # the scenario's first root-cause failure: (property, hint)

    def start(self, scenario: str) -> None:
        self.scenario, self.cause = scenario, None

    def check(self, prop: str, ok: bool, explanation: str | Explanation = "", hint: Optional[str] = None) -> bool:
        if self.closed:
            return ok
        self.checks[prop] += 1
        if not ok:
            self.fail(prop, explanation() if callable(explanation) else explanation, hint)
        return ok

    def fail(self, prop: str, explanation: str, hint: Optional[str] = None, cause: bool = False) -> None:
        """Record a failure.  ``cause``: a root cause (a fence that did not hold, a checkpoint apart
        from its data, ...); later failures of the scenario on other properties are most likely
        its consequences, and their hint says so."""
        if self.closed:
            return
        hint = hint or HINTS[prop]
        if cause and self.cause is None:
            self.cause = (prop, hint)
        elif not cause and self.cause is not None and self.cause[0] != prop:
            hint = f"probably a consequence of the {self.cause[0]} failure of this scenario ({self.cause[1]}); if not: {hint}"
        self.counts[prop] += 1
        text = f"[{self.scenario}] {explanation} (fix: {hint})"
        if len(self.failures[prop]) < MAX_EXPLANATIONS and text not in self.failures[prop]:
            self.failures[prop].append(text)

    def note(self, prop: str, text: str) -> None:
        if not self.closed and text not in self.notes[prop]:
            self.notes[prop].append(text)

    def total_failures(self) -> int:
        return sum(self.counts.values())

    def failed_since(self, before: dict[str, int]) -> list[str]:
        return [p for p, n in self.counts.items() if n > before.get(p, 0)]


def classify(exc: BaseException) -> tuple[str, str]:
    """The property an unexpected error of the driver (or a refusal of the real runtime) breaks,
    and the hint that fits it."""
    from tidemark.errors import DriverProgramError, FencedOff, ProtocolViolation, RecoveryError, SpecError

    text = str(exc)
    if isinstance(exc, RecoveryError):
        if "another tidemark checkpoint" in text or "is written by materialization" in text:
            return "range-isolation", (
                "Opened returns the checkpoint of this materialization and range only; "
                "keep checkpoints per (materialization, range)"
            )
        if "with another identity" in text:
            return "checkpoints-monotonic", "store StartCommit.runtime_checkpoint verbatim and return it in Opened"
        if re.search(r"holds batch \d+, newer", text):
            return "range-isolation", (
                "a range returned a checkpoint no session committed there: inherit only "
                "from ranges that cover or merge into it"
            )
        if "holds no batch" in text or re.search(r"holds batch \d+, older", text):
            return "checkpoints-monotonic", (
                "a range's checkpoint went back or vanished: commit it with the "
                "data, keep it in checkpoints(), and fence zombies"
            )
        return "checkpoints-monotonic", HINTS["checkpoints-monotonic"]
    if isinstance(exc, FencedOff):
        return "fencing", "only a newer session on the range (or an overlapping one) may fence a session off"
    if isinstance(exc, ProtocolViolation):
        return "protocol", "follow the order rules of docs/protocol.md (the message says which)"
    if isinstance(exc, DriverProgramError):
        return "protocol", (
            "the program must answer every request with one wire line and keep running until "
            "its input ends; its last stderr lines are quoted"
        )
    if isinstance(exc, SpecError):
        return "protocol", "the driver's capabilities must cover the kit's two bindings (standard and delta)"
    return "protocol", HINTS["protocol"]


# ------------------------------------------------------------------------ report


@dataclass
class PropertyResult:
    name: str
    description: str
    passed: Optional[bool]  # None: not exercised (e.g. fencing of an at-least-once driver)
    checks: int
    failures: list[str] = field(default_factory=list)
    failure_count: int = 0
    notes: list[str] = field(default_factory=list)

    @property
    def status(self) -> str:
        return {True: "pass", False: "FAIL", None: "n/a"}[self.passed]


@dataclass
class ConformanceReport:
    driver: str
    commit_pattern: str
    properties: dict[str, PropertyResult]
    scenarios: list[str]
    seed: int
    quick: bool
    seconds: float = 0.0
    deadline: float = 0.0
    timings: dict[str, float] = field(default_factory=dict)  # scenario -> seconds (those that ran)

    @property
    def ok(self) -> bool:
        return all(p.passed is not False for p in self.properties.values())

    @property
    def failed(self) -> list[str]:
        return [name for name, p in self.properties.items() if p.passed is False]

    def headline(self) -> str:
        return (
            f"conformance of {self.driver} ({self.commit_pattern}), {len(self.scenarios)} scenarios, "
            f"seed {self.seed}{', quick' if self.quick else ''}, {self.seconds:.1f} s: "
            f"{'PASS' if self.ok else 'FAIL'}"
        )

    def summary(self) -> str:
        lines = [self.headline()]
        for p in self.properties.values():
            lines.append(f"  {p.status:4}  {p.name}: {p.description}")
            for f in p.failures:
                lines.append(f"          - {f}")
            if p.failure_count > len(p.failures):
                lines.append(f"          ... and {p.failure_count - len(p.failures)} more")
            for n in p.notes:
                lines.append(f"          note: {n}")
        return "\n".join(lines)

    __str__ = summary

    def render(self, console=None) -> None:
        """The report as a table.  Explanations are escaped: ``[scenario]`` is text, not markup."""
        from rich.console import Console
        from rich.markup import escape
        from rich.table import Table

        console = console or Console(soft_wrap=True)
        table = Table(title=escape(f"tidemark conformance: {self.driver} ({self.commit_pattern})"), show_lines=True)
        table.add_column("property", style="bold")
        table.add_column("result")
        table.add_column("what it means / what went wrong")
        for p in self.properties.values():
            style = {"pass": "green", "FAIL": "bold red", "n/a": "dim"}[p.status]
            text = escape(p.description)
            if p.failures:
                text += "\n" + "\n".join(f"• {escape(f)}" for f in p.failures)
                if p.failure_count > len(p.failures):
                    text += f"\n… and {p.failure_count - len(p.failures)} more"
            for n in p.notes:
                text += f"\nnote: {escape(n)}"
            table.add_row(p.name, f"[{style}]{p.status}[/]", text)
        console.print(table)
        verdict = "[bold green]PASS[/]" if self.ok else f"[bold red]FAIL[/] ({', '.join(self.failed)})"
        console.print(f"{len(self.scenarios)} scenarios, seed {self.seed}, {self.seconds:.1f} s: {verdict}")


def build_report(rec: Recorder, name: str, pattern: str, plan: list[str], seed: int, quick: bool) -> ConformanceReport:
    props = {}
    for prop, desc in PROPERTIES.items():
        failed = rec.counts[prop] > 0
        exercised = rec.checks[prop] > 0 or failed
        props[prop] = PropertyResult(
            prop,
            desc,
            (not failed) if exercised else None,
            rec.checks[prop],
            rec.failures[prop],
            rec.counts[prop],
            rec.notes[prop],
        )
    return ConformanceReport(name, pattern, props, plan, seed, quick)


__all__ = [
    "PROPERTIES",
    "HINTS",
    "Recorder",
    "classify",
    "PropertyResult",
    "ConformanceReport",
    "build_report",
    "MAX_EXPLANATIONS",
]
