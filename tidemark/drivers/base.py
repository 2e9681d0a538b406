"""The driver contract: what an endpoint driver must do, and must not assume.

A driver is the endpoint side of the materialization protocol.  The runtime constructs
one :class:`Driver` per process from ``(name, config)`` (drivers are built on executors,
so they must not rely on anything but their config), calls :meth:`Driver.open` once per
shard session, and talks to the returned :class:`Transactor` in this order, enforced by
:mod:`tidemark.protocol.state`::

    open(Open)                -> (Transactor, Opened{runtime_checkpoint | None})
    acknowledge(Acknowledge)  -> Acknowledged      # first, every transaction
    load(Load)*               -> [Loaded]*         # may defer: return [] and answer at flush
    flush(Flush)              -> ([Loaded], Flushed)
    store(AnyStore)*                               # no reply: Store, StoreTexts or StoreRows
    start_commit(StartCommit) -> StartedCommit
    close()                                        # NOT guaranteed: a process may be killed

What a driver may assume
------------------------
* A key is Loaded at most once per transaction, and only for standard (non-delta)
  bindings.  Load keys may not exist; answer Loaded only for keys that exist.
* ``Store.exists[i]`` is true exactly when the key was Loaded in this transaction.
* ``StartCommit.runtime_checkpoint`` is a small JSON object with at least
  ``{"checkpoint_id", "batch_id", "materialization"}``; batch ids only grow.

What a driver must NOT assume
-----------------------------
* That ``close`` is called, or that a session that was opened will ever commit.
* That it is the only session on its key range: a retried or speculative Spark task
  opens a new session on the same range while the old one may still run (a *zombie*).
  Store-authoritative drivers fence: :meth:`Driver.open` bumps a nonce for the range
  and the commit verifies it *inside* the endpoint transaction, raising
  :class:`~tidemark.errors.FencedOff` when it changed.
* That Loads may be evaluated before its own Acknowledged (read-committed): a driver
  that commits in the background must stage Loads until its commit is visible.
* That Acknowledge runs once: it must be idempotent (it is re-run after crashes).
* That keys outside ``Open.range`` never reach it: the runtime only routes keys of the
  range, but a driver that stores per range (checkpoints, channels) must use the range
  it was opened with, never "all keys".
* Anything about the order of Stores beyond "keys are sorted within a binding".

Commit patterns (see ``Capabilities.commit_pattern``)
-----------------------------------------------------
``store-authoritative``
    data + runtime checkpoint + fence check in one endpoint transaction in
    ``start_commit``; ``Opened`` returns the last committed runtime checkpoint of the
    range (inheriting from the narrowest covering range after a split or merge).
``idempotent-apply-shard`` / ``idempotent-apply-coordinator``
    ``store`` stages; ``StartedCommit`` returns a driver-checkpoint patch naming the
    staged work; once the runtime's recovery log commits, the staged work is applied
    idempotently (keyed by batch) by ``Transactor.acknowledge`` of the next session
    (per shard) or by :meth:`Driver.coordinator_acknowledge` (once, over all shards).
``at-least-once``
    writes go straight to the endpoint; ``Opened`` returns None.  Reductions such as
    ``sum`` may double-apply after a crash; lastWriteWins is effectively-once.
"""

from __future__ import annotations

import enum
import os
from abc import ABC, abstractmethod
from dataclasses import dataclass
from typing import Any, ClassVar, Iterable, Iterator, Optional, Sequence, TypeVar

from tidemark.drivers.limits import ValueLimits
from tidemark.errors import ProtocolViolation
from tidemark.protocol.messages import (
    Acknowledge,
    Acknowledged,
    AnyStore,
    Applied,
    Apply,
    BindingSpec,
    Doc,
    Flush,
    Flushed,
    JsonObject,
    Key,
    Load,
    Loaded,
    Open,
    Opened,
    Quarantine,
    Range,
    SpecResponse,
    StartCommit,
    StartedCommit,
    Store,
    Validate,
    Validated,
    ValidatedBinding,
)

_T = TypeVar("_T")
_D = TypeVar("_D", bound="Driver")


class CommitPattern(str, enum.Enum):
    STORE_AUTHORITATIVE = "store-authoritative"
    IDEMPOTENT_APPLY_SHARD = "idempotent-apply-shard"
    IDEMPOTENT_APPLY_COORDINATOR = "idempotent-apply-coordinator"
    AT_LEAST_ONCE = "at-least-once"

    @property
    def exactly_once(self) -> bool:
        return self is not CommitPattern.AT_LEAST_ONCE


