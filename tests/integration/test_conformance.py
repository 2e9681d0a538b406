"""The conformance kit against every driver that ships, and against drivers that are broken
on purpose: the good ones pass, each broken one fails on the property it breaks."""

from __future__ import annotations

import os
import subprocess
import sys
import uuid
from pathlib import Path

import pytest

from tidemark.drivers import memory
from tidemark.drivers.base import CommitPattern
from tidemark.drivers.registry import load_driver
from tidemark.testing.broken import BROKEN
from tidemark.testing.conformance import assert_conformance, run_conformance

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE_DRIVER = ROOT / "examples" / "external_driver" / "driver.py"


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


@pytest.mark.parametrize("cls,prop", list(BROKEN.items()), ids=[c.__name__ for c in BROKEN])
def test_each_broken_driver_fails_on_its_property(cls, prop, memory_name):
    report = run_conformance(lambda: cls({"name": memory_name}), quick=True)
    assert not report.ok
    assert prop in report.failed, report.summary()
    assert report.properties[prop].failures  # with an explanation for the driver author
    assert f"FAIL  {prop}" in report.summary()


def test_sqlite_driver_passes(tmp_path):
    from tidemark.drivers.sqlite import SQLiteDriver

    path = str(tmp_path / "views.db")
    report = assert_conformance(lambda: SQLiteDriver({"path": path}), quick=True)
    assert report.commit_pattern == "store-authoritative" and report.properties["fencing"].passed


def test_postgres_driver_passes(postgres_url):
    import psycopg

    from tidemark.drivers.postgres import PostgresDriver

    schema = f"kit_{uuid.uuid4().hex[:10]}"
    try:
        report = assert_conformance(lambda: PostgresDriver({"url": postgres_url, "schema": schema}), quick=True)
        assert report.properties["fencing"].passed and report.properties["range-isolation"].passed
    finally:
        with psycopg.connect(postgres_url, autocommit=True) as con:
            con.execute(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE')


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
    finally:
        close_idle_programs()
    assert state.exists()


def test_cli_conformance_memory_exits_zero():
    env = dict(os.environ, COLUMNS="200")
    proc = subprocess.run([sys.executable, "-m", "tidemark", "conformance", "memory"], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "PASS" in proc.stdout and "no-loss" in proc.stdout


@pytest.mark.parametrize("changelog", [False, True], ids=["local", "changelog+spill"])
def test_store_driver_passes(tmp_path, changelog):
    from tidemark.drivers.store import StoreDriver

    config = {"path": str(tmp_path / "store")}
    if changelog:  # restore and snapshots exercised too; a tiny buffer spills every transaction
        config.update(changelog=str(tmp_path / "changelog"), snapshot_every=2, max_uncommitted_bytes=300)
    report = assert_conformance(lambda: StoreDriver(config), quick=True)
    assert report.commit_pattern == "store-authoritative" and report.properties["fencing"].passed
