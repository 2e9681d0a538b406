"""The one driver of the push endpoints: a local store beside a log part.

A push endpoint (Kafka, NATS, the webhook) supplies its log part only
(:class:`~tidemark.drivers.push.log.PushLog`: its resources, fence and frontier, send and
publish, its records); this driver writes the rest once:

* the local store (the store endpoint's :class:`~tidemark.drivers.store.StoreDriver`,
  configured by the part's ``store_options``), which answers the Loads;
* Open: the part fences the range at the endpoint and reads its frontier; the local store is
  opened and, where the endpoint's commit counts, brought to that frontier (:mod:`.catchup`);
  the shard session is one :class:`~tidemark.drivers.push.transactor.PushTransactor` over both;
* dump, checkpoints, quarantine and the view-identity records: the endpoint's where it keeps
  them, else the local store's; drop: the endpoint's resources, then the local store;
* the capabilities: the local store's (data, in one place); the rebuild refusal.

An endpoint's driver class names its part and nothing else (``log_part``); the driver pickles
as its config (Spark ships it; the part's clients are made again where it is unpickled).
"""

from __future__ import annotations

import dataclasses
from typing import ClassVar, Optional, Sequence

from tidemark.drivers.base import Capabilities, CheckpointRow, Driver
from tidemark.drivers.push.catchup import open_at
from tidemark.drivers.push.local import CAPABILITIES, QUARANTINE_ID, StoreDriver, StoreTransactor, binding_id
from tidemark.drivers.push.log import PushLog
from tidemark.drivers.push.transactor import PushTransactor
from tidemark.errors import IncompatibleSchema
from tidemark.jsontext import loads
from tidemark.protocol.messages import (
    Applied,
    Apply,
    BindingSpec,
    Open,
    Opened,
    Range,
    SpecResponse,
    Validate,
    Validated,
    ValidatedBinding,
)
from tidemark.store import RangeStore


