"""A running job rides out a terminated database session: PostgreSQL's backend is killed
(``pg_terminate_backend``, as a failover or a pooler restart does) while a shard session is
inside its transaction; the batch runs again after a backoff, with a line that says so, and
the view ends exact -- no manual rerun."""

from __future__ import annotations

import logging
import threading
import time

import psycopg
import pytest

from tests.support.helpers import normalize, oracle_orders, postgres_spec, postgres_view, write_orders
from tidemark import faults

pytestmark = [pytest.mark.spark]


def terminate_when_in_transaction(url: str, schema: str, done: threading.Event, killed: list) -> None:
    """Terminate the backend of the view's session once it idles inside its transaction (the
    armed stall of 5 s before the commit: idle for more than a second), then stop."""
    with psycopg.connect(url, autocommit=True) as con:
        deadline = time.monotonic() + 120
        while not done.is_set() and time.monotonic() < deadline:
            rows = con.execute(
                # idle in its transaction for a second: the stalled shard session, not a session
                # between two statements of its own (Apply's reads of the schema, a moment each)
                "SELECT pid FROM pg_stat_activity WHERE state = 'idle in transaction' AND pid <> pg_backend_pid() "
                "AND datname = current_database() AND query LIKE %s AND state_change < now() - interval '1 second'",
                (f'%"{schema}"%',),
            ).fetchall()
            if rows:
                for (pid,) in rows:
                    con.execute("SELECT pg_terminate_backend(%s)", (pid,))
                    killed.append(pid)
                return
            done.wait(0.05)  # polling pg_stat_activity: the state cannot be awaited otherwise


@pytest.mark.postgres
def test_a_terminated_session_inside_its_transaction_is_ridden_out(
    spark, tmp_path, postgres_url, pg_schema, monkeypatch, caplog
):
    from tidemark.spark.runner import run_spec

    data = tmp_path / "data"
    write_orders(data, files=3, per_file=50, customers=20, seed=61)
    spec = postgres_spec(tmp_path, data_dir=data, url=postgres_url, schema=pg_schema)
    # the second batch's session stalls inside its transaction, once: long enough to be killed
    monkeypatch.setenv(faults.ENV, f"before_endpoint_commit:stall=5!once={tmp_path / 'stalled'}")
    faults.rearm()
    done, killed = threading.Event(), []
    killer = threading.Thread(target=terminate_when_in_transaction, args=(postgres_url, pg_schema, done, killed))
    killer.start()
    try:
        with caplog.at_level(logging.WARNING, logger="tidemark"):
            run_spec(spec, spark=spark)
    finally:
        done.set()
        killer.join()
        monkeypatch.delenv(faults.ENV)
        faults.rearm()
    assert killed, "the session was never seen inside its transaction"
    retries = [r.getMessage() for r in caplog.records if "(run 2 of the batch;" in r.getMessage()]
    assert retries and "transient_retry_seconds" in retries[0], [r.getMessage() for r in caplog.records]
    assert normalize(postgres_view(postgres_url, pg_schema)) == oracle_orders(data)


@pytest.mark.slow  # the same retry as PostgreSQL's above, on another endpoint (CI runs it after the default suite)
def test_a_redis_server_restarted_mid_commit_is_ridden_out(spark, tmp_path, monkeypatch, caplog):
    """A private redis-server (AOF, fsync always) is killed and started again while a shard
    session stalls before its commit: the run goes on by itself and the view is exact."""
    from tests.support.redis_server import Server
    from tests.support.redis_support import redis_spec, redis_view
    from tests.support.server_restarts import ride_out

    (tmp_path / "redis").mkdir()
    server = Server(tmp_path / "redis", "--appendonly", "yes", "--appendfsync", "always")
    try:
        data, prefix = tmp_path / "data", "customers:"
        write_orders(data, files=3, per_file=60, customers=20, seed=211)
        spec = redis_spec(tmp_path, data, url=server.url, prefix=prefix, shards=2)

        def restart() -> None:
            server.kill()
            server.start()

        ride_out(spark, tmp_path, monkeypatch, caplog, spec, restart)
        assert normalize(redis_view(server.url, prefix)) == oracle_orders(data)
    finally:
        server.close()
