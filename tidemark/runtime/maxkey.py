"""Skip Loads of keys that cannot exist: the largest key stored, per range and binding.

A key greater than every key ever stored into a resource cannot be there, so the shard
need not Load it.  Estuary's runtime does the same (its per-binding *max-key*).  Keys
that grow over time -- sequence numbers, time-ordered ids (ULID, UUIDv7), a time bucket
as the first key field -- then cost no Load at all, and neither does the first batch
into a table that Apply has just created.

Where the maximum lives: in the runtime checkpoint each shard commits for its range,
``{"max_keys": {"range": [begin, end], "bindings": {resource: key | [] | null}}}``.  For a
store-authoritative endpoint that checkpoint commits in the same transaction as the
data, so the maximum can never be behind what the endpoint holds.  Other commit patterns
never skip a Load.

What a shard knows at Open, per standard binding:

* the inherited checkpoint records the binding for a range covering the shard's own (the
  same range, or its parent before a split): that maximum (``[]``: nothing stored yet;
  ``null``: unknown);
* no checkpoint for the range, or one that never saw the binding, and this run's Apply
  created the binding's resource: nothing stored yet;
* anything else is unknown -- a checkpoint written before this existed, a merge (one
  child's maximum says nothing of the other child's keys), a resource that existed before
  the binding did.  Unknown is recorded as ``null`` and stays unknown: every key of that
  binding in that range is Loaded, as before.

Keys are ordered by type, then value: null < booleans < numbers < strings (numbers by
value, strings by code point).  A key with another kind of component makes the binding
unknown.
"""

from __future__ import annotations

from typing import Any, Optional, Sequence

from tidemark.protocol.messages import BindingSpec, Range

EMPTY: tuple = ()  # the order of "nothing stored": every key is greater


def resource_id(binding: BindingSpec) -> str:
    return "/".join(binding.resource_path)


def order(key: Sequence[Any]) -> Optional[tuple]:
    """A key's place in the order above, or None when a component has no place in it."""
    out = []
    for v in key:
        if v is None:
            out.append((0, 0))
        elif v is True or v is False:
            out.append((1, int(v)))
        elif isinstance(v, (int, float)):
            out.append((2, v))
        elif isinstance(v, str):
            out.append((3, v))
        else:
            return None
    return tuple(out)


class MaxKey:
    """One binding's maximum in one shard's transaction."""

    __slots__ = ("prior", "prior_order", "top", "top_order", "skipped")

    def __init__(self, prior: Optional[list]):
        self.prior = prior  # the recorded key ([] for nothing stored)
        self.prior_order = EMPTY if not prior else order(prior)
        self.top = None  # the largest key above ``prior`` seen in this transaction
        self.top_order = None
        self.skipped = 0

    def absent(self, key: tuple) -> bool:
        """True when ``key`` cannot exist at the endpoint (so needs no Load)."""
        o = order(key)
        if o is None or self.prior_order is None:
            self.prior_order = None  # unknown from here on
            return False
        if o <= self.prior_order:
            return False
        if self.top_order is None or o > self.top_order:
            self.top, self.top_order = key, o
        self.skipped += 1
        return True

    @property
    def known(self) -> bool:
        return self.prior_order is not None

    def record(self) -> Optional[list]:
        """What the commit records: the new maximum, or None (unknown)."""
        if self.prior_order is None:
            return None
        if self.top is not None:
            return list(self.top)
        return list(self.prior) if self.prior else []


def at_open(bindings: Sequence[BindingSpec], rng: Range, checkpoint: Optional[dict],
            created: frozenset) -> list[Optional[MaxKey]]:
    """Per binding: a :class:`MaxKey` when something is known, else None (Load every key)."""
    recorded = (checkpoint or {}).get("max_keys")
    covering = None
    if isinstance(recorded, dict):
        r = recorded.get("range")
        known = recorded.get("bindings")
        if (isinstance(r, list) and len(r) == 2 and isinstance(known, dict)
                and Range(int(r[0]), int(r[1])).covers(rng)):
            covering = known
    out: list[Optional[MaxKey]] = []
    for b in bindings:
        rid = resource_id(b)
        if b.delta_updates:
            out.append(None)
        elif checkpoint is None or (covering is not None and rid not in covering):
            out.append(MaxKey([]) if rid in created else None)
        elif covering is not None and isinstance(covering[rid], list):
            m = MaxKey(covering[rid])
            out.append(m if m.known else None)
        else:
            out.append(None)
    return out


def to_record(bindings: Sequence[BindingSpec], rng: Range, maxes: Sequence[Optional[MaxKey]]) -> dict:
    """The ``max_keys`` entry of the runtime checkpoint this shard commits."""
    return {
        "range": [rng.key_begin, rng.key_end],
        "bindings": {resource_id(b): (m.record() if m is not None else None)
                     for b, m in zip(bindings, maxes) if not b.delta_updates},
    }
