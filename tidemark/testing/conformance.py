"""The conformance kit: does a driver keep exactly-once views through crashes, kills, races,
zombies, re-sharding and large transactions?

::

    from tidemark.testing.conformance import run_conformance, assert_conformance

    report = run_conformance(lambda: MyDriver({...}), quick=True)
    print(report.summary())            # property -> pass / FAIL + why + how to fix it
    assert_conformance(lambda: MyDriver({...}))   # in pytest

    $ tidemark conformance sqlite --config endpoint.yaml

``driver_factory`` returns a fresh Driver for the *same* endpoint on every call (the kit
opens one per session, like executors do).  Every scenario uses a fresh materialization,
fresh resource names (``kit_<random>_sums``) and its own checkpoint folder, so runs
against a shared database do not collide.  The kit runs tidemark's own coordinator
(:mod:`tidemark.testing.kit.runtime`) over two bindings (:mod:`tidemark.testing.workload`),
through the scenarios of :mod:`tidemark.testing.kit.scenarios`, and checks the
properties of :data:`~tidemark.testing.kit.report.PROPERTIES`.

A run has a deadline (``deadline`` seconds, printed at the start), and each request a
bounded wait (``request_wait``, default 60 s): a driver that has not answered a request by
either is reported as a ``liveness`` failure naming the request the kit waits for, and the
run ends there.
"""

from __future__ import annotations

import json
import random
import threading
import time
import uuid
from typing import Any, Callable, Optional, Sequence, cast

from tidemark.drivers.base import Driver, capabilities_of
from tidemark.drivers.store.ids import distinct_ids
from tidemark.errors import ProtocolViolation, TidemarkError
from tidemark.testing.kit.report import ConformanceReport, PropertyResult, Recorder, build_report, classify
from tidemark.testing.kit.runtime import ScenarioAbort, Tracker
from tidemark.testing.kit.scenarios import runtime_of, scenarios

DriverFactory = Callable[[], Driver]
DEFAULT_DEADLINE = {True: 300.0, False: 900.0}  # seconds per run: quick, full
DEFAULT_REQUEST_WAIT = 60.0  # seconds the kit waits for the answer to one request


def _scenario(factory, rec: Recorder, tag: str, caps, name: str, tracker: Tracker, fn, draw, quick: bool) -> None:
    kit = None
    try:
        kit = runtime_of(rec.scenario)(factory, rec, tag, caps, driver_name=name, tracker=tracker)
        kit.start()
        fn(kit, draw, quick)
        rec.check("protocol", True)
    except ScenarioAbort:
        pass
    except ProtocolViolation as exc:
        rec.fail("protocol", str(exc), classify(exc)[1])
    except Exception as exc:  # noqa: BLE001 - a driver failing is a finding
        prop, hint = classify(exc)
        rec.fail(prop, f"unexpected {type(exc).__name__}: {exc}", hint)
    finally:
        if kit is not None:
            try:
                kit.close()
            except Exception:  # noqa: BLE001
                pass


def _run_tag(scenarios_n: int) -> str:
    """A random tag for this run's resource names (``kit_<tag>_<i>_sums``, ...), drawn again
    until each scenario's names are distinct in every namespace an endpoint narrows them to
    (the store's 16-bit binding ids): a name clash is the endpoint's rightful refusal, not a
    finding of the kit."""
    from tidemark.testing.kit.values import value_bindings
    from tidemark.testing.workload import REDUCED_STRATEGIES, bindings

    while True:
        run = uuid.uuid4().hex[:8]
        names = (
            [
                b.resource["table"]
                for b in bindings(f"kit_{run}_{i:02d}", frozenset(REDUCED_STRATEGIES))
                + value_bindings(f"kit_{run}_{i:02d}")
            ]
            for i in range(scenarios_n)
        )
        if all(distinct_ids(n) for n in names):
            return run


def _abandon(tracker: Tracker) -> None:
    """The deadline passed: kill the programs of the kit's sessions, so that the stalled call returns."""
    for program in tracker.programs:
        try:
            if program.proc.poll() is None:
                program.proc.kill()
        except Exception:  # noqa: BLE001
            pass


