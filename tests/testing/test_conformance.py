"""The conformance kit against every driver that ships, and against drivers that are broken
on purpose: the good ones pass, each broken one fails on the property it breaks — the
in-process ones of tidemark.testing.broken, and external programs each with one realistic
defect (tests/support/defective_driver.py)."""

from __future__ import annotations

import os
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest

from tests.support.conformance_drivers import SHIPPED, URL_FIXTURES
from tests.support.kafka_broker import kafka_bootstrap, kafka_broker
from tests.support.mysql_support import mysql_url
from tests.support.nats_server import nats_server, nats_url
from tests.support.paths import REPO, SUPPORT
from tidemark.drivers import memory
from tidemark.drivers.base import CommitPattern
from tidemark.drivers.registry import load_driver
from tidemark.testing.broken import BROKEN
from tidemark.testing.conformance import assert_conformance, run_conformance

ROOT = Path(REPO)
EXAMPLE_DRIVER = ROOT / "examples" / "external_driver" / "driver.py"
DEFECTIVE_DRIVER = Path(SUPPORT) / "defective_driver.py"

# defect of tests/support/defective_driver.py -> (the property the kit must fail, words of the fitting hint)
DEFECTS = {
    "checkpoint-second-tx": ("checkpoints-monotonic", "ONE endpoint transaction"),
    "fence-before-tx": ("fencing", "inside the commit transaction"),
    "exact-range-fence": ("fencing", "every overlapping range"),
    "loaded-100": ("read-committed", "answer every existing key of a Load"),
    "store-early": ("read-committed", "until StartCommit commits them"),
    "binding-blind-load": ("binding-isolation", "look a Load's keys up in the resource of Load.binding only"),
    "binding-fallback-load": ("binding-isolation", "look a Load's keys up in the resource of Load.binding only"),
    "doc-16k": ("whole-documents", "store and return each document whole"),
    "value-16k": ("whole-documents", "store and return each document whole"),
    "identity-overwritten": ("identity-records", "never overwrite it"),
    "drops-nulls": ("round-trip", "a null member is not an absent one"),
    "real-floats": ("round-trip", "a 4-byte REAL turns 0.1"),
    "empty-string-null": ("round-trip", "an empty string is not null"),
    "key-255": ("keys-exact", "a VARCHAR(255) or a prefix index cuts them"),
}


@pytest.fixture
def redis_kit_db():
    """A Redis database of its own for the kit (its resources are ``kit_<run>_…`` keys outside
    any namespace); afterwards the keys of the runs that this test started are deleted."""
    redis = pytest.importorskip("redis")
    from tests.support.redis_support import REDIS_URL

    url = REDIS_URL.rsplit("/", 1)[0] + "/13"
    client = redis.Redis.from_url(url)
    runs_before = {k.split(b"_")[1] for k in client.scan_iter(match="kit_*", count=1000)}

    def cleanup(config):
        ours = [k for k in client.scan_iter(match="kit_*", count=1000) if k.split(b"_")[1] not in runs_before]
        ours += list(client.scan_iter(match=(config.get("namespace") or "tidemark:") + "*kit_*", count=1000))
        for i in range(0, len(ours), 1000):
            client.delete(*ours[i : i + 1000])

    yield url, cleanup
    client.close()


@pytest.fixture
def memory_name():
    name = f"kit-{uuid.uuid4().hex[:8]}"
    yield name
    memory.reset(name)


@pytest.mark.parametrize("pattern", [p.value for p in CommitPattern])
def test_memory_driver_passes_in_every_commit_pattern(pattern, memory_name):
    report = assert_conformance(lambda: memory.MemoryDriver({"pattern": pattern, "name": memory_name}), quick=True)
    assert report.ok and report.commit_pattern == pattern
    assert report.properties["no-loss"].passed and report.properties["no-loss"].checks > 0
    fencing = report.properties["fencing"]
    if CommitPattern(pattern).exactly_once:
        assert fencing.passed and fencing.checks > 0
    else:  # an at-least-once driver is not fenced: the kit says so instead of passing it
        assert fencing.passed is None and fencing.notes


# broken driver -> the scenario that first catches it (the whole kit over each took ~40 s in all;
# the CLI test below runs a whole kit over a broken driver)
CAUGHT_IN = {
    "SkipsFenceCheck": "zombie-early",
    "IgnoresRange": "crash-open",
    "AtLeastOnceClaimsExactlyOnce": "crash-store",
    "ForgetsDeletes": "pipelined",
    "NonIdempotentAcknowledge": "repeat-acknowledge",
    "FoldsKeys": "folded-keys",
    "CutsCheckpoints": "large-checkpoint",
}


