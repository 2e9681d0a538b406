"""The ``nats`` endpoint's config and resources: which stream and subject each binding writes.

::

    endpoint: {nats: {url: "nats://127.0.0.1:4222",   # required; credentials are never printed
                      state: DIR,                      # the local state store (default tidemark-state
                                                       # next to the spec)
                      stream: VIEWS,                   # optional: the default stream of the bindings
                      atomic: auto,                    # auto | true | false: atomic batch publish
                      max_batch: 1000,                 # messages per atomic batch (server limit)
                      duplicate_window: 120,           # seconds, for a stream Apply creates
                      retry: {connect_timeout: 10}}}
    bindings: [{source: orders, resource: {stream: VIEWS, subject: views.customers}}]

``resource: {name: customers}`` (or ``table``) is short for ``{stream: <endpoint stream>,
subject: <stream>.customers}``.  Every binding of one materialization writes ONE stream: its
progress records live there, and an atomic batch cannot span streams.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from typing import Any, Optional, Sequence

from tidemark.drivers.common.redact import redact
from tidemark.drivers.common.settings import Setting, read
from tidemark.drivers.nats import wire
from tidemark.drivers.nats.channel import NatsSettings
from tidemark.errors import IncompatibleSchema, SpecError
from tidemark.policy import RetryPolicy
from tidemark.protocol.messages import BindingSpec

DEFAULT_STATE = "tidemark-state"
SETTINGS = (
    Setting("url", required=True, description="nats://HOST:PORT (or tls://, ws://, wss://)"),
    Setting("state", default=DEFAULT_STATE, description="the local state store's folder (relative: the spec's folder)"),
    Setting("stream", description="the JetStream stream of the bindings that name none"),
    Setting(
        "atomic",
        "any",
        default="auto",
        properties={"enum": ["auto", True, False, "true", "false"]},
        description="atomic batch publish (auto: where the server has it)",
    ),
    Setting("max_batch", "integer", default=1000, minimum=2, description="messages per atomic publish, at most"),
    Setting("duplicate_window", "number", default=120.0, minimum=0, description="the stream's dedup window, seconds"),
    Setting("retry", "retry"),
)
_STREAM_OK = re.compile(r"^[A-Za-z0-9_-]+$")
_SUBJECT_TOKEN_OK = re.compile(r"^[^\s.*>]+$")


@dataclass(frozen=True, slots=True)
class Target:
    """Where one binding writes."""

    stream: str
    subject: str


@dataclass(frozen=True)
class NatsConfig:
    url: str
    state: str
    stream: Optional[str]
    atomic: Optional[bool]
    settings: NatsSettings
    policy: RetryPolicy

    @property
    def safe_url(self) -> str:
        return redact(self.url)

    def __repr__(self) -> str:  # the URL may carry a password or a token
        return f"NatsConfig(url={self.safe_url!r}, stream={self.stream!r}, state={self.state!r})"

    @classmethod
    def from_config(cls, config: dict) -> "NatsConfig":
        v = read("nats", config, SETTINGS)
        url = v["url"]
        if not url.startswith(("nats://", "tls://", "ws://", "wss://")):
            raise SpecError(f"nats: `url` must be a NATS URL like nats://127.0.0.1:4222, got {redact(url)!r}")
        atomic = v["atomic"]
        if isinstance(atomic, str):
            atomic = {"auto": None, "true": True, "false": False}.get(atomic.lower(), "bad")
        if atomic not in (None, True, False):
            raise SpecError(f"nats: `atomic` must be auto, true or false, got {config.get('atomic')!r}")
        stream = v["stream"]
        if stream is not None:
            check_stream(stream, "the endpoint's `stream`")
        settings = NatsSettings(max_batch=v["max_batch"], duplicate_window=v["duplicate_window"])
        return cls(url, v["state"], stream, atomic, settings, v["retry"])


def check_stream(name: Any, what: str) -> str:
    if not isinstance(name, str) or not _STREAM_OK.match(name):
        raise SpecError(f"nats: {what} must be a stream name of letters, digits, `_` and `-`, got {name!r}")
    return name


def check_subject(subject: Any, what: str) -> str:
    if not isinstance(subject, str) or not subject or not all(_SUBJECT_TOKEN_OK.match(t) for t in subject.split(".")):
        raise SpecError(
            f"nats: {what} must be a literal subject (dot-separated tokens, no spaces or wildcards), got {subject!r}"
        )
    return subject


def target(binding: BindingSpec, default_stream: Optional[str]) -> Target:
    """The stream and subject of ``binding`` (see the module docstring)."""
    res = binding.resource if isinstance(binding.resource, dict) else {}
    extra = set(res) - {"stream", "subject", "name", "table"}
    if extra:
        raise SpecError(
            f"binding of {binding.collection!r}: a nats resource takes `stream` and `subject` "
            f"(or `name`), not {sorted(extra)}"
        )
    stream = res.get("stream", default_stream)
    if stream is None:
        raise SpecError(
            f"binding of {binding.collection!r}: name its stream (resource {{stream: NAME, subject: ...}}) "
            "or set the endpoint's `stream`"
        )
    check_stream(stream, f"the stream of the binding of {binding.collection!r}")
    subject = res.get("subject")
    name = res.get("name", res.get("table"))
    if subject is None:
        if name is None:
            raise SpecError(f"binding of {binding.collection!r}: give the resource a `subject` (or a `name`)")
        subject = f"{stream}.{check_subject(name, 'the resource name')}"
    check_subject(subject, f"the subject of the binding of {binding.collection!r}")
    if subject.startswith(wire.default_prefix(stream) + "."):
        raise SpecError(
            f"binding of {binding.collection!r}: subject {subject!r} is under "
            f"{wire.default_prefix(stream)}.>, where tidemark keeps progress records; choose another"
        )
    return Target(stream, subject)


def targets(bindings: Sequence[BindingSpec], default_stream: Optional[str], materialization: str) -> list[Target]:
    """Every binding's target; refuses two streams in one materialization and a subject bound twice."""
    out = [target(b, default_stream) for b in bindings]
    streams = sorted({t.stream for t in out})
    if len(streams) > 1:
        raise IncompatibleSchema(
            f"materialization {materialization!r} binds streams {', '.join(streams)}: every binding of one "
            "materialization must write the same stream (its progress records and atomic batches live there); "
            "use one materialization per stream"
        )
    seen: set[str] = set()
    for t in out:
        if t.subject in seen:
            raise IncompatibleSchema(f"materialization {materialization!r}: subject {t.subject!r} is bound twice")
        seen.add(t.subject)
    return out


def stream_of(bindings: Sequence[BindingSpec], default_stream: Optional[str], materialization: str) -> str:
    ts = targets(bindings, default_stream, materialization)
    if ts:
        return ts[0].stream
    if default_stream is None:
        raise SpecError(f"materialization {materialization!r}: no bindings and no endpoint `stream`")
    return default_stream


def quarantine_subject(stream: str, materialization: str) -> str:
    return f"{wire.default_prefix(stream)}.quarantine.{wire.subject_token(materialization)}"


def resolve_state(config: dict, base_dir: str) -> dict:
    out = dict(config)
    state = out.get("state") or DEFAULT_STATE
    if isinstance(state, str) and not os.path.isabs(state):
        state = os.path.abspath(os.path.join(base_dir, state))
    out["state"] = state
    return out
