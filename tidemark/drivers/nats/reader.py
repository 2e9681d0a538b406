"""The read-committed reader: only documents a progress record covers, each once.

Reading a stream in sequence order, per channel ``(materialization, range)``:

* a data message waits until the ``commit`` record of its batch arrives; then the batch's
  counters ``1..count`` are delivered in counter order, the first copy of each counter
  (a duplicate from a zombie or a replay outside the duplicate window is dropped);
* a data message of a batch that is not after the channel's committed batch is a late
  duplicate and is dropped; so is anything written to a ``closed`` range;
* an ``open`` record after a rescale sets the new range's committed batch (inherited).

So a partial batch (a writer killed mid-batch in ordered mode, or a zombie's chunk) is
never delivered, and documents come out in commit order.  :func:`committed_view` folds
them into the last document per key (deletes remove the key).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Iterable, Iterator, Optional

from tidemark.drivers.nats import wire
from tidemark.drivers.nats.wire import BatchId, DataMessage, ProgressRecord
from tidemark.errors import RecoveryError


@dataclass(frozen=True, slots=True)
class CommittedMessage:
    """A data message a commit record covers, with the sequence of that record."""

    message: DataMessage
    commit_seq: int

    @property
    def key(self) -> tuple:
        return self.message.key

    @property
    def subject(self) -> str:
        return self.message.subject

    @property
    def delete(self) -> bool:
        return self.message.delete

    @property
    def document(self) -> Any:
        return self.message.document


@dataclass(slots=True)
class _ChannelState:
    committed: Optional[BatchId] = None
    closed: bool = False
    pending: dict[BatchId, dict[int, DataMessage]] = field(default_factory=dict)


class CommittedFold:
    """The reader's state machine; feed it messages in stream order with :meth:`feed`."""

    def __init__(self, prefix: str, materialization: Optional[str] = None, filtered: bool = False):
        self.progress_prefix = f"{prefix}.progress."
        self.materialization = materialization
        self.filtered = filtered  # the stream is read through a subject filter: a batch's other subjects are absent
        self.channels: dict[tuple[str, str], _ChannelState] = {}

    def _state(self, mat: str, key_range: str) -> _ChannelState:
        return self.channels.setdefault((mat, key_range), _ChannelState())

    def feed(self, seq: int, subject: str, headers: Optional[dict], data: bytes) -> list[CommittedMessage]:
        if subject.startswith(self.progress_prefix):
            return self._record(seq, ProgressRecord.decode(data))
        d = wire.decode_data(seq, subject, headers, data)
        if d is None or (self.materialization and d.materialization != self.materialization):
            return []
        st = self._state(d.materialization, d.range)
        if st.closed or not d.batch.after(st.committed):
            return []  # a write to a retired range, or a late duplicate of a committed batch
        st.pending.setdefault(d.batch, {}).setdefault(d.counter, d)  # the first copy wins
        return []

    def _record(self, seq: int, rec: ProgressRecord) -> list[CommittedMessage]:
        if self.materialization and rec.materialization != self.materialization:
            return []
        st = self._state(rec.materialization, rec.range)
        out: list[CommittedMessage] = []
        if rec.kind == wire.KIND_COMMIT and rec.committed is not None and rec.committed.after(st.committed):
            got = st.pending.pop(rec.committed, {})
            missing = [c for c in range(1, rec.count + 1) if c not in got]
            if missing and not self.filtered:
                raise RecoveryError(
                    f"stream sequence {seq}: the commit of batch {rec.committed.batch_id} on range {rec.range} of "
                    f"{rec.materialization!r} covers {rec.count} documents but counters {missing[:5]} are not in the "
                    f"stream (removed by retention limits?)"
                )
            out = [CommittedMessage(got[c], seq) for c in range(1, rec.count + 1) if c in got]
            st.committed = rec.committed
        elif rec.kind == wire.KIND_OPEN and rec.inherited_from:
            st.committed = rec.committed
            st.closed = False
        elif rec.kind == wire.KIND_CLOSED:
            st.closed = True
        if rec.kind in (wire.KIND_COMMIT, wire.KIND_OPEN, wire.KIND_CLOSED):
            st.pending = {b: m for b, m in st.pending.items() if not st.closed and b.after(st.committed)}
        return out


def fold_committed(
    messages: Iterable[tuple[int, str, Optional[dict], bytes]],
    prefix: str,
    materialization: Optional[str] = None,
    filtered: bool = False,
) -> Iterator[CommittedMessage]:
    """Committed messages, in commit order, of ``(seq, subject, headers, data)`` in stream order
    (``filtered``: read through a subject filter, so a batch's messages on other subjects are absent)."""
    fold = CommittedFold(prefix, materialization, filtered)
    for seq, subject, headers, data in messages:
        yield from fold.feed(seq, subject, headers, data)


def committed_view(messages: Iterable[CommittedMessage], subject: Optional[str] = None) -> dict[tuple, Any]:
    """The last committed document per key (of ``subject``, when given); deletes remove keys."""
    view: dict[tuple, Any] = {}
    for m in messages:
        if subject is not None and m.subject != subject:
            continue
        if m.delete:
            view.pop(m.key, None)
        else:
            view[m.key] = m.document
    return view
