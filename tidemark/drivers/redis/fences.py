"""Open a key range: bump the fences of every overlapping range, inherit a checkpoint.

The rule is the SQL drivers' (:func:`tidemark.drivers.common.fences.plan_open`); here it runs as an
optimistic Redis transaction on the materialization's checkpoints hash::

    WATCH <hash>;  HGETALL <hash>          read every range's fence and checkpoint
    plan_open(...)                         decide in Python (may raise RecoveryError)
    MULTI
      HINCRBY <hash> <r>:fence 1           for every range r overlapping the opened one
      HSET <hash> <opened>:fence N         the opened range is new
      HSET <hash> <opened>:checkpoint CP   new, or a merge inherits a later checkpoint
    EXEC                                   nil when another Open touched the hash: start over

A zombie of the same range, of a parent range before a split or of a child range before a
merge therefore holds a stale fence, and its commit script refuses it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

from tidemark.drivers.common.columns import dumps
from tidemark.drivers.common.fences import OpenPlan, plan_open
from tidemark.drivers.redis.layout import CHECKPOINT, FENCE, checkpoints_key, field, parse_states
from tidemark.protocol.messages import Range


@dataclass(frozen=True, slots=True)
class RangeFence:
    """What an Open returns and a commit needs: the range, its fence after the bump, and
    the runtime checkpoint it holds or inherited (None: nothing committed yet)."""

    materialization: str
    range: Range
    fence: int
    checkpoint: Optional[dict]


def open_range(client, namespace: str, materialization: str, key_range: Range) -> RangeFence:
    """Bump and inherit in one optimistic transaction (retried by redis-py on a conflict)."""
    hkey = checkpoints_key(namespace, materialization)

    def body(pipe) -> OpenPlan:
        states = parse_states(pipe.hgetall(hkey))  # immediate: the pipeline is WATCHing
        over = [s for s in states if s.range.overlaps(key_range)]
        plan = plan_open(materialization, key_range, over)
        pipe.multi()
        for s in over:
            pipe.hincrby(hkey, field(s.range, FENCE), 1)
        if plan.insert:
            pipe.hset(hkey, field(key_range, FENCE), plan.fence)
        if (plan.insert or plan.refresh) and plan.checkpoint is not None:
            pipe.hset(hkey, field(key_range, CHECKPOINT), dumps(plan.checkpoint))
        return plan

    plan = client.transaction(body, hkey, value_from_callable=True)
    return RangeFence(materialization, key_range, plan.fence, plan.checkpoint)


def read_states(client, namespace: str, materialization: str):
    """Every range's fence and checkpoint (for ``tidemark status`` and tests)."""
    return parse_states(client.hgetall(checkpoints_key(namespace, materialization)))
