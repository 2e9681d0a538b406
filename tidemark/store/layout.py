"""Which committed state a range starts from: itself, its parent (split), its children (merge).

:func:`plan` gets the *heads* of every range that overlaps the opened one — what each
committed last, from the local stores and the changelog — and decides, with the rule of
:func:`tidemark.drivers.common.fences.plan_open`:

1. nothing overlapping ever committed: start empty;
2. the newest batch among the overlapping ranges is held by the range itself: keep it;
3. else by a range that covers it (a split: the narrowest such parent): copy the keys of
   the interval from that parent, inherit its checkpoint;
4. else the ranges at the newest batch must cover the opened range without a gap and
   hold the *same* checkpoint (a merge, allowed only at a batch boundary that every old
   range committed): copy each one's part, inherit the checkpoint;
5. otherwise :class:`~tidemark.errors.RecoveryError`, naming the ranges and batches.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional, Sequence

from tidemark.errors import RecoveryError
from tidemark.protocol.checkpoints import same_batch
from tidemark.protocol.messages import Range
from tidemark.store.db import batch_of


@dataclass(frozen=True, slots=True)
class Head:
    range: Range
    checkpoint: Optional[dict]

    @property
    def batch(self) -> int:
        return batch_of(self.checkpoint)


@dataclass(frozen=True, slots=True)
class Plan:
    checkpoint: Optional[dict]
    sources: tuple[Range, ...]  # () start empty; (key_range,) keep; else copy from these, in key order

    @property
    def batch(self) -> int:
        return batch_of(self.checkpoint)


def _same(a: Optional[dict], b: Optional[dict]) -> bool:
    """The one rule of every endpoint: the checkpoint and batch identity, never the spec version."""
    return same_batch(a, b)


def _cover(key_range: Range, ranges: Sequence[Range]) -> Optional[list[Range]]:
    """A few ranges (greedy, widest reach first) that cover ``key_range`` without a gap."""
    pos, out = key_range.key_begin, []
    while pos <= key_range.key_end:
        reach = [r for r in ranges if r.key_begin <= pos <= r.key_end]
        if not reach:
            return None
        best = max(reach, key=lambda r: r.key_end)
        out.append(best)
        pos = best.key_end + 1
    return out


def plan(store: str, key_range: Range, heads: Sequence[Head]) -> Plan:
    heads = [h for h in heads if h.range.overlaps(key_range) and h.checkpoint is not None]
    if not heads:
        return Plan(None, ())
    top = max(h.batch for h in heads)
    latest = [h for h in heads if h.batch == top]
    exact = next((h for h in latest if h.range == key_range), None)
    if exact is not None:
        return Plan(exact.checkpoint, (key_range,))
    covering = sorted(
        (h for h in latest if h.range.covers(key_range)), key=lambda h: h.range.key_end - h.range.key_begin
    )
    if covering:
        return Plan(covering[0].checkpoint, (covering[0].range,))
    agree = all(_same(h.checkpoint, latest[0].checkpoint) for h in latest)
    cover = _cover(key_range, [h.range for h in latest]) if agree else None
    if cover is not None:
        return Plan(latest[0].checkpoint, tuple(cover))
    detail = ", ".join(f"{h.range.name}: batch {h.batch}" for h in sorted(heads, key=lambda h: h.range.key_begin))
    raise RecoveryError(
        f"store {store}: range {key_range.name} cannot inherit a checkpoint: the ranges it overlaps disagree or "
        f"leave a gap ({detail}); a merge needs every old range to have committed the same batch — "
        "run the old shard layout until every range commits one more batch, then change it"
    )
