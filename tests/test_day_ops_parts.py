"""Without Spark: the metrics endpoint (a real HTTP server on a free port), the retry log,
and `tidemark run` refusing an unreachable endpoint before Spark starts."""

from __future__ import annotations

import logging
import socket

import pytest

from tests.support.metrics_scrape import scrape
from tidemark.errors import EndpointUnavailable, SpecError
from tidemark.metrics import serve
from tidemark.policy import RetryPolicy, retry
from tidemark.spark.processor import BatchReport


def test_metrics_are_served_in_the_prometheus_text_format():
    metrics, url = serve(0, host="127.0.0.1")
    metrics.register("v1", input_lag=lambda: 3)
    assert scrape(url)[("tidemark_batches_committed_total", '{materialization="v1"}')] == 0
    metrics.batch(
        BatchReport(
            "v1",
            0,
            documents=10,
            stored=4,
            deleted=1,
            invalid=2,
            timings={"plan": 0.5, "shards": 0.25, "shard.store": 9.0},
            wall=1.0,
        )
    )
    metrics.batch(BatchReport("v1", 1, documents=5, stored=2, timings={"plan": 0.1}, wall=0.2))
    metrics.batch(BatchReport("v1", 1, skipped=True))
    metrics.failure("v1", EndpointUnavailable("x"))
    got = scrape(url)
    m = '{materialization="v1"}'
    assert got[("tidemark_batches_committed_total", m)] == 2
    assert got[("tidemark_batches_replayed_total", m)] == 1
    assert got[("tidemark_documents_read_total", m)] == 15
    assert got[("tidemark_documents_stored_total", m)] == 6
    assert got[("tidemark_documents_quarantined_total", m)] == 2
    assert got[("tidemark_last_batch_id", m)] == 1
    assert got[("tidemark_last_batch_duration_seconds", '{materialization="v1",phase="plan"}')] == 0.1
    assert got[("tidemark_last_batch_duration_seconds", '{materialization="v1",phase="total"}')] == 0.2
    assert not any(k[0] == "tidemark_last_batch_duration_seconds" and "shard." in k[1] for k in got)
    assert got[("tidemark_input_files_waiting", m)] == 3
    metrics.register("v2", input_lag=lambda: {"orders/0": 7.0, "orders/1": 0.0})  # a log source: per part
    got = scrape(url)
    assert got[("tidemark_input_records_waiting", '{materialization="v2",part="orders/0"}')] == 7
    assert got[("tidemark_input_records_waiting", '{materialization="v2",part="orders/1"}')] == 0
    assert ("tidemark_input_files_waiting", '{materialization="v2"}') not in got
    assert got[("tidemark_batch_failures_total", '{materialization="v1",error="EndpointUnavailable"}')] == 1
    # the same address again: the same server and metrics
    again, url2 = serve(int(url.split(":")[2].split("/")[0]), host="127.0.0.1")
    assert again is metrics and url2 == url


def test_a_busy_metrics_port_is_a_clear_error():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        port = s.getsockname()[1]
        with pytest.raises(SpecError, match=f"cannot serve metrics on 127.0.0.1:{port}"):
            serve(f"127.0.0.1:{port}")
    with pytest.raises(SpecError, match="metrics port must be a number"):
        serve("http")


def test_a_retried_error_is_logged_once_and_names_its_attempts(caplog):
    caplog.set_level(logging.INFO, logger="tidemark.policy")
    calls = []

    def down():
        calls.append(1)
        raise EndpointUnavailable("db at host:1 is unreachable\nIs the server running?")

    with pytest.raises(EndpointUnavailable) as err:
        retry(down, RetryPolicy(attempts=4, base_delay=0), what="connect")
    assert len(calls) == 4
    warned = [r for r in caplog.records if r.levelno >= logging.WARNING]
    assert len(warned) == 1 and "unreachable" not in warned[0].getMessage()  # the error is shown once, by its raiser
    assert str(err.value).splitlines()[0] == "db at host:1 is unreachable (all 4 tries failed)"


def test_run_reports_an_unreachable_endpoint_once_before_spark_starts(tmp_path):
    """Nothing listens on the port: the policy retries, the warning comes once, the error
    once with its attempt count, exit code 1, and Spark never starts."""
    import os
    import subprocess
    import sys

    from tests.support.helpers import free_port, orders_spec, write_orders

    pytest.importorskip("psycopg")
    data = tmp_path / "data"
    write_orders(data, files=1, per_file=5, customers=2, seed=1)
    port = free_port()
    spec = orders_spec(
        tmp_path,
        data_dir=data,
        db_path=None,
        endpoint={
            "postgres": {
                "url": f"postgresql://postgres:pw-not-shown@127.0.0.1:{port}/test",
                "retry": {"attempts": 3, "base_delay": 0.01},
            }
        },
    )
    done = subprocess.run(
        [sys.executable, "-m", "tidemark", "run", spec, "--available-now"],
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "COLUMNS": "80"},
    )
    assert done.returncode == 1
    assert done.stderr.count("try 1 of 3") == 1 and "try 2 of 3" not in done.stderr, done.stderr
    errors = [ln for ln in done.stderr.splitlines() if ln.startswith("error: ")]
    assert len(errors) == 1 and f"127.0.0.1:{port} is unreachable" in errors[0], done.stderr
    assert errors[0].endswith("(all 3 tries failed)"), errors
    assert done.stderr.count("Connection refused") == 1
    assert "pw-not-shown" not in done.stderr + done.stdout
    assert "log4j" not in done.stderr and "Traceback" not in done.stderr
