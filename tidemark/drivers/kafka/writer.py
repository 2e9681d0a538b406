"""The transactional producer of one (materialization, range), and fencing old ones.

:meth:`RangeWriter.open` calls ``init_transactions`` with the range's transactional id: the
broker aborts the open transaction of any earlier producer with that id and fences it
(its next produce or commit fails: :class:`~tidemark.errors.FencedOff`). Then, per batch::

    writer.begin()
    writer.send(topic, key, doc)        # doc None: a tombstone (the key was deleted)
    ...
    writer.commit(progress_record)      # the progress record joins the same transaction

so that the data records and the range's progress record commit together or not at all.
:func:`fence_and_abort` does the ``init_transactions`` alone, for ids no one will write with
again (an old shard layout at a rescale, or every id at start-up), so none of their
transactions lingers.
"""

from __future__ import annotations

import time
from typing import Any, Callable, Iterable, Mapping, Optional, cast

from tidemark.collection.keys import key_json
from tidemark.drivers.kafka.client import call, client_config, kafka_error_of, translate
from tidemark.drivers.kafka.ids import DEFAULT_PREFIX, transactional_id
from tidemark.drivers.kafka.progress import ProgressRecord, progress_partition
from tidemark.drivers.kafka.settings import document_limits
from tidemark.errors import DriverError, EndpointUnavailable, TidemarkError
from tidemark.jsontext import dumps_bytes
from tidemark.policy import DEFAULT_POLICY, RetryPolicy
from tidemark.protocol.messages import Range

#: Producer settings tidemark insists on (a user's config cannot weaken them).
TRANSACTIONAL = {"enable.idempotence": True, "acks": "all"}


def _producer(config: Mapping[str, Any], tid: str, policy: RetryPolicy, **extra):
    from confluent_kafka import Producer

    overrides = {"partitioner": "murmur2_random", **extra, **TRANSACTIONAL, "transactional.id": tid}
    if "partitioner" in config:
        overrides.pop("partitioner")
    return call(lambda: Producer(client_config(config, **overrides)), f"creating the producer {tid}", config)


def fence_and_abort(
    config: Mapping[str, Any], transactional_ids: Iterable[str], *, policy: RetryPolicy = DEFAULT_POLICY
) -> list[str]:
    """Initialise each transactional id once and let go: every producer that used it is
    fenced and its open transaction aborted. Idempotent; returns the ids, in order."""
    done = []
    for tid in transactional_ids:
        producer = _producer(config, tid, policy)
        call(
            cast("Callable[[], None]", lambda producer=producer: producer.init_transactions(policy.lock_timeout)),
            f"fencing transactional id {tid}",
            config,
        )
        call(
            cast("Callable[[], int]", lambda producer=producer: producer.flush(policy.connect_timeout)),
            f"closing the producer {tid}",
            config,
        )
        done.append(tid)
    return done


