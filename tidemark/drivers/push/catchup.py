"""Bring a range's local store to the endpoint's frontier, where the endpoint's commit counts.

The local store commits *after* the endpoint, so it can be behind it: one batch after a
crash between the two commits, or entirely when the range runs on a machine that never held
it.  Then the range's part of the view is read back from the endpoint's committed rows (the
log part's :meth:`~tidemark.drivers.push.log.PushLog.rows`: the last row of each key whose
hash falls in the range is its document, a delete removes it) and committed with the
frontier's runtime checkpoint.  A store of another checkpoint is wiped first; a store
*ahead* of the endpoint means the endpoint was reset under it, and Open refuses.
"""

from __future__ import annotations

import logging
import os
import shutil
import time
from typing import Callable, Iterable, Mapping, Optional

from tidemark.collection.keys import key_hash
from tidemark.drivers.push.log import Row
from tidemark.errors import RecoveryError
from tidemark.protocol.checkpoints import batch_of, identity
from tidemark.protocol.messages import Range
from tidemark.store import Isolation, RangeStore, StoreConfig, tidemark_key
from tidemark.store.keys import is_range_name

log = logging.getLogger("tidemark")


def verdict(have: Optional[dict], want: Optional[dict]) -> str:
    """``same``, ``behind`` (a transaction brings it forward), ``other`` (wipe, then rebuild)
    or ``ahead`` (the endpoint was reset under the store)."""
    if identity(have) == identity(want):
        return "same"
    if have is None:
        return "behind"
    if want is None:
        return "ahead"
    if have.get("checkpoint_id") == want.get("checkpoint_id") and batch_of(have) != batch_of(want):
        return "ahead" if batch_of(have) > batch_of(want) else "behind"
    return "other"


def wipe(cfg: StoreConfig, key_range: Range) -> None:
    """Remove the local ranges that overlap ``key_range`` (the endpoint holds what they held)."""
    base = os.path.join(cfg.path, "ranges")
    for name in os.listdir(base) if os.path.isdir(base) else ():
        if is_range_name(name) and Range.parse(name).overlaps(key_range):
            shutil.rmtree(os.path.join(base, name), ignore_errors=True)


def open_at(
    cfg: StoreConfig,
    key_range: Range,
    materialization: str,
    want: Optional[dict],
    place: str,
    ids: Mapping[str, int],
    rows: Callable[[], Iterable[Row]],
) -> RangeStore:
    """The range's local store, holding the endpoint's view at ``want`` (its frontier, kept in
    ``place``); ``ids``: the local binding id of each standard binding's resource, ``rows()``:
    their committed rows."""
    try:
        store = RangeStore.open(cfg, key_range)
    except RecoveryError:  # the local ranges disagree among themselves: the endpoint decides
        wipe(cfg, key_range)
        store = RangeStore.open(cfg, key_range)
    v = verdict(store.checkpoint, want)
    if v == "ahead":
        store.close()
        raise RecoveryError(
            f"range {key_range.name} of {materialization!r}: the local state store {cfg.path} is at batch "
            f"{batch_of(store.checkpoint)} but {place} has committed only "
            f"{'nothing' if want is None else f'batch {batch_of(want)}'}: it was reset or replaced under the store. "
            f"Start the view over with `tidemark reset SPEC -m {materialization}` (it removes the local state too); "
            "nothing was written"
        )
    if v == "other":
        store.close()
        wipe(cfg, key_range)
        store = RangeStore.open(cfg, key_range)
    if v != "same":
        assert want is not None  # "behind" and "other" have a frontier
        rebuild(store, ids, rows(), want)
    return store


def rebuild(store: RangeStore, ids: Mapping[str, int], rows: Iterable[Row], checkpoint: dict) -> int:
    """Replace the range's part of the store with the committed ``rows`` of the resources of
    ``ids`` (their local binding ids) and commit ``checkpoint``."""
    t0, key_range = time.monotonic(), store.range
    txn = store.transaction()
    for k, _ in list(txn.scan(isolation=Isolation.READ_COMMITTED)):
        txn.delete(k)
    latest: dict[bytes, Optional[bytes]] = {}
    for resource, key, value in rows:
        if resource in ids and key_range.contains(key_hash(key)):
            latest[tidemark_key(key, ids[resource])] = value
    for k, v in latest.items():
        if v is None:
            txn.delete(k)
        else:
            txn.put(k, v)
    txn.commit(checkpoint)
    log.warning(
        "rebuilt the local state of range %s from the endpoint to batch %s (%d keys, %.1fs)",
        key_range.name,
        batch_of(checkpoint),
        len(latest),
        time.monotonic() - t0,
    )
    return len(latest)
