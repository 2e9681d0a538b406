"""Prometheus metrics of running materializations: ``GET /metrics`` in the text format.

``tidemark run --metrics-port PORT`` and ``tidemark.materialize(..., metrics_port=PORT)``
serve them from the Spark driver process (one server per process and port, shared by the
materializations it runs).  Counters count since the process started; gauges describe the
last batch.  A small :mod:`http.server` in a daemon thread: no extra dependency.

Metrics (label ``materialization``; phase durations also ``phase``; failures ``error``)::

    tidemark_batches_committed_total            batches this process committed
    tidemark_batches_replayed_total             re-runs of a committed batch, only acknowledged
    tidemark_documents_read_total               source documents of the committed batches
    tidemark_documents_stored_total             documents stored (after combining per key)
    tidemark_documents_deleted_total            documents deleted
    tidemark_documents_quarantined_total        invalid documents quarantined
    tidemark_batch_failures_total               failed batches, by error class (FencedOff: a
                                                newer session owns a range)
    tidemark_last_batch_id                      the last committed batch
    tidemark_last_commit_timestamp_seconds      when it committed (Unix time)
    tidemark_last_batch_duration_seconds        its duration, by phase (plan, shards,
                                                recovery_log, total)
    tidemark_input_files_waiting                files of the spec's file sources not yet
                                                planned into a batch (spec runs only)
    tidemark_input_records_waiting              records of a log source (Kafka, NATS) past the
                                                last committed batch, by ``part`` (spec runs only)
"""

from __future__ import annotations

import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import TYPE_CHECKING, Any, Callable, Optional, cast

from tidemark.errors import SpecError

_HELP = {
    "tidemark_batches_committed_total": ("counter", "Batches committed by this process."),
    "tidemark_batches_replayed_total": ("counter", "Re-runs of an already committed batch (only acknowledged)."),
    "tidemark_documents_read_total": ("counter", "Source documents of the committed batches."),
    "tidemark_documents_stored_total": ("counter", "Documents stored into the endpoint."),
    "tidemark_documents_deleted_total": ("counter", "Documents deleted from the endpoint."),
    "tidemark_documents_quarantined_total": ("counter", "Invalid documents quarantined."),
    "tidemark_batch_failures_total": ("counter", "Failed batches by error class."),
    "tidemark_last_batch_id": ("gauge", "The last committed batch."),
    "tidemark_last_commit_timestamp_seconds": ("gauge", "When the last batch committed (Unix time)."),
    "tidemark_last_batch_duration_seconds": ("gauge", "Duration of the last committed batch by phase."),
    "tidemark_input_files_waiting": ("gauge", "Files of the source folders not yet planned into a batch."),
    "tidemark_input_records_waiting": ("gauge", "Records of a log source's part past the last committed batch."),
}

_COUNTS = (
    ("tidemark_documents_read_total", "documents"),
    ("tidemark_documents_stored_total", "stored"),
    ("tidemark_documents_deleted_total", "deleted"),
    ("tidemark_documents_quarantined_total", "invalid"),
)


def _escape(value: str) -> str:
    return value.replace("\\", "\\\\").replace("\n", "\\n").replace('"', '\\"')


def _labels(labels: dict) -> str:
    return "{" + ",".join(f'{k}="{_escape(str(v))}"' for k, v in labels.items()) + "}"


