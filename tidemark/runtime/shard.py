"""One shard's transaction: the protocol session that runs in an executor task.

:func:`run_shard` is called once per shard per batch with the shard's combined rows
``((shard, binding, key_json), doc_json)`` sorted by key.  It

1. opens a session on the shard's key range (the driver bumps its fence);
2. skips the whole transaction if the endpoint already committed this batch
   (a batch that Spark re-runs after a crash);
3. Acknowledge, then Loads the keys of standard bindings in chunks while spilling the
   combined rows to local disk above a memory budget, then Flush;
4. reduces ``loaded ⊕ combined`` per key and Stores in chunks (a binding the endpoint
   reduces itself, ``BindingSpec.endpoint_reduce``, gets no Loads: it Stores the combined
   documents);
5. StartCommit with the runtime checkpoint, and returns a :class:`ShardResult` that
   carries the driver-checkpoint updates to the commit on the Spark driver.

Nothing here imports Spark: the function is a plain iterator transform.
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Iterable, Optional, Sequence, cast

from tidemark.drivers.base import Capabilities, CommitPattern, Driver, Transactor, capabilities_of
from tidemark.drivers.limits import store_check
from tidemark.drivers.registry import load_driver
from tidemark.errors import RecoveryError, TidemarkError, mark_for_driver, reset_hint
from tidemark.faults import fault_point
from tidemark.jsontext import loads
from tidemark.protocol.messages import (
    Acknowledge,
    BindingSpec,
    Doc,
    Flush,
    JsonObject,
    Key,
    Load,
    Loaded,
    Open,
    Quarantine,
    Range,
    StartCommit,
    StateUpdate,
    Store,
    StoreRows,
    StoreTexts,
)
from tidemark.protocol.state import RuntimeSession
from tidemark.runtime.spill import LoadedIndex, SpillBuffer

if TYPE_CHECKING:
    import pyarrow as pa

    from tidemark.collection.collection import Collection

#: a shard's combined row as Spark gives it: ((shard, binding, key JSON), document JSON)
CombinedRow = tuple[tuple[int, int, str], str]


@dataclass(frozen=True)
class ShardTask:
    """Everything an executor needs for one batch (pickled into the task closure)."""

    materialization: str
    version: str
    driver_name: str
    driver_config: JsonObject
    bindings: tuple[BindingSpec, ...]
    collections: tuple[Collection, ...]  # tidemark.collection.Collection per binding
    checkpoint_id: str
    batch_id: int
    ranges: tuple[Range, ...]
    driver_checkpoint: Any
    runtime_checkpoint: JsonObject
    memory_budget_bytes: int = 64 << 20
    max_loaded_in_memory: int = 200_000
    quarantine: tuple[JsonObject, ...] = ()  # invalid documents, written by shard 0's transaction
    committed_batch: int = -1  # the recovery log's last batch (-1: none)
    capabilities: Optional[Capabilities] = None  # read once by the coordinator (None: ask the driver)


@dataclass
class ShardResult:
    shard: int
    range: Range
    skipped: bool
    updates: list[StateUpdate] = field(default_factory=list)  # StateUpdate in order
    loaded: int = 0
    stored: int = 0
    deleted: int = 0
    keys: int = 0  # the combined keys (rows) of this shard's batch
    spilled: bool = False
    aborted: bool = False  # committed nothing: the batch needs the checked plan (see tidemark.spark.paths)
    input_documents: int = 0  # documents combined into this shard's rows
    timings: dict[str, float] = field(default_factory=dict)
    executor: str = field(default_factory=lambda: f"{os.uname().nodename}:{os.getppid()}")  # host:executor JVM pid


@dataclass
class TypedRows:
    """A shard's combined rows of one binding as typed values (the sessions in the driver on
    the typed combine): ``keys`` sorted as the rows, ``rows`` the Arrow table of their
    documents' properties (:class:`StoreRows`), ``documents`` the source documents combined."""

    binding: int
    keys: list[Key]
    rows: pa.Table
    documents: int


@dataclass
class TypedShard:
    """A shard's combined rows as typed values: one :class:`TypedRows` per binding that has
    rows in the batch, in binding order."""

    parts: list[TypedRows]

    @property
    def documents(self) -> int:
        return sum(p.documents for p in self.parts)


def typed_parts(rows: Iterable[CombinedRow] | TypedRows | TypedShard) -> Optional[list[TypedRows]]:
    """The :class:`TypedRows` of a shard's ``rows`` (None: rows of JSON texts)."""
    if isinstance(rows, TypedRows):
        return [rows]
    return list(rows.parts) if isinstance(rows, TypedShard) else None


