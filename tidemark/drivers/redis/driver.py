"""The ``redis`` endpoint: each document a JSON string under ``<prefix><key JSON>``.

Config::

    endpoint: {redis: {url: "redis://HOST:6379/0",       # rediss:// for TLS, unix:// too
                       mode: exactly-once,                # or at-least-once
                       namespace: "tidemark:",            # where checkpoints, fences, quarantine live
                       load_chunk: 1000, write_chunk: 1000, max_commit_bytes: 536870912,
                       retry: {attempts: 5, reply_timeout: 300}}}
    bindings: [{source: orders, resource: {prefix: "orders:"}}]

``mode: exactly-once`` (the default) is store-authoritative: Open bumps the fences of every
overlapping range in the materialization's checkpoints hash, and StartCommit runs ONE Lua
script that checks the fence and writes the documents, the deletes, the delta-update rows,
the quarantined documents and the runtime checkpoint (:mod:`tidemark.drivers.redis.script`).
``mode: at-least-once`` writes with plain pipelines and keeps no checkpoint: the runtime
warns about reductions (sum, append) that a replay applies twice.

Delta-updates bindings append each stored document to a list, ``RPUSH <prefix><key JSON>``.
The library under this driver is :mod:`tidemark.drivers.redis`.
"""

from __future__ import annotations

import logging
from typing import Optional, Sequence

from tidemark.drivers.base import (
    Capabilities,
    CheckpointRow,
    CommitPattern,
    Driver,
    ReadCommittedLoads,
    Transactor,
    store_of_documents,
)
from tidemark.drivers.common.settings import config_schema
from tidemark.drivers.redis.connection import redact
from tidemark.drivers.redis.fences import RangeFence
from tidemark.drivers.redis.layout import check_prefix
from tidemark.drivers.redis.store import SETTINGS, RedisConfig, RedisStore
from tidemark.errors import IncompatibleSchema, SpecError
from tidemark.faults import fault_point
from tidemark.protocol.messages import (
    Acknowledge,
    Acknowledged,
    AnyStore,
    Applied,
    Apply,
    BindingSpec,
    Load,
    Loaded,
    Open,
    Opened,
    Quarantine,
    SpecResponse,
    StartCommit,
    StartedCommit,
    Validate,
    Validated,
    ValidatedBinding,
)

log = logging.getLogger("tidemark")

_WARNED: set[str] = set()  # URLs whose persistence this process has checked (and warned about)


def binding_prefix(binding: BindingSpec) -> str:
    """``resource: {prefix: P}``; ``{name: N}`` (or ``table``) means the prefix ``N:``."""
    res = binding.resource if isinstance(binding.resource, dict) else {}
    if "prefix" in res:
        extra = set(res) - {"prefix"}
        if extra:
            raise SpecError(
                f"binding of {binding.collection!r}: the redis resource takes only `prefix` (got {sorted(res)})"
            )
        return check_prefix(res["prefix"])
    name = res.get("name", res.get("table"))
    if isinstance(name, str) and name and len(res) == 1:
        return f"{name}:"
    raise SpecError(
        f"binding of {binding.collection!r}: the redis endpoint needs resource {{prefix: PREFIX}} "
        f'(e.g. {{prefix: "orders:"}}), got {binding.resource!r}'
    )


def check_prefixes(bindings: Sequence[BindingSpec]) -> list[str]:
    """The bindings' prefixes; two bindings may not share one (their keys would collide)."""
    prefixes = [binding_prefix(b) for b in bindings]
    seen: dict[str, str] = {}
    for b, p in zip(bindings, prefixes):
        if p in seen:
            raise SpecError(
                f"bindings of {seen[p]!r} and {b.collection!r} both use redis prefix {p!r}: give each "
                "binding its own prefix"
            )
        seen[p] = b.collection
    return prefixes


