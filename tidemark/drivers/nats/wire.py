"""What tidemark writes into a JetStream stream: subjects, headers, message ids, progress records.

Pure data and codecs, no I/O and no ``nats`` import, so the read-committed reader and the
tests can decode a stream without the client.

A **channel** is what one shard session writes to one stream: ``(stream, materialization,
range)``.  Its messages:

data message, on a binding's subject (shared by every range of the materialization)::

    Tidemark-Materialization: customer_view
    Tidemark-Range:           00000000-7fffffff
    Tidemark-Checkpoint:      <checkpoint_id of the recovery log>
    Tidemark-Batch:           17                 # batch_id, only grows within a checkpoint
    Tidemark-Counter:         42                 # 1-based, per (channel, batch), in Store order
    Tidemark-Key:             ["c0042"]          # the key, a JSON array
    Tidemark-Op:              delete             # only on deletes; upserts carry no Op header
    Nats-Msg-Id:              tm/<materialization>/<range>/<checkpoint>/<batch>/<counter>
    payload: the key's full document as JSON (a delete carries the document that deleted it)

progress record, on the channel's own subject ``<prefix>.progress.<materialization>.<range>``
(``prefix`` defaults to ``tidemark.<stream>``): a JSON object, :class:`ProgressRecord`.
Every record carries the channel's whole state forward, so the *last* record on the
subject is the frontier, and its stream sequence is the fence: each record is published
with ``Nats-Expected-Last-Subject-Sequence`` equal to the sequence of the record before it.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field, replace
from typing import Any, Mapping, Optional

from tidemark.protocol.messages import Range

# ---------------------------------------------------------------- headers
H_MATERIALIZATION = "Tidemark-Materialization"
H_RANGE = "Tidemark-Range"
H_CHECKPOINT = "Tidemark-Checkpoint"
H_BATCH = "Tidemark-Batch"
H_COUNTER = "Tidemark-Counter"
H_KEY = "Tidemark-Key"
H_OP = "Tidemark-Op"
OP_DELETE = "delete"

# NATS' own headers that tidemark sets.
H_MSG_ID = "Nats-Msg-Id"
H_EXPECTED_LAST_SUBJECT_SEQ = "Nats-Expected-Last-Subject-Sequence"
H_BATCH_ID = "Nats-Batch-Id"
H_BATCH_SEQ = "Nats-Batch-Sequence"
H_BATCH_COMMIT = "Nats-Batch-Commit"

RECORD_VERSION = 1

_TOKEN_OK = re.compile(r"^[A-Za-z0-9_-]+$")


def subject_token(name: str) -> str:
    """``name`` as one subject token: letters, digits, ``_`` and ``-`` stay; every other
    byte (``.``, ``*``, ``>``, spaces, …) becomes ``~XX``.  Injective, so two
    materializations never share a progress subject."""
    if _TOKEN_OK.match(name):
        return name
    out = []
    for ch in name:
        if _TOKEN_OK.match(ch):
            out.append(ch)
        else:
            out.extend(f"~{b:02X}" for b in ch.encode())
    return "".join(out)


def default_prefix(stream: str) -> str:
    return f"tidemark.{subject_token(stream)}"


@dataclass(frozen=True, slots=True)
class Channel:
    """What one shard session writes to one stream."""

    stream: str
    materialization: str
    range: Range
    prefix: str = ""  # progress subjects live under ``<prefix>.progress.``; default tidemark.<stream>

    def __post_init__(self) -> None:
        if not self.prefix:
            object.__setattr__(self, "prefix", default_prefix(self.stream))

    @property
    def progress_subject(self) -> str:
        return progress_subject(self.prefix, self.materialization, self.range)

    def with_range(self, key_range: Range) -> "Channel":
        return replace(self, range=key_range)


def progress_subject(prefix: str, materialization: str, key_range: Range) -> str:
    return f"{prefix}.progress.{subject_token(materialization)}.{key_range.name}"


def progress_wildcard(prefix: str) -> str:
    """The subject filter that covers every progress subject under ``prefix``."""
    return f"{prefix}.progress.>"


@dataclass(frozen=True, slots=True, order=True)
class BatchId:
    """A transaction of the recovery log: ``batch_id`` only grows within one ``checkpoint_id``."""

    checkpoint_id: str
    batch_id: int

    @staticmethod
    def from_checkpoint(cp: dict) -> "BatchId":
        return BatchId(str(cp["checkpoint_id"]), int(cp["batch_id"]))

    def as_json(self) -> dict:
        return {"checkpoint_id": self.checkpoint_id, "batch_id": self.batch_id}

    @staticmethod
    def from_json(d: Optional[dict]) -> Optional["BatchId"]:
        return None if d is None else BatchId(str(d["checkpoint_id"]), int(d["batch_id"]))

    def after(self, other: Optional["BatchId"]) -> bool:
        """True when this batch comes after ``other`` (None: nothing committed yet).  A
        batch of another checkpoint (``tidemark reset``) is never "before" this one."""
        if other is None or other.checkpoint_id != self.checkpoint_id:
            return True
        return self.batch_id > other.batch_id


def msg_id(channel: Channel, batch: BatchId, counter: int) -> str:
    """The deterministic ``Nats-Msg-Id`` of one data message: a replay of the same batch
    produces the same ids, so the server's duplicate window drops what it already has."""
    return (
        f"tm/{subject_token(channel.materialization)}/{channel.range.name}/"
        f"{subject_token(batch.checkpoint_id)}/{batch.batch_id}/{counter}"
    )


