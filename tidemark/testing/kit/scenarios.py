"""The kit's scenarios: each drives one fresh materialization through the real commit path.

``steady``                a batch per session
``pipelined``             several transactions per session
``crash-<phase>``         the runtime dies after a phase and restarts
``kill-<request>``        the driver dies inside StartCommit or Acknowledge, after doing the work
                          and before the runtime reads its reply (an external program is killed
                          as soon as the endpoint shows the request's effect)
``repeat-acknowledge``    start-up re-runs Acknowledge, twice
``zombie-early/late``     an older session of the same range commits after a newer one opened
``zombie-split/merge``    a session of the old layout commits after a re-shard
``race``                  a commit races an Open of the same or an overlapping range (threads)
``large``                 transactions beyond the declared Load/Store chunk sizes, with a crash
                          after the Stores and a zombie
``split-merge``           1 -> 2 -> 1 -> 4 -> 3 shards
``folded-keys``           keys that differ only in letter case, Unicode normalization (NFC/NFD) or
                          trailing spaces: what ``*_ci`` collations, ``PAD SPACE`` and ``NOCASE`` fold
``large-checkpoint``      runtime checkpoints of 96 KiB, through a crash and a restart
``values``                every JSON type and edge stored, Loaded back and dumped through a crash;
                          a value beyond a declared limit refused (:mod:`.values`)
``key-collisions``        keys that agree on a long prefix, or differ in case or normalization
``two-checkpoints``       another spec's view of the same name (its own checkpoint folder) starts,
                          runs and resets in the endpoint: this view's progress and rows unchanged
``random-<i>``            all of it, seeded
"""

from __future__ import annotations

import random
from typing import Callable

from tidemark.protocol.messages import Range
from tidemark.testing.kit.race import OFFSETS, race_batch
from tidemark.testing.kit.runtime import PHASES, KitCrash, KitRuntime, ScenarioAbort
from tidemark.testing.kit.values import SCENARIOS as VALUE_SCENARIOS
from tidemark.testing.workload import Event, key_space, make_batch

LARGE_BOUND = 1100  # keys per transaction at most in the large scenario (for speed; above a typical 1000)


def run(kit: KitRuntime, batch: int, events, crash=None, zombie=None, kill=None) -> None:
    """Run a batch; after a crash, restart and re-run it with the same input (as Spark does)."""
    try:
        kit.run_batch(batch, events, crash=crash, zombie=zombie, kill=kill)
    except KitCrash:
        kit.restart()
        kit.run_batch(batch, events)


def events_for(draw: random.Random, keys, batch: int, size: int = 18):
    return make_batch(draw, keys, size, batch)


def steady(kit: KitRuntime, draw: random.Random, quick: bool) -> None:
    keys = key_space(draw, 10)
    for b in range(3 if quick else 5):
        run(kit, b, events_for(draw, keys, b))
    kit.check_views()


def pipelined(kit: KitRuntime, draw: random.Random, quick: bool) -> None:
    keys = key_space(draw, 10)
    kit.set_layout(2)
    kit.run_pipelined([(b, events_for(draw, keys, b)) for b in range(3)])
    run(kit, 3, events_for(draw, keys, 3))
    kit.check_views()


def crash_at(phase: str) -> Callable:
    def scenario(kit: KitRuntime, draw: random.Random, quick: bool) -> None:
        keys = key_space(draw, 12)
        kit.set_layout(2)
        run(kit, 0, events_for(draw, keys, 0))
        run(kit, 1, events_for(draw, keys, 1))
        shard = 0 if phase == "start_commit" else 1
        run(kit, 2, events_for(draw, keys, 2, 24), crash=(phase, shard))
        run(kit, 3, events_for(draw, keys, 3))
        kit.check_views()

    scenario.__name__ = f"crash_{phase}"
    return scenario


def kill_in(request: str) -> Callable:
    def scenario(kit: KitRuntime, draw: random.Random, quick: bool) -> None:
        keys = key_space(draw, 12)
        kit.set_layout(2)
        run(kit, 0, events_for(draw, keys, 0))
        last = 3 if quick else 5
        for b in range(1, last + 1):
            run(kit, b, events_for(draw, keys, b, 24), kill=(request, b % 2))
        run(kit, last + 1, events_for(draw, keys, last + 1))
        kit.check_views()

    scenario.__name__ = f"kill_{request}"
    return scenario


def repeat_acknowledge(kit: KitRuntime, draw: random.Random, quick: bool) -> None:
    keys = key_space(draw, 10)
    run(kit, 0, events_for(draw, keys, 0))
    run(kit, 1, events_for(draw, keys, 1))
    kit.restart()
    kit.restart()
    run(kit, 2, events_for(draw, keys, 2))
    kit.restart()
    kit.restart()
    kit.check_views(repeated_ack=True)


