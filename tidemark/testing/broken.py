"""Deliberately broken drivers: each breaks one promise, and the kit must name it.

Every class is a small variant of :class:`~tidemark.drivers.memory.MemoryDriver`;
:data:`BROKEN` maps each to the property the kit must report as failing.  Use them to
check the kit itself, or as a catalogue of the bugs a driver author should avoid.
"""

from __future__ import annotations

import dataclasses
import json
import unicodedata

from tidemark.drivers.base import CommitPattern
from tidemark.drivers.memory import (
    MemoryDriver,
    MemoryTransactor,
    _apply_ops,
    _mat,
    key_text,
    resource_name,
)
from tidemark.protocol.messages import Acknowledged, Loaded, Range

# --------------------------------------------------------------- store-authoritative


class _SkipsFenceTransactor(MemoryTransactor):
    def check_fence(self, m):
        row = next(
            (
                r
                for r in m["checkpoints"]
                if r["key_begin"] == self.range.key_begin and r["key_end"] == self.range.key_end
            ),
            None,
        )
        return row  # BUG: never compares the fence


class SkipsFenceCheck(MemoryDriver):
    """Commits without verifying the fence: a zombie session overwrites the newer one."""

    default_pattern = CommitPattern.STORE_AUTHORITATIVE
    transactor_class = _SkipsFenceTransactor


class IgnoresRange(MemoryDriver):
    """Keeps one checkpoint (and fence) for all ranges of a materialization."""

    default_pattern = CommitPattern.STORE_AUTHORITATIVE

    def _open_range(self, materialization, key_range):
        return super()._open_range(materialization, Range())  # BUG: the range is ignored

    class transactor_class(MemoryTransactor):
        def __init__(self, driver, req, fence):
            super().__init__(driver, req, fence)
            self.range = Range()  # BUG: commits to the all-keys row


class _AtLeastOnceTransactor(MemoryTransactor):
    def store(self, msg):
        with self.driver.backend.write() as state:  # BUG: writes outside the commit
            _apply_ops(_mat(state, self.materialization), self._ops(msg))


class AtLeastOnceClaimsExactlyOnce(MemoryDriver):
    """Writes each Store straight away but declares store-authoritative (exactly-once)."""

    default_pattern = CommitPattern.STORE_AUTHORITATIVE
    transactor_class = _AtLeastOnceTransactor


class _ForgetsDeletesTransactor(MemoryTransactor):
    def _ops(self, msg):
        return [[o[0], o[1], o[2], o[3], False] for o in super()._ops(msg)]  # BUG: delete flag dropped


class ForgetsDeletes(MemoryDriver):
    """Stores the deletion document instead of removing the key."""

    default_pattern = CommitPattern.STORE_AUTHORITATIVE
    transactor_class = _ForgetsDeletesTransactor


class _LoadsMissingTransactor(MemoryTransactor):
    def _evaluate(self, msg):
        found = dict(self.driver.read_docs(self.materialization, resource_name(self.bindings[msg.binding]), msg.keys))
        docs = tuple(found.get(tuple(k), {}) for k in msg.keys)  # BUG: {} for missing keys
        return [Loaded(msg.binding, tuple(tuple(k) for k in msg.keys), docs)] if msg.keys else []


class LoadedForMissingKeys(MemoryDriver):
    """Answers Loaded (with an empty document) for keys that do not exist."""

    default_pattern = CommitPattern.STORE_AUTHORITATIVE
    transactor_class = _LoadsMissingTransactor


class _NoCheckpointTransactor(MemoryTransactor):
    def commit_store(self, ops, runtime_checkpoint):
        with self.driver.backend.write() as state:
            m = _mat(state, self.materialization)
            self.check_fence(m)
            _apply_ops(m, ops)  # BUG: the runtime checkpoint is not written


class CommitsWithoutCheckpoint(MemoryDriver):
    """Commits the data but not the runtime checkpoint with it."""

    default_pattern = CommitPattern.STORE_AUTHORITATIVE
    transactor_class = _NoCheckpointTransactor


class _LosesStoresTransactor(MemoryTransactor):
    def store(self, msg):
        if not getattr(self, "_stored_once", False):  # BUG: only the first Store of a session counts
            self._stored_once = True
            super().store(msg)


class LosesStores(MemoryDriver):
    """Keeps only the first Store message of a session."""

    default_pattern = CommitPattern.STORE_AUTHORITATIVE
    transactor_class = _LosesStoresTransactor