def data_headers(
    channel: Channel, batch: BatchId, counter: int, key: Any, *, delete: bool = False, with_msg_id: bool = True
) -> dict[str, str]:
    h = {
        H_MATERIALIZATION: channel.materialization,
        H_RANGE: channel.range.name,
        H_CHECKPOINT: batch.checkpoint_id,
        H_BATCH: str(batch.batch_id),
        H_COUNTER: str(counter),
        H_KEY: json.dumps(list(key), separators=(",", ":"), ensure_ascii=False),
    }
    if delete:
        h[H_OP] = OP_DELETE
    if with_msg_id:
        h[H_MSG_ID] = msg_id(channel, batch, counter)
    return h


@dataclass(frozen=True, slots=True)
class DataMessage:
    """A decoded data message (see the module docstring)."""

    seq: int
    subject: str
    materialization: str
    range: str
    batch: BatchId
    counter: int
    key: tuple
    delete: bool
    data: bytes

    @property
    def document(self) -> Any:
        return json.loads(self.data) if self.data else None


def decode_data(seq: int, subject: str, headers: Optional[dict], data: bytes) -> Optional[DataMessage]:
    """A :class:`DataMessage`, or None when the message carries no tidemark headers."""
    if not headers or H_COUNTER not in headers:
        return None
    return DataMessage(
        seq=seq,
        subject=subject,
        materialization=headers[H_MATERIALIZATION],
        range=headers[H_RANGE],
        batch=BatchId(headers[H_CHECKPOINT], int(headers[H_BATCH])),
        counter=int(headers[H_COUNTER]),
        key=tuple(json.loads(headers[H_KEY])),
        delete=headers.get(H_OP) == OP_DELETE,
        data=data,
    )


# ---------------------------------------------------------------- progress records
KIND_OPEN = "open"  # a session claimed the channel (the fence moved); state carried forward
KIND_CHUNK = "chunk"  # atomic mode: counters 1..through of the in-flight batch are stored
KIND_COMMIT = "commit"  # the batch is complete: every counter 1..count is stored
KIND_CLOSED = "closed"  # rescale: the range is retired; nothing may be written to it
KINDS = (KIND_OPEN, KIND_CHUNK, KIND_COMMIT, KIND_CLOSED)


@dataclass(frozen=True, slots=True)
class InFlightMark:
    """Atomic mode: the in-flight batch's counters ``1..through`` are in the stream."""

    batch: BatchId
    through: int


