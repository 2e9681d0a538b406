"""Live rescale 2→4→3 while ``tidemark run`` is SIGKILLed at random named points and
restarted: the scale requests are made from this process while the query runs (4 once a
batch past the first is committed, 3 once a batch ran on 4), and the view ends exact on
SQLite, PostgreSQL and Delta Lake; the layout history shows 2, then 4, then 3."""

from __future__ import annotations

import threading

import pytest

import tidemark
from tests.support.harness import run_until_done
from tests.support.helpers import normalize, oracle_orders, postgres_view, sqlite_view, write_orders
from tests.support.operator_specs import Delta, Postgres, SQLite, write_spec
from tidemark.errors import TidemarkError

pytestmark = pytest.mark.chaos


class Rescaler(threading.Thread):
    """Polls the view's layout history (a deadline, no fixed sleeps) and asks for 4 shards
    once batch 1 is committed, then for 3 once a batch committed on 4."""

    def __init__(self, spec: str):
        super().__init__(daemon=True)
        self.spec, self.stop, self.asked, self.error = spec, threading.Event(), [], None

    def committed(self) -> list:
        try:
            return [r for r in tidemark.layout_history(self.spec)["ranges"] if r["committed"]]
        except TidemarkError:  # not started yet
            return []

    def run(self):
        try:
            while not self.stop.wait(0.05):
                ranges = self.committed()
                if not self.asked and ranges and ranges[-1]["last"] >= 1:
                    tidemark.scale(self.spec, shards=4)
                    self.asked.append(4)
                elif self.asked == [4] and any(r["shards"] == 4 for r in ranges):
                    tidemark.scale(self.spec, shards=3)
                    self.asked.append(3)
                    return
        except BaseException as exc:
            self.error = exc


def rescale_under_random_kills(tmp_path, ep, view, *, seed: int, killing_attempts: int = 4):
    data = tmp_path / "data"
    write_orders(data, files=8, per_file=120, customers=60, seed=seed, deletes=0.05)
    spec = write_spec(tmp_path, data, ep, shards=2)
    rescaler = Rescaler(spec)
    rescaler.start()
    try:
        outcome = run_until_done(spec, random_points=(seed, 0.04), random_attempts=killing_attempts, max_attempts=12)
    finally:
        rescaler.stop.set()
        rescaler.join()
    assert outcome.kills >= 1 and rescaler.error is None and rescaler.asked == [4, 3], (rescaler.asked, outcome)
    assert normalize(view()) == oracle_orders(data), outcome
    hist = tidemark.layout_history(spec)
    counts = [r["shards"] for r in hist["ranges"] if r["committed"]]
    assert [c for i, c in enumerate(counts) if i == 0 or counts[i - 1] != c] == [2, 4, 3], hist["ranges"]
    assert hist["pending"] == []
    return outcome


@pytest.mark.chaos_full  # with Spark; CI runs it after the default suite
def test_live_rescale_under_random_kills_sqlite(tmp_path):
    ep = SQLite(tmp_path)
    # in the default run: kills in the first two attempts only (each attempt starts a JVM)
    rescale_under_random_kills(tmp_path, ep, lambda: sqlite_view(ep.db), seed=7, killing_attempts=2)


@pytest.mark.chaos_full
@pytest.mark.postgres
def test_live_rescale_under_random_kills_postgres(tmp_path, postgres_url, pg_schema):
    ep = Postgres(postgres_url, pg_schema)
    rescale_under_random_kills(tmp_path, ep, lambda: postgres_view(postgres_url, pg_schema), seed=8)


@pytest.mark.chaos_full
def test_live_rescale_under_random_kills_delta(tmp_path):
    from tests.support.delta_support import independent_view

    ep = Delta(tmp_path)
    rescale_under_random_kills(tmp_path, ep, lambda: independent_view(ep.lake / "customers"), seed=9)