def _store_rows(session: RuntimeSession, typed: TypedRows, chunk: int, result: ShardResult) -> None:
    """The Stores of a shard's typed rows: slices of the Arrow table, no Python per row."""
    for i in range(0, len(typed.keys), chunk):
        part = typed.keys[i : i + chunk]
        m = len(part)
        session.store(StoreRows(typed.binding, tuple(part), typed.rows.slice(i, m)))
        fault_point("mid_store")
        result.stored += m


def _session(transactor: Transactor, bindings: Sequence[BindingSpec], capabilities: Capabilities) -> RuntimeSession:
    """The checked session over a transactor; each Store's keys within the driver's declared limits."""
    return RuntimeSession(transactor, bindings, check_store=store_check(capabilities.limits, bindings))


def run_shard(task: ShardTask, index: int, rows: Iterable[CombinedRow] | TypedRows | TypedShard) -> ShardResult:
    try:
        return _run_shard(task, index, rows)
    except TidemarkError as exc:
        raise mark_for_driver(exc) from exc  # read back on the Spark driver as this error


def check_opened(task: ShardTask, key_range: Range, cp: Optional[JsonObject], store_authoritative: bool) -> bool:
    """Compare the range's committed checkpoint with this batch; True: the endpoint already
    committed this very batch (a re-run), so the session skips it.  Refuses a checkpoint of
    another tidemark checkpoint, of the same batch number with another identity (other
    input, another Spark query), one ahead of this batch, or one behind the recovery log."""
    from tidemark.runtime.identity import BatchIdentity
    from tidemark.runtime.ownership import Owner, other_checkpoint
    from tidemark.runtime.startup_checks import check_position
    from tidemark.runtime.versions import refuse_newer

    where = f"materialization {task.materialization!r}: range {key_range.name} of endpoint {task.driver_name!r}"
    if cp is None:
        if store_authoritative and task.committed_batch >= 0:  # tables or checkpoint rows dropped
            check_position(task.materialization, task.driver_name, f"range {key_range.name}", -1, task.committed_batch)
        return False
    refuse_newer(cp, f"{where}: its committed runtime checkpoint")
    if cp.get("checkpoint_id") != task.checkpoint_id:
        other = Owner.of(cp, task.materialization) or Owner(task.materialization, cp.get("checkpoint_id"))
        here = Owner.of(task.runtime_checkpoint, task.materialization) or Owner(
            task.materialization, task.checkpoint_id
        )
        if not here.same_folder(other):
            place = f"range {key_range.name} of endpoint {task.driver_name!r}"
            text = other_checkpoint(
                task.materialization, place, other, here, f"batch {cp.get('batch_id')}", action="this run"
            )
            raise RecoveryError(text.replace("Nothing was changed", "this session committed nothing"))
        raise RecoveryError(
            f"{where} is written by another tidemark checkpoint (id {cp.get('checkpoint_id')}, batch "
            f"{cp.get('batch_id')}), not this one (id {task.checkpoint_id}). If this checkpoint folder was "
            f"deleted, restore it; to start this view over on purpose: {reset_hint(task.materialization)}; "
            "this session committed nothing"
        )
    at = BatchIdentity.of(cp)
    mine = BatchIdentity.of(task.runtime_checkpoint)
    at_batch = at.batch_id if at else -1
    if at_batch == task.batch_id:
        diff = mine.differences(at) if (mine and at) else []
        if diff:
            raise RecoveryError(
                f"{where} committed batch {task.batch_id} with another identity ({'; '.join(diff)}): the input "
                "differs from what this run would write. Restore Spark's checkpoint, or start over with "
                f"{reset_hint(task.materialization)}; this session committed nothing"
            )
        return True
    # Never ahead of this batch; a store-authoritative range never behind the recovery log.
    check_position(
        task.materialization,
        task.driver_name,
        f"range {key_range.name}",
        at_batch,
        task.committed_batch,
        ahead_ok=task.batch_id - 1 - task.committed_batch,
        behind_ok=task.committed_batch + 1 if not store_authoritative else 0,
    )
    return False


def _run_shard(task: ShardTask, index: int, rows: Iterable[CombinedRow] | TypedRows | TypedShard) -> ShardResult:
    return run_opened(task, index, open_shard(task, index), rows)


@dataclass
class OpenedShard:
    """A shard's session after Open (:func:`open_shard`), before its batch's rows: the driver,
    its transactor, the driver's capabilities, whether the endpoint holds this very batch
    already (a re-run), and the Open's time."""

    driver: Driver
    transactor: Transactor
    caps: Capabilities
    replayed: bool
    seconds: float

    def discard(self) -> None:
        """Close the session without a transaction (its batch runs elsewhere, or failed):
        nothing was staged, and a later Open fences it."""
        try:
            self.transactor.close()
        finally:
            self.driver.close()


