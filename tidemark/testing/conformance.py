"""The conformance kit: does a driver keep exactly-once views through crashes, zombies and re-sharding?

::

    from tidemark.testing.conformance import run_conformance, assert_conformance

    report = run_conformance(lambda: MyDriver({...}), quick=True)
    print(report.summary())            # property -> pass / FAIL + why
    assert_conformance(lambda: MyDriver({...}))   # in pytest

    $ tidemark conformance sqlite --config endpoint.yaml

``driver_factory`` returns a fresh Driver for the *same* endpoint on every call (the kit
opens one per session, like executors do).  Every scenario uses a fresh materialization
and fresh resource names (``kit_<random>_sums``), so runs against a shared database do
not collide.  The kit plays the runtime (see :mod:`tidemark.testing.kit`) over two
bindings (:mod:`tidemark.testing.workload`) and checks the properties listed in
:data:`~tidemark.testing.kit.PROPERTIES`.

Scenarios: ``steady`` (a batch per session), ``pipelined`` (several transactions per
session), ``crash-<phase>`` (the runtime dies after each phase and restarts),
``repeat-acknowledge`` (start-up re-runs Acknowledge), ``zombie-early`` /
``zombie-late`` (an older session tries to commit after a newer one opened),
``split-merge`` (1 → 2 → 1 → 4 → 3 shards) and ``random-<i>`` (all of it, seeded).
"""

from __future__ import annotations

import json
import random
import uuid
from dataclasses import dataclass, field
from typing import Callable, Optional

from tidemark.drivers.base import Driver, capabilities_of
from tidemark.errors import ProtocolViolation, TidemarkError
from tidemark.testing.kit import PHASES, PROPERTIES, KitCrash, KitRuntime, Recorder, ScenarioAbort
from tidemark.testing.workload import key_space, make_batch

DriverFactory = Callable[[], Driver]


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

    @property
    def ok(self) -> bool:
        return all(p.passed is not False for p in self.properties.values())

    @property
    def failed(self) -> list[str]:
        return [name for name, p in self.properties.items() if p.passed is False]

    def summary(self) -> str:
        lines = [f"conformance of {self.driver} ({self.commit_pattern}), {len(self.scenarios)} scenarios, "
                 f"seed {self.seed}{', quick' if self.quick else ''}: {'PASS' if self.ok else 'FAIL'}"]
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
        from rich.console import Console
        from rich.table import Table

        console = console or Console()
        table = Table(title=f"tidemark conformance: {self.driver} ({self.commit_pattern})", show_lines=True)
        table.add_column("property", style="bold")
        table.add_column("result")
        table.add_column("what it means / what went wrong")
        for p in self.properties.values():
            style = {"pass": "green", "FAIL": "bold red", "n/a": "dim"}[p.status]
            text = p.description
            if p.failures:
                text += "\n" + "\n".join(f"• {f}" for f in p.failures)
                if p.failure_count > len(p.failures):
                    text += f"\n… and {p.failure_count - len(p.failures)} more"
            for n in p.notes:
                text += f"\nnote: {n}"
            table.add_row(p.name, f"[{style}]{p.status}[/]", text)
        console.print(table)
        verdict = "[bold green]PASS[/]" if self.ok else f"[bold red]FAIL[/] ({', '.join(self.failed)})"
        console.print(f"{len(self.scenarios)} scenarios, seed {self.seed}: {verdict}")


# --------------------------------------------------------------------- scenarios


def _run(kit: KitRuntime, batch: int, events, crash=None, zombie=None) -> None:
    """Run a batch; after a crash, restart and re-run it with the same input (as Spark does)."""
    try:
        kit.run_batch(batch, events, crash=crash, zombie=zombie)
    except KitCrash:
        kit.restart()
        kit.run_batch(batch, events)


def _events(rng: random.Random, keys, batch: int, size: int = 18):
    return make_batch(rng, keys, size, batch)


def steady(kit: KitRuntime, rng: random.Random, quick: bool) -> None:
    keys = key_space(rng, 10)
    for b in range(3 if quick else 5):
        _run(kit, b, _events(rng, keys, b))
    kit.check_views()


def pipelined(kit: KitRuntime, rng: random.Random, quick: bool) -> None:
    keys = key_space(rng, 10)
    kit.set_layout(2)
    kit.run_pipelined([(b, _events(rng, keys, b)) for b in range(3)])
    _run(kit, 3, _events(rng, keys, 3))
    kit.check_views()


def crash_at(phase: str) -> Callable:
    def scenario(kit: KitRuntime, rng: random.Random, quick: bool) -> None:
        keys = key_space(rng, 12)
        kit.set_layout(2)
        _run(kit, 0, _events(rng, keys, 0))
        _run(kit, 1, _events(rng, keys, 1))
        shard = 0 if phase == "start_commit" else 1
        _run(kit, 2, _events(rng, keys, 2, 24), crash=(phase, shard))
        _run(kit, 3, _events(rng, keys, 3))
        kit.check_views()

    scenario.__name__ = f"crash_{phase}"
    return scenario


def repeat_acknowledge(kit: KitRuntime, rng: random.Random, quick: bool) -> None:
    keys = key_space(rng, 10)
    _run(kit, 0, _events(rng, keys, 0))
    _run(kit, 1, _events(rng, keys, 1))
    kit.restart()
    kit.restart()
    _run(kit, 2, _events(rng, keys, 2))
    kit.restart()
    kit.restart()
    kit.check_views(repeated_ack=True)