class RedisDriver(Driver):
    name = "redis"

    def __init__(self, config: dict | None = None):
        super().__init__(config)
        self.cfg = RedisConfig.from_config(self.config)
        self._store: Optional[RedisStore] = None

    def __repr__(self) -> str:
        return f"RedisDriver(url={redact(self.cfg.url)!r}, mode={self.cfg.mode})"

    @property
    def store(self) -> RedisStore:
        """The driver's own connection (setup and inspection; each session has its own)."""
        if self._store is None:
            self._store = RedisStore(self.cfg)
        return self._store

    def capabilities(self) -> Capabilities:
        pattern = CommitPattern.STORE_AUTHORITATIVE if self.cfg.exactly_once else CommitPattern.AT_LEAST_ONCE
        return Capabilities(
            commit_pattern=pattern,
            delta_updates=True,
            standard_updates=True,
            max_load_keys=10_000,
            max_store_docs=10_000,
            concurrent_shards=True,
            quarantine=True,
        )

    def spec(self) -> SpecResponse:
        return SpecResponse(
            config_schema=config_schema(SETTINGS),
            resource_schema={"type": "object", "required": ["prefix"], "properties": {"prefix": {"type": "string"}}},
        )

    # ------------------------------------------------------------- setup phase
    def _check_server(self) -> None:
        def cluster() -> bool:
            info = self.store.client.info("cluster")
            return bool(int(info.get("cluster_enabled", 0) or 0))

        if self.store._run(cluster, "INFO cluster"):
            raise IncompatibleSchema(
                f"redis {redact(self.cfg.url)} is a Redis Cluster node: the commit script touches the keys of "
                "several hash slots, which Cluster refuses; use a standalone Redis (or a primary with replicas)"
            )
        evicts = self.store.persistence().eviction()
        if evicts:
            raise IncompatibleSchema(f"{redact(evicts, [self.cfg.url])} ({redact(self.cfg.url)}). Nothing was changed")

    def warn_persistence(self, store: Optional[RedisStore] = None) -> Optional[str]:
        """Log (once per process and URL: at Apply, or at the first Open of an executor) what the
        server's persistence risks for exactly-once."""
        if not self.cfg.exactly_once or self.cfg.url in _WARNED:
            return None
        warning = (store or self.store).persistence().warning()
        _WARNED.add(self.cfg.url)
        if warning:
            log.warning("%s", redact(warning, [self.cfg.url]))
        return warning

    def validate(self, req: Validate) -> Validated:
        check_prefixes(req.bindings)
        self._check_server()
        return Validated(tuple(ValidatedBinding((binding_prefix(b),), b.delta_updates) for b in req.bindings))

    def apply(self, req: Apply) -> Applied:
        """Nothing to create in Redis: keys appear with their first commit."""
        prefixes = check_prefixes(req.bindings)
        self.store.claim(req.materialization, req.checkpoint_id, prefixes, dry_run=req.dry_run, records=req.identities)
        if not req.dry_run:
            self.warn_persistence()
        return Applied("nothing to create (redis keys appear with the first commit)", ())

    # ------------------------------------------------------- transaction phase
    def open(self, req: Open) -> tuple["RedisTransactor", Opened]:
        prefixes = check_prefixes(req.bindings)
        store = RedisStore(self.cfg)
        try:
            self.warn_persistence(store)
            fence = store.open_range(req.materialization, req.range)
        except BaseException:
            store.close()
            raise
        t = RedisTransactor(store, fence, prefixes, [b.delta_updates for b in req.bindings])
        return t, Opened(fence.checkpoint)

    # -------------------------------------------------------------- inspection
    def dump(self, materialization: str, binding: BindingSpec):
        prefix = binding_prefix(binding)
        if binding.delta_updates:
            return self.store.dump_lists(prefix)
        return self.store.dump(prefix)

    def checkpoints(self, materialization: str) -> list[CheckpointRow]:
        if not self.cfg.exactly_once:
            return []
        return self.store.checkpoints(materialization)

    def quarantined(self, materialization: str) -> list[dict]:
        return self.store.quarantined(materialization)

    def identities(self, materialization: str, bindings: Sequence[BindingSpec]) -> list[Optional[dict]]:
        return self.store.identities(check_prefixes(bindings))

    def drop(self, materialization: str, bindings: Sequence[BindingSpec]) -> list[str]:
        return self.store.drop(materialization, [binding_prefix(b) for b in bindings])

    def close(self) -> None:
        if self._store is not None:
            self._store.close()
            self._store = None


