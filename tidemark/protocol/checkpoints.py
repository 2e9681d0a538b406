"""The one rule for "these ranges hold the same batch", for every endpoint.

Two ranges' runtime checkpoints name the same batch when they agree on the tidemark
checkpoint and the batch identity (Spark query, batch id, source offsets) — never on the spec
version or other fields, which may differ between the attempts that committed the ranges of
one batch (a re-run after the config changed, or after the shard count did).  Used by every
endpoint's split/merge inheritance: the SQL skeleton, Kafka, NATS, Redis
(:func:`tidemark.drivers.common.fences.plan_open`) and the KIP-892 store
(:func:`tidemark.store.layout.plan`, the store, webhook and Kafka local stores).
"""

from __future__ import annotations

import json
from typing import Any, Optional

from tidemark.protocol.messages import JsonObject


def batch_of(cp: Optional[JsonObject]) -> int:
    """The batch a runtime checkpoint names (-1: none, or not a runtime checkpoint)."""
    if isinstance(cp, dict):
        b = cp.get("batch_id")
        if isinstance(b, int) and not isinstance(b, bool):
            return b
    return -1


# compact, keys in their order: the same text as before this module existed (the webhook's
# Idempotency-Key is derived from it, so a batch re-sent across an upgrade keeps its key)
_dumps = json.JSONEncoder(separators=(",", ":"), ensure_ascii=False).encode


def identity(cp: Optional[JsonObject]) -> tuple[Any, ...]:
    """What makes two ranges' checkpoints "the same batch" (see the module docstring)."""
    if not isinstance(cp, dict) or batch_of(cp) < 0:
        return ("whole", _dumps(cp))  # not a tidemark runtime checkpoint: compare all of it
    return (_dumps(cp.get("checkpoint_id")), batch_of(cp), _dumps(cp.get("query_id")), _dumps(cp.get("offsets")))


def same_batch(a: Optional[JsonObject], b: Optional[JsonObject]) -> bool:
    return identity(a) == identity(b)


__all__ = ["batch_of", "identity", "same_batch"]