@dataclass(frozen=True, slots=True)
class Capabilities:
    """What a driver can do. The runtime branches on this, never on ``isinstance``."""

    commit_pattern: CommitPattern
    delta_updates: bool = True
    standard_updates: bool = True
    max_load_keys: int = 10_000  # keys per Load message
    max_store_docs: int = 10_000  # documents per Store message
    concurrent_shards: bool = True  # several shards may write one endpoint at once
    quarantine: bool = False  # Transactor.quarantine writes invalid documents with the transaction
    #: the reduce strategies the endpoint applies itself (in SQL): a binding whose schema
    #: reduces with these only gets no Loads, and its Stores carry the batch's combined
    #: documents (``BindingSpec.endpoint_reduce``; :func:`tidemark.collection.sql_plan.sql_reduction`)
    endpoint_reduce: frozenset[str] = frozenset()
    #: the values the endpoint cannot hold (refused, never cut or changed)
    limits: ValueLimits = ValueLimits()

    @property
    def exactly_once(self) -> bool:
        return self.commit_pattern.exactly_once


@dataclass(frozen=True, slots=True)
class CheckpointRow:
    """One row of a store's checkpoints (for ``tidemark status`` and the kit)."""

    materialization: str
    range: Range
    fence: int
    runtime_checkpoint: Optional[JsonObject]


@dataclass(frozen=True, slots=True)
class ReplaceContents:
    """A rebuild's cut-over (:meth:`Driver.replace_contents`): ``pairs`` of (live binding,
    shadow binding); ``checkpoint_id``: the shadow's tidemark checkpoint, which owns the live
    resources from now on; ``identities``: per pair, the live resource's new view-identity
    record (as Apply keeps it); ``added``: the pairs whose live resource does not exist yet
    (the shadow's becomes it)."""

    materialization: str
    shadow: str
    pairs: tuple[tuple[BindingSpec, BindingSpec], ...]
    checkpoint_id: str
    identities: tuple[JsonObject, ...] = ()
    added: tuple[int, ...] = ()  # indices of the pairs whose live resource is new (a binding the edit added)


@dataclass(frozen=True, slots=True)
class Position:
    """What an endpoint records of a materialization, per place: which tidemark checkpoint
    writes it and the last batch it holds (-1: none).  Read before anything is written,
    so that the runtime can refuse a run that would double-apply or skip batches."""

    place: str  # e.g. "range 00000000-7fffffff" or "table /lake/customers"
    materialization: str
    checkpoint_id: Optional[str]
    batch_id: int
    range: Optional[Range] = None  # store-authoritative checkpoints: the range
    resource: Optional[tuple[str, ...]] = None  # per-resource positions (coordinator apply): the resource path
    location: Optional[str] = None  # the writing checkpoint's folder and host, where recorded
    host: Optional[str] = None


class Transactor(ABC):
    """One shard session. Not shared between threads or sessions."""

    @abstractmethod
    def acknowledge(self, msg: Acknowledge) -> Acknowledged:
        """The previous transaction committed to the recovery log.

        Idempotent: apply (or re-apply) staged work of the previous transaction, then
        answer.  Called first in every transaction, including the first one of a session."""

    @abstractmethod
    def load(self, msg: Load) -> Sequence[Loaded]:
        """Look up keys. Return Loaded now, or ``[]`` and answer at :meth:`flush`.

        Must not evaluate before this session's own Acknowledged was returned."""

    @abstractmethod
    def flush(self, msg: Flush) -> tuple[Sequence[Loaded], Flushed]:
        """Answer every deferred Load, then Flushed."""

    @abstractmethod
    def store(self, msg: AnyStore) -> None:
        """Write (or stage) documents. No reply.  A driver gets :class:`Store` only (see
        :func:`store_of_documents`) unless it reduces bindings in the endpoint: then also
        :class:`StoreTexts`, and :class:`StoreRows` where :meth:`Driver.typed_rows` says so."""

    @abstractmethod
    def start_commit(self, msg: StartCommit) -> StartedCommit:
        """Finish every Store and commit (or stage) the transaction."""

    def quarantine(self, msg: Quarantine) -> None:
        """Write ``msg.rows`` (invalid documents) to the endpoint's dead-letter place as
        part of this transaction: they commit with it, or not at all.  Sent after the
        transaction's Stores, before StartCommit; no reply.  Only drivers whose
        :class:`Capabilities` declare ``quarantine`` receive it."""
        raise NotImplementedError(f"{type(self).__name__} does not declare the quarantine capability")

    def close(self) -> None:  # noqa: B027 - an optional hook: nothing to release by default
        """Release resources. Not guaranteed to be called."""


