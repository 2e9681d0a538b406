"""SIGKILL `tidemark run` into a webhook at the crash-table points, at the store's and the
webhook's own points, and at random moments; restart.  The receivers are real HTTP servers
in this process (tests/support/webhook_support.py), so they outlive every kill.

With the receiver that honours ``Idempotency-Key``: every batch delivers each changed
customer once (no (batch, customer) applied twice, none missing), and the latest documents
equal the oracle.  With the receiver that does not: a kill between the POSTs and the state
store's commit makes it apply that batch's documents twice (full documents, so its latest
documents are still right; a counter would be wrong).
"""

from __future__ import annotations

import random

import pytest

pytest.importorskip("urllib3")
pytest.importorskip("rocksdict")

from tests.support.crash_points import POINTS as CRASH_TABLE
from tests.support.harness import arm_in_sequence, fired, run_until_done
from tests.support.helpers import normalize, oracle_orders, write_orders
from tests.support.webhook_support import (
    applied_per_batch,
    applied_view,
    dedup_receiver,
    expected_per_batch,
    naive_receiver,
    webhook_spec,
)

pytestmark = pytest.mark.chaos

POINTS = CRASH_TABLE + [
    "webhook_after_chunk",  # some chunks of the batch were acknowledged, the rest never sent
    "webhook_after_post",  # every chunk acknowledged, the state store not committed
    "store_after_commit",  # the state store committed, the commit has not returned
]
TELLING = ["webhook_after_post"]  # the kill the idempotency keys exist for


def check_exact(receiver, data) -> None:
    assert normalize(applied_view(receiver)) == oracle_orders(data)
    per_batch = applied_per_batch(receiver)
    assert set(per_batch) == expected_per_batch(
        data, data.parent / "checkpoints"
    )  # every changed customer of every batch delivered
    twice = {k: n for k, n in per_batch.items() if n != 1}
    assert not twice, f"applied more than once: {sorted(twice)[:5]}"


@pytest.mark.parametrize("shards", [1, pytest.param(2, marks=pytest.mark.chaos_full)])  # 2: after the default run
def test_kill_at_every_point_delivers_every_document_once(tmp_path, dedup_receiver, shards):
    """Every point on the commit path without Spark (tests/support/plain.py)."""
    data, markers = tmp_path / "data", tmp_path / "markers"
    markers.mkdir()
    write_orders(data, files=2, per_file=150, customers=40, seed=171 + shards, deletes=0.03)
    spec = webhook_spec(tmp_path, data, url=dedup_receiver.url, shards=shards, chunk_docs=10)
    assert run_until_done(spec, plain=True).kills == 0  # a clean first run: the killed batches load existing keys
    write_orders(data, files=3, per_file=150, customers=40, seed=181 + shards, start=2, deletes=0.03)

    outcome = run_until_done(spec, faults=arm_in_sequence(POINTS, markers), max_attempts=len(POINTS) + 2, plain=True)

    assert fired(markers) == set(POINTS), outcome
    assert (outcome.kills == len(POINTS)) if shards == 1 else (len(POINTS) // 2 <= outcome.kills <= len(POINTS)), (
        outcome
    )
    check_exact(dedup_receiver, data)
    assert any(r["outcome"] == "duplicate" for r in dedup_receiver.requests)  # replays were resent, and dropped


@pytest.mark.chaos_full  # with Spark; every point runs in the default run without it
def test_kill_between_the_posts_and_the_commit_delivers_every_document_once(tmp_path, dedup_receiver):
    """The first attempt dies after POSTing its second batch, before the state store
    committed it; the restart resends the batch under the same keys (with Spark)."""
    data, markers = tmp_path / "data", tmp_path / "markers"
    markers.mkdir()
    write_orders(data, files=3, per_file=150, customers=40, seed=191, deletes=0.03)
    spec = webhook_spec(tmp_path, data, url=dedup_receiver.url, shards=1, chunk_docs=10)
    outcome = run_until_done(spec, faults=arm_in_sequence(TELLING, markers, nth=2))
    assert fired(markers) == set(TELLING) and outcome.kills == 1, outcome
    check_exact(dedup_receiver, data)
    resent = [r for r in dedup_receiver.requests if r["outcome"] == "duplicate"]
    assert resent and all(r["outcome"] == "applied" for r in dedup_receiver.requests[: len(resent)])


@pytest.mark.chaos_full  # (what a receiver does with a replay: the plain runner, no Spark)
def test_the_naive_receiver_applies_a_replayed_batch_twice(tmp_path, naive_receiver):
    data, markers = tmp_path / "data", tmp_path / "markers"
    markers.mkdir()
    write_orders(data, files=3, per_file=150, customers=40, seed=192, deletes=0.03)
    spec = webhook_spec(tmp_path, data, url=naive_receiver.url, shards=1, chunk_docs=10)
    outcome = run_until_done(spec, faults=arm_in_sequence(TELLING, markers, nth=2), plain=True)
    assert outcome.kills == 1, outcome
    per_batch = applied_per_batch(naive_receiver)
    assert set(per_batch) == expected_per_batch(data)
    twice = {b for (b, _c), n in per_batch.items() if n == 2}
    # exactly the killed batch (the second post in the process that ran it), every document of it
    assert len(twice) == 1 and twice <= {1, 2} and set(per_batch.values()) == {1, 2}, twice
    (killed,) = twice
    assert all(n == 2 for (b, _c), n in per_batch.items() if b == killed)
    assert normalize(applied_view(naive_receiver)) == oracle_orders(data)  # full documents: the latest are right


@pytest.mark.chaos_full
def test_kill_at_random_moments_delivers_every_document_once(tmp_path, dedup_receiver):
    data = tmp_path / "data"
    write_orders(data, files=5, per_file=150, customers=40, seed=193, deletes=0.03)
    spec = webhook_spec(tmp_path, data, url=dedup_receiver.url, shards=2, chunk_docs=10)
    draw = random.Random(53)
    outcome = run_until_done(spec, kill_after=lambda a: draw.uniform(4.0, 9.0) if a < 3 else None)
    assert outcome.kills >= 1, outcome
    check_exact(dedup_receiver, data)
