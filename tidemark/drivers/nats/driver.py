"""The ``nats`` endpoint: each changed key's full document as a message on a JetStream stream,
exactly once, without transactions (see :mod:`tidemark.drivers.nats` for the scheme, and
:mod:`.config` for the config and resources).

The log part of the push endpoints' one driver (:class:`~tidemark.drivers.push.PushDriver`).
Commit pattern: store-authoritative — the log's progress record of a range is the endpoint
transaction: it names the batch and the runtime checkpoint, and it is fenced by
``Nats-Expected-Last-Subject-Sequence`` on the range's progress subject (:mod:`.session`).
Loads read a local state store (under ``state``), a cache of the log that an Open rebuilds
from the log whenever the two disagree (:mod:`tidemark.drivers.push.catchup`).
"""

from __future__ import annotations

import json
import logging
import threading
from typing import Iterator, Optional, Sequence, cast

from tidemark.drivers.base import CheckpointRow
from tidemark.drivers.common.identity import parse_record, record_text
from tidemark.drivers.common.settings import config_schema
from tidemark.drivers.nats import settings as conf
from tidemark.drivers.nats.channel import LIMITS, MIN_ATOMIC_VERSION, version_tuple
from tidemark.drivers.nats.layout import dropping_limits
from tidemark.drivers.nats.session import NatsSession
from tidemark.drivers.push import PushDriver, PushLog
from tidemark.drivers.push.log import Row
from tidemark.errors import IncompatibleSchema, RecoveryError
from tidemark.protocol.messages import Applied, Apply, BindingSpec, Open, SpecResponse

log = logging.getLogger("tidemark")


def publish_mode(atomic: bool) -> str:
    """How batches reach the stream, as ``check`` and the run's apply line say it."""
    if atomic:
        return "atomic batch publish on"
    return (
        "atomic batch publish off (ordered mode: a plain consumer of the stream may see part of a batch until it "
        "is complete; `tidemark query` and read_committed see whole batches only; nats-server 2.12 or newer "
        "publishes each batch atomically)"
    )


