"""The ``kafka`` endpoint: an exactly-once, compactable upsert log per binding, written with
Kafka transactions and a progress topic (the Materialize seed), full documents from a
local state store.

Per shard range, one transactional producer whose ``transactional.id`` is a function of
(materialization, range) (:mod:`tidemark.drivers.kafka.ids`). Each batch of the range is one Kafka
transaction holding the batch's documents and the range's **progress record** (the
runtime checkpoint, the commit's sequence and counts) — the write frontier. Open:

1. ``init_transactions`` with the range's id: every zombie of the range is fenced and its
   open transaction aborted;
2. the frontiers of the materialization's ranges are read (read_committed); the range's
   checkpoint is its own last record's, or inherited after a split or merge exactly like
   the SQL endpoints' checkpoint rows (:func:`tidemark.drivers.common.fences.plan_open`);
   a range that takes over from an older layout first fences every overlapping old
   range's transactional id, so no transaction of the old layout lingers;
3. the local store of the range (under ``state``) is opened and, if it is not at the
   frontier, rebuilt from the topics (:mod:`tidemark.drivers.push.catchup`: the push
   endpoints' one driver, :class:`~tidemark.drivers.push.PushDriver`, whose log part this is).

Commit pattern: store-authoritative (Kafka's transaction is the endpoint transaction).
"""

from __future__ import annotations

import json
import logging
import uuid
from typing import Any, Callable, Iterator, Mapping, Optional, Sequence, cast

import orjson

from tidemark import jsontext
from tidemark.drivers.base import CheckpointRow
from tidemark.drivers.common.fences import CheckpointState, plan_open
from tidemark.drivers.common.identity import kept as kept_record
from tidemark.drivers.common.identity import parse_record
from tidemark.drivers.common.settings import config_schema
from tidemark.drivers.kafka.progress import check_partitions
from tidemark.drivers.kafka.session import KafkaSession
from tidemark.drivers.kafka.settings import (
    SETTINGS,
    KafkaSettings,
    check_topic_name,
    document_limits,
    resolve_state,
    resource_partitions,
    topic_of,
)
from tidemark.drivers.kafka.topics import partition_counts
from tidemark.drivers.push import PushDriver, PushLog
from tidemark.drivers.push.log import Row
from tidemark.errors import DocumentError, IncompatibleSchema, RecoveryError, SpecError
from tidemark.protocol.checkpoints import batch_of
from tidemark.protocol.messages import Applied, Apply, BindingSpec, Open, Range, SpecResponse

log = logging.getLogger("tidemark")