def run_conformance(
    driver_factory: DriverFactory,
    *,
    quick: bool = False,
    seed: int = 0,
    deadline: Optional[float] = None,
    progress: Optional[Callable[[str], None]] = None,
    only: Optional[Sequence[str]] = None,
    request_wait: float = DEFAULT_REQUEST_WAIT,
) -> ConformanceReport:
    """Drive fresh drivers from ``driver_factory`` through every scenario; report per property.

    ``deadline``: seconds for the whole run (default 300 quick, 900 full); ``request_wait``:
    seconds for the answer to one request (default 60); ``progress``: called
    with a line at the start and after each scenario; ``only``: run just these scenarios."""
    started = time.monotonic()
    probe = driver_factory()
    try:
        caps = capabilities_of(probe)
        name = type(probe).name or type(probe).__name__
        if name == "command" and getattr(probe, "program", None):
            name = f"command:{cast(Any, probe).program}"
    finally:
        probe.close()
    say = progress or (lambda line: None)
    rec = Recorder()
    plan = [(n, f) for n, f in scenarios(caps.exactly_once, quick) if only is None or n in only]
    run = _run_tag(len(plan))
    limit = DEFAULT_DEADLINE[quick] if deadline is None else float(deadline)
    end = started + limit
    say(
        f"conformance of {name} ({caps.commit_pattern.value}): {len(plan)} scenarios, seed {seed}; deadline "
        f"{limit:g} s (until {time.strftime('%H:%M:%S', time.localtime(time.time() + limit))}): a driver that has "
        f"not answered by then, or within {request_wait:g} s of a request, is reported as stalled"
    )
    tracker = Tracker()
    timings: dict[str, float] = {}
    for i, (scenario_name, fn) in enumerate(plan):
        rec.start(scenario_name)
        before = dict(rec.counts)
        t0 = time.monotonic()
        worker = threading.Thread(
            target=_scenario,
            name=f"tidemark-kit-{scenario_name}",
            daemon=True,
            args=(
                driver_factory,
                rec,
                f"kit_{run}_{i:02d}",
                caps,
                name,
                tracker,
                fn,
                random.Random(f"{seed}:{scenario_name}"),
                quick,
            ),
        )
        worker.start()
        while worker.is_alive() and time.monotonic() < end and time.monotonic() - tracker.since < request_wait:
            worker.join(min(0.25, max(0.0, end - time.monotonic())))
        if worker.is_alive():
            waited = time.monotonic() - tracker.since
            why = (
                f"no answer within {request_wait:g} s of the request"
                if waited >= request_wait
                else f"the run's deadline ({limit:g} s) passed"
            )
            rec.fail(
                "liveness",
                f"{why} during scenario {scenario_name}: the kit had been waiting {waited:.0f} s for {tracker.doing}",
            )
            rest = [n for n, _ in plan[i + 1 :]]
            if rest:
                rec.note("liveness", f"not run after the deadline: {', '.join(rest)}")
            rec.closed = True
            _abandon(tracker)
            say(f"  {i + 1:>2}/{len(plan)} {scenario_name:<22} STALLED: waiting for {tracker.doing} ({waited:.0f} s)")
            break
        timings[scenario_name] = time.monotonic() - t0
        failed = rec.failed_since(before)
        say(
            f"  {i + 1:>2}/{len(plan)} {scenario_name:<22} {'FAIL ' + ', '.join(failed) if failed else 'ok':<28} "
            f"{timings[scenario_name]:6.1f} s"
        )
        tracker.programs = [p for p in tracker.programs if p.proc.poll() is None]
    else:
        rec.check("liveness", True)
    rec.closed = True
    if not caps.exactly_once:
        rec.closed = False
        rec.note(
            "fencing", "the driver declares at-least-once: zombie and race scenarios are skipped (it does not fence)"
        )
        rec.closed = True
    report = build_report(rec, name, caps.commit_pattern.value, [n for n, _ in plan], seed, quick)
    report.seconds, report.deadline, report.timings = time.monotonic() - started, limit, timings
    return report


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


def main(
    driver: str,
    config_path: Optional[str] = None,
    *,
    quick: bool = False,
    seed: int = 0,
    deadline: Optional[float] = None,
    request_wait: float = DEFAULT_REQUEST_WAIT,
) -> int:
    """``tidemark conformance DRIVER [--config FILE]``: a line per scenario, then the report; 0 when it passes."""
    from rich.console import Console
    from rich.markup import escape

    from tidemark.drivers.registry import load_driver

    console = Console(soft_wrap=True)
    config = _load_config(config_path)
    try:
        load_driver(driver, config).close()  # fail early on an unknown driver / missing library
    except TidemarkError as exc:
        console.print(f"[bold red]error:[/] {escape(str(exc))}")
        return 2
    report = run_conformance(
        lambda: load_driver(driver, config),
        quick=quick,
        seed=seed,
        deadline=deadline,
        request_wait=request_wait,
        progress=lambda line: console.print(escape(line), highlight=False, soft_wrap=True),
    )
    report.render(console)
    return 0 if report.ok else 1


__all__ = ["run_conformance", "assert_conformance", "main", "ConformanceReport", "PropertyResult", "scenarios"]