def zombie(when: str, shards: int = 1) -> Callable:
    def scenario(kit: KitRuntime, draw: random.Random, quick: bool) -> None:
        keys = key_space(draw, 10)
        kit.set_layout(shards)
        run(kit, 0, events_for(draw, keys, 0))
        run(kit, 1, events_for(draw, keys, 1), zombie=(shards - 1, when))
        run(kit, 2, events_for(draw, keys, 2))
        kit.check_views()

    return scenario


def zombie_reshard(old: int, new: int) -> Callable:
    """A session of the ``old`` layout, run up to StartCommit, commits after batch 2 committed on
    the ``new`` layout: the re-sharded sessions overlap its range, so it must be fenced off."""

    def scenario(kit: KitRuntime, draw: random.Random, quick: bool) -> None:
        keys = key_space(draw, 12)
        kit.set_layout(old)
        run(kit, 0, events_for(draw, keys, 0))
        run(kit, 1, events_for(draw, keys, 1))
        events = events_for(draw, keys, 2)
        z, steps = kit.open_stale(0, Range.split(old)[0], 2, events)
        kit.set_layout(new)
        run(kit, 2, events)
        kit.zombie_commit(z, steps, [r for r in Range.split(new) if r.overlaps(z.range)])
        run(kit, 3, events_for(draw, keys, 3))
        kit.check_views()

    return scenario