def zombie(when: str, shards: int = 1) -> Callable:
    def scenario(kit: KitRuntime, rng: random.Random, quick: bool) -> None:
        keys = key_space(rng, 10)
        kit.set_layout(shards)
        _run(kit, 0, _events(rng, keys, 0))
        _run(kit, 1, _events(rng, keys, 1), zombie=(shards - 1, when))
        _run(kit, 2, _events(rng, keys, 2))
        kit.check_views()

    return scenario


def split_merge(kit: KitRuntime, rng: random.Random, quick: bool) -> None:
    keys = key_space(rng, 16)
    layouts = [1, 2, 2, 1, 4, 3] if quick else [1, 1, 2, 2, 1, 4, 4, 3, 1]
    for b, n in enumerate(layouts):
        kit.set_layout(n)
        _run(kit, b, _events(rng, keys, b, 24))
    kit.check_views()


def randomized(kit: KitRuntime, rng: random.Random, quick: bool) -> None:
    keys = key_space(rng, rng.randint(6, 20))
    for b in range(6 if quick else 10):
        if rng.random() < 0.25:
            kit.set_layout(rng.randint(1, 4))
        crash = zombie_at = None
        r = rng.random()
        if r < 0.35:
            crash = (rng.choice(PHASES), rng.randrange(len(kit.layout)))
        elif r < 0.5 and kit.exactly_once:
            zombie_at = (rng.randrange(len(kit.layout)), rng.choice(("early", "late")))
        _run(kit, b, _events(rng, keys, b, rng.randint(5, 30)), crash=crash, zombie=zombie_at)
    kit.check_views()


def scenarios(exactly_once: bool, quick: bool) -> list[tuple[str, Callable]]:
    out: list[tuple[str, Callable]] = [("steady", steady), ("pipelined", pipelined)]
    out += [(f"crash-{p}", crash_at(p)) for p in PHASES]
    out.append(("repeat-acknowledge", repeat_acknowledge))
    if exactly_once:
        out += [("zombie-early", zombie("early")), ("zombie-late", zombie("late"))]
        if not quick:
            out += [("zombie-early-2-shards", zombie("early", 2)), ("zombie-late-2-shards", zombie("late", 2))]
    out.append(("split-merge", split_merge))
    out += [(f"random-{i}", randomized) for i in range(1 if quick else 3)]
    return out


# ----------------------------------------------------------------------- running


def run_conformance(driver_factory: DriverFactory, *, quick: bool = False, seed: int = 0) -> ConformanceReport:
    """Drive fresh drivers from ``driver_factory`` through every scenario; report per property."""
    probe = driver_factory()
    try:
        caps = capabilities_of(probe)
        name = type(probe).name or type(probe).__name__
    finally:
        probe.close()
    rec = Recorder()
    run = uuid.uuid4().hex[:8]
    plan = scenarios(caps.exactly_once, quick)
    for i, (scenario_name, fn) in enumerate(plan):
        rec.scenario = scenario_name
        kit = KitRuntime(driver_factory, rec, f"kit_{run}_{i:02d}", caps)
        try:
            kit.apply()
            fn(kit, random.Random(f"{seed}:{scenario_name}"), quick)
            rec.check("protocol", True)
        except ScenarioAbort:
            pass
        except ProtocolViolation as exc:
            rec.fail("protocol", f"{exc}")
        except (TidemarkError, Exception) as exc:  # noqa: BLE001 - a driver failing is a finding
            rec.fail("protocol", f"unexpected {type(exc).__name__}: {exc}")
    if not caps.exactly_once:
        rec.note("fencing", "the driver declares at-least-once: zombie scenarios are skipped (it does not fence)")
    props = {}
    for prop, desc in PROPERTIES.items():
        failed = rec.counts[prop] > 0
        exercised = rec.checks[prop] > 0 or failed
        props[prop] = PropertyResult(
            prop, desc, (not failed) if exercised else None, rec.checks[prop], rec.failures[prop],
            rec.counts[prop], rec.notes[prop],
        )
    return ConformanceReport(name, caps.commit_pattern.value, props, [n for n, _ in plan], seed, quick)


def assert_conformance(driver_factory: DriverFactory, **kw) -> ConformanceReport:
    """Run the kit; fail (AssertionError listing the broken properties) unless all hold."""
    report = run_conformance(driver_factory, **kw)
    if not report.ok:
        raise AssertionError(f"driver broke: {', '.join(report.failed)}\n{report.summary()}")
    return report


def _load_config(path: Optional[str]) -> dict:
    if not path:
        return {}
    with open(path, encoding="utf-8") as f:
        text = f.read()
    if path.endswith(".json"):
        return json.loads(text)
    import yaml

    data = yaml.safe_load(text) or {}
    if not isinstance(data, dict):
        raise ValueError(f"{path}: the driver config must be a mapping")
    return data


def main(driver: str, config_path: Optional[str] = None, *, quick: bool = False, seed: int = 0) -> int:
    """``tidemark conformance DRIVER [--config FILE]``: print the report; 0 when it passes."""
    from rich.console import Console

    from tidemark.drivers.registry import load_driver

    console = Console()
    config = _load_config(config_path)
    try:
        load_driver(driver, config).close()  # fail early on an unknown driver / missing library
    except TidemarkError as exc:
        console.print(f"[bold red]error:[/] {exc}")
        return 2
    report = run_conformance(lambda: load_driver(driver, config), quick=quick, seed=seed)
    report.render(console)
    return 0 if report.ok else 1


__all__ = ["run_conformance", "assert_conformance", "main", "ConformanceReport", "PropertyResult", "scenarios"]