@dataclass(frozen=True, slots=True)
class ProgressRecord:
    """One message on a channel's progress subject, JSON, versioned (``v``).

    ``committed`` is the last batch whose documents are all in the stream (``count`` of
    them), ``checkpoint`` the runtime checkpoint committed with it (what ``Opened``
    returns), ``committed_seq`` the stream sequence of the ``commit`` record that
    committed it (None for that record itself: its own sequence).  Records of other
    kinds copy these forward unchanged."""

    kind: str
    materialization: str
    range: str
    session: str
    committed: Optional[BatchId] = None
    count: int = 0
    checkpoint: Optional[dict] = None
    committed_seq: Optional[int] = None
    inflight: Optional[InFlightMark] = None
    inherited_from: tuple[str, ...] = ()  # open after a rescale: the old ranges
    successors: tuple[str, ...] = ()  # closed: the new ranges
    v: int = RECORD_VERSION

    def __post_init__(self) -> None:
        if self.kind not in KINDS:
            raise ValueError(f"unknown progress record kind {self.kind!r}")

    def encode(self) -> bytes:
        d: dict[str, Any] = {
            "v": self.v,
            "kind": self.kind,
            "materialization": self.materialization,
            "range": self.range,
            "session": self.session,
            "committed": self.committed.as_json() if self.committed else None,
            "count": self.count,
            "checkpoint": self.checkpoint,
            "committed_seq": self.committed_seq,
            "inflight": (
                {"batch": self.inflight.batch.as_json(), "through": self.inflight.through} if self.inflight else None
            ),
        }
        if self.inherited_from:
            d["inherited_from"] = list(self.inherited_from)
        if self.successors:
            d["successors"] = list(self.successors)
        return json.dumps(d, separators=(",", ":"), sort_keys=True).encode()

    @staticmethod
    def decode(data: bytes) -> "ProgressRecord":
        d = json.loads(data)
        v = d.get("v")
        if v != RECORD_VERSION:
            raise ValueError(f"progress record version {v!r} is not supported (this tidemark reads {RECORD_VERSION})")
        inflight = d.get("inflight")
        return ProgressRecord(
            kind=d["kind"],
            materialization=d["materialization"],
            range=d["range"],
            session=d["session"],
            committed=BatchId.from_json(d.get("committed")),
            count=int(d.get("count", 0)),
            checkpoint=d.get("checkpoint"),
            committed_seq=d.get("committed_seq"),
            inflight=(
                InFlightMark(BatchId.from_json(inflight["batch"]), int(inflight["through"]))  # type: ignore[arg-type]
                if inflight
                else None
            ),
            inherited_from=tuple(d.get("inherited_from", ())),
            successors=tuple(d.get("successors", ())),
            v=v,
        )


@dataclass(frozen=True, slots=True)
class Frontier:
    """A channel's state as its last progress record says.

    ``seq`` is that record's stream sequence (0: the subject is empty): the fence the next
    record must name.  ``committed_seq`` is the sequence of the record that committed
    ``record.committed`` (0 when nothing is committed): data after it may belong to the
    in-flight batch."""

    record: Optional[ProgressRecord]
    seq: int

    @property
    def committed(self) -> Optional[BatchId]:
        return self.record.committed if self.record else None

    @property
    def checkpoint(self) -> Optional[dict]:
        return self.record.checkpoint if self.record else None

    @property
    def closed(self) -> bool:
        return bool(self.record and self.record.kind == KIND_CLOSED)

    @property
    def committed_seq(self) -> int:
        r = self.record
        if r is None or r.committed is None:
            return 0
        if r.kind == KIND_COMMIT or (r.kind == KIND_OPEN and r.inherited_from and r.committed_seq is None):
            return self.seq  # this record committed (or, after a rescale, inherited) the batch
        return int(r.committed_seq or 0)

    def carried_forward(
        self, kind: str, materialization: str, range: str, session: str, **fields: Any
    ) -> ProgressRecord:
        """The next record, of ``kind``: this frontier's committed batch, count, checkpoint and
        committed sequence copied forward, with ``fields`` on top."""
        prev = self.record
        return ProgressRecord(
            kind=kind,
            materialization=materialization,
            range=range,
            session=session,
            committed=self.committed,
            count=prev.count if prev else 0,
            checkpoint=self.checkpoint,
            committed_seq=self.committed_seq or None,
            **fields,
        )


@dataclass(frozen=True, slots=True)
class InFlight:
    """Data messages of a channel already in the stream after its committed batch, by batch:
    a replay skips exactly these counters.  Normally one batch (the one in flight)."""

    written: Mapping[BatchId, frozenset[int]] = field(default_factory=dict)
    last_seq: int = 0  # the highest stream sequence among them

    def skip(self, batch: BatchId, counter: int) -> bool:
        return counter in self.written.get(batch, ())

    def counters(self, batch: BatchId) -> frozenset[int]:
        return self.written.get(batch, frozenset())
