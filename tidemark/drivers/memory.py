"""An in-memory (or one-file) driver: the test double for the runtime, in every commit pattern.

Config::

    {"pattern": "store-authoritative"            # default
               | "idempotent-apply-shard" | "idempotent-apply-coordinator" | "at-least-once",
     "name": "default",       # in-process store shared by every MemoryDriver with this name
     "path": "/tmp/x.json",   # or: the whole state in one file shared by processes
     "quarantine": true}      # declare the quarantine capability (default true)

With ``path`` every operation takes an exclusive ``flock`` on ``PATH.lock``, reads the
file, and (for writes) replaces it atomically (temp file + rename), so Spark executor
processes and the Spark driver see one endpoint.  Without ``path`` the state lives in
this process, keyed by ``name``.

How each pattern commits:

``store-authoritative``
    Stores are buffered in the session; ``start_commit`` verifies the session's fence
    and applies the data and the runtime checkpoint in one write (FencedOff otherwise).
    ``open`` bumps the fence of every checkpoint row overlapping the range and inherits
    the checkpoint of the narrowest covering row — or of a more recently committed
    overlapping row, which is what a merge of ranges needs (like Estuary's
    ``flow_checkpoints_v1``, extended to merges).
``idempotent-apply-shard`` / ``idempotent-apply-coordinator``
    ``start_commit`` persists the staged documents under a fresh stage id and returns
    the patch ``{"stages": {RANGE: STAGE_ID}}``.  Once the runtime's recovery log holds
    it, ``Transactor.acknowledge`` (shard: stages overlapping its range) or
    ``coordinator_acknowledge`` (all stages) applies the named stages, each once.
``at-least-once``
    every Store is written at once; Opened is null.

Quarantine rows (``Transactor.quarantine``) travel with the transaction's data -- in the
same write, or in the same stage -- and land in the materialization's ``quarantine`` list,
each with its ``batch_id``: read it with :meth:`MemoryDriver.quarantined` or
:func:`quarantined`.
"""

from __future__ import annotations

import contextlib
import copy
import fcntl
import json
import os
import tempfile
import threading
import uuid
from typing import Any, Iterator, Optional, Sequence

from tidemark.collection.keys import key_json
from tidemark.drivers.base import (
    Capabilities,
    CheckpointRow,
    CommitPattern,
    Driver,
    Position,
    Transactor,
    resolve_local_path,
    store_of_documents,
)
from tidemark.drivers.common.identity import kept as kept_record
from tidemark.errors import FencedOff, SpecError
from tidemark.protocol.messages import (
    Acknowledge,
    Acknowledged,
    AnyStore,
    Applied,
    Apply,
    BindingSpec,
    Flush,
    Flushed,
    Load,
    Loaded,
    Open,
    Opened,
    Quarantine,
    Range,
    StartCommit,
    StartedCommit,
    StateUpdate,
)

key_text = key_json  # the canonical key text (tidemark.collection.keys)


def resource_name(binding: BindingSpec) -> str:
    return "/".join(binding.resource_path)


# ------------------------------------------------------------------------ backends


class _Backend:
    """Holds the whole state: ``{"seq": int, "mats": {materialization: {...}}}``."""

    @contextlib.contextmanager
    def read(self) -> Iterator[dict]:
        raise NotImplementedError

    @contextlib.contextmanager
    def write(self) -> Iterator[dict]:
        """Yield a copy of the state; it replaces the state if the block does not raise."""
        raise NotImplementedError


class _ProcessBackend(_Backend):
    def __init__(self):
        self.lock = threading.RLock()
        self.state: dict = {"seq": 0, "mats": {}}

    @contextlib.contextmanager
    def read(self):
        with self.lock:
            yield self.state

    @contextlib.contextmanager
    def write(self):
        with self.lock:
            work = copy.deepcopy(self.state)
            yield work
            self.state = work