@pytest.mark.parametrize("cls,prop", list(BROKEN.items()), ids=[c.__name__ for c in BROKEN])
def test_each_broken_driver_fails_on_its_property(cls, prop, memory_name):
    only = [CAUGHT_IN.get(cls.__name__, "steady")]
    report = run_conformance(lambda: cls({"name": memory_name}), quick=True, only=only)
    assert not report.ok
    assert prop in report.failed, report.summary()
    assert report.properties[prop].failures  # with an explanation for the driver author
    assert f"FAIL  {prop}" in report.summary()


# the kit on the drivers whose own tests take longest runs after the default suite (-m slow)
SLOW_KIT = {"kafka", "mysql", "nats", "store-changelog", "webhook", "iceberg", "delta", "postgres", "store"}


@pytest.mark.parametrize("driver", [pytest.param(d, marks=pytest.mark.slow) if d in SLOW_KIT else d for d in SHIPPED])
def test_every_shipped_driver_passes(driver, tmp_path, request):
    urls = {driver: request.getfixturevalue(URL_FIXTURES[driver])} if driver in URL_FIXTURES else {}
    name = driver.split("-")[0]
    factory = lambda: load_driver(name, config)
    cleanup = None
    if name == "redis":
        urls["redis"], cleanup = request.getfixturevalue("redis_kit_db")
    if name == "webhook":
        from tests.support.webhook_support import Receiver, receiver_view

        receiver = Receiver(dedup=True)
        request.addfinalizer(receiver.close)
        urls["webhook"] = receiver.url
        factory = lambda: receiver_view(receiver)(config)
    config = SHIPPED[driver](tmp_path, urls)
    try:
        report = assert_conformance(factory, quick=True)
        assert report.properties["no-loss"].passed and report.properties["no-loss"].checks > 0
        assert report.properties["identity-records"].passed and report.properties["identity-records"].checks > 0
        # keys apart however a collation might fold them; checkpoints kept whole where the endpoint keeps them
        assert report.properties["keys-exact"].passed and report.properties["keys-exact"].checks > 0
        # every JSON value back as stored; what the endpoint declares it cannot hold, refused
        assert report.properties["round-trip"].passed and report.properties["round-trip"].checks > 100
        assert report.properties["limits"].passed is not False
        if report.commit_pattern == "store-authoritative":
            assert report.properties["whole-checkpoints"].passed and report.properties["whole-checkpoints"].checks > 0
        if report.commit_pattern != "at-least-once":
            assert report.properties["fencing"].passed is not False
    finally:
        if cleanup is not None:
            cleanup(config)
        if driver == "postgres":
            import psycopg

            with psycopg.connect(urls["postgres"], autocommit=True) as con:
                con.execute(f'DROP SCHEMA IF EXISTS "{config["schema"]}" CASCADE')
        if driver == "mysql":
            from tests.support.mysql_support import drop_database

            drop_database(urls["mysql"], config["schema"])


@pytest.mark.slow  # (the wire form's own tests run in the default suite)
def test_external_example_driver_passes_over_the_wire(tmp_path):
    from tidemark.drivers.command import CommandDriver, close_idle_programs

    state = tmp_path / "external.db"
    name = f"command:{sys.executable} {EXAMPLE_DRIVER} --state {state}"
    config = {"retry": {"reply_timeout": 120}}
    try:
        probe = load_driver(name, config)
        assert isinstance(probe, CommandDriver)
        assert probe.capabilities().commit_pattern is CommitPattern.STORE_AUTHORITATIVE  # from describe
        probe.close()
        report = assert_conformance(lambda: load_driver(name, config), quick=True)
        assert report.properties["fencing"].passed and report.properties["read-committed"].passed
        assert report.properties["identity-records"].passed and report.properties["identity-records"].checks > 0
        # keys apart however a collation might fold them; checkpoints kept whole where the endpoint keeps them
        assert report.properties["keys-exact"].passed and report.properties["keys-exact"].checks > 0
        if report.commit_pattern == "store-authoritative":
            assert report.properties["whole-checkpoints"].passed and report.properties["whole-checkpoints"].checks > 0
    finally:
        close_idle_programs()
    assert state.exists()


# defect -> the scenarios that catch it (the whole kit over each took 4-7 s)
CAUGHT_BY = {
    "fence-before-tx": ["race"],
    "store-early": ["large"],
    "binding-blind-load": ["steady"],
    "binding-fallback-load": ["steady"],
    "identity-overwritten": ["crash-open", "crash-acknowledge"],
    "checkpoint-second-tx": ["kill-start_commit"],
    "exact-range-fence": ["zombie-split", "zombie-merge"],
    "doc-16k": ["crash-store", "values"],
    "value-16k": ["crash-store", "values"],
    **dict.fromkeys(("drops-nulls", "real-floats", "empty-string-null", "key-255"), ["values", "key-collisions"]),
}