class Metrics:
    """The metrics of the materializations of one process (thread-safe)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._values: dict[tuple[str, tuple], float] = {}
        self._lag: dict[str, Callable[[], Any]] = {}

    def _set(self, name: str, labels: dict, value: float, add: bool = False) -> None:
        key = (name, tuple(labels.items()))
        self._values[key] = self._values.get(key, 0.0) + value if add else value

    def register(self, materialization: str, input_lag: Optional[Callable[[], Any]] = None) -> None:
        """Show a materialization from its start (counters at 0); ``input_lag()``: files waiting
        (an int), or records waiting per part of a log source (a dict), or None."""
        m = {"materialization": materialization}
        with self._lock:
            for name in (
                "tidemark_batches_committed_total",
                "tidemark_batches_replayed_total",
                *(n for n, _ in _COUNTS),
            ):
                self._set(name, m, 0.0, add=True)
            if input_lag is not None:
                self._lag[materialization] = input_lag

    def batch(self, report) -> None:
        """Record a :class:`~tidemark.spark.processor.BatchReport`."""
        m = {"materialization": report.materialization}
        with self._lock:
            if report.skipped:
                self._set("tidemark_batches_replayed_total", m, 1, add=True)
                return
            self._set("tidemark_batches_committed_total", m, 1, add=True)
            for name, attr in _COUNTS:
                self._set(name, m, getattr(report, attr), add=True)
            self._set("tidemark_last_batch_id", m, report.batch_id)
            self._set("tidemark_last_commit_timestamp_seconds", m, time.time())
            for phase, seconds in report.timings.items():
                if not phase.startswith("shard."):
                    self._set("tidemark_last_batch_duration_seconds", {**m, "phase": phase}, seconds)
            self._set("tidemark_last_batch_duration_seconds", {**m, "phase": "total"}, report.wall)

    def failure(self, materialization: str, exc: BaseException) -> None:
        with self._lock:
            self._set(
                "tidemark_batch_failures_total",
                {"materialization": materialization, "error": type(exc).__name__},
                1,
                add=True,
            )

    def render(self) -> str:
        """The Prometheus text exposition format (version 0.0.4)."""
        lags = {}
        for name, fn in list(self._lag.items()):
            try:
                lags[name] = fn()
            except Exception:  # noqa: BLE001 - a folder that went away: no sample
                lags[name] = None
        with self._lock:
            values = dict(self._values)
        for name, lag in lags.items():
            if isinstance(lag, dict):  # a log source: records waiting per part
                for part, behind in lag.items():
                    values[("tidemark_input_records_waiting", (("materialization", name), ("part", part)))] = behind
            elif lag is not None:
                values[("tidemark_input_files_waiting", (("materialization", name),))] = float(lag)
        out = []
        for metric, (kind, text) in _HELP.items():
            samples = sorted((labels, v) for (n, labels), v in values.items() if n == metric)
            if not samples:
                continue
            out.append(f"# HELP {metric} {text}")
            out.append(f"# TYPE {metric} {kind}")
            for labels, v in samples:
                out.append(f"{metric}{_labels(dict(labels))} {v:.17g}")
        return "\n".join(out) + "\n"


class _Handler(BaseHTTPRequestHandler):
    metrics: Metrics

    def do_GET(self):
        if self.path.split("?")[0] not in ("/metrics", "/"):
            self.send_error(404, "only /metrics is served")
            return
        body = self.server.metrics.render().encode("utf-8")
        self.send_response(200)
        self.send_header("Content-Type", "text/plain; version=0.0.4; charset=utf-8")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args):  # no access log on stderr
        pass


if TYPE_CHECKING:

    class _MetricsServer(ThreadingHTTPServer):
        """A server :func:`serve` started: a ThreadingHTTPServer given its ``metrics``."""

        metrics: Metrics


_servers: dict[tuple[str, int], _MetricsServer] = {}
_servers_lock = threading.Lock()


def serve(port, host: str = "0.0.0.0") -> tuple[Metrics, str]:
    """The :class:`Metrics` served on ``host:port`` (started once per process and address;
    ``port`` 0 picks a free one), and the URL of its ``/metrics``.  ``port`` may be
    ``"HOST:PORT"``."""
    if isinstance(port, str) and ":" in port:
        host, _, port = port.rpartition(":")
    try:
        port = int(port)
    except (TypeError, ValueError):
        raise SpecError(f"metrics port must be a number or HOST:PORT, got {port!r}") from None
    with _servers_lock:
        server = _servers.get((host, port))
        if server is None:
            try:
                server = cast("_MetricsServer", ThreadingHTTPServer((host, port), _Handler))
            except OSError as exc:
                raise SpecError(f"cannot serve metrics on {host}:{port}: {exc.strerror or exc}") from None
            server.daemon_threads = True
            server.metrics = Metrics()
            threading.Thread(target=server.serve_forever, name=f"tidemark-metrics-{port}", daemon=True).start()
            _servers[(host, port)] = server
            _servers[(host, server.server_address[1])] = server
    shown = "127.0.0.1" if host in ("0.0.0.0", "") else host
    return server.metrics, f"http://{shown}:{server.server_address[1]}/metrics"