class _FileBackend(_Backend):
    def __init__(self, path: str):
        self.path = os.path.abspath(path)
        d = os.path.dirname(self.path)
        if d:
            os.makedirs(d, exist_ok=True)
        self.thread_lock = threading.RLock()

    @contextlib.contextmanager
    def _locked(self):
        with self.thread_lock, open(self.path + ".lock", "a+") as lock:
            fcntl.flock(lock.fileno(), fcntl.LOCK_EX)
            try:
                yield
            finally:
                fcntl.flock(lock.fileno(), fcntl.LOCK_UN)

    def _load(self) -> dict:
        try:
            with open(self.path, encoding="utf-8") as f:
                text = f.read()
        except FileNotFoundError:
            return {"seq": 0, "mats": {}}
        return json.loads(text) if text.strip() else {"seq": 0, "mats": {}}

    @contextlib.contextmanager
    def read(self):
        with self._locked():
            yield self._load()

    @contextlib.contextmanager
    def write(self):
        with self._locked():
            work = self._load()
            yield work
            fd, tmp = tempfile.mkstemp(prefix=".memory-", dir=os.path.dirname(self.path) or ".")
            try:
                with os.fdopen(fd, "w", encoding="utf-8") as f:
                    json.dump(work, f, separators=(",", ":"))
                    f.flush()
                    os.fsync(f.fileno())
                os.replace(tmp, self.path)
            except BaseException:
                with contextlib.suppress(FileNotFoundError):
                    os.unlink(tmp)
                raise


_SHARED: dict[str, _ProcessBackend] = {}
_SHARED_LOCK = threading.Lock()


def _backend(config: dict) -> _Backend:
    if config.get("path"):
        return _FileBackend(str(config["path"]))
    name = str(config.get("name", "default"))
    with _SHARED_LOCK:
        if name not in _SHARED:
            _SHARED[name] = _ProcessBackend()
        return _SHARED[name]


def _mat(state: dict, materialization: str) -> dict:
    m = state["mats"].setdefault(materialization, {})
    for k, v in (
        ("views", {}),
        ("deltas", {}),
        ("checkpoints", []),
        ("staged", {}),
        ("applied", []),
        ("quarantine", []),
    ):
        m.setdefault(k, v)
    return m


QUARANTINED = None  # the resource of an op that quarantines its doc (an invalid document's row)


def _apply_ops(m: dict, ops: list) -> None:
    """ops: ``[resource, delta, key_text, doc, delete]``; resource ``QUARANTINED``: a quarantine row."""
    for resource, delta, key, doc, delete in ops:
        if resource is QUARANTINED:
            m.setdefault("quarantine", []).append(doc)
        elif delta:
            m["deltas"].setdefault(resource, []).append(doc)
        elif delete:
            m["views"].setdefault(resource, {}).pop(key, None)
        else:
            m["views"].setdefault(resource, {})[key] = doc


def _row_range(row: dict) -> Range:
    return Range(row["key_begin"], row["key_end"])


# -------------------------------------------------------------------------- driver


def _pattern(config: dict, default: CommitPattern) -> CommitPattern:
    pattern = config.get("pattern", default.value)
    try:
        return CommitPattern(pattern)
    except ValueError:
        known = ", ".join(p.value for p in CommitPattern)
        raise SpecError(f"memory driver: unknown pattern {pattern!r} (known: {known})") from None


