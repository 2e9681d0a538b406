"""A private Kafka-protocol broker for tests: ``noida-db`` (PyPI) with only its Kafka service.

Apache Kafka cannot be installed here; noida-db is one binary that speaks the Kafka
protocol, with transactions (see ``docs/dev/kafka-broker.md`` for what it was verified to
do, and its gaps). Import the fixtures into a test module::

    from tests.support.kafka_broker import kafka_bootstrap, kafka_broker, private_kafka  # noqa: F401

* ``kafka_broker`` (module scope): a :class:`NoidaKafka` shared by the module's tests.
* ``kafka_bootstrap``: its ``bootstrap.servers`` string.
* ``private_kafka``: a broker of the test's own, for tests that stop, kill or restart it.

Readiness is awaited by polling the broker's metadata until a deadline, never by a fixed
sleep. Without the binary the tests skip, or fail where ``TIDEMARK_REQUIRE_ALL`` is set.
"""

from __future__ import annotations

import importlib.util
import json
import logging
import os
import shutil
import signal
import subprocess
import time
from pathlib import Path

import pytest

from tests.support.helpers import free_port, skip_unless_required

START_DEADLINE = 30.0  # seconds for the broker to answer metadata after it was started


def confluent_kafka_or_skip():
    """``confluent_kafka``, imported for a test module; without it the module is skipped, or
    fails where ``TIDEMARK_REQUIRE_ALL`` is set."""
    try:
        import confluent_kafka
    except ImportError:
        reason = "confluent-kafka is not installed (pip install -e '.[kafka]')"
        if os.environ.get("TIDEMARK_REQUIRE_ALL", "").strip() not in ("", "0"):
            pytest.fail(f"{reason} (TIDEMARK_REQUIRE_ALL is set)", pytrace=False)
        pytest.skip(reason, allow_module_level=True)
    return confluent_kafka


def quiet_logger() -> logging.Logger:
    """A logger for librdkafka clients in tests: its connection-refused chatter while a broker
    restarts goes to ``tidemark.tests.rdkafka`` instead of stderr."""
    return logging.getLogger("tidemark.tests.rdkafka")


def noida_binary() -> str | None:
    """The noida-db executable itself (not the ``noida-db`` Python wrapper script, whose pid
    is not the server's): ``TIDEMARK_NOIDA_DB``, else the binary inside the installed
    ``noida_db`` package."""
    explicit = os.environ.get("TIDEMARK_NOIDA_DB")
    if explicit:
        return explicit if os.access(explicit, os.X_OK) else None
    spec = importlib.util.find_spec("noida_db")
    if spec is None or not spec.submodule_search_locations:
        return None
    for folder in spec.submodule_search_locations:
        candidate = Path(folder) / ("noida-db.exe" if os.name == "nt" else "noida-db")
        if candidate.is_file():
            if not os.access(candidate, os.X_OK):
                candidate.chmod(0o755)  # wheels may lose the mode bit; the wrapper does the same
            return str(candidate)
    return None