def _folded(key) -> tuple:
    """A key as a case-insensitive, padding collation compares it (MySQL's default ``*_ci``)."""
    return tuple(unicodedata.normalize("NFC", k).casefold().rstrip(" ") if isinstance(k, str) else k for k in key)


class _FoldsKeysTransactor(MemoryTransactor):
    def _ops(self, msg):
        return [[o[0], o[1], key_text(_folded(json.loads(o[2]))), o[3], o[4]] for o in super()._ops(msg)]


class FoldsKeys(MemoryDriver):
    """Compares keys as a case-insensitive collation with trailing-space padding and Unicode
    normalization does: ``"A"``, ``"a"`` and ``"a "`` are one row (the later write wins)."""

    default_pattern = CommitPattern.STORE_AUTHORITATIVE
    transactor_class = _FoldsKeysTransactor

    def read_docs(self, materialization, resource, keys):
        found = dict(super().read_docs(materialization, resource, [_folded(k) for k in keys]))
        return [(tuple(k), found[_folded(k)]) for k in keys if _folded(k) in found]


CHECKPOINT_TEXT_BYTES = 65_535  # MySQL's TEXT


class _CutsCheckpointsTransactor(MemoryTransactor):
    def commit_store(self, ops, runtime_checkpoint):
        text = json.dumps(runtime_checkpoint).encode()[:CHECKPOINT_TEXT_BYTES]  # BUG: a 64 KiB column
        super().commit_store(ops, {"text": text.decode("utf-8", "ignore")})


class CutsCheckpoints(MemoryDriver):
    """Keeps the runtime checkpoint in a 64 KiB text column: a larger one comes back cut
    (and no longer parses)."""

    default_pattern = CommitPattern.STORE_AUTHORITATIVE
    transactor_class = _CutsCheckpointsTransactor

    def _open_range(self, materialization, key_range):
        fence, kept = super()._open_range(materialization, key_range)
        return fence, (json.loads(kept["text"]) if kept is not None else None)

    def checkpoints(self, materialization):
        return [
            dataclasses.replace(r, runtime_checkpoint=r.runtime_checkpoint and json.loads(r.runtime_checkpoint["text"]))
            for r in super().checkpoints(materialization)
        ]


# ------------------------------------------------------------------ idempotent apply


class NonIdempotentAcknowledge(MemoryDriver):
    """Re-applies staged work every time Acknowledge names it (delta rows are appended again)."""

    default_pattern = CommitPattern.IDEMPOTENT_APPLY_SHARD

    def apply_stages(self, materialization, driver_state, key_range):
        stages = (driver_state or {}).get("stages") or {} if isinstance(driver_state, dict) else {}
        with self.backend.write() as state:
            m = _mat(state, materialization)
            for stage_id in stages.values():
                stage = m["staged"].get(stage_id)
                if stage is not None and (key_range is None or Range(*stage["range"]).overlaps(key_range)):
                    self._apply_stage(m, stage)  # BUG: no "already applied" check


class _EagerLoadsTransactor(MemoryTransactor):
    def acknowledge(self, msg):
        self.pending_state = msg.state  # BUG: applies later, answers Acknowledged at once
        self.acknowledged = True
        return Acknowledged()

    def flush(self, msg):
        loaded, flushed = super().flush(msg)
        self.driver.apply_stages(self.materialization, getattr(self, "pending_state", None), self.range)
        return loaded, flushed


class EvaluatesLoadsBeforeAcknowledged(MemoryDriver):
    """Answers Acknowledged before its staged work is applied, and evaluates Loads meanwhile."""

    default_pattern = CommitPattern.IDEMPOTENT_APPLY_SHARD
    transactor_class = _EagerLoadsTransactor


# property each broken driver must fail
BROKEN: dict[type, str] = {
    SkipsFenceCheck: "fencing",
    NonIdempotentAcknowledge: "no-duplicates",
    EvaluatesLoadsBeforeAcknowledged: "read-committed",
    IgnoresRange: "range-isolation",
    AtLeastOnceClaimsExactlyOnce: "at-least-once-honesty",
    ForgetsDeletes: "deletes-applied",
    LoadedForMissingKeys: "loaded-existing-only",
    CommitsWithoutCheckpoint: "checkpoints-monotonic",
    LosesStores: "no-loss",
    FoldsKeys: "keys-exact",
    CutsCheckpoints: "whole-checkpoints",
}

__all__ = [c.__name__ for c in BROKEN] + ["BROKEN"]