class MemoryDriver(Driver):
    """The test double; ``config["pattern"]`` chooses its commit pattern."""

    name = "memory"
    default_pattern = CommitPattern.STORE_AUTHORITATIVE

    @classmethod
    def resolve_config(cls, config: dict, base_dir: str) -> dict:
        """``path`` (the file backend) relative to the spec's folder."""
        return resolve_local_path(config, "path", base_dir)

    def __init__(self, config: dict | None = None):
        super().__init__(config)
        self.pattern = _pattern(self.config, self.default_pattern)
        self.backend = _backend(self.config)

    def capabilities(self) -> Capabilities:
        return Capabilities(self.pattern, quarantine=bool(self.config.get("quarantine", True)))

    def __getstate__(self):
        return {"config": self.config}

    def __setstate__(self, st):
        self.__init__(st["config"])

    # ---------------------------------------------------------------- setup
    def apply(self, req: Apply) -> Applied:
        if req.dry_run:
            return Applied(f"would create {len(req.bindings)} in-memory resources")
        with self.backend.write() as state:
            m = _mat(state, req.materialization)
            kept = m.setdefault("identities", {})
            for i, b in enumerate(req.bindings):
                if b.delta_updates:
                    m["deltas"].setdefault(resource_name(b), [])
                else:
                    m["views"].setdefault(resource_name(b), {})
                if i < len(req.identities) and resource_name(b) not in kept:
                    kept[resource_name(b)] = kept_record(req.identities[i], resource_name(b))
            if req.checkpoint_id and "owner" not in m:  # the state of this name is that checkpoint's
                first = req.identities[0] if req.identities else {}
                m["owner"] = {**{k: first.get(k) for k in ("checkpoint_location", "host")}, "id": req.checkpoint_id}
        return Applied(f"created {len(req.bindings)} in-memory resources")

    def owners(self, materialization: str) -> list[Position]:
        """The checkpoint that owns the view's in-memory state (its staged work, fences and
        views are kept per materialization name)."""
        out = []
        with self.backend.read() as state:
            owner = (state["mats"].get(materialization) or {}).get("owner")
        if owner:
            place = f"in-memory state of {materialization!r}"
            out.append(
                Position(
                    place,
                    materialization,
                    owner["id"],
                    -1,
                    location=owner.get("checkpoint_location"),
                    host=owner.get("host"),
                )
            )
        return out

    def identities(self, materialization: str, bindings: Sequence[BindingSpec]) -> list[Optional[dict]]:
        with self.backend.read() as state:
            kept = (state["mats"].get(materialization) or {}).get("identities") or {}
            return [copy.deepcopy(kept.get(resource_name(b))) for b in bindings]

    # ---------------------------------------------------------- transactions
    def open(self, req: Open) -> tuple[Transactor, Opened]:
        fence, checkpoint = 0, None
        if self.pattern is CommitPattern.STORE_AUTHORITATIVE:
            fence, checkpoint = self._open_range(req.materialization, req.range)
        return self.transactor_class(self, req, fence), Opened(runtime_checkpoint=checkpoint)

    def _open_range(self, materialization: str, key_range: Range) -> tuple[int, Optional[dict]]:
        """Bump the fence of every overlapping row; inherit the checkpoint; insert the exact row."""
        with self.backend.write() as state:
            m = _mat(state, materialization)
            rows = m["checkpoints"]
            overlapping = [r for r in rows if _row_range(r).overlaps(key_range)]
            for r in overlapping:
                r["fence"] += 1
            covering = sorted(
                (r for r in overlapping if _row_range(r).covers(key_range)), key=lambda r: r["key_end"] - r["key_begin"]
            )
            source = covering[0] if covering else None
            latest = max(overlapping, key=lambda r: r["seq"], default=None)
            if (
                latest is not None
                and latest["checkpoint"] is not None
                and (source is None or latest["seq"] > source["seq"])
            ):
                source = latest  # a merge: the sub-ranges committed after the covering row
            exact = next(
                (r for r in rows if r["key_begin"] == key_range.key_begin and r["key_end"] == key_range.key_end), None
            )
            if exact is None:
                exact = {
                    "key_begin": key_range.key_begin,
                    "key_end": key_range.key_end,
                    "fence": 1 + max((r["fence"] for r in overlapping), default=0),
                    "checkpoint": None,
                    "seq": 0,
                }
                rows.append(exact)
            if source is not None and source is not exact:
                exact["checkpoint"] = copy.deepcopy(source["checkpoint"])
                exact["seq"] = source["seq"]
            return exact["fence"], copy.deepcopy(exact["checkpoint"])

    transactor_class: type  # set below

    def coordinator_acknowledge(
        self, materialization: str, state: Any, runtime_checkpoint: dict, bindings: Sequence[BindingSpec]
    ) -> None:
        if self.pattern is CommitPattern.IDEMPOTENT_APPLY_COORDINATOR:
            self.apply_stages(materialization, state, None)

    def apply_stages(self, materialization: str, driver_state: Any, key_range: Optional[Range]) -> int:
        """Apply, once each, the stages the driver checkpoint names (overlapping ``key_range``)."""
        stages = (driver_state or {}).get("stages") or {} if isinstance(driver_state, dict) else {}
        if not stages:
            return 0
        with self.backend.write() as state:
            m = _mat(state, materialization)
            applied = set(m["applied"])
            n = 0
            for stage_id in stages.values():
                stage = m["staged"].get(stage_id)
                if stage is None or stage_id in applied:
                    continue
                if key_range is not None and not Range(*stage["range"]).overlaps(key_range):
                    continue
                self._apply_stage(m, stage)
                m["applied"].append(stage_id)
                del m["staged"][stage_id]
                n += 1
            return n

    def _apply_stage(self, m: dict, stage: dict) -> None:
        _apply_ops(m, stage["ops"])

    # ------------------------------------------------------------ inspection
    def dump(self, materialization: str, binding: BindingSpec):
        with self.backend.read() as state:
            m = state["mats"].get(materialization) or {}
            if binding.delta_updates:
                return copy.deepcopy(list((m.get("deltas") or {}).get(resource_name(binding), [])))
            view = (m.get("views") or {}).get(resource_name(binding), {})
            return {tuple(json.loads(k)): copy.deepcopy(v) for k, v in view.items()}

    def quarantined(self, materialization: str) -> list[dict]:
        """The committed quarantine rows of a materialization, in commit order."""
        with self.backend.read() as state:
            return copy.deepcopy(list((state["mats"].get(materialization) or {}).get("quarantine") or []))

    def drop(self, materialization: str, bindings: Sequence[BindingSpec]) -> list[str]:
        with self.backend.write() as state:
            if state["mats"].pop(materialization, None) is None:
                return []
        return [f"dropped the in-memory view of {materialization!r}"]

    def checkpoints(self, materialization: str) -> list[CheckpointRow]:
        with self.backend.read() as state:
            m = state["mats"].get(materialization) or {}
            return [
                CheckpointRow(materialization, _row_range(r), r["fence"], copy.deepcopy(r["checkpoint"]))
                for r in sorted(m.get("checkpoints", []), key=lambda r: (r["key_begin"], r["key_end"]))
            ]

    # --------------------------------------------------------------- helpers
    def read_docs(self, materialization: str, resource: str, keys: Sequence[tuple]) -> list[tuple[tuple, Any]]:
        with self.backend.read() as state:
            view = ((state["mats"].get(materialization) or {}).get("views") or {}).get(resource, {})
            out = []
            for key in keys:
                doc = view.get(key_text(key))
                if doc is not None:
                    out.append((tuple(key), copy.deepcopy(doc)))
            return out