class KafkaLog(PushLog):
    """The ``kafka`` log part: a topic per binding, a progress topic, a quarantine topic."""

    name = "kafka"
    commits = True

    def __init__(self, config: dict):
        self.settings = KafkaSettings.from_config(config)
        self.store_options = {"path": self.settings.state}
        self.limits = document_limits(self.settings.client)
        # identity records the last scan found, for the Apply after it
        self._read: Optional[dict[str, Optional[dict]]] = None

    @staticmethod
    def resolve_config(config: dict, base_dir: str) -> dict:
        return resolve_state(config, base_dir)

    def spec(self) -> SpecResponse:
        return SpecResponse(
            config_schema=config_schema(SETTINGS, additional=True),
            resource_schema={
                "type": "object",
                "required": ["topic"],
                "properties": {
                    "topic": {"type": "string"},
                    "partitions": {"type": "integer"},
                    "replication_factor": {"type": "integer"},
                },
            },
        )

    # ------------------------------------------------------------------ places
    def resources(self, materialization: str, bindings: Sequence[BindingSpec]) -> list[str]:
        topics = [topic_of(b) for b in bindings]
        s = self.settings
        seen: dict[str, int] = {}
        for i, t in enumerate(topics):
            if t in seen:
                raise SpecError(f"kafka: bindings {seen[t]} and {i} both write topic {t!r}; give each its own topic")
            if t in (s.progress_topic, s.quarantine_topic):
                raise SpecError(f"kafka: topic {t!r} of binding {i} is tidemark's own progress or quarantine topic")
            seen[t] = i
        return topics

    def topic_specs(self, bindings: Sequence[BindingSpec], topics: Sequence[str]):
        from tidemark.drivers.kafka.topics import TopicSpec, progress_topic_spec

        s = self.settings
        specs = []
        for b, t in zip(bindings, topics):
            parts, rf = resource_partitions(b, s)
            # standard bindings: a compactable upsert log (the last record per key is the view)
            specs.append(TopicSpec(t, parts, {} if b.delta_updates else {"cleanup.policy": "compact"}, rf))
        specs.append(progress_topic_spec(s.progress_topic, 1, s.replication_factor))
        specs.append(
            TopicSpec(check_topic_name(s.quarantine_topic, "quarantine_topic"), None, {}, s.replication_factor)
        )
        return specs

    # ------------------------------------------------------------- setup phase
    def validate(self, materialization: str, bindings: Sequence[BindingSpec], resources: Sequence[str]) -> None:
        self.topic_specs(bindings, resources)
        self.refuse_other_writers(materialization, resources)

    def refuse_other_writers(self, materialization: str, topics: Sequence[str]) -> None:
        """A data topic another view writes (its last records name it) is refused: two views
        on one topic would read each other's documents as their own."""
        from tidemark.drivers.kafka.reader import writers_of

        s = self.settings
        present = partition_counts(s.client, topics, timeout=s.policy.connect_timeout)
        for t in topics:
            if t not in present:
                continue
            others = sorted(writers_of(s.client, t, policy=s.policy) - {materialization})
            if others:
                raise IncompatibleSchema(
                    f"kafka: topic {t!r} is written by materialization {others[0]!r}, not only by {materialization!r}: "
                    "two views on one topic would each take the other's documents for its own. Give this "
                    f"binding a topic of its own, or reset the other view first (`tidemark reset SPEC -m {others[0]}`). "
                    "Nothing was written"
                )

    def apply(self, req: Apply, resources: Sequence[str]) -> Applied:
        from tidemark.drivers.kafka.topics import ensure_topics

        specs = self.topic_specs(req.bindings, resources)
        if req.dry_run:
            return Applied("ensure topics " + ", ".join(s.name for s in specs), ())
        outcome = ensure_topics(self.settings.client, specs, policy=self.settings.policy)
        if req.checkpoint_id and req.identities:
            self.keep_identities(resources, req.identities)
        created = tuple((name,) for name, what in outcome.items() if what == "created")
        actions = [f"created topic {name}" for name, what in outcome.items() if what == "created"]
        return Applied("; ".join(actions) or "nothing to do", created)

    # --------------------------------------------------- view-identity records
    def read_identities(self) -> dict[str, Optional[dict]]:
        """Every data topic's view-identity record kept in the progress topic (the last one per topic)."""
        from tidemark.drivers.kafka.progress import decode_identity_key
        from tidemark.drivers.kafka.reader import committed_messages

        out: dict[str, Optional[dict]]
        s, out = self.settings, {}
        for msg in committed_messages(s.client, s.progress_topic, policy=s.policy):
            topic = decode_identity_key(msg.key())
            if topic is None:
                continue
            if msg.value() is None:
                out.pop(topic, None)
            else:
                out[topic] = parse_record(msg.value())
        self._read = out
        return out

    def write_identities(self, records: Mapping[str, Optional[dict]]) -> None:
        """Write (or, for None, forget) view-identity records in the progress topic, in one transaction."""
        from tidemark.drivers.kafka.progress import identity_key
        from tidemark.drivers.kafka.writer import _producer

        s, self._read = self.settings, None
        # a transactional id of its own: two start-ups at once (other views) must not fence each other
        producer = _producer(s.client, f"{s.prefix}.identity.{uuid.uuid4().hex[:12]}", s.policy)
        producer.init_transactions(s.policy.lock_timeout)
        producer.begin_transaction()
        for topic, record in records.items():
            producer.produce(
                s.progress_topic,
                key=identity_key(topic),
                value=None if record is None else json.dumps(record, sort_keys=True).encode("utf-8"),
            )
        producer.commit_transaction(s.policy.lock_timeout)

    def keep_identities(self, topics: Sequence[str], records: Sequence[dict]) -> None:
        """Write the records of topics that keep none.  Kafka has no compare-and-set: the records
        the start-up's check just read (``identities``) serve, rather than a second scan."""
        kept, self._read = (self._read if self._read is not None else self.read_identities()), None
        new = {t: kept_record(r, t) for t, r in zip(topics, records) if t not in kept}
        if new:
            self.write_identities(new)

    def identities(self, materialization: str, topics: Sequence[str]) -> list[Optional[dict]]:
        if not self._progress_topic_exists():
            return [None] * len(topics)
        kept = self.read_identities()
        return [kept.get(t) for t in topics]

    # ------------------------------------------------------- transaction phase
    def frontiers(self, materialization: str) -> dict:
        from tidemark.drivers.kafka.reader import read_frontiers

        s = self.settings
        return read_frontiers(s.client, s.progress_topic, materialization, policy=s.policy)

    def recover(self, materialization: str, checkpoint_id: Optional[str], ranges: Sequence[Range] = ()) -> list[str]:
        """Fence every producer of this checkpoint, aborting what it left open.

        A run killed while ranges were committing can leave a range's transaction open with
        its progress record in it; every read_committed read of the progress topic (the
        start-up's position check, every other range's Open) then waits until the range's
        id is initialised again — by its own Open, which may never come first when there
        are more shards than task slots. Likewise a range that rebuilds its local state
        reads data topics that another range's dead transaction may hold. At start-up none
        of this run's sessions is live, so every producer of this checkpoint is dead or a
        zombie: first those with a record past the progress topic's last stable offset,
        then every range whose committed frontier is this checkpoint's, and every range of
        ``ranges`` (the recovery log's last and in-flight layouts) that has no frontier yet
        (its first batch may have died). Producers of other materializations or checkpoints
        are left alone (a read waits for them as before)."""
        from tidemark.drivers.kafka.ids import transactional_id
        from tidemark.drivers.kafka.progress import ProgressRecord, decode_key
        from tidemark.drivers.kafka.reader import undecided_messages
        from tidemark.drivers.kafka.writer import fence_and_abort

        s = self.settings
        if checkpoint_id is None or not self._progress_topic_exists():
            return []

        def tid(rec) -> str:
            return rec.transactional_id or transactional_id(materialization, rec.range, prefix=s.prefix)

        open_ids: set[str] = set()
        for msg in undecided_messages(s.client, s.progress_topic, policy=s.policy):
            parsed, value = decode_key(msg.key()), msg.value()
            if parsed is None or parsed[0] != materialization or value is None:
                continue
            try:
                rec = ProgressRecord.decode(value)
            except RecoveryError:
                continue  # not ours to interpret; a committed one is refused by the frontier read
            if rec.materialization == materialization and rec.runtime_checkpoint.get("checkpoint_id") == checkpoint_id:
                open_ids.add(tid(rec))
        done = []
        if open_ids:
            fence_and_abort(s.client, sorted(open_ids), policy=s.policy)
            done.append(
                f"kafka: aborted the transactions earlier runs left open in {s.progress_topic!r} "
                f"(fenced {', '.join(sorted(open_ids))})"
            )
        frontiers = self.frontiers(materialization)
        ids: set[str] | list[str]  # a set, then the sorted list
        ids = {tid(r) for r in frontiers.values() if r.runtime_checkpoint.get("checkpoint_id") == checkpoint_id}
        ids |= {transactional_id(materialization, r, prefix=s.prefix) for r in ranges if r not in frontiers}
        ids = sorted(ids - open_ids)
        if ids:
            fence_and_abort(s.client, ids, policy=s.policy)
            done.append(f"kafka: fenced the producers of {len(ids)} range(s) of earlier runs")
        return done

    def fence(self, req: Open, topics: Sequence[str]) -> KafkaSession:
        from tidemark.drivers.kafka.ids import transactional_id
        from tidemark.drivers.kafka.writer import RangeWriter, fence_and_abort

        s, mat, key_range = self.settings, req.materialization, req.range
        writer = RangeWriter.open(
            s.client, mat, key_range, progress_topic=s.progress_topic, prefix=s.prefix, policy=s.policy
        )
        try:
            frontiers = self.frontiers(mat)
            overlapping = [r for r in frontiers.values() if r.range.overlaps(key_range)]
            plan = plan_open(
                mat, key_range, [CheckpointState(r.range, r.sequence, r.runtime_checkpoint) for r in overlapping]
            )
            own = frontiers.get(key_range)
            mine = batch_of(own.runtime_checkpoint) if own is not None else None
            # the data topics' partition counts: as this view's ranges recorded them (progress.check_partitions)
            partitions = partition_counts(s.client, [t for t in topics], timeout=s.policy.connect_timeout)
            check_partitions(mat, list(frontiers.values()), partitions)
            # Producers of other layouts' overlapping ranges that may still commit: those not
            # behind this range's frontier (a range taking over after a split or a merge, and
            # the first batch after it). Fence them, aborting their open transactions.
            live = [
                r
                for r in overlapping
                if r.range != key_range and (mine is None or batch_of(r.runtime_checkpoint) >= mine)
            ]
            if live:
                old = sorted({r.transactional_id or transactional_id(mat, r.range, prefix=s.prefix) for r in live})
                fence_and_abort(s.client, old, policy=s.policy)
                log.info(
                    "kafka: range %s of %s fenced the transactional ids of overlapping ranges: %s",
                    key_range.name,
                    mat,
                    ", ".join(old),
                )
            if plan.checkpoint is not None and (own is None or plan.refresh):
                # The range inherits a checkpoint: record it as the range's own frontier.
                own = _inherit(writer, mat, key_range, own, plan.checkpoint)
        except BaseException:
            writer.close()
            raise
        return KafkaSession(
            writer,
            materialization=mat,
            topics=topics,
            quarantine_topic=s.quarantine_topic,
            checkpoint=plan.checkpoint,
            frontier=own,
            place=f"Kafka's progress topic {s.progress_topic!r}",
            partitions=partitions,
        )

    # -------------------------------------------------------------- inspection
    def rows(self, materialization: str, topics: Sequence[str]) -> Iterator[Row]:
        """This view's committed records of ``topics`` (:func:`written_by`), partition by partition."""
        from tidemark.drivers.kafka.reader import committed_messages

        s = self.settings
        for topic in topics:
            for msg in committed_messages(s.client, topic, policy=s.policy):
                if not written_by(msg, materialization):
                    continue
                try:
                    key = tuple(jsontext.loads(msg.key()))
                except (orjson.JSONDecodeError, TypeError) as exc:
                    raise DocumentError(
                        f"kafka: a record of {topic!r} has a key that is not a JSON array ({exc})",
                        location=f"{topic}[{msg.partition()}]@{msg.offset()}",
                    ) from exc
                yield topic, key, msg.value()

    def checkpoints(self, materialization: str) -> list[CheckpointRow]:
        try:
            frontiers = self.frontiers(materialization)
        except Exception:
            if not self._progress_topic_exists():
                return []
            raise
        return [
            CheckpointRow(materialization, r.range, r.sequence, dict(r.runtime_checkpoint)) for r in frontiers.values()
        ]

    def _progress_topic_exists(self) -> bool:
        s = self.settings
        return s.progress_topic in partition_counts(s.client, [s.progress_topic], timeout=s.policy.connect_timeout)

    def drop(self, materialization: str, bindings: Sequence[BindingSpec], topics: Sequence[str]) -> list[str]:
        """Start the view over: delete the bindings' topics and forget the materialization's
        frontiers (tombstones in the progress topic, after fencing every range's producer)."""
        from confluent_kafka.admin import AdminClient

        from tidemark.drivers.kafka.client import call, client_config
        from tidemark.drivers.kafka.writer import _producer, fence_and_abort

        s, done = self.settings, []
        if self._progress_topic_exists():
            frontiers = self.frontiers(materialization)
            if frontiers:
                fence_and_abort(
                    s.client,
                    sorted({r.transactional_id for r in frontiers.values() if r.transactional_id}),
                    policy=s.policy,
                )
                producer = _producer(s.client, f"{s.prefix}.reset", s.policy)
                producer.init_transactions(s.policy.lock_timeout)
                producer.begin_transaction()
                for r in frontiers.values():
                    producer.produce(s.progress_topic, key=r.key, value=None)
                producer.commit_transaction(s.policy.lock_timeout)
                done.append(f"forgot {len(frontiers)} range frontier(s) in {s.progress_topic}")
        if self._progress_topic_exists():
            kept = self.read_identities()
            mine = {t: None for t in topics if (kept.get(t) or {}).get("materialization") == materialization}
            if mine:
                self.write_identities(mine)
                done.append(f"forgot the view-identity records of {', '.join(sorted(mine))}")
        present = list(partition_counts(s.client, topics, timeout=s.policy.connect_timeout))
        if present:
            admin = AdminClient(client_config(s.client))
            futures = admin.delete_topics(present, operation_timeout=s.policy.connect_timeout)
            for t, f in futures.items():
                call(
                    cast("Callable[[], Any]", lambda f=f: f.result(s.policy.connect_timeout + 5)),
                    f"deleting topic {t!r}",
                    s.client,
                )
                done.append(f"deleted topic {t}")
        return done


def written_by(msg, materialization: str) -> bool:
    """Whether a data record is this view's: its ``tidemark-materialization`` header names it
    (a record with a ``tidemark-range`` header but no materialization is an older tidemark's,
    and kept); a record without tidemark's headers is another writer's."""
    headers = dict(msg.headers() or ())
    owner = headers.get("tidemark-materialization")
    if owner is not None:
        return owner == materialization.encode("utf-8")
    return "tidemark-range" in headers


def _inherit(writer, materialization: str, key_range, own, checkpoint: dict):
    """Commit ``checkpoint`` as ``key_range``'s frontier (a transaction of one progress record)."""
    from tidemark.drivers.kafka.progress import ProgressRecord

    record = (
        own.next(checkpoint, {}, transactional_id=writer.transactional_id)
        if own is not None
        else ProgressRecord.first(materialization, key_range, checkpoint, {}, transactional_id=writer.transactional_id)
    )
    writer.begin()
    writer.commit(record)
    return record


class KafkaDriver(PushDriver):
    name = "kafka"
    log_part = KafkaLog


__all__ = ["KafkaDriver", "KafkaLog"]
