"""The fenced checkpoints of store-authoritative endpoints: the rule an Open follows.

The checkpoints table follows Estuary's ``flow_checkpoints_v1``::

    tidemark_checkpoints(materialization, key_begin, key_end, fence, checkpoint)
        primary key (materialization, key_begin, key_end)

Open (one endpoint transaction, see :func:`plan_open`):

1. bump the fence of every row of the materialization whose range overlaps the opened
   range (a zombie of the same range, or of a parent range before a split, or of a
   child range before a merge, can no longer commit);
2. pick the runtime checkpoint the opened range inherits: the narrowest row covering it
   (the exact row, or the parent after a split) — unless rows inside the range hold a
   *later* batch (a split followed by a merge), in which case the latest rows must
   cover the range and agree, else :class:`~tidemark.errors.RecoveryError`;
3. insert the exact range if it is missing, with the inherited checkpoint.

Commit verifies the fence with ``UPDATE ... WHERE materialization AND key_begin AND
key_end AND fence`` in the data transaction: zero rows means a newer session opened the
range, and the transaction rolls back with :class:`~tidemark.errors.FencedOff`.

The rule is pure (no SQL): the SQL skeleton (:mod:`tidemark.drivers.sql.driver`) runs
it inside its Open transaction, and the Redis store and the state store reuse it.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any, Optional, Sequence

from tidemark.errors import FencedOff, RecoveryError
from tidemark.protocol.checkpoints import batch_of, identity
from tidemark.protocol.messages import Range


@dataclass(frozen=True, slots=True)
class CheckpointState:
    range: Range
    fence: int
    checkpoint: Optional[dict]


@dataclass(frozen=True, slots=True)
class OpenPlan:
    fence: int  # the opened range's fence after the bump
    checkpoint: Optional[dict]  # inherited runtime checkpoint
    insert: bool  # the exact row is missing
    refresh: bool = False  # the exact row exists but inherits a later checkpoint (split, then merge)


_batch = batch_of  # the one rule lives in tidemark.protocol.checkpoints (re-exported here)


def _covered(key_range: Range, rows: Sequence[CheckpointState]) -> bool:
    pos = key_range.key_begin
    for r in sorted(rows, key=lambda r: r.range.key_begin):
        if r.range.key_begin > pos:
            return False
        pos = max(pos, r.range.key_end + 1)
        if pos > key_range.key_end:
            return True
    return pos > key_range.key_end


def plan_open(materialization: str, key_range: Range, overlapping: Sequence[CheckpointState]) -> OpenPlan:
    """Given the rows overlapping ``key_range`` (fences *before* the bump), decide the Open.

    Every overlapping row's fence is bumped by one; see the module docstring."""
    bumped = [CheckpointState(r.range, r.fence + 1, r.checkpoint) for r in overlapping]
    exact = next((r for r in bumped if r.range == key_range), None)
    fence = exact.fence if exact else max((r.fence for r in bumped), default=0) + 1
    if not bumped:
        return OpenPlan(fence, None, True)
    covering = sorted(
        (r for r in bumped if r.range.covers(key_range)), key=lambda r: r.range.key_end - r.range.key_begin
    )
    if covering and not any(_batch(r.checkpoint) > _batch(covering[0].checkpoint) for r in bumped):
        return OpenPlan(fence, covering[0].checkpoint, exact is None)
    # A merge (or a split followed by a merge): the latest rows must cover and agree.
    top = max(_batch(r.checkpoint) for r in bumped)
    latest = [r for r in bumped if _batch(r.checkpoint) == top]
    cps = {identity(r.checkpoint) for r in latest}
    if len(cps) == 1 and _covered(key_range, latest):
        cp = latest[0].checkpoint
        return OpenPlan(fence, cp, exact is None, exact is not None and identity(exact.checkpoint) != identity(cp))
    detail = ", ".join(
        f"{r.range.name}: batch {_batch(r.checkpoint)}" for r in sorted(bumped, key=lambda r: r.range.key_begin)
    )
    raise RecoveryError(
        f"materialization {materialization!r}: range {key_range.name} cannot inherit a checkpoint: the ranges "
        f"it overlaps disagree or leave a gap ({detail}). The ranges of one layout committed different "
        "batches or different runs; restore the endpoint's checkpoint rows, or start the view over with "
        f"`tidemark reset SPEC -m {materialization}`"
    )


def fenced_off(materialization: str, key_range: Range, fence: int) -> FencedOff:
    return FencedOff(
        f"materialization {materialization!r} range {key_range.name}: fence {fence} is stale — a newer session "
        "opened this key range (a retried or speculative task); this session's transaction was rolled back"
    )


def load_checkpoint(text: Any) -> Optional[dict]:
    if text is None:
        return None
    if isinstance(text, (bytes, bytearray, memoryview)):
        text = bytes(text).decode()
    return json.loads(text) if isinstance(text, str) else text