class RedisTransactor(ReadCommittedLoads, Transactor):
    """One shard session on its own connection.

    * Acknowledge: the previous commit was synchronous; Loads are answered from now on.
    * Load: ``MGET`` per chunk of keys, pipelined (read-committed for free: a commit is one script).
    * Store: buffered in memory (upserts, deletes, delta rows), quarantine rows too.
    * StartCommit: exactly-once: the commit script (fence, data, checkpoint, all or nothing);
      at-least-once: non-transactional pipelines."""

    def __init__(self, store: RedisStore, fence: RangeFence, prefixes: list[str], delta: list[bool]):
        self.rs = store
        self.fence = fence
        self.prefixes = prefixes  # per binding; a quarantined row names its binding's prefix
        self.delta = delta
        self._acknowledged = False
        self._deferred: list[Load] = []
        self._reset()

    def _reset(self) -> None:
        self._upserts: list = []
        self._deletes: list = []
        self._appends: list = []
        self._quarantine: list = []

    def acknowledge(self, msg: Acknowledge) -> Acknowledged:
        self._acknowledged = True
        return Acknowledged()

    def _evaluate(self, msg: Load) -> list[Loaded]:
        if not msg.keys:
            return []
        found = self.rs.load(self.prefixes[msg.binding], [tuple(k) for k in msg.keys])
        keys = [tuple(k) for k in msg.keys if tuple(k) in found]
        return [Loaded(msg.binding, tuple(keys), tuple(found[k] for k in keys))] if keys else []

    def store(self, msg: AnyStore) -> None:
        msg = store_of_documents(msg)
        prefix = self.prefixes[msg.binding]
        if self.delta[msg.binding]:
            self._appends.extend((prefix, tuple(k), d) for k, d in zip(msg.keys, msg.docs))
            return
        for key, doc, delete in zip(msg.keys, msg.docs, msg.deletes):
            if delete:
                self._deletes.append((prefix, tuple(key)))
            else:
                self._upserts.append((prefix, tuple(key), doc))

    def quarantine(self, msg: Quarantine) -> None:
        self._quarantine.extend(msg.rows)

    def _quarantine_rows(self, cp: dict) -> list[dict]:
        out = []
        for row in self._quarantine:
            b = row.get("binding")
            name = self.prefixes[b] if isinstance(b, int) and 0 <= b < len(self.prefixes) else None
            out.append(
                {
                    "materialization": self.fence.materialization,
                    "batch_id": cp.get("batch_id"),
                    "resource": name,
                    "location": row.get("location"),
                    "key_json": row.get("key_json"),
                    "reason": str(row.get("reason", "")),
                    "value": row.get("value"),
                }
            )
        return out

    def start_commit(self, msg: StartCommit) -> StartedCommit:
        cp = msg.runtime_checkpoint
        quarantine = self._quarantine_rows(cp)
        fault_point("before_endpoint_commit")
        if self.rs.config.exactly_once:
            self.rs.commit(self.fence, cp, self._upserts, self._deletes, self._appends, quarantine)
        else:
            self.rs.write(self._upserts, self._deletes, self._appends, quarantine, self.fence.materialization)
        fault_point("after_endpoint_commit")
        self._reset()
        self._acknowledged = False
        return StartedCommit()

    def close(self) -> None:
        self.rs.close()


__all__ = ["RedisDriver", "RedisTransactor", "binding_prefix"]
