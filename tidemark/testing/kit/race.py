"""Sessions that race: a commit against an Open of the same or an overlapping range.

A session Z runs a transaction up to StartCommit; then two threads start together (with
a small offset, mostly the Open first): one sends Z's StartCommit, the other opens the newer
session(s) N.  Whatever the order the endpoint chose, a store-authoritative driver keeps
one invariant: either Z's commit came first, and N's Opened returns Z's batch, or N's
Open came first, and Z's commit is fenced off.  "Z committed batch b and N's Opened
returned an older batch" means Z committed after N opened: a fence checked outside the
commit transaction, or an Open that did not bump an overlapping range.

``retry``: Z and N are two attempts of one shard of batch b (a Spark task retry).
``split``: Z is a session of the old one-shard layout; N are the sessions of batch b on
the new two-shard layout, which overlap it.  (A merge is not raced: a stale session that
commits a new batch on part of a merged range first would make the merged range inherit
that batch; zombie-merge covers merges.)
"""

from __future__ import annotations

import threading
import time
from typing import Any

from tidemark.errors import FencedOff
from tidemark.protocol.messages import Range

# Seconds by which the Open starts before (negative: the commit waits) or after the commit. An
# Open takes the endpoint's write lock for a while, so a commit that starts just after it is
# the likeliest to find a fence checked outside its transaction still unchanged.
OFFSETS = (-0.0005, -0.0002, -0.001, 0.0, -0.0003, -0.0007, 0.0003, -0.0015)


def race_batch(kit, batch_id: int, events, variant: str, offset: float, choose) -> None:
    """Run batch ``batch_id`` with a race of kind ``variant`` ("retry" or "split")."""
    if variant == "retry":
        start, layout, task = kit.begin(batch_id, events)
        if start.replayed:
            return
        j = choose(len(layout))
        z = kit.open_shard(j, layout[j], task)
        z_steps = kit.transaction(z, events)
        kit.advance(z_steps, "ready")
        targets = [(j, layout[j])]
    else:
        kit.set_layout(1)
        z, z_steps = kit.open_stale(0, Range(), batch_id, events)
        kit.set_layout(2)
        start, layout, task = kit.begin(batch_id, events)
        targets = list(enumerate(layout))
    out: dict[str, Any] = {}
    gate = threading.Barrier(2)

    def commit_z() -> None:
        gate.wait()
        if offset < 0:
            time.sleep(-offset)
        try:
            for _ in z_steps:
                pass
            out["z"] = "committed"
        except FencedOff:
            out["z"] = "fenced"
        except BaseException as exc:  # noqa: BLE001 - reported by the caller
            out["z_error"] = exc

    def open_n() -> None:
        gate.wait()
        if offset > 0:
            time.sleep(offset)
        try:
            out["n"] = [kit.open_shard(i, key_range, task, check=False) for i, key_range in targets]
        except BaseException as exc:  # noqa: BLE001
            out["n_error"] = exc

    threads = [
        threading.Thread(target=f, daemon=True, name=f"tidemark-kit-race-{f.__name__}") for f in (commit_z, open_n)
    ]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    kit.finish(z)
    if "n_error" in out:
        raise out["n_error"]
    if "z_error" in out:
        raise out["z_error"]
    news = out["n"]
    judge(kit, z, out["z"], news, batch_id)
    others = [
        kit.open_shard(i, key_range, task) for i, key_range in enumerate(layout) if i not in {i for i, _ in targets}
    ]
    shards = sorted(news + others, key=lambda s: s.index)
    for shard in shards:
        if not shard.skipped:
            kit.run_shard(shard, events)
        kit.finish(shard)
    kit.commit(start, events, shards)
    kit.check_checkpoint_rows()


def judge(kit, z, result: str, news: list, batch_id: int) -> None:
    """Did Z commit after an N opened?  Then run the opened checks N deferred."""
    late = []
    if result == "committed" and kit.store_authoritative:
        late = [n for n in news if n.range.overlaps(z.range) and n.opened_batch < batch_id]
    if late:
        n = late[0]
        same = n.range == z.range
        kit.rec.fail(
            "fencing",
            f"a session on range {z.range.name} committed batch {batch_id} (StartedCommit) while a newer "
            f"session opened range {n.range.name}{'' if same else ', which overlaps it'}; that Open returned "
            f"batch {n.opened_batch if n.opened_batch >= 0 else 'none'}, so it came before the commit, which "
            "should have been fenced off",
            "verify the fence inside the commit transaction, not before it (a check before the transaction "
            "lets an Open slip in between)"
            if same
            else "Open bumps the fence of every overlapping range, and start_commit verifies the fence inside the "
            "commit transaction",
            cause=True,
        )
    elif kit.exactly_once:
        kit.rec.check("fencing", True)
    for n in news:
        kit.check_opened(n, extra=not late)


__all__ = ["race_batch", "OFFSETS"]
