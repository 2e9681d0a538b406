"""SIGKILL `tidemark run` into Redis (exactly-once mode) at the crash-table points and at
random moments; restart; the view, read straight from Redis, must equal the oracle and
every range's checkpoint must hold the last batch.

Follows test_sqlite_crash.py: each point is armed once (``arm_in_sequence``); an attempt
dies at the first point it reaches whose marker is not written yet.
"""

from __future__ import annotations

import random

import pytest

pytest.importorskip("redis")

from tests.support.crash_points import POINTS
from tests.support.harness import arm_in_sequence, fired, run_until_done
from tests.support.helpers import normalize, oracle_orders, write_orders
from tests.support.redis_support import redis_ns, redis_spec, redis_url, redis_view
from tidemark.drivers.registry import load_driver

pytestmark = pytest.mark.chaos

# The most telling point in the default run: the script committed batch N, the recovery
# log does not have it; the restart must skip N, not apply it again.
TELLING = ["after_endpoint_commit"]


def batches(url, ns) -> list[int]:
    driver = load_driver("redis", {"url": url, "namespace": ns})
    try:
        return sorted(r.runtime_checkpoint["batch_id"] for r in driver.checkpoints("view"))
    finally:
        driver.close()


# Every point, 1 and 2 shards, on the commit path without Spark (tests/support/plain.py).
@pytest.mark.parametrize("shards", [1, pytest.param(2, marks=pytest.mark.chaos_full)])  # 2: after the default run
def test_kill_at_every_point_then_restart_is_exact(tmp_path, redis_url, redis_ns, shards):
    data, markers, prefix = tmp_path / "data", tmp_path / "markers", redis_ns + "customers:"
    markers.mkdir()
    write_orders(data, files=2, per_file=150, customers=40, seed=141 + shards, deletes=0.03)
    spec = redis_spec(tmp_path, data, url=redis_url, prefix=prefix, namespace=redis_ns, shards=shards)
    assert run_until_done(spec, plain=True).kills == 0  # a clean first run: the killed batches load existing keys
    write_orders(data, files=3, per_file=150, customers=40, seed=151 + shards, start=2, deletes=0.03)

    outcome = run_until_done(spec, faults=arm_in_sequence(POINTS, markers), max_attempts=len(POINTS) + 2, plain=True)

    assert fired(markers) == set(POINTS), outcome
    assert (outcome.kills == len(POINTS)) if shards == 1 else (len(POINTS) // 2 <= outcome.kills <= len(POINTS)), (
        outcome
    )
    assert normalize(redis_view(redis_url, prefix)) == oracle_orders(data)
    assert batches(redis_url, redis_ns) == [4] * shards


@pytest.mark.chaos_full  # with Spark; every point runs in the default run without it
def test_kill_at_the_telling_point_then_at_a_random_moment_is_exact(tmp_path, redis_url, redis_ns):
    """The default run: the first attempt dies after the script committed its second batch
    (which loads keys of the first), the second at a random moment; the view is exact."""
    data, markers, prefix = tmp_path / "data", tmp_path / "markers", redis_ns + "customers:"
    markers.mkdir()
    write_orders(data, files=5, per_file=150, customers=40, seed=161, deletes=0.03)
    spec = redis_spec(tmp_path, data, url=redis_url, prefix=prefix, namespace=redis_ns, shards=2)
    draw = random.Random(47)
    outcome = run_until_done(
        spec,
        faults=arm_in_sequence(TELLING, markers, nth=3),
        kill_after=lambda a: draw.uniform(4.0, 8.0) if a == 1 else None,
    )
    assert fired(markers) == set(TELLING) and outcome.kills >= 1, outcome
    assert normalize(redis_view(redis_url, prefix)) == oracle_orders(data)
    assert batches(redis_url, redis_ns) == [4, 4]


@pytest.mark.chaos_full
@pytest.mark.parametrize("aof", [True, False], ids=["aof-always", "no-aof"])
def test_a_killed_redis_server_with_the_aof_goes_on_exact_and_without_it_is_refused(tmp_path, aof):
    """A private redis-server is SIGKILLed between two runs.  With ``appendonly yes`` +
    ``appendfsync always`` the next run continues and the view is exact; without the AOF
    the view and its checkpoints are gone, and the next run refuses to start (the endpoint
    is behind the recovery log) instead of writing a view that lacks the earlier batches.
    (The commit path without Spark: what is tested is the server's.)"""
    from tests.support.redis_server import Server

    (tmp_path / "redis").mkdir()
    server = Server(
        tmp_path / "redis", *(("--appendonly", "yes", "--appendfsync", "always") if aof else ("--appendonly", "no"))
    )
    try:
        data, prefix = tmp_path / "data", "customers:"
        write_orders(data, files=2, per_file=150, customers=40, seed=201, deletes=0.03)
        spec = redis_spec(tmp_path, data, url=server.url, prefix=prefix, shards=1)
        assert run_until_done(spec, plain=True).kills == 0
        server.kill()
        server.start()
        write_orders(data, files=1, per_file=150, customers=40, seed=202, start=2, deletes=0.03)
        if aof:
            assert run_until_done(spec, plain=True).kills == 0
            assert normalize(redis_view(server.url, prefix)) == oracle_orders(data)
        else:
            with pytest.raises(AssertionError) as failed:
                run_until_done(spec, max_attempts=1, plain=True)
            assert "holds no batch of this view" in str(failed.value) and "tidemark reset" in str(failed.value)
            assert redis_view(server.url, prefix) == {}
    finally:
        server.close()