class NatsLog(PushLog):
    """The ``nats`` log part: a JetStream stream per materialization."""

    name = "nats"
    commits = True

    def __init__(self, config: dict):
        self.cfg = self.settings = conf.NatsConfig.from_config(config)
        self.limits = LIMITS  # a message's payload
        self.store_options = {"path": self.cfg.state}
        self._client = None
        self._lock = threading.Lock()
        self._streams: dict[str, str] = {}  # materialization -> stream, once known

    @staticmethod
    def resolve_config(config: dict, base_dir: str) -> dict:
        """``state`` (default ``tidemark-state``) against the spec's folder."""
        return conf.resolve_state(config, base_dir)

    def spec(self) -> SpecResponse:
        return SpecResponse(
            config_schema=config_schema(conf.SETTINGS),
            resource_schema={
                "type": "object",
                "properties": {"stream": {"type": "string"}, "subject": {"type": "string"}, "name": {"type": "string"}},
            },
        )

    # ------------------------------------------------------------------ places
    def client(self):
        with self._lock:
            if self._client is None:
                from tidemark.drivers.nats.client import NatsClient

                self._client = NatsClient(self.cfg.url, policy=self.cfg.policy, settings=self.cfg.settings)
            return self._client

    def close(self) -> None:
        with self._lock:
            client, self._client = self._client, None
        if client is not None:
            client.close()

    def _check(self, materialization: str, bindings: Sequence[BindingSpec]) -> list[conf.Target]:
        ts = conf.targets(bindings, self.cfg.stream, materialization)
        if ts:
            self._streams[materialization] = ts[0].stream
        return ts

    def resources(self, materialization: str, bindings: Sequence[BindingSpec]) -> list[str]:
        return [t.subject for t in self._check(materialization, bindings)]

    def stream(self, materialization: str, bindings: Sequence[BindingSpec] = ()) -> Optional[str]:
        """The stream of ``materialization``: its bindings', the endpoint's, or the one whose
        progress subjects name it (None: nothing written yet)."""
        if bindings:
            return conf.stream_of(bindings, self.cfg.stream, materialization)
        if materialization in self._streams:
            return self._streams[materialization]
        if self.cfg.stream is not None:
            return self.cfg.stream
        client = self.client()
        for name in client.stream_names():
            if client.channel_frontiers(name, materialization):
                self._streams[materialization] = name
                return name
        return None

    # ------------------------------------------------------------- setup phase
    def apply(self, req: Apply, resources: Sequence[str]) -> Applied:
        ts = self._check(req.materialization, req.bindings)
        stream = cast(str, self.stream(req.materialization, req.bindings))  # a str: stream_of's, with bindings
        client = self.client()
        existing = client.stream_config(stream)
        exists = existing is not None
        limits = dropping_limits(existing or {})
        writers = client.subject_writers(stream, [t.subject for t in ts]) if exists else {}
        others = {subj: w for subj, w in writers.items() if w != req.materialization}
        if others:
            subj, w = sorted(others.items())[0]
            raise RecoveryError(
                f"subject {subj!r} of stream {stream!r} holds the view of materialization {w!r}; "
                f"{req.materialization!r} would mix its documents into it (and a reader could not tell them "
                "apart). Give this view a subject of its own. Nothing was changed"
            )
        if limits:
            raise IncompatibleSchema(
                f"stream {stream!r} deletes messages on its own ({', '.join(limits)}): the view's documents and "
                "progress records would silently go, and a rebuild or a reader would miss them. Remove the limits "
                f"(`nats stream edit {stream}` with no max age/messages/bytes and retention limits), or give the "
                "view a stream of its own. Nothing was changed"
            )
        if exists and req.checkpoint_id:
            owners = {
                str(f.checkpoint.get("checkpoint_id"))
                for f in client.channel_frontiers(stream, req.materialization).values()
                if isinstance(f.checkpoint, dict) and f.checkpoint.get("checkpoint_id")
            }
            if owners - {req.checkpoint_id}:
                raise RecoveryError(
                    f"stream {stream!r} holds progress records of {req.materialization!r} written by tidemark "
                    f"checkpoint {', '.join(sorted(owners))}, not by {req.checkpoint_id}; give this view its own "
                    f"materialization name, or start it over with `tidemark reset SPEC -m {req.materialization}`. "
                    "Nothing was changed"
                )
        subjects = [t.subject for t in ts] + [conf.quarantine_subject(stream, req.materialization)]
        action = f"{'update' if exists else 'create'} stream {stream} for subjects {', '.join(subjects)}"
        created = () if exists else tuple(b.resource_path for b in req.bindings)
        if req.dry_run:
            version = client.server_version
            atomic = self.cfg.atomic if self.cfg.atomic is not None else version_tuple(version) >= MIN_ATOMIC_VERSION
            return Applied(f"{action} ({publish_mode(atomic)}, nats-server {version})", created)
        records = {}
        if req.checkpoint_id:
            records = {
                identity_entry(t.subject): record_text(r, f"{stream}:{t.subject}") for t, r in zip(ts, req.identities)
            }
        setup = client.ensure_stream(stream, subjects, atomic=self.cfg.atomic, metadata=records)
        if not setup.atomic:
            log.warning("materialization %s: stream %s: %s", req.materialization, stream, publish_mode(False))
        return Applied(f"{action} ({publish_mode(setup.atomic)}, nats-server {setup.server_version})", created)

    def identities(self, materialization: str, resources: Sequence[str]) -> list[Optional[dict]]:
        stream = self.stream(materialization)
        meta = ((self.client().stream_config(stream) if stream else None) or {}).get("metadata") or {}
        return [parse_record(meta.get(identity_entry(subject))) for subject in resources]

    # ------------------------------------------------------- transaction phase
    def fence(self, req: Open, resources: Sequence[str]) -> NatsSession:
        from tidemark.drivers.nats.wire import Channel

        stream = cast(str, self.stream(req.materialization, req.bindings))  # a str: stream_of's, with bindings
        channel = Channel(stream, req.materialization, req.range)
        qsubject = conf.quarantine_subject(stream, req.materialization)
        return NatsSession(self.client(), channel, resources, [b.delta_updates for b in req.bindings], qsubject)

    # -------------------------------------------------------------- inspection
    def read_committed(
        self, materialization: str, subjects: Optional[Sequence[str]] = None, stream: Optional[str] = None
    ):
        """The committed messages of ``materialization`` (of ``subjects``), in commit order."""
        stream = stream or self.stream(materialization)
        if stream is None:
            return iter(())
        return self.client().read_committed(stream, materialization=materialization, subjects=subjects)

    def rows(self, materialization: str, resources: Sequence[str]) -> Iterator[Row]:
        for m in self.read_committed(materialization, resources):
            if m.subject in resources:
                yield m.subject, tuple(m.key), None if m.delete else bytes(m.message.data)

    def quarantined(self, materialization: str) -> list[dict]:
        stream = self.stream(materialization)
        if stream is None:
            return []
        q = conf.quarantine_subject(stream, materialization)
        return [m.document for m in self.read_committed(materialization, [q], stream) if m.subject == q]

    def checkpoints(self, materialization: str) -> list[CheckpointRow]:
        """Every range's last progress record (a range closed by a rescale keeps the batch it
        held); the fence is the record's stream sequence."""
        stream = self.stream(materialization)
        if stream is None or not self.client().stream_exists(stream):
            return []
        fr = self.client().channel_frontiers(stream, materialization)
        return [CheckpointRow(materialization, r, f.seq, f.checkpoint) for r, f in fr.items()]

    def drop(self, materialization: str, bindings: Sequence[BindingSpec], resources: Sequence[str]) -> list[str]:
        """Purge the view's subjects, its progress records and quarantine from the stream (the
        stream itself stays)."""
        from tidemark.drivers.nats.layout import progress_filter

        done = []
        stream = self.stream(materialization, bindings) if bindings else self.stream(materialization)
        if stream is not None and self.client().stream_exists(stream):
            ts = conf.targets(bindings, self.cfg.stream, materialization)
            subjects = [t.subject for t in ts] + [
                conf.quarantine_subject(stream, materialization),
                progress_filter(stream, materialization),
            ]
            n = self.client().purge(stream, subjects)
            done.append(f"purged {n} messages of {', '.join(subjects)} from stream {stream}")
            scfg = self.client().stream_config(stream) or {}
            meta = scfg.get("metadata") or {}
            mine = {
                identity_entry(t.subject): None
                for t in ts
                if json.loads(meta.get(identity_entry(t.subject)) or "{}").get("materialization") == materialization
            }
            if mine:
                self.client().ensure_stream(
                    stream, list(scfg.get("subjects") or ()), atomic=bool(scfg.get("allow_atomic")), metadata=mine
                )
                done.append(f"removed the view-identity records of {len(mine)} subject(s) from stream {stream}")
        return done


def identity_entry(subject: str) -> str:
    """The stream-metadata entry that keeps a subject's view-identity record (JSON)."""
    return f"tidemark.identity.{subject}"


class NatsDriver(PushDriver):
    name = "nats"
    log_part = NatsLog
    log: NatsLog  # what ``log_part`` makes (``query`` reads the stream through it)


__all__ = ["NatsDriver", "NatsLog"]
