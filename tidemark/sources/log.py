"""A collection read from a log (a Kafka topic, a NATS JetStream stream), without Spark.

A log is a set of *parts* (Kafka: one per topic-partition, named ``topic/0000000003``;
NATS: the stream, named by the stream), each an ordered sequence of records at integer
offsets (Kafka offsets; JetStream stream sequences).  An offset of the whole source is
``{part: next offset to read}``.  A batch is a range ``[start, end)`` per part, planned by
:func:`plan` on the driver and read by :meth:`Log.read` on an executor:

* ``end`` never passes a part's *stable end* (Kafka: the last stable offset, below which
  every transaction is decided; JetStream: the last sequence + 1), so reading a planned
  range again after a crash yields the same records: a replay is exact;
* a part that appears later (partitions added) starts at its earliest offset;
* a part whose records at ``start`` are gone (retention, a deleted topic or stream) fails
  the batch with :class:`SourceGone`, naming the part and the offsets, before anything is
  read: a view must not skip what it never read.

The Spark side is :mod:`tidemark.spark.logsource`; the parts are
:class:`tidemark.sources.kafka.KafkaLog` and :class:`tidemark.sources.nats.NatsLog`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Iterator, Mapping, Optional, Protocol, Sequence

from tidemark.errors import DocumentError, SourceGone

Offsets = dict[str, int]


@dataclass(frozen=True)
class Bounds:
    """What a part holds now: records at ``earliest <= offset < end`` (``end``: the stable end)."""

    earliest: int
    end: int


@dataclass(frozen=True)
class Record:
    """One record of a part: its offset, value and key (bytes; None where absent)."""

    offset: int
    value: Optional[bytes]
    key: Optional[bytes] = None


class Log(Protocol):
    """One log source, opened from its settings (picklable settings; the log itself is opened
    where it is used: on the driver to plan, on an executor to read)."""

    kind: str  # "kafka" | "nats": the spec's key, and the word in messages
    name: str  # what the messages name: the topic(s) or the stream

    def bounds(self) -> dict[str, Bounds]:
        """Every part the source holds now, with its earliest offset and stable end."""
        ...

    def read(self, part: str, start: int, end: int) -> Iterator[Record]:
        """The committed records of ``part`` with ``start <= offset < end``, in offset order
        (``end`` at most the stable end :meth:`bounds` gave): the same records every time."""
        ...

    def close(self) -> None: ...


def initial(bounds: Mapping[str, Bounds], starting: str = "earliest") -> Offsets:
    """Where a new view starts: each part's earliest offset, or (``latest``) its stable end."""
    return {p: (b.end if starting == "latest" else b.earliest) for p, b in sorted(bounds.items())}


def check_retained(log_name: str, kind: str, start: Mapping[str, int], bounds: Mapping[str, Bounds]) -> None:
    """Refuse a start that the log no longer holds: a part that is gone, or whose earliest
    offset passed ``start`` (its records were deleted before they were read)."""
    problems = []
    for part, at in sorted(start.items()):
        held = bounds.get(part)
        if held is None:
            problems.append(f"{part} no longer exists (the view read it up to offset {at})")
        elif held.earliest > at:
            problems.append(
                f"{part} holds offsets {held.earliest}..{held.end - 1} but the view must read from offset {at} "
                f"({held.earliest - at} records were deleted before they were read: retention, or a purge)"
            )
    if problems:
        raise SourceGone(
            f"{kind} source {log_name}: " + "; ".join(problems) + ". Nothing of this batch was read. "
            "To go on without those records, rebuild the view from what the log still holds (tidemark rebuild)"
        )


def plan(
    start: Mapping[str, int],
    bounds: Mapping[str, Bounds],
    cap: Optional[int] = None,
    target: Optional[Mapping[str, int]] = None,
) -> Offsets:
    """The end offsets of the next batch: every part up to its stable end (or ``target``'s,
    with ``Trigger.AvailableNow``), with parts new since ``start`` from their earliest
    offset; at most ``cap`` offsets in all, shared out over the parts with something to read
    in turn (each part's share a contiguous range from its start)."""
    begin = {p: start.get(p, b.earliest) for p, b in bounds.items()}
    stop = {p: b.end for p, b in bounds.items()}
    if target is not None:
        stop = {p: min(e, target.get(p, begin[p])) for p, e in stop.items()}
    out = {p: max(begin[p], stop[p]) for p in bounds}  # (never behind where the part is)
    for p, at in start.items():  # a part planned before keeps its place (check_retained refuses a lost one)
        out.setdefault(p, at)
    if cap is None:
        return dict(sorted(out.items()))
    left = max(0, int(cap))
    end = dict(begin)
    for p, at in start.items():
        end.setdefault(p, at)
    waiting = sorted(p for p in bounds if out[p] > begin[p])
    while left > 0 and waiting:
        share = max(1, left // len(waiting))
        still = []
        for p in waiting:
            take = min(share, out[p] - end[p], left)
            end[p] += take
            left -= take
            if end[p] < out[p]:
                still.append(p)
            if left == 0:
                break
        waiting = still
    return dict(sorted(end.items()))


def ranges(start: Mapping[str, int], end: Mapping[str, int], bounds: Optional[Mapping[str, Bounds]] = None):
    """The ``(part, start, end)`` ranges of a batch with something to read, in part order (a
    part new in ``end`` starts at its earliest offset in ``bounds``, else 0)."""
    out = []
    for part, stop in sorted(end.items()):
        first = start.get(part)
        if first is None:
            first = bounds[part].earliest if bounds is not None and part in bounds else 0
        if stop > first:
            out.append((part, first, stop))
    return out


def key_document(pointers: Sequence[str], key: Optional[bytes], where: str) -> dict:
    """The deletion document of a tombstone (a record without a value): the collection's key
    properties taken from the record's key, a JSON array (what tidemark's Kafka endpoint
    writes) or, for a one-property key, a JSON scalar; ``_meta.op`` ``d``."""
    import json

    if key is None or not pointers:
        raise DocumentError(
            "a record without a value (a tombstone) "
            + ("without a key" if key is None else "in a source whose collection key is not known")
            + ": tidemark cannot tell which document it deletes",
            location=where,
        )
    try:
        values = json.loads(key)
    except ValueError as exc:
        raise DocumentError(f"a tombstone's key is not JSON ({exc})", location=where) from None
    if not isinstance(values, list):
        values = [values]
    if len(values) != len(pointers):
        raise DocumentError(
            f"a tombstone's key {key.decode('utf-8', 'replace')} has {len(values)} part(s), the collection's "
            f"key {len(pointers)} ({', '.join(pointers)})",
            location=where,
        )
    doc: dict = {"_meta": {"op": "d"}}
    for pointer, value in zip(pointers, values):
        names = [n.replace("~1", "/").replace("~0", "~") for n in pointer.lstrip("/").split("/")]
        node = doc
        for n in names[:-1]:
            node = node.setdefault(n, {})
        node[names[-1]] = value
    return doc