class MemoryTransactor(Transactor):
    """One session of a :class:`MemoryDriver`."""

    def __init__(self, driver: MemoryDriver, req: Open, fence: int):
        self.driver = driver
        self.materialization = req.materialization
        self.range = req.range
        self.bindings = req.bindings
        self.fence = fence
        self.acknowledged = False
        self.deferred: list[Load] = []
        self.ops: list = []
        self.quarantine_rows: list[dict] = []

    @property
    def pattern(self) -> CommitPattern:
        return self.driver.pattern

    def acknowledge(self, msg: Acknowledge) -> Acknowledged:
        if self.pattern is CommitPattern.IDEMPOTENT_APPLY_SHARD:
            self.driver.apply_stages(self.materialization, msg.state, self.range)
        self.acknowledged = True
        return Acknowledged()

    def _evaluate(self, msg: Load) -> list[Loaded]:
        found = self.driver.read_docs(self.materialization, resource_name(self.bindings[msg.binding]), msg.keys)
        if not found:
            return []
        return [Loaded(msg.binding, tuple(k for k, _ in found), tuple(d for _, d in found))]

    def load(self, msg: Load) -> list[Loaded]:
        if not self.acknowledged:  # read-committed: stage until our Acknowledged
            self.deferred.append(msg)
            return []
        return self._evaluate(msg)

    def flush(self, msg: Flush) -> tuple[list[Loaded], Flushed]:
        out: list[Loaded] = []
        for load in self.deferred:
            out.extend(self._evaluate(load))
        self.deferred = []
        return out, Flushed()

    def _ops(self, msg: AnyStore) -> list:
        msg = store_of_documents(msg)
        b = self.bindings[msg.binding]
        res = resource_name(b)
        return [[res, b.delta_updates, key_text(k), d, bool(x)] for k, d, x in zip(msg.keys, msg.docs, msg.deletes)]

    def store(self, msg: AnyStore) -> None:
        if self.pattern is CommitPattern.AT_LEAST_ONCE:
            with self.driver.backend.write() as state:
                _apply_ops(_mat(state, self.materialization), self._ops(msg))
        else:
            self.ops.extend(self._ops(msg))

    def quarantine(self, msg: Quarantine) -> None:
        """Invalid documents: committed (or staged) with this transaction's data."""
        self.quarantine_rows.extend(msg.rows)

    def start_commit(self, msg: StartCommit) -> StartedCommit:
        batch_id = msg.runtime_checkpoint.get("batch_id")
        quarantined = [[QUARANTINED, False, None, dict(r, batch_id=batch_id), False] for r in self.quarantine_rows]
        ops, self.ops, self.quarantine_rows = self.ops + quarantined, [], []
        self.acknowledged = False  # the next transaction starts with Acknowledge
        if self.pattern is CommitPattern.STORE_AUTHORITATIVE:
            self.commit_store(ops, msg.runtime_checkpoint)
            return StartedCommit()
        if self.pattern is CommitPattern.AT_LEAST_ONCE:
            if quarantined:  # the Stores went out at once; the dead letters go now
                with self.driver.backend.write() as state:
                    _apply_ops(_mat(state, self.materialization), quarantined)
            return StartedCommit()
        stage_id = f"{self.range.name}.{uuid.uuid4().hex[:16]}"
        with self.driver.backend.write() as state:
            m = _mat(state, self.materialization)
            m["staged"][stage_id] = {"range": [self.range.key_begin, self.range.key_end], "ops": ops}
        return StartedCommit(StateUpdate({"stages": {self.range.name: stage_id}}, merge_patch=True))

    def check_fence(self, m: dict) -> dict:
        row = next(
            (
                r
                for r in m["checkpoints"]
                if r["key_begin"] == self.range.key_begin and r["key_end"] == self.range.key_end
            ),
            None,
        )
        if row is None or row["fence"] != self.fence:
            raise FencedOff(
                f"memory endpoint: a newer session opened range {self.range.name} of "
                f"{self.materialization!r} (fence {self.fence} is stale)"
            )
        return row

    def commit_store(self, ops: list, runtime_checkpoint: dict) -> None:
        """Data + checkpoint + fence check in one write."""
        with self.driver.backend.write() as state:
            m = _mat(state, self.materialization)
            row = self.check_fence(m)
            _apply_ops(m, ops)
            state["seq"] = state.get("seq", 0) + 1
            row["checkpoint"] = copy.deepcopy(runtime_checkpoint)
            row["seq"] = state["seq"]


MemoryDriver.transactor_class = MemoryTransactor


def quarantined(materialization: str, config: dict | None = None) -> list[dict]:
    """The quarantine rows a materialization committed to the memory endpoint of ``config``
    (default: the in-process store ``"default"``)."""
    return MemoryDriver(config).quarantined(materialization)


def reset(name: str = "default") -> None:
    """Forget an in-process store (tests)."""
    with _SHARED_LOCK:
        _SHARED.pop(name, None)


__all__ = ["MemoryDriver", "MemoryTransactor", "quarantined", "reset", "key_text", "resource_name"]