def open_shard(task: ShardTask, index: int) -> OpenedShard:
    """Step 1 of a shard's session: Open its range (the fence bumped) and compare the
    endpoint's checkpoint with this batch (:func:`check_opened`)."""
    key_range = task.ranges[index]
    t0 = time.perf_counter()
    driver: Driver = load_driver(task.driver_name, task.driver_config)
    try:
        fault_point("open")
        transactor, opened = driver.open(
            Open(
                materialization=task.materialization,
                version=task.version,
                range=key_range,
                state=task.driver_checkpoint,
                config=task.driver_config,
                bindings=task.bindings,
            )
        )
        caps = task.capabilities or capabilities_of(driver)
        store_authoritative = caps.commit_pattern is CommitPattern.STORE_AUTHORITATIVE
        try:
            replayed = check_opened(task, key_range, opened.runtime_checkpoint, store_authoritative)
        except BaseException:
            transactor.close()
            raise
    except BaseException:
        driver.close()
        raise
    return OpenedShard(driver, transactor, caps, replayed, time.perf_counter() - t0)


def run_opened(
    task: ShardTask, index: int, shard: OpenedShard, rows: Iterable[CombinedRow] | TypedRows | TypedShard
) -> ShardResult:
    """Steps 2-5 of an opened shard's session on its batch's ``rows``; the driver is closed after."""
    key_range = task.ranges[index]
    try:
        if shard.replayed:
            # Step 2: the endpoint committed this very batch already (a re-run): skip.
            for _ in () if typed_parts(rows) is not None else cast(Iterable[CombinedRow], rows):
                pass
            shard.transactor.close()
            return ShardResult(index, key_range, skipped=True, timings={"open": shard.seconds})
        session = _session(shard.transactor, task.bindings, shard.caps)
        return _transaction(
            task, index, key_range, session, shard.transactor, rows, {"open": shard.seconds}, shard.caps
        )
    finally:
        shard.driver.close()


