"""Log sources as Spark streaming sources: Python Data Sources (PySpark 4.0+) over
:mod:`tidemark.sources` -- no JVM connector, no Maven jar.

::

    spark.dataSource.register(KafkaSource)
    df = (spark.readStream.format("tidemark_kafka")
          .option("bootstrap_servers", "127.0.0.1:9092").option("topic", "orders").load())
    tidemark.materialize(df, "orders", ...)

A DataFrame has ``value`` (the record's value as text: one JSON document), ``_file`` (the
part, ``orders/0000000003``: text order is partition order) and ``_block`` (the offset), so
tidemark orders a key's documents by (partition, offset) and ``lastWriteWins`` needs no
``order:``.  Spark's checkpoint keeps each batch's offsets (``{part: next offset}``); a
batch re-run after a crash reads the same ranges (:mod:`tidemark.sources.log`).

Admission control: ``max_records_per_batch`` is a read limit (``ReadMaxRows``) where Spark
asks for one (4.2+); on 4.0-4.1 (``latestOffset()`` without a start) the reader caps from the
start it knows: a new view's, or the previous batch's (the first batch after a restart reads
what is there).  ``Trigger.AvailableNow`` reads what the log held when the
query started.
"""

from __future__ import annotations

import contextlib
import json
from typing import Any, Iterator, Optional

from pyspark.sql.datasource import DataSource, DataSourceStreamReader, InputPartition

from tidemark.errors import TidemarkError, mark_for_driver
from tidemark.sources import log_settings, open_log
from tidemark.sources.log import check_retained, initial, key_document, plan, ranges
from tidemark.sources.origin import read_origin, write_origin

_streaming: Any = None  # read limits and Trigger.AvailableNow for Python sources: PySpark 4.2+
with contextlib.suppress(ImportError):  # (PySpark 4.0/4.1: none)
    from pyspark.sql.streaming import datasource as _streaming

_AvailableNow: Any = getattr(_streaming, "SupportsTriggerAvailableNow", object)


SCHEMA = "value string, _file string, _block bigint"
ROWS = 8192  # records per Arrow batch a read hands to Spark
OPTION_KEY = "tidemark.key"  # the collection's key pointers (JSON): a tombstone's deletion document
OPTION_ORIGIN = "tidemark.origin"  # where the view keeps its first batch's start (tidemark.sources.origin)


@contextlib.contextmanager
def marked():
    """A tidemark error raised inside Spark's source runner or a read task, marked so that the
    run reports it as itself (:func:`tidemark.errors.from_task_failure`), not Spark's stack."""
    try:
        yield
    except TidemarkError as exc:
        raise mark_for_driver(exc) from None


class LogRange(InputPartition):
    """One Spark task: ``part``'s offsets ``start <= offset < end``."""

    def __init__(self, part: str, start: int, end: int):
        super().__init__((part, start, end))
        self.part, self.start, self.end = part, start, end


def _file_of(kind: str, part: str) -> str:
    if kind == "kafka":
        topic, _, partition = part.rpartition("/")
        return f"{topic}/{int(partition):010d}"
    return part