class ReadCommittedLoads:
    """Mixin for transactors whose Loads must not be evaluated before Acknowledged.

    Loads that arrive before :meth:`acknowledge` sets ``self._acknowledged`` are kept and
    answered at Flush; later ones are evaluated at once with ``self._evaluate(msg)``.
    The transactor sets ``_acknowledged = False`` again when a transaction commits."""

    _acknowledged: bool = False
    _deferred: list[Load]

    def _evaluate(self, msg: Load) -> list[Loaded]:  # pragma: no cover - the driver's own
        raise NotImplementedError

    def load(self, msg: Load) -> list[Loaded]:
        if not self._acknowledged:
            self._deferred.append(msg)  # read-committed: evaluate after Acknowledged
            return []
        return self._evaluate(msg)

    def flush(self, msg: Flush) -> tuple[list[Loaded], Flushed]:
        out: list[Loaded] = []
        deferred, self._deferred = self._deferred, []
        for m in deferred:
            out.extend(self._evaluate(m))
        return out, Flushed()


class Driver(ABC):
    """An endpoint. Constructed from its config alone, on any process."""

    name: ClassVar[str] = ""
    #: a dry-run Apply names in ``Applied.created`` every resource that does not exist yet (so
    #: ``tidemark reset`` can tell a resource made by hand from one never made)
    reports_created: ClassVar[bool] = False

    def __init__(self, config: JsonObject | None = None):
        self.config = dict(config or {})

    @abstractmethod
    def capabilities(self) -> Capabilities:
        """What this instance can do (it may depend on its config, or on what an external
        program says of itself).  Read once per process by the runtime
        (:func:`capabilities_of`) and carried to the shard sessions."""

    @classmethod
    def resolve_config(cls, config: JsonObject, base_dir: str) -> JsonObject:
        """The config as the spec stores it, resolved against ``base_dir`` (the spec
        file's folder): e.g. a relative file path made absolute.  Called once, when the
        spec is loaded, never on executors; the default changes nothing."""
        return config

    # ---------------------------------------------------------------- setup phase
    def spec(self) -> SpecResponse:
        return SpecResponse()

    def typed_rows(self, bindings: Sequence[BindingSpec]) -> list[bool]:
        """Per binding, whether its Stores may carry the combined documents as typed values
        (:class:`StoreRows`: an Arrow table) instead of JSON texts.  Asked once, after Apply."""
        return [False] * len(bindings)

    def typed_remainder(self) -> bool:
        """Whether the typed rows (:class:`StoreRows`) of a binding may carry their remainder
        (:data:`~tidemark.protocol.messages.REMAINDER`): then they may hold properties the schema
        does not declare.  Asked once, after Apply."""
        return False

    def row_forms(self, bindings: Sequence[BindingSpec]) -> list[str]:
        """What ``tidemark check`` says of how each binding's rows hold its documents (none:
        the endpoint has one way)."""
        return []

    def validate(self, req: Validate) -> Validated:
        """Check that bindings can be applied. Raise IncompatibleSchema otherwise."""
        return Validated(tuple(ValidatedBinding(b.resource_path, b.delta_updates) for b in req.bindings))

    @abstractmethod
    def apply(self, req: Apply) -> Applied:
        """Create or evolve the endpoint resources (idempotent)."""

    # ---------------------------------------------------------- transaction phase
    @abstractmethod
    def open(self, req: Open) -> tuple[Transactor, Opened]:
        """Start a session on ``req.range`` (bumping the fence where the store is
        authoritative) and return the last committed runtime checkpoint of the range."""

    def coordinator_acknowledge(  # noqa: B027 - an optional hook (idempotent-apply-coordinator drivers)
        self, materialization: str, state: Any, runtime_checkpoint: JsonObject, bindings: Sequence[BindingSpec]
    ) -> None:
        """Coordinator apply (``idempotent-apply-coordinator``): apply, idempotently,
        everything the merged driver checkpoint ``state`` names. Called on the Spark
        driver after the recovery log commits, and again at start-up."""

    def recover(self, materialization: str, checkpoint_id: Optional[str], ranges: Sequence[Range] = ()) -> list[str]:
        """End what dead writers of this checkpoint left open in the endpoint, so that
        reading its checkpoints cannot wait on them. Called once in the job's driver at
        start-up, before the endpoint's checkpoints are read and before any shard session
        of the run opens (so none of this run's sessions is live; one still running from
        an earlier run of the same checkpoint is a zombie and may be fenced).
        ``checkpoint_id``: the recovery log's (None: none yet); ``ranges``: the ranges of
        the log's last batch and of the batch in flight, if any. Returns what was done, in
        words; the default does nothing."""
        return []

    # ----------------------------------------------------------------- inspection
    def dump(self, materialization: str, binding: BindingSpec) -> dict[Key, Doc] | list[Doc]:
        """The committed view of a binding: ``{key: doc}`` (or the rows, for delta updates)."""
        raise NotImplementedError

    def checkpoints(self, materialization: str) -> list[CheckpointRow]:
        """Committed checkpoints per range (store-authoritative drivers)."""
        return []

    def positions(self, materialization: str, bindings: Sequence[BindingSpec]) -> Optional[list[Position]]:
        """What the endpoint records of ``materialization`` (read-only; see :class:`Position`).

        The default reads :meth:`checkpoints`.  Drivers whose endpoint records ownership
        elsewhere (Delta: a table property and app transactions) override it; ``None``
        means the driver cannot tell."""
        try:
            rows = self.checkpoints(materialization)
        except NotImplementedError:
            return None
        out = []
        for r in rows:
            cp = r.runtime_checkpoint if isinstance(r.runtime_checkpoint, dict) else {}
            batch = cp.get("batch_id")
            out.append(
                Position(
                    f"range {r.range.name}",
                    materialization,
                    cp.get("checkpoint_id"),
                    batch if isinstance(batch, int) else -1,
                    r.range,
                    location=cp.get("checkpoint_location"),
                    host=cp.get("host"),
                )
            )
        return out

    def owners(self, materialization: str) -> list[Position]:
        """Places that hold no batch but belong to the checkpoint that writes ``materialization``
        where the endpoint keeps state by the view's name alone (a lake's staging folder, the
        in-memory driver's state): batch -1 each.  Another checkpoint's view of the name is
        refused on them as on :meth:`positions` (:mod:`tidemark.runtime.ownership`)."""
        return []

    def identities(self, materialization: str, bindings: Sequence[BindingSpec]) -> Optional[list[Optional[JsonObject]]]:
        """The view-identity record kept with each binding's resource (read-only), in binding
        order: the dict Apply was given in ``Apply.identities`` for it, plus ``"resolved"``, the
        resource's name as the endpoint resolves it (case-folded where the endpoint folds,
        qualified).  None for a resource that keeps none (not created yet, or by a tidemark that
        kept none); ``None`` overall when the endpoint keeps no records.

        A driver keeps the record in its own place (a SQL table, a table property, a hash,
        stream metadata, a record on a topic) and writes it in Apply, with the resource, only
        where none is kept: a record, once kept, is changed only by ``drop``.  The coordinator
        compares it with the spec before anything is written; the conformance kit checks that it
        round-trips."""
        return None

    def drop(self, materialization: str, bindings: Sequence[BindingSpec]) -> list[str]:
        """Remove the view: the bindings' resources and everything the endpoint records of
        the materialization (checkpoints, fences, staged work, quarantine).  Returns what was
        removed, in words.  Used by ``tidemark reset``; not part of a transaction."""
        raise NotImplementedError(f"the {self.name or type(self).__name__} driver cannot drop a view")

    def shadow_resource(self, resource: JsonObject, tag: str) -> Optional[JsonObject]:
        """The resource a rebuild builds ``resource``'s new contents in, beside the live one
        (``tidemark rebuild``: :mod:`tidemark.runtime.rebuild`), named with ``tag`` so that an
        operator recognises it; None: this endpoint cannot replace a view's contents in place
        (:attr:`rebuild_refusal` says why)."""
        return None

    #: why :meth:`shadow_resource` answers None, in words (``tidemark rebuild`` prints it)
    rebuild_refusal: str = "it cannot replace a view's contents in one transaction"

    def check_rebuild(self, bindings: Sequence[BindingSpec], old_keys: Sequence[Optional[list[str]]]) -> None:  # noqa: B027
        """Refuse, before a rebuild builds anything, a change this endpoint's cut-over cannot make
        in one transaction (``bindings``: the edited spec's; ``old_keys``: each view's key now)."""

    def replace_contents(self, req: "ReplaceContents") -> list[str]:
        """The cut-over of a rebuild, in ONE endpoint transaction: each live resource's contents
        become its shadow's (the shadow is dropped), and what the endpoint records of the shadow
        materialization -- checkpoints with fences above every live fence, the owner, the
        view-identity records, quarantine -- becomes the live materialization's.  Readers see
        the old view or the new one, never a mix; a kill anywhere leaves one of the two.
        Returns what was done, in words."""
        raise NotImplementedError(f"the {self.name or type(self).__name__} driver cannot replace a view's contents")

    def rebuilt_state(self, state: Any, req: "ReplaceContents") -> Any:
        """A driver checkpoint of the shadow materialization (a recovery-log entry's), as the
        live one's after the cut-over: what it names of the shadow (resources, tags) renamed.
        Recovery re-runs the last logged batch's acknowledge with it, which must then find
        the live resources holding that batch."""
        return state

    def cut_over_state(self, req: "ReplaceContents") -> str:
        """How far :meth:`replace_contents` got, read back after a kill: ``"none"`` (the live
        resources are as they were), ``"done"``, or ``"partial"`` -- an endpoint that replaces
        each resource in a transaction of its own (the lakes: one commit per table) got some of
        the way; :meth:`replace_contents` is then called again and must finish the rest.  By
        default: ``"done"`` once the endpoint's positions name the shadow's checkpoint."""
        positions = self.positions(req.materialization, [live for live, _ in req.pairs]) or []
        hit = any(p.materialization == req.materialization and p.checkpoint_id == req.checkpoint_id for p in positions)
        return "done" if hit else "none"

    def read_rows(self, source: str) -> Iterable[dict[str, Any]]:
        """The rows of an existing table or query of the endpoint, as dicts of column name ->
        value (the client library's types), for ``tidemark adopt``.  Read-only."""
        raise NotImplementedError(
            f"the {self.name or type(self).__name__} driver cannot read an existing table to "
            "adopt (SQLite, PostgreSQL, MySQL and Delta can)"
        )

    def quarantined(self, materialization: str) -> list[JsonObject]:
        """The documents quarantined for ``materialization`` (``on_invalid: quarantine``), oldest
        first, as dicts of ``batch_id``, ``location``, ``key_json``, ``reason`` and ``value``.
        Endpoints that keep them where the user reads them with the endpoint's own tools (SQL:
        the ``tidemark_quarantine`` table) need not implement it."""
        raise NotImplementedError(
            f"the {self.name or type(self).__name__} driver keeps its quarantine in the "
            "endpoint: read it there (docs/operations.md)"
        )

    def close(self) -> None:  # noqa: B027 - an optional hook: nothing to release by default
        pass

    def __enter__(self: _D) -> _D:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def store_of_documents(msg: AnyStore) -> Store:
    """``msg``, a Store of documents: the one form a driver gets that neither reduces in the
    endpoint (``Capabilities.endpoint_reduce``) nor takes typed rows (``Driver.typed_rows``)."""
    if isinstance(msg, Store):
        return msg
    raise ProtocolViolation("STORE", type(msg).__name__, "Store", "the driver stores documents only")


def capabilities_of(driver: Driver) -> Capabilities:
    """The one place the runtime and the kit read a driver's capabilities."""
    caps = driver.capabilities()
    if not isinstance(caps, Capabilities):
        raise TypeError(f"{type(driver).__name__}.capabilities() returned {caps!r}, not a Capabilities")
    return caps


def resolve_local_path(config: JsonObject, key: str, base_dir: str) -> JsonObject:
    """``config`` with ``config[key]``, a relative local path, made absolute against
    ``base_dir`` (a URI, an absolute path or SQLite's ``:memory:`` stay as they are)."""
    path = config.get(key)
    if isinstance(path, str) and path and path != ":memory:" and "://" not in path and not os.path.isabs(path):
        return {**config, key: os.path.abspath(os.path.join(base_dir, path))}
    return config


def chunked(items: Iterable[_T], size: int) -> Iterator[list[_T]]:
    """Yield lists of at most ``size`` items."""
    buf: list[_T] = []
    for item in items:
        buf.append(item)
        if len(buf) >= size:
            yield buf
            buf = []
    if buf:
        yield buf