@pytest.mark.parametrize("defect", [d for d in DEFECTS if d != "loaded-100"])
def test_each_seeded_external_defect_fails_on_its_property(defect, tmp_path):
    """Realistic defects of an external driver that the kit once passed, each caught by the
    scenarios that must catch it; loaded-100 runs through the CLI below."""
    from tidemark.drivers.command import close_idle_programs

    prop, hint = DEFECTS[defect]
    name = f"command:{sys.executable} {DEFECTIVE_DRIVER} --defect {defect} --state {tmp_path / 'x.db'}"
    # the scenarios that catch it (CAUGHT_BY): a race (16 attempts where not quick: a loaded
    # machine shifts the timing), transactions beyond a chunk, the values a round trip must keep, …
    quick, only = defect != "fence-before-tx", CAUGHT_BY[defect]
    try:
        report = run_conformance(lambda: load_driver(name, {}), quick=quick, only=only)
    finally:
        close_idle_programs()
    assert prop in report.failed, report.summary()
    assert any(hint in f for f in report.properties[prop].failures), report.summary()
    assert report.properties["protocol"].passed and report.properties["liveness"].passed, report.summary()


def test_cli_conformance_memory_exits_zero():
    env = dict(os.environ, COLUMNS="200")
    proc = subprocess.run(
        [sys.executable, "-m", "tidemark", "conformance", "memory"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "PASS" in proc.stdout and "no-loss" in proc.stdout
    assert "deadline 900 s" in proc.stdout  # one deadline for the run, printed first
    assert "race" in proc.stdout and "kill-start_commit" in proc.stdout  # a line per scenario


def test_cli_conformance_names_the_property_with_scenario_prefixes(tmp_path):
    """The external driver whose Loaded stops at 100 documents fails read-committed; the table
    keeps the ``[scenario]`` prefixes (escaped, not read as markup)."""
    env = dict(os.environ, COLUMNS="250")
    driver = f"command:{sys.executable} {DEFECTIVE_DRIVER} --defect loaded-100 --state {tmp_path / 'x.db'}"
    proc = subprocess.run(
        [sys.executable, "-m", "tidemark", "conformance", driver, "--quick", "--deadline", "240"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert "deadline 240 s" in proc.stdout.splitlines()[0]
    out = " ".join(proc.stdout.split())  # the table wraps long lines
    assert "FAIL (" in out and "read-committed" in out.split("FAIL (")[-1]
    assert "[large] a Load of 1000 keys" in out
    assert "answer every existing key of a Load" in out


def test_a_stalled_driver_is_reported_by_the_run_deadline(memory_name):
    from tidemark.testing.faulty import FaultyDriver

    stalls: list[FaultyDriver] = []

    def factory():
        driver = FaultyDriver(
            memory.MemoryDriver({"name": memory_name}), "stall", at_event=1, on="start_commit", stall_timeout=60
        )
        stalls.append(driver)
        return driver

    lines: list[str] = []
    started = time.monotonic()
    try:
        report = run_conformance(factory, quick=True, deadline=3, progress=lines.append)
    finally:
        for d in stalls:
            d.release()
    assert time.monotonic() - started < 10
    assert "deadline 3 s" in lines[0]
    assert any("STALLED" in line and "StartedCommit" in line for line in lines), lines
    assert report.failed == ["liveness"], report.summary()
    failure = report.properties["liveness"].failures[0]
    assert "waiting" in failure and "StartedCommit" in failure and "fix:" in failure


def test_a_driver_that_never_answers_a_request_is_reported_after_the_request_wait(memory_name):
    """A bounded wait per request (``request_wait``, default 60 s), well before the run's
    deadline: the stalled request is named, and the run ends."""
    from tidemark.testing.faulty import FaultyDriver

    stalls: list[FaultyDriver] = []

    def factory():
        driver = FaultyDriver(
            memory.MemoryDriver({"name": memory_name}), "stall", at_event=1, on="start_commit", stall_timeout=60
        )
        stalls.append(driver)
        return driver

    lines: list[str] = []
    started = time.monotonic()
    try:
        report = run_conformance(factory, quick=True, deadline=600, request_wait=2, progress=lines.append)
    finally:
        for d in stalls:
            d.release()
    assert time.monotonic() - started < 15
    assert "within 2 s of a request" in lines[0]
    assert report.failed == ["liveness"], report.summary()
    failure = report.properties["liveness"].failures[0]
    assert "no answer within 2 s of the request" in failure and "StartedCommit" in failure
