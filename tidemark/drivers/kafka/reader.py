"""Reading what is committed: the write frontier of a range, and the view of a topic.

Both read with ``isolation.level=read_committed`` from the beginning of every partition up
to its *high watermark* taken when the read starts (everything written by then, committed
or not). A read_committed consumer cannot pass an open transaction, so it reaches the high
watermark only once every transaction below it has committed or aborted; the read waits
for that, for at most ``policy.lock_timeout`` seconds, then raises
:class:`~tidemark.errors.EndpointUnavailable` naming the partition and its last stable
offset. (Reading only up to the last stable offset would be wrong: another range's open
transaction below this range's newest commit would hide that commit.)

Open transactions that block a reader are those of live producers (they end within a
commit) and of dead ones, which the next ``init_transactions`` with their transactional id
aborts — the range's own at Open, every id of an old layout at a rescale
(:func:`tidemark.drivers.kafka.writer.fence_and_abort`), and at start-up every id of the run's own
checkpoint (``KafkaDriver.recover``: first those with a record past the progress topic's
last stable offset, :func:`undecided_messages`, then every range it committed). Kafka also aborts one after
``transaction.timeout.ms``; noida-db, the test broker, never does.
"""

from __future__ import annotations

import time
import uuid
from typing import Any, Callable, Iterator, Mapping, Optional, cast

import orjson

from tidemark import jsontext
from tidemark.drivers.kafka.client import call, client_config, translate
from tidemark.drivers.kafka.progress import ProgressRecord, decode_key
from tidemark.errors import DocumentError, DriverError, EndpointUnavailable
from tidemark.jsontext import dumps_bytes
from tidemark.policy import DEFAULT_POLICY, RetryPolicy
from tidemark.protocol.messages import Range

BATCH = 1000  # messages per consume() call


def committed_messages(config: Mapping[str, Any], topic: str, *, policy: RetryPolicy = DEFAULT_POLICY) -> Iterator:
    """Every committed message (a ``confluent_kafka.Message``) of ``topic``, partition by
    partition in offset order (partitions interleaved), up to the high watermarks taken at
    the start. Control records and aborted transactions are not returned."""
    yield from _read(config, topic, "read_committed", "earliest", policy)


def undecided_messages(config: Mapping[str, Any], topic: str, *, policy: RetryPolicy = DEFAULT_POLICY) -> Iterator:
    """The messages of ``topic`` from each partition's last stable offset to its high
    watermark, read_uncommitted: the records of the transactions still open (and whatever
    was written after the first of them). Empty when no transaction holds the topic."""
    yield from _read(config, topic, "read_uncommitted", "stable", policy)


RECENT = 64  # offsets per partition that writers_of reads back


def writers_of(config: Mapping[str, Any], topic: str, *, policy: RetryPolicy = DEFAULT_POLICY) -> set[str]:
    """The materializations named by the ``tidemark-materialization`` header of the last
    records of each partition of ``topic`` (read_uncommitted: an open transaction holds
    nothing up, and a record of an aborted one still names its writer)."""
    out = set()
    for msg in _read(config, topic, "read_uncommitted", "recent", policy):
        owner = dict(msg.headers() or ()).get("tidemark-materialization")
        if owner is not None:
            out.add(owner.decode("utf-8", "replace"))
    return out


def _read(config, topic: str, isolation: str, since: str, policy: RetryPolicy) -> Iterator:
    """Messages of ``topic`` with ``isolation``, from each partition's earliest offset
    (``since="earliest"``) or last stable offset (``"stable"``) up to its high watermark
    taken now, waiting at most ``policy.lock_timeout`` for the reader to get there."""
    from confluent_kafka import Consumer, IsolationLevel, KafkaError, TopicPartition
    from confluent_kafka.admin import AdminClient, OffsetSpec

    timeout = policy.connect_timeout
    admin = call(lambda: AdminClient(client_config(config)), "connecting the admin client", config)
    # all topics: a metadata request that names a missing topic may create it (noida-db
    # does, and Kafka does for clients that allow auto-creation)
    metadata = call(lambda: admin.list_topics(timeout=timeout), f"reading metadata of {topic!r}", config)
    info = metadata.topics.get(topic)
    if info is None or info.error is not None:
        raise DriverError(
            f"kafka: topic {topic!r} does not exist or is unavailable"
            f"{f' ({info.error.str()})' if info is not None and info.error else ''}"
        )
    parts = [TopicPartition(topic, p) for p in sorted(info.partitions)]
    if not parts:
        return
    high = _offsets(admin, parts, OffsetSpec.latest(), IsolationLevel.READ_UNCOMMITTED, timeout, config)
    if since == "earliest":
        start = _offsets(admin, parts, OffsetSpec.earliest(), IsolationLevel.READ_UNCOMMITTED, timeout, config)
    elif since == "recent":
        start = {p: hw - RECENT for p, hw in high.items()}
    else:
        start = _offsets(admin, parts, OffsetSpec.latest(), IsolationLevel.READ_COMMITTED, timeout, config)
    start = {p: max(0, start.get(p, 0)) for p in high}
    pending = {p: hw for p, hw in high.items() if hw > start[p]}  # something to read
    if not pending:
        return
    consumer = call(
        lambda: Consumer(
            client_config(
                config,
                **{
                    "group.id": f"tidemark-reader-{uuid.uuid4().hex}",  # never joined, never committed: assign() only
                    "isolation.level": isolation,
                    "enable.auto.commit": False,
                    "enable.auto.offset.store": False,
                    "auto.offset.reset": "earliest",
                    "enable.partition.eof": True,  # a second sign that a partition was read to its end
                    "fetch.wait.max.ms": 10,  # a read ends at the high watermark: do not let the broker hold a fetch
                    "fetch.error.backoff.ms": 10,
                    "topic.metadata.refresh.fast.interval.ms": 10,  # a short read starts fast
                },
            )
        ),
        "connecting a consumer",
        config,
    )
    try:
        call(
            lambda: consumer.assign([TopicPartition(topic, p, start[p]) for p in pending]),
            f"assigning {topic!r}",
            config,
        )
        until = time.monotonic() + policy.lock_timeout
        while pending:
            left = until - time.monotonic()
            if left <= 0:
                raise EndpointUnavailable(_blocked(consumer, topic, pending, policy.lock_timeout, config))
            batch = call(
                cast("Callable[[], list[Any]]", lambda left=left: consumer.consume(BATCH, min(0.01, left))),
                f"reading {topic!r}",
                config,
            )
            for msg in batch:
                err = msg.error()
                if err is not None:
                    if err.code() == KafkaError._PARTITION_EOF:
                        if msg.offset() >= pending.get(msg.partition(), 0):
                            pending.pop(msg.partition(), None)
                        continue
                    raise translate(err, f"reading {topic!r}", config)
                hw = high.get(msg.partition(), 0)
                if msg.offset() < hw:  # later records were written after the read began
                    yield msg
            if not pending:
                break
            positions = call(
                lambda: consumer.position([TopicPartition(topic, p) for p in pending]), f"reading {topic!r}", config
            )
            for tp in positions:
                if tp.offset >= pending[tp.partition]:
                    del pending[tp.partition]
    finally:
        consumer.close()