class RangeWriter:
    """Writes one range's transactions. Not thread-safe; one per shard session."""

    def __init__(
        self,
        config: Mapping[str, Any],
        materialization: str,
        range: Range,
        *,
        progress_topic: str,
        prefix: str = DEFAULT_PREFIX,
        policy: RetryPolicy = DEFAULT_POLICY,
    ):
        self.config = config
        self.limits = document_limits(config)  # a document beyond them is refused before it is produced
        self.materialization = materialization
        self.range = range
        self.progress_topic = progress_topic
        self.policy = policy
        self.transactional_id = transactional_id(materialization, range, prefix=prefix)
        self._producer = None
        self._progress_partitions: Optional[int] = None
        self._in_transaction = False
        self.sent = 0

    @classmethod
    def open(
        cls,
        config: Mapping[str, Any],
        materialization: str,
        range: Range,
        *,
        progress_topic: str,
        prefix: str = DEFAULT_PREFIX,
        policy: RetryPolicy = DEFAULT_POLICY,
    ) -> "RangeWriter":
        """A writer whose ``init_transactions`` has fenced every earlier one of the range."""
        writer = cls(config, materialization, range, progress_topic=progress_topic, prefix=prefix, policy=policy)
        producer = _producer(config, writer.transactional_id, policy)
        call(
            lambda: producer.init_transactions(policy.lock_timeout),
            f"initialising transactional id {writer.transactional_id}",
            config,
        )
        writer._producer = producer
        metadata = call(
            lambda: producer.list_topics(timeout=policy.connect_timeout),  # naming it may create it
            f"reading metadata of {progress_topic!r}",
            config,
        )
        info = metadata.topics.get(progress_topic)
        if info is None or info.error is not None or not info.partitions:
            raise DriverError(f"kafka: progress topic {progress_topic!r} does not exist (create it with ensure_topics)")
        writer._progress_partitions = len(info.partitions)
        return writer

    @property
    def in_transaction(self) -> bool:
        return self._in_transaction

    def begin(self) -> None:
        call(self._live().begin_transaction, f"beginning a transaction of {self.transactional_id}", self.config)
        self._in_transaction = True
        self.sent = 0

    def send(self, topic: str, key: tuple, doc: Any, headers: Optional[list] = None) -> None:
        """Queue one record: key = the key as a JSON array, value = the document as JSON,
        or a tombstone when ``doc`` is None."""
        value = None if doc is None else dumps_bytes(doc)
        if value is not None:
            self.limits.check_document(len(value), key, f"kafka: topic {topic!r}")
        self._produce(topic, key_json(key).encode("utf-8"), value, headers=headers)

    def send_raw(self, topic: str, key: bytes, value: Optional[bytes], headers: Optional[list] = None) -> None:
        """Queue one record of bytes as they are."""
        self._produce(topic, key, value, headers=headers)

    def commit(self, progress: ProgressRecord) -> None:
        """Add ``progress`` to the transaction and commit it. On failure the transaction is
        aborted (when the producer can still abort) and the error raised, translated."""
        if progress.materialization != self.materialization or progress.range != self.range:
            raise DriverError(
                f"kafka: progress record of {progress.materialization}/{progress.range.name} "
                f"given to the writer of {self.materialization}/{self.range.name}"
            )
        key = progress.key
        self._produce(
            self.progress_topic,
            key,
            progress.encode(),
            partition=progress_partition(key, self._progress_partitions or 1),
        )
        producer = self._live()
        try:
            producer.commit_transaction(self.policy.lock_timeout)
        except Exception as exc:
            error = translate(exc, f"committing the transaction of {self.transactional_id}", self.config)
            err = kafka_error_of(exc)
            if err is not None and err.txn_requires_abort():
                self.abort()
            raise error from exc
        self._in_transaction = False

    def abort(self) -> None:
        if not self._in_transaction:
            return
        self._in_transaction = False
        call(
            lambda: self._live().abort_transaction(self.policy.lock_timeout),
            f"aborting the transaction of {self.transactional_id}",
            self.config,
        )

    def close(self) -> None:
        """Let go of the producer. An open transaction stays open until the next
        ``init_transactions`` of this id (or the broker's timeout) aborts it."""
        producer, self._producer = self._producer, None
        if producer is not None:
            try:
                producer.flush(0)
            except Exception:  # noqa: BLE001 - closing is best effort
                pass

    def _live(self):
        if self._producer is None:
            raise DriverError(f"kafka: the writer of {self.transactional_id} is not open")
        return self._producer

    def _produce(
        self,
        topic: str,
        key: bytes,
        value: Optional[bytes],
        partition: Optional[int] = None,
        headers: Optional[list] = None,
    ) -> None:
        producer = self._live()
        kwargs: dict = {} if partition is None else {"partition": partition}
        if headers:
            kwargs["headers"] = headers
        until = time.monotonic() + self.policy.lock_timeout
        while True:
            try:
                producer.produce(topic, value=value, key=key, **kwargs)
                break
            except BufferError:  # the local queue is full: let deliveries drain it
                if time.monotonic() > until:
                    raise EndpointUnavailable(
                        f"kafka: the producer queue of {self.transactional_id} stayed "
                        f"full for {self.policy.lock_timeout:g}s"
                    ) from None
                call(lambda: producer.poll(0.1), f"producing to {topic!r}", self.config)
            except TidemarkError:
                raise
            except Exception as exc:
                raise translate(self._cause(exc), f"producing to {topic!r}", self.config) from exc
        self.sent += 1
        # serve delivery callbacks (their errors surface at commit); a producer that a newer
        # session fenced meanwhile may raise here: translated like every other call (FencedOff)
        try:
            producer.poll(0)
        except Exception as exc:
            raise translate(self._cause(exc), f"producing to {topic!r}", self.config) from exc

    def _cause(self, exc: BaseException) -> BaseException:
        """The error behind librdkafka's bare ``_FATAL`` (\"Unable to produce message: Local:
        Fatal error\"), which ``produce`` raises once a background request has made the
        producer unusable -- a newer session's fencing, most often, reported only later by
        ``poll`` or the transaction calls. The transaction API returns the cause itself, so an
        abort (which cannot succeed on a fatal producer) is asked for it."""
        err = kafka_error_of(exc)
        if err is None or err.name() != "_FATAL" or self._producer is None:
            return exc
        self._in_transaction = False
        # a fatal producer answers at once, but a zero timeout can lose the race with
        # librdkafka's own thread and answer _TIMED_OUT ("retry call to resume") instead
        until = time.monotonic() + min(self.policy.lock_timeout, 5.0)
        while True:
            try:
                self._producer.abort_transaction(0.5)
            except Exception as cause:  # noqa: BLE001 - the cause is what we want
                err = kafka_error_of(cause)
                if err is not None and err.name() == "_TIMED_OUT" and time.monotonic() < until:
                    continue
                return cause
            return exc