class LogStreamReader(DataSourceStreamReader, _AvailableNow):
    def __init__(self, kind: str, options: dict):
        self.kind = kind
        self.pointers: list[str] = json.loads(options.pop(OPTION_KEY, "[]") or "[]")
        self.origin: Optional[str] = options.pop(OPTION_ORIGIN, None)
        self.settings = log_settings(kind, options)
        self._log: Any = None
        self._target: Optional[dict] = None
        self._last: Optional[dict] = None  # the last batch's end (PySpark 4.0/4.1: latestOffset() has no start)

    @property
    def log(self):
        if self._log is None:
            self._log = open_log(self.kind, self.settings)
        return self._log

    def initialOffset(self) -> dict:
        with marked():
            return self._initial()

    def _initial(self) -> dict:
        offsets = read_origin(self.origin) if self.origin else None  # the view began before: a restart, rebuild, adopt
        if offsets is None:
            offsets = initial(self.log.bounds(), self.settings.get("starting_offsets") or "earliest")
            if self.origin:
                write_origin(self.origin, offsets)
        self._last = dict(offsets)  # (PySpark 4.0/4.1: the first batch's start, for the cap)
        return offsets

    def getDefaultReadLimit(self):
        cap = self.settings.get("max_records_per_batch")
        return _streaming.ReadMaxRows(int(cap)) if cap else _streaming.ReadAllAvailable()

    def latestOffset(self, start: Optional[dict] = None, limit: Any = None) -> dict:
        with marked():
            return self._latest(start, limit)

    def _latest(self, start: Optional[dict], limit: Any) -> dict:
        bounds = self.log.bounds()
        if start is None:  # PySpark 4.0/4.1: no start given; the run's previous batch ended at _last
            start, cap = self._last, self.settings.get("max_records_per_batch")
            if start is None:  # the run's first batch: everything (its start is in Spark's checkpoint)
                return plan({}, bounds, None, self._target)
        else:
            cap = getattr(limit, "max_rows", None)
        check_retained(self.log.name, self.kind, start, bounds)
        return plan(start, bounds, cap, self._target)

    def prepareForTriggerAvailableNow(self) -> None:
        self._target = {p: b.end for p, b in self.log.bounds().items()}

    def reportLatestOffset(self) -> Optional[dict]:
        return {p: b.end for p, b in self.log.bounds().items()}

    def partitions(self, start: dict, end: dict) -> list[InputPartition]:
        self._last = dict(end)
        return [
            LogRange(p, s, e) for p, s, e in ranges(start, end, self.log.bounds() if set(end) - set(start) else None)
        ]

    def read(self, partition: InputPartition) -> Iterator[Any]:
        """The range's records as Arrow record batches (``value``, ``_file``, ``_block``) of
        up to :data:`ROWS` rows: no Python row per record between the log and Spark."""
        import pyarrow as pa

        assert isinstance(partition, LogRange)
        log = open_log(self.kind, self.settings)
        name = _file_of(self.kind, partition.part)
        values: list = []
        offsets: list = []

        def batch():
            return pa.RecordBatch.from_arrays(
                [
                    pa.array(values, pa.string()),
                    pa.array([name] * len(values), pa.string()),
                    pa.array(offsets, pa.int64()),
                ],
                names=["value", "_file", "_block"],
            )

        with marked():
            try:
                for rec in log.read(partition.part, partition.start, partition.end):
                    if rec.value is None:
                        where = f"{partition.part}@{rec.offset}"
                        values.append(json.dumps(key_document(self.pointers, rec.key, where)))
                    else:
                        values.append(rec.value.decode("utf-8", "replace"))
                    offsets.append(rec.offset)
                    if len(values) >= ROWS:
                        yield batch()
                        values, offsets = [], []
                if values:
                    yield batch()
            finally:
                log.close()

    def commit(self, end: dict) -> None:
        self._last = dict(end)

    def stop(self) -> None:
        if self._log is not None:
            self._log.close()
            self._log = None


class KafkaSource(DataSource):
    """``spark.readStream.format("tidemark_kafka")``: options as the spec's ``source: {kafka: …}``."""

    @classmethod
    def name(cls) -> str:
        return "tidemark_kafka"

    def schema(self) -> str:
        return SCHEMA

    def streamReader(self, schema) -> DataSourceStreamReader:
        return LogStreamReader("kafka", dict(self.options))


class NatsSource(DataSource):
    """``spark.readStream.format("tidemark_nats")``: options as the spec's ``source: {nats: …}``."""

    @classmethod
    def name(cls) -> str:
        return "tidemark_nats"

    def schema(self) -> str:
        return SCHEMA

    def streamReader(self, schema) -> DataSourceStreamReader:
        return LogStreamReader("nats", dict(self.options))


SOURCES = {"kafka": KafkaSource, "nats": NatsSource}


def register(spark) -> None:
    """Make ``tidemark_kafka`` and ``tidemark_nats`` known to ``spark`` (idempotent)."""
    for cls in SOURCES.values():
        spark.dataSource.register(cls)


def read_log(spark, kind: str, settings: dict, key: tuple, origin: Optional[str] = None):
    """A streaming DataFrame (``value``, ``_file``, ``_block``) of a spec's log source;
    ``origin``: the file that keeps where the view began (:mod:`tidemark.sources.origin`)."""
    register(spark)
    options = {
        k: (json.dumps(v) if isinstance(v, (list, dict)) else str(v)) for k, v in settings.items() if v is not None
    }
    options[OPTION_KEY] = json.dumps(list(key))
    if origin:
        options[OPTION_ORIGIN] = origin
    return spark.readStream.format(SOURCES[kind].name()).options(**options).load()