def _transaction(
    task: ShardTask,
    index: int,
    key_range: Range,
    session: RuntimeSession,
    transactor: Transactor,
    rows: Iterable[CombinedRow] | TypedRows | TypedShard,
    timings: dict[str, float],
    caps: Capabilities,
) -> ShardResult:
    result = ShardResult(index, key_range, skipped=False, timings=timings)
    bindings = task.bindings
    collections = task.collections

    # Step 3: Acknowledge (the previous transaction is in the recovery log).
    t = time.perf_counter()
    acked = session.acknowledge(Acknowledge(state=task.driver_checkpoint))
    if acked.state is not None:
        result.updates.append(acked.state)
    timings["acknowledge"] = time.perf_counter() - t

    # Step 3b: Load keys in chunks while buffering the combined rows.
    t = time.perf_counter()
    load_chunk = _limit(caps, "max_load_keys", 10_000)
    buffer = SpillBuffer(task.memory_budget_bytes)
    loaded = LoadedIndex(task.max_loaded_in_memory)
    pending: dict[int, list[Key]] = {}

    def index_loaded(responses: Iterable[Loaded]) -> None:
        for resp in responses:
            for key, doc in zip(resp.keys, resp.docs):
                loaded.put(resp.binding, tuple(key), doc)

    delta = [b.delta_updates for b in bindings]
    # no Loads: delta updates, and bindings the endpoint reduces itself (their Stores carry
    # the batch's combined documents)
    reduced = [b.endpoint_reduce and not b.delta_updates for b in bindings]
    no_load = [b.delta_updates or r for b, r in zip(bindings, reduced)]
    typed = typed_parts(rows)
    try:
        # typed_parts is None: rows are the combined rows
        for (_shard, binding, key_json), doc_json in () if typed is not None else cast(Iterable[CombinedRow], rows):
            key = tuple(loads(key_json))  # parsed once: the Store loop reads it from the buffer
            buffer.append((binding, key, doc_json), len(key_json) + len(doc_json))
            if no_load[binding]:
                continue
            keys = pending.setdefault(binding, [])
            keys.append(key)
            if len(keys) >= load_chunk:
                index_loaded(session.load(Load(binding, tuple(keys))))
                pending[binding] = []
                fault_point("mid_load")
        for binding, keys in pending.items():
            if keys:
                index_loaded(session.load(Load(binding, tuple(keys))))
                fault_point("mid_load")
        late, flushed = session.flush(Flush())
        index_loaded(late)
        if flushed.state is not None:
            result.updates.append(flushed.state)
        fault_point("after_load")
        result.keys = buffer.count if typed is None else sum(len(p.keys) for p in typed)
        result.loaded = loaded.count
        timings["load"] = time.perf_counter() - t

        # Step 4: reduce loaded ⊕ combined, Store in chunks (rows are grouped by binding).
        t = time.perf_counter()
        store_chunk = _limit(caps, "max_store_docs", 10_000)
        for part in typed or ():
            _store_rows(session, part, store_chunk, result)
        cols = _Columns()
        current: Optional[int] = None
        for binding, key, doc_json in buffer:
            if binding != current and cols.n:
                session.store(cols.message(cast(int, current)))  # set with the first row
                fault_point("mid_store")
                cols = _Columns()
            current = binding
            if reduced[binding]:  # the endpoint parses and reduces it: its JSON text, as combined
                cols.add_text(key, doc_json)
                result.stored += 1
                if cols.n >= store_chunk:
                    session.store(cols.message(binding))
                    fault_point("mid_store")
                    cols = _Columns()
                continue
            coll = collections[binding]
            doc = loads(doc_json)
            prior = None if no_load[binding] else loaded.get(binding, key)
            if prior is not None:
                doc = coll.reduce(prior, doc)
            delete = bool(coll.is_deletion(doc))
            if delete and prior is None and not delta[binding]:
                continue  # deleting a key the endpoint does not have: nothing to do
            doc = coll.finish(doc)  # the reset marker of a delete-then-re-add is never stored
            cols.add(key, coll.values(doc), doc, prior is not None, delete)
            result.stored += 1
            result.deleted += int(delete)
            if cols.n >= store_chunk:
                session.store(cols.message(binding))
                fault_point("mid_store")
                cols = _Columns()
        if cols.n:
            session.store(cols.message(cast(int, current)))  # set with the first row
            fault_point("mid_store")
        result.spilled = buffer.spilled_chunks > 0 or loaded.on_disk
    finally:
        buffer.close()
        loaded.close()
    if index == 0 and task.quarantine:
        # Invalid documents go to the dead-letter place in the same transaction (the
        # coordinator refused on_invalid: quarantine where the driver cannot).
        session.quarantine(Quarantine(tuple(task.quarantine)))
    fault_point("after_store")
    timings["store"] = time.perf_counter() - t

    # Step 5: StartCommit with the runtime checkpoint.
    t = time.perf_counter()
    started = session.start_commit(StartCommit(runtime_checkpoint=task.runtime_checkpoint))
    if started.state is not None:
        result.updates.append(started.state)
    timings["commit"] = time.perf_counter() - t
    session.close()
    return result


def _limit(caps: Capabilities, name: str, default: int) -> int:
    """A limit the driver declares (``Capabilities``)."""
    return int(getattr(caps, name, default) or default)


class _Columns:
    __slots__ = ("keys", "values", "docs", "exists", "deletes", "texts")
    keys: list[Key]
    values: list[tuple[Any, ...]]
    docs: list[Doc]
    exists: list[bool]
    deletes: list[bool]
    texts: list[str]

    def __init__(self) -> None:
        self.keys, self.values, self.docs, self.exists, self.deletes, self.texts = [], [], [], [], [], []

    def add_text(self, key: Key, text: str) -> None:
        self.keys.append(key)
        self.texts.append(text)

    @property
    def n(self) -> int:
        return len(self.keys)

    def add(self, key: Key, values: Iterable[Any], doc: Doc, exists: bool, delete: bool) -> None:
        self.keys.append(key)
        self.values.append(tuple(values))
        self.docs.append(doc)
        self.exists.append(exists)
        self.deletes.append(delete)

    def message(self, binding: int) -> Store | StoreTexts:
        if self.texts:  # a binding the endpoint reduces: its columns hold texts only
            return StoreTexts(binding, tuple(self.keys), tuple(self.texts))
        return Store(
            binding=binding,
            keys=tuple(self.keys),
            values=tuple(self.values),
            docs=tuple(self.docs),
            exists=tuple(self.exists),
            deletes=tuple(self.deletes),
        )


def merge_updates(state: Any, results: Sequence[ShardResult]) -> Any:
    """Merge the shards' driver-checkpoint updates into the driver checkpoint, in shard order."""
    from tidemark.runtime.merge_patch import apply_update

    for res in sorted(results, key=lambda r: r.shard):
        for upd in res.updates:
            state = apply_update(state, upd)
    return state


__all__ = ["ShardTask", "ShardResult", "run_shard", "merge_updates", "StateUpdate"]