class NoidaKafka:
    """One noida-db process serving Kafka on ``127.0.0.1:port`` with its data in ``data_dir``.

    :meth:`stop` (SIGTERM), :meth:`kill` (SIGKILL) and :meth:`start` again keep the port and
    the data directory, so a test can restart the broker on its own data."""

    def __init__(self, binary: str, data_dir: Path, port: int | None = None):
        self.binary = binary
        self.data_dir = Path(data_dir)
        self.port = port or free_port()
        self.log_path = self.data_dir.parent / f"{self.data_dir.name}.log"
        self.proc: subprocess.Popen | None = None
        self.starts = 0

    @property
    def bootstrap(self) -> str:
        return f"127.0.0.1:{self.port}"

    @property
    def data_file(self) -> Path:
        """Where noida-db 0.2.x saves the Kafka service's state (one JSON document)."""
        return self.data_dir / "kafka.json"

    def config(self, **extra) -> dict:
        """A librdkafka client config for this broker."""
        return {"bootstrap.servers": self.bootstrap, "logger": quiet_logger(), **extra}

    def start(self, deadline: float = START_DEADLINE) -> None:
        from confluent_kafka import KafkaException
        from confluent_kafka.admin import AdminClient

        assert self.proc is None or self.proc.poll() is not None, "broker already running"
        self.data_dir.mkdir(parents=True, exist_ok=True)
        log = open(self.log_path, "ab")
        try:
            self.proc = subprocess.Popen(
                [
                    self.binary,
                    "start",
                    "--data-dir",
                    str(self.data_dir),
                    "--only",
                    "kafka",
                    "--kafka-port",
                    str(self.port),
                    "--host",
                    "127.0.0.1",
                ],
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
            )
        finally:
            log.close()
        self.starts += 1
        admin = AdminClient(self.config(**{"socket.connection.setup.timeout.ms": 1000}))
        until = time.monotonic() + deadline
        while True:
            if self.proc.poll() is not None:  # it died (port taken, bad binary, ...): ours, or no broker at all
                pytest.fail(f"noida-db exited with {self.proc.returncode}:\n{self.log_tail()}")
            try:
                metadata = admin.list_topics(timeout=0.5)  # the wait: a metadata round trip
                if metadata.brokers:
                    return
            except KafkaException:
                pass
            if time.monotonic() > until:
                self.kill()
                pytest.fail(
                    f"noida-db did not answer metadata on {self.bootstrap} within {deadline}s:\n{self.log_tail()}"
                )

    def stop(self, timeout: float = 20.0) -> None:
        """SIGTERM, and wait for the process to exit (it saves its data first)."""
        self._signal(signal.SIGTERM, timeout)

    def kill(self) -> None:
        """SIGKILL: a crash of the broker, nothing saved on the way out."""
        self._signal(signal.SIGKILL, 20.0)

    def restart(self, *, kill: bool = False) -> None:
        """Stop (or kill) and start again on the same port and data directory."""
        self.kill() if kill else self.stop()
        self.start()

    def wait_saved(self, topic: str, partition: int = 0, high_watermark: int = 0, deadline: float = 10.0) -> None:
        """Wait until noida-db's data file holds ``topic`` with ``partition`` written up to
        ``high_watermark`` (commit markers included).

        noida-db acknowledges a commit before it saves (see docs/dev/kafka-broker.md): tests
        that crash the broker on purpose use this to crash it after the save. It reads the
        file's format (noida-db 0.2.x), and fails loudly if that changes."""
        until = time.monotonic() + deadline
        seen = None
        while True:
            try:
                state = json.loads(self.data_file.read_text())
                topics = {name: t for name, t in state["topics"]}
                parts = {pid: p for pid, p in topics[topic]["partitions"]} if topic in topics else {}
                seen = parts[partition]["high_watermark"] if partition in parts else None
                if seen is not None and seen >= high_watermark:
                    return
            except (FileNotFoundError, ValueError):  # not written yet, or caught mid-write
                pass
            except (KeyError, TypeError) as exc:
                raise AssertionError(f"noida-db's data file has a format these tests do not know: {exc!r}") from exc
            if time.monotonic() > until:
                raise AssertionError(
                    f"noida-db did not save {topic}[{partition}] up to {high_watermark} "
                    f"within {deadline}s (saved: {seen})"
                )
            time.sleep(0.02)  # polling a file, bounded by the deadline above

    def log_tail(self, lines: int = 30) -> str:
        try:
            text = self.log_path.read_text(errors="replace")
        except FileNotFoundError:
            return "(no log)"
        return "\n".join(text.splitlines()[-lines:])

    def _signal(self, sig: int, timeout: float) -> None:
        proc = self.proc
        if proc is None or proc.poll() is not None:
            return
        proc.send_signal(sig)
        try:
            proc.wait(timeout)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def _broker(tmp_path_factory, name: str):
    try:
        import confluent_kafka
    except ImportError:
        skip_unless_required("confluent-kafka is not installed (pip install -e '.[kafka]')")
    binary = noida_binary()
    if binary is None:
        skip_unless_required("no noida-db binary on this machine (pip install noida-db)")
    base = tmp_path_factory.mktemp(name)
    broker = NoidaKafka(binary, base / "data")
    broker.start()
    try:
        yield broker
    finally:
        broker.stop()
        shutil.rmtree(base, ignore_errors=True)


@pytest.fixture(scope="module")
def kafka_broker(tmp_path_factory):
    """A noida-db Kafka broker shared by one test module (do not restart it)."""
    yield from _broker(tmp_path_factory, "kafka")


@pytest.fixture
def kafka_bootstrap(kafka_broker) -> str:
    """``bootstrap.servers`` of the module's broker."""
    return kafka_broker.bootstrap


@pytest.fixture
def private_kafka(tmp_path_factory):
    """A broker of this test's own: stop, kill and restart it at will."""
    yield from _broker(tmp_path_factory, "kafka-private")