def _offsets(admin, parts, spec, level, timeout: float, config) -> dict[int, int]:
    futures = call(
        lambda: admin.list_offsets({tp: spec for tp in parts}, isolation_level=level, request_timeout=timeout),
        f"listing offsets of {parts[0].topic!r}",
        config,
    )
    out: dict[int, int] = {}
    for tp, fut in futures.items():
        try:
            out[tp.partition] = fut.result(timeout + 5).offset
        except Exception as exc:
            raise translate(exc, f"listing offsets of {tp.topic!r}", config) from exc
    return out


def _blocked(consumer, topic: str, pending: dict[int, int], waited: float, config) -> str:
    from confluent_kafka import TopicPartition

    details = []
    for p, hw in sorted(pending.items()):
        try:
            _, lso = consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=2, cached=False)
            details.append(f"partition {p}: last stable offset {lso}, high watermark {hw}")
        except Exception:  # noqa: BLE001 - only for the message
            details.append(f"partition {p}: high watermark {hw}")
    return (
        f"kafka: reading {topic!r} with read_committed waited {waited:g}s for open transactions to end ("
        + "; ".join(details)
        + "); a producer that died inside a transaction holds it until its "
        "transactional id is initialised again (or the broker's transaction timeout aborts it): "
        "starting the view's run again does that for its own producers"
    )


def read_frontiers(
    config: Mapping[str, Any], progress_topic: str, materialization: str, *, policy: RetryPolicy = DEFAULT_POLICY
) -> dict[Range, ProgressRecord]:
    """The last committed progress record of every range of ``materialization``.

    Records of other materializations (and keys that are not progress keys) are skipped;
    a tombstone forgets its range. Two records of one range in different partitions are
    ordered by their ``sequence``."""
    out: dict[Range, ProgressRecord] = {}
    for msg in committed_messages(config, progress_topic, policy=policy):
        parsed = decode_key(msg.key())
        if parsed is None or parsed[0] != materialization:
            continue
        _, key_range = parsed
        value = msg.value()
        if value is None:
            out.pop(key_range, None)
            continue
        rec = ProgressRecord.decode(value, where=f"{progress_topic}[{msg.partition()}]@{msg.offset()}")
        if rec.materialization != materialization or rec.range != key_range:
            continue  # the key says one range, the value another: not ours to interpret
        prev = out.get(key_range)
        if prev is None or rec.sequence >= prev.sequence:
            out[key_range] = rec
    return out


def read_frontier(
    config: Mapping[str, Any],
    progress_topic: str,
    materialization: str,
    range: Range,
    *,
    policy: RetryPolicy = DEFAULT_POLICY,
) -> Optional[ProgressRecord]:
    """The last committed progress record of exactly ``range`` (None if it never committed).

    Call it *after* initialising the range's transactional id (which aborts the range's own
    dead transaction), so that only other producers' transactions can hold the read up."""
    return read_frontiers(config, progress_topic, materialization, policy=policy).get(range)


def tail(config: Mapping[str, Any], topic: str, *, policy: RetryPolicy = DEFAULT_POLICY) -> Iterator[tuple[tuple, Any]]:
    """The committed view of a data topic: ``(key, document)`` of the last record of every
    key, in key order; a tombstone deletes its key. Keys are the JSON arrays tidemark
    writes (``["c0001"]``), returned as tuples."""
    last: dict[bytes, Any] = {}
    for msg in committed_messages(config, topic, policy=policy):
        key = msg.key()
        if key is None:
            raise DocumentError(
                f"a record without a key in {topic!r}", location=f"{topic}[{msg.partition()}]@{msg.offset()}"
            )
        value = msg.value()
        if value is None:
            last.pop(key, None)
        else:
            last[key] = value
    decoded = []
    for key, value in last.items():
        try:
            k = tuple(jsontext.loads(key))
            doc = jsontext.loads(value)
        except (orjson.JSONDecodeError, TypeError) as exc:
            raise DocumentError(f"not a tidemark record in {topic!r}: {exc}", location=topic) from exc
        decoded.append((k, doc))
    try:
        decoded.sort(key=lambda kv: kv[0])
    except TypeError:  # keys of mixed types at one position: order by their JSON text
        decoded.sort(key=lambda kv: dumps_bytes(list(kv[0])))
    yield from decoded
