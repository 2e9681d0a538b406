"""The metrics endpoint and the retry log, without Spark: a real HTTP server on a free port."""

from __future__ import annotations

import logging
import re
import socket
import urllib.request

import pytest

from tidemark.errors import EndpointUnavailable, SpecError
from tidemark.metrics import serve
from tidemark.policy import RetryPolicy, retry
from tidemark.spark.processor import BatchReport

SAMPLE = re.compile(r'^([a-z_]+)(\{[^}]*\})? (-?[0-9.e+]+)$')


def scrape(url: str) -> dict:
    """{(name, labels): value} of a Prometheus text page; every line a comment or a sample."""
    with urllib.request.urlopen(url, timeout=10) as r:
        assert r.headers["Content-Type"].startswith("text/plain; version=0.0.4")
        text = r.read().decode()
    out = {}
    for line in text.splitlines():
        if line.startswith("#"):
            assert re.match(r"^# (HELP|TYPE) tidemark_[a-z_]+ ", line), line
            continue
        m = SAMPLE.match(line)
        assert m, line
        out[(m.group(1), m.group(2) or "")] = float(m.group(3))
    return out


def test_metrics_are_served_in_the_prometheus_text_format():
    metrics, url = serve(0, host="127.0.0.1")
    metrics.register("v1", input_lag=lambda: 3)
    assert scrape(url)[("tidemark_batches_committed_total", '{materialization="v1"}')] == 0
    metrics.batch(BatchReport("v1", 0, documents=10, stored=4, deleted=1, invalid=2,
                              timings={"plan": 0.5, "shards": 0.25, "shard.store": 9.0}, wall=1.0))
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
    assert str(err.value).splitlines()[0] == "db at host:1 is unreachable (failed 4 attempts)"
