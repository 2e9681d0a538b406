"""The ``nats`` endpoint: each changed key's full document as a message on a JetStream stream,
exactly once, without transactions (see :mod:`tidemark.drivers.nats` for the scheme, and
:mod:`.config` for the config and resources).

Commit pattern: store-authoritative — the log's progress record of a range is the endpoint
transaction: it names the batch and the runtime checkpoint, and it is fenced by
``Nats-Expected-Last-Subject-Sequence`` on the range's progress subject.  Loads read a local
state store (:mod:`tidemark.store`, under ``state``), a cache of the log that an Open
rebuilds from the log whenever the two disagree (:mod:`.opening`).
"""

from __future__ import annotations

import dataclasses
import json
import logging
import os
import shutil
import threading
from typing import Any, Optional, Sequence, cast

from tidemark.drivers.base import Capabilities, CheckpointRow, CommitPattern, Driver
from tidemark.drivers.common.identity import parse_record, record_text
from tidemark.drivers.common.settings import config_schema
from tidemark.drivers.nats import settings as conf
from tidemark.drivers.nats.channel import MIN_ATOMIC_VERSION, version_tuple
from tidemark.drivers.nats.layout import dropping_limits
from tidemark.drivers.nats.opening import fence, open_store
from tidemark.drivers.nats.transactor import NatsTransactor
from tidemark.drivers.push.local import QUARANTINE_ID, StoreTransactor, binding_id
from tidemark.errors import IncompatibleSchema, RecoveryError
from tidemark.protocol.messages import (
    Applied,
    Apply,
    BindingSpec,
    Open,
    Opened,
    SpecResponse,
    Validate,
    Validated,
    ValidatedBinding,
)

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


CAPABILITIES = Capabilities(
    commit_pattern=CommitPattern.STORE_AUTHORITATIVE,
    delta_updates=True,
    standard_updates=True,
    max_load_keys=10_000,
    max_store_docs=10_000,
    concurrent_shards=True,
    quarantine=True,
)


class NatsDriver(Driver):
    name = "nats"

    def __init__(self, config: dict | None = None):
        super().__init__(config)
        self.cfg = conf.NatsConfig.from_config(self.config)
        self._client = None
        self._lock = threading.Lock()
        self._streams: dict[str, str] = {}  # materialization -> stream, once known

    def __repr__(self) -> str:
        return f"NatsDriver(url={self.cfg.safe_url!r}, state={self.cfg.state!r})"

    @classmethod
    def resolve_config(cls, config: dict, base_dir: str) -> dict:
        """``state`` (default ``tidemark-state``) against the spec's folder."""
        return conf.resolve_state(config, base_dir)

    def capabilities(self) -> Capabilities:
        return CAPABILITIES

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

    def store_config(self, materialization: str):
        from tidemark.store import StoreConfig

        return StoreConfig(
            path=conf.state_dir(self.cfg.state, materialization), lock_timeout=self.cfg.policy.lock_timeout
        )

    def _check(self, materialization: str, bindings: Sequence[BindingSpec]) -> list[conf.Target]:
        ts = conf.targets(bindings, self.cfg.stream, materialization)
        seen: dict[int, str] = {}
        for b, t in zip(bindings, ts):
            if b.delta_updates:
                continue
            i = binding_id(t.subject)
            if i in seen or i == QUARANTINE_ID:
                raise IncompatibleSchema(
                    f"nats: subjects {t.subject!r} and {seen.get(i, 'quarantine')!r} share the "
                    f"state store's 16-bit binding id {i}; rename one"
                )
            seen[i] = t.subject
        if ts:
            self._streams[materialization] = ts[0].stream
        return ts

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
    def validate(self, req: Validate) -> Validated:
        self._check(req.materialization, req.bindings)
        return Validated(tuple(ValidatedBinding(b.resource_path, b.delta_updates) for b in req.bindings))

    def apply(self, req: Apply) -> Applied:
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

    def identities(self, materialization: str, bindings: Sequence[BindingSpec]) -> list[Optional[dict]]:
        ts = self._check(materialization, bindings)
        stream = self.stream(materialization, bindings)
        meta = ((self.client().stream_config(stream) if stream else None) or {}).get("metadata") or {}
        out: list[Optional[dict]] = []
        for t in ts:
            out.append(parse_record(meta.get(identity_entry(t.subject))))
        return out

    # ------------------------------------------------------- transaction phase
    def open(self, req: Open) -> tuple[NatsTransactor, Opened]:
        from tidemark.drivers.nats.wire import Channel

        ts = self._check(req.materialization, req.bindings)
        stream = cast(str, self.stream(req.materialization, req.bindings))  # a str: stream_of's, with bindings
        client = self.client()
        channel = Channel(stream, req.materialization, req.range)
        session = fence(client, channel)
        qsubject = conf.quarantine_subject(stream, req.materialization)
        subjects = [t.subject for t in ts]
        inflight = client.written_after(channel, session.frontier, [*dict.fromkeys(subjects), qsubject])
        standard = [(t.subject, binding_id(t.subject)) for b, t in zip(req.bindings, ts) if not b.delta_updates]
        checkpoint = session.frontier.checkpoint
        store = open_store(client, self.store_config(req.materialization), channel, checkpoint, standard)
        ids = [binding_id(t.subject) for t in ts]
        named = [dataclasses.replace(b, resource={"name": t.subject}) for b, t in zip(req.bindings, ts)]
        tx = NatsTransactor(
            client,
            session,
            inflight,
            StoreTransactor(store, req.materialization, named, ids),
            subjects,
            [b.delta_updates for b in req.bindings],
            qsubject,
            req.materialization,
        )
        return tx, Opened(checkpoint)

    # -------------------------------------------------------------- inspection
    def read_committed(
        self, materialization: str, subjects: Optional[Sequence[str]] = None, stream: Optional[str] = None
    ):
        """The committed messages of ``materialization`` (of ``subjects``), in commit order."""
        stream = stream or self.stream(materialization)
        if stream is None:
            return iter(())
        return self.client().read_committed(stream, materialization=materialization, subjects=subjects)

    def dump(self, materialization: str, binding: BindingSpec):
        t = conf.target(binding, self.cfg.stream)
        msgs = self.read_committed(materialization, [t.subject], t.stream)
        if binding.delta_updates:
            return [m.document for m in msgs if m.subject == t.subject]
        view: dict[tuple, Any] = {}
        for m in msgs:
            if m.subject != t.subject:
                continue
            if m.delete:
                view.pop(tuple(m.key), None)
            else:
                view[tuple(m.key)] = m.document
        return view

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
        return [
            CheckpointRow(materialization, r, f.seq, f.checkpoint)
            for r, f in sorted(fr.items(), key=lambda kv: (kv[0].key_begin, kv[0].key_end))
        ]

    def drop(self, materialization: str, bindings: Sequence[BindingSpec]) -> list[str]:
        """Purge the view's subjects, its progress records and quarantine from the stream, and
        remove its local state store (stop the job first).  The stream itself stays."""
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
        path = conf.state_dir(self.cfg.state, materialization)
        if os.path.isdir(path):
            shutil.rmtree(path)
            done.append(f"removed state store {path}")
        return done


def identity_entry(subject: str) -> str:
    """The stream-metadata entry that keeps a subject's view-identity record (JSON)."""
    return f"tidemark.identity.{subject}"


__all__ = ["NatsDriver", "CAPABILITIES"]