def race(kit: KitRuntime, draw: random.Random, quick: bool) -> None:
    keys = key_space(draw, 12)
    kit.set_layout(2)
    run(kit, 0, events_for(draw, keys, 0))
    attempts = 8 if quick else 16
    for i in range(attempts):
        b = i + 1
        variant = "retry" if i % 2 == 0 else "split"
        if variant == "retry":
            kit.set_layout(1 + (i // 2) % 2)
        race_batch(kit, b, events_for(draw, keys, b), variant, OFFSETS[(i // 2) % len(OFFSETS)], draw.randrange)
    kit.check_views()


def large_sizes(caps) -> tuple[int, int, int]:
    """Keys per transaction (one more than a Load chunk, at most LARGE_BOUND) and the chunk sizes."""
    keys = min(caps.max_load_keys + 1, LARGE_BOUND)
    return keys, max(1, min(caps.max_load_keys, keys - 1)), max(1, min(caps.max_store_docs, keys - 1))


def large(kit: KitRuntime, draw: random.Random, quick: bool) -> None:
    """Transactions beyond the driver's Load and Store chunk sizes (and typical spill thresholds)."""
    n, load_chunk, store_chunk = large_sizes(kit.caps)
    kit.load_chunk, kit.store_chunk = load_chunk, store_chunk
    kit.set_layout(1)
    keys = [f"{w}-{i:05d}" for i, w in enumerate(key_space(draw, n))]

    def batch(b: int, deletes: float = 0.0) -> list[Event]:
        out = [Event(k, draw.randint(1, 9), f"b{b}.{i}") for i, k in enumerate(keys)]
        out += [Event(k, delete=True) for k in keys if draw.random() < deletes]
        return out

    run(kit, 0, batch(0))
    run(kit, 1, batch(1))  # every key exists: each Load chunk is answered in full
    run(kit, 2, batch(2), crash=("ready", 0))  # every Store sent, no StartCommit: nothing may show
    if kit.exactly_once:
        run(kit, 3, batch(3, 0.05), zombie=(0, "late"))
    else:
        run(kit, 3, batch(3, 0.05))
    kit.check_views()
    kit.rec.note(
        "no-loss",
        f"large transactions: {n} keys, Loads of up to {load_chunk} keys and Stores of up to "
        f"{store_chunk} documents (declared: max_load_keys={kit.caps.max_load_keys}, "
        f"max_store_docs={kit.caps.max_store_docs}; the kit stops at {LARGE_BOUND} keys)",
    )


def split_merge(kit: KitRuntime, draw: random.Random, quick: bool) -> None:
    keys = key_space(draw, 16)
    layouts = [1, 2, 2, 1, 4, 3] if quick else [1, 1, 2, 2, 1, 4, 4, 3, 1]
    for b, n in enumerate(layouts):
        kit.set_layout(n)
        run(kit, b, events_for(draw, keys, b, 24))
    kit.check_views()


def randomized(kit: KitRuntime, draw: random.Random, quick: bool) -> None:
    keys = key_space(draw, draw.randint(6, 20))
    for b in range(6 if quick else 10):
        if draw.random() < 0.25:
            kit.set_layout(draw.randint(1, 4))
        crash = zombie_at = kill = None
        r = draw.random()
        if r < 0.35:
            crash = (draw.choice(PHASES), draw.randrange(kit.shards))
        elif r < 0.45:
            kill = (draw.choice(("start_commit", "acknowledge")), draw.randrange(kit.shards))
        elif r < 0.6 and kit.exactly_once:
            zombie_at = (draw.randrange(kit.shards), draw.choice(("early", "late")))
        run(kit, b, events_for(draw, keys, b, draw.randint(5, 30)), crash=crash, zombie=zombie_at, kill=kill)
    kit.check_views()


#: keys a folding collation or encoding takes for one another: letter case (also beyond ASCII),
#: NFC against NFD, trailing (and leading) spaces
CONFUSABLE_KEYS = [
    "Order-1",
    "order-1",
    "ORDER-1",
    "caf\u00e9",
    "cafe\u0301",
    "k",
    "k ",
    "k  ",
    " k",
    "stra\u00dfe",
    "STRASSE",
    "\u00c5ngstr\u00f6m",
    "\u00e5ngstr\u00f6m",
]


def folded_keys(kit: KitRuntime, draw: random.Random, quick: bool) -> None:
    keys = CONFUSABLE_KEYS + key_space(draw, 4)
    kit.set_layout(2)
    for b in range(3):  # every key in every batch, with its own values
        run(kit, b, [Event(k, draw.randint(1, 9), f"b{b}.{i}") for i, k in enumerate(keys)])
    kit.check_views()
    kit.check_keys_exact(CONFUSABLE_KEYS)


CHECKPOINT_BYTES = 96 * 1024


def large_checkpoint(kit: KitRuntime, draw: random.Random, quick: bool) -> None:
    """Runtime checkpoints of 96 KiB (multi-byte text: a limit in characters or in bytes
    shows), through a crash after the commit and a restart."""
    unit = "offset \u00e9\u4e2d "
    text = (unit * (CHECKPOINT_BYTES // len(unit.encode()) + 1)).encode()[:CHECKPOINT_BYTES].decode("utf-8", "ignore")
    kit.checkpoint_padding = text
    keys = key_space(draw, 8)
    try:
        run(kit, 0, events_for(draw, keys, 0))
        run(kit, 1, events_for(draw, keys, 1), crash=("start_commit", 0))
        kit.restart()
        run(kit, 2, events_for(draw, keys, 2))
    except ScenarioAbort:
        raise
    except Exception as exc:  # the driver failing on a large checkpoint is the finding
        kit.rec.fail(
            "whole-checkpoints",
            f"with runtime checkpoints of {len(text.encode())} bytes: {type(exc).__name__}: {exc}",
        )
        raise ScenarioAbort(str(exc)) from exc
    kit.check_views()


def two_checkpoints(kit: KitRuntime, draw: random.Random, quick: bool) -> None:
    """Another spec's view of the same name, with a checkpoint folder of its own, in this
    endpoint while this view has a batch in the recovery log that the endpoint has not
    acknowledged yet (its staged work pending): over this view's resources, then over its
    own, it starts, runs and resets; this view's progress is unchanged, and after its restart
    it holds every batch exactly."""
    keys = key_space(draw, 8)
    run(kit, 0, events_for(draw, keys, 0))
    kit.set_layout(2)
    run(kit, 1, events_for(draw, keys, 1))
    pending = events_for(draw, keys, 2)
    try:
        kit.run_batch(2, pending, crash=("recovery_log", 0))
    except KitCrash:
        pass
    for same in (True, False):
        kit.intrude(same, events_for(draw, keys, 0))
    kit.restart()
    run(kit, 3, events_for(draw, keys, 3))
    kit.check_views()


def scenarios(exactly_once: bool, quick: bool) -> list[tuple[str, Callable]]:
    out: list[tuple[str, Callable]] = [("steady", steady), ("pipelined", pipelined)]
    out += [(f"crash-{p}", crash_at(p)) for p in PHASES]
    out += [("kill-start_commit", kill_in("start_commit")), ("kill-acknowledge", kill_in("acknowledge"))]
    out.append(("repeat-acknowledge", repeat_acknowledge))
    if exactly_once:
        out += [("zombie-early", zombie("early")), ("zombie-late", zombie("late"))]
        if not quick:
            out += [("zombie-early-2-shards", zombie("early", 2)), ("zombie-late-2-shards", zombie("late", 2))]
        out += [("zombie-split", zombie_reshard(1, 2)), ("zombie-merge", zombie_reshard(2, 1)), ("race", race)]
    out.append(("split-merge", split_merge))
    out += [("folded-keys", folded_keys), ("large-checkpoint", large_checkpoint), ("two-checkpoints", two_checkpoints)]
    out += [(name, fn) for name, (fn, _) in VALUE_SCENARIOS.items()]
    out += [(f"random-{i}", randomized) for i in range(1 if quick else 3)]
    out.append(("large", large))
    return out


def runtime_of(name: str) -> type[KitRuntime]:
    """The runtime a scenario runs on: the value scenarios' own bindings, or the kit's."""
    return VALUE_SCENARIOS[name][1] if name in VALUE_SCENARIOS else KitRuntime


__all__ = ["scenarios", "runtime_of", "run", "large_sizes", "LARGE_BOUND"]