class PushDriver(Driver):
    """A push endpoint: the local store and the endpoint's log part (``log_part(config)``)."""

    log_part: ClassVar[type[PushLog]]
    rebuild_refusal = "its endpoint's readers took every batch it sent: it cannot replace them in one transaction"

    def __init__(self, config: dict | None = None):
        super().__init__(config)
        self.log = type(self).log_part(self.config)
        self.settings = self.log.settings  # the endpoint's typed settings
        retry = {"retry": self.config["retry"]} if self.config.get("retry") else {}  # lock_timeout: an Open's wait
        self.local = StoreDriver({**self.log.store_options, **retry})

    def __reduce__(self):
        return type(self), (self.config,)

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.log.settings!r}, state={self.local.base.path!r})"

    @classmethod
    def resolve_config(cls, config: dict, base_dir: str) -> dict:
        return cls.log_part.resolve_config(config, base_dir)

    def capabilities(self) -> Capabilities:
        # the local store's: it answers the Loads and keeps the quarantine with a batch; the log's limits
        return dataclasses.replace(CAPABILITIES, limits=self.log.limits)

    def spec(self) -> SpecResponse:
        return self.log.spec()

    def close(self) -> None:
        self.log.close()
        self.local.close()

    # ------------------------------------------------------------- setup phase
    def resources(self, materialization: str, bindings: Sequence[BindingSpec]) -> list[str]:
        """Each binding's name at the endpoint; the standard bindings' must have distinct ids
        in the local store."""
        names = self.log.resources(materialization, bindings)
        seen: dict[int, str] = {}
        for b, name in zip(bindings, names):
            i = binding_id(name)
            if not b.delta_updates and (i in seen or i == QUARANTINE_ID):
                raise IncompatibleSchema(
                    f"{self.name}: resources {name!r} and {seen.get(i, 'quarantine')!r} share the local state "
                    f"store's 16-bit binding id {i}; rename one"
                )
            seen[i] = name
        return names

    def validate(self, req: Validate) -> Validated:
        self.log.validate(req.materialization, req.bindings, self.resources(req.materialization, req.bindings))
        if not self.log.commits:
            self.local.validate(req)  # the local store keeps the view's records: its manifest agrees
        return Validated(tuple(ValidatedBinding(b.resource_path, b.delta_updates) for b in req.bindings))

    def apply(self, req: Apply) -> Applied:
        applied = self.log.apply(req, self.resources(req.materialization, req.bindings))
        if applied is not None:
            return applied
        kept = self.local.apply(req)
        text = kept.action_description.replace("create store view", "create the state store of")
        return dataclasses.replace(kept, action_description=text)

    def identities(self, materialization: str, bindings: Sequence[BindingSpec]) -> list[Optional[dict]]:
        kept = self.log.identities(materialization, self.resources(materialization, bindings))
        return self.local.identities(materialization, bindings) if kept is None else kept

    def recover(self, materialization: str, checkpoint_id: Optional[str], ranges: Sequence[Range] = ()) -> list[str]:
        return self.log.recover(materialization, checkpoint_id, ranges)

    # ------------------------------------------------------- transaction phase
    def open(self, req: Open) -> tuple[PushTransactor, Opened]:
        mat, key_range = req.materialization, req.range
        resources = self.resources(mat, req.bindings)
        ids = [binding_id(r) for r in resources]
        session = self.log.fence(req, resources)
        try:
            cfg = self.local.store_config(mat)
            if self.log.commits:  # the endpoint's frontier counts: the local store follows it
                standard = {r: i for b, r, i in zip(req.bindings, resources, ids) if not b.delta_updates}
                store = open_at(
                    cfg,
                    key_range,
                    mat,
                    session.checkpoint,
                    session.place,
                    standard,
                    lambda: self.log.rows(mat, [*standard]) or (),
                )
            else:  # the local store's commit counts
                self.local.resolve_duplicates(mat, key_range, req.state)
                store = RangeStore.open(cfg, key_range)
        except BaseException:
            session.close()
            raise
        named = [dataclasses.replace(b, resource={"name": r}) for b, r in zip(req.bindings, resources)]
        state = StoreTransactor(store, mat, named, ids)
        delta = [b.delta_updates for b in req.bindings]
        tx = PushTransactor(state, session, mat, resources, delta, self.log.commits)
        return tx, Opened(session.checkpoint if self.log.commits else store.checkpoint)

    # -------------------------------------------------------------- inspection
    def dump(self, materialization: str, binding: BindingSpec):
        """The committed view of a binding, as the endpoint holds it where it can be read back
        (``{key: doc}``; delta updates: every row in commit order), else the local store's."""
        (resource,) = self.resources(materialization, [binding])
        rows = self.log.rows(materialization, [resource])
        if rows is None:
            if binding.delta_updates:
                raise NotImplementedError(
                    f"{self.name}: delta-update rows are kept only by the receiver, not by tidemark"
                )
            return self.local.dump(materialization, dataclasses.replace(binding, resource={"name": resource}))
        if binding.delta_updates:
            return [loads(v) for r, _, v in rows if r == resource and v is not None]
        view: dict[tuple, object] = {}
        for r, key, value in rows:
            if r == resource and value is not None:
                view[key] = loads(value)
            elif r == resource:
                view.pop(key, None)
        return view

    def checkpoints(self, materialization: str) -> list[CheckpointRow]:
        rows = self.log.checkpoints(materialization)
        if rows is None:
            return self.local.checkpoints(materialization)
        return sorted(rows, key=lambda r: (r.range.key_begin, r.range.key_end))

    def quarantined(self, materialization: str) -> list[dict]:
        rows = self.log.quarantined(materialization)
        return self.local.quarantined(materialization) if rows is None else rows

    def drop(self, materialization: str, bindings: Sequence[BindingSpec]) -> list[str]:
        """Remove the view at the endpoint (what it holds of it, where the endpoint's commit
        counts) and the local state store (stop the job first)."""
        done = self.log.drop(materialization, bindings, self.log.resources(materialization, bindings))
        local = self.local.drop(materialization, bindings)
        return done + [d.replace("removed store ", "removed local state store ", 1) for d in local]
