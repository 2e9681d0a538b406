"""A toy endpoint driver, written only from docs/protocol.md "Writing a driver": one JSON file
holds the views, the fences and the checkpoints of every range, replaced atomically under an
exclusive ``flock``.  Store-authoritative: data + runtime checkpoint + fence check in one
write.  ``tests/drivers/test_toy_driver.py`` registers it and runs the conformance kit."""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
from typing import Sequence

from tidemark.drivers.base import Capabilities, CheckpointRow, CommitPattern, Driver, ReadCommittedLoads, Transactor
from tidemark.errors import FencedOff
from tidemark.protocol.messages import (
    Acknowledge,
    Acknowledged,
    Applied,
    Apply,
    BindingSpec,
    Load,
    Loaded,
    Open,
    Opened,
    Range,
    StartCommit,
    StartedCommit,
    Store,
)

CAPABILITIES = Capabilities(CommitPattern.STORE_AUTHORITATIVE, max_load_keys=50, max_store_docs=50)


def _res(binding: BindingSpec) -> str:
    return "/".join(binding.resource_path)


class ToyDriver(Driver):
    name = "toy"

    def __init__(self, config: dict | None = None):
        super().__init__(config)
        self.path = self.config["path"]

    @classmethod
    def resolve_config(cls, config: dict, base_dir: str) -> dict:
        return {**config, "path": os.path.join(base_dir, config["path"])}

    def capabilities(self) -> Capabilities:
        return CAPABILITIES

    @contextlib.contextmanager
    def state(self, write: bool = False):
        with open(self.path + ".lock", "a") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            try:
                with open(self.path) as f:
                    st = json.load(f)
            except FileNotFoundError:
                st = {}
            yield st
            if write:
                with open(self.path + ".tmp", "w") as f:
                    json.dump(st, f)
                    f.flush()
                    os.fsync(f.fileno())
                os.replace(self.path + ".tmp", self.path)

    def apply(self, req: Apply) -> Applied:
        if req.dry_run:
            return Applied("would create views", created=())
        with self.state(write=True) as st:
            m = st.setdefault(req.materialization, {"views": {}, "ranges": [], "seq": 0})
            for b in req.bindings:
                m["views"].setdefault(_res(b), [] if b.delta_updates else {})
        return Applied("created views")

    def open(self, req: Open) -> tuple[Transactor, Opened]:
        key_range = req.range
        with self.state(write=True) as st:
            m = st.setdefault(req.materialization, {"views": {}, "ranges": [], "seq": 0})
            over = [r for r in m["ranges"] if Range(r["b"], r["e"]).overlaps(key_range)]
            for r in over:  # fence every overlapping range: a zombie of a split or merge too
                r["fence"] += 1
            latest = max((r for r in over if r["cp"] is not None), key=lambda r: r["seq"], default=None)
            mine = next((r for r in over if (r["b"], r["e"]) == (key_range.key_begin, key_range.key_end)), None)
            if mine is None:
                mine = {
                    "b": key_range.key_begin,
                    "e": key_range.key_end,
                    "cp": None,
                    "seq": 0,
                    "fence": 1 + max((r["fence"] for r in over), default=0),
                }
                m["ranges"].append(mine)
            if latest is not None:  # inherit the newest commit of the covering or merged ranges
                mine["cp"], mine["seq"] = latest["cp"], latest["seq"]
            return ToyTransactor(self, req, mine["fence"]), Opened(mine["cp"])

    def dump(self, materialization: str, binding: BindingSpec):
        with self.state() as st:
            view = st.get(materialization, {}).get("views", {}).get(_res(binding), {})
            return list(view) if binding.delta_updates else {tuple(json.loads(k)): v for k, v in view.items()}

    def checkpoints(self, materialization: str) -> list[CheckpointRow]:
        with self.state() as st:
            return [
                CheckpointRow(materialization, Range(r["b"], r["e"]), r["fence"], r["cp"])
                for r in st.get(materialization, {}).get("ranges", [])
            ]

    def drop(self, materialization: str, bindings: Sequence[BindingSpec]) -> list[str]:
        with self.state(write=True) as st:
            return [f"dropped {materialization}"] if st.pop(materialization, None) is not None else []


class ToyTransactor(ReadCommittedLoads, Transactor):
    def __init__(self, driver: ToyDriver, req: Open, fence: int):
        self.driver, self.req, self.fence = driver, req, fence
        self._deferred: list = []
        self._ops: list = []

    def acknowledge(self, msg: Acknowledge) -> Acknowledged:
        self._acknowledged = True  # nothing staged: commits are visible when StartedCommit returns
        return Acknowledged()

    def _evaluate(self, msg: Load) -> list[Loaded]:
        res = _res(self.req.bindings[msg.binding])
        with self.driver.state() as st:
            view = st.get(self.req.materialization, {}).get("views", {}).get(res, {})
            hits = [(k, view[json.dumps(list(k))]) for k in msg.keys if json.dumps(list(k)) in view]
        return [Loaded(msg.binding, tuple(k for k, _ in hits), tuple(d for _, d in hits))] if hits else []

    def store(self, msg: Store) -> None:
        self._ops.append(msg)

    def start_commit(self, msg: StartCommit) -> StartedCommit:
        key_range = self.req.range
        with self.driver.state(write=True) as st:
            m = st[self.req.materialization]
            mine = next(r for r in m["ranges"] if (r["b"], r["e"]) == (key_range.key_begin, key_range.key_end))
            if mine["fence"] != self.fence:  # checked inside the write that commits
                raise FencedOff(f"toy: range {key_range.name} was opened again (fence {mine['fence']} != {self.fence})")
            for s in self._ops:
                binding = self.req.bindings[s.binding]
                view = m["views"].setdefault(_res(binding), [] if binding.delta_updates else {})
                if binding.delta_updates:  # rows appended as they come
                    view.extend(s.docs)
                    continue
                for key, doc, delete in zip(s.keys, s.docs, s.deletes):
                    if delete:
                        view.pop(json.dumps(list(key)), None)
                    else:
                        view[json.dumps(list(key))] = doc
            m["seq"] += 1
            mine["cp"], mine["seq"] = msg.runtime_checkpoint, m["seq"]
        self._ops, self._acknowledged = [], False
        return StartedCommit()
