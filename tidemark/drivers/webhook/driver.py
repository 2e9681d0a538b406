"""The ``webhook`` endpoint: POST each batch's documents to an HTTP URL, with an
``Idempotency-Key`` per chunk; a local state store keeps the full documents.

Config::

    endpoint: {webhook: {url: "https://hooks.example.com/orders",
                         headers: {Authorization: "Bearer …"},
                         chunk_docs: 500, chunk_bytes: 1048576,
                         retry: {attempts: 5, max_delay: 2, reply_timeout: 300},
                         state: webhook-state}}     # a folder, relative to the spec's folder;
                                                    # or {path: …, changelog: …} (store options)
    bindings: [{source: orders, resource: {name: customers}}]

A standard binding sends each key's full reduced document, so the runtime must Load the
key's current document: the driver keeps them in a local state store (the ``store``
endpoint's :class:`~tidemark.drivers.store.transactor.StoreTransactor` over a
:class:`~tidemark.store.RangeStore`), which is the authority (store-authoritative): it holds
the documents, the fence and the runtime checkpoint of each range.

StartCommit, per range (:class:`~tidemark.drivers.push.PushTransactor`, the store's commit counting):

1. take the range's lock in the state store and verify the fence (a stale session gets
   FencedOff and posts nothing; a newer Open of an overlapping range waits for the lock);
2. plan the chunks of every binding's documents in Store order (deterministic: a replay of
   the batch gives the same chunks, bodies and keys; :mod:`tidemark.drivers.webhook.chunks`);
3. POST the chunks one by one, retried under the retry policy (:mod:`tidemark.drivers.webhook.client`);
4. write the state store's documents and the runtime checkpoint atomically, release the lock.

A crash between 3 and 4 leaves the batch uncommitted: its replay posts the same chunks
with the same keys, so a receiver that honours ``Idempotency-Key`` applies each once.
Delta-updates bindings post their combined deltas and keep nothing in the state store.
"""

from __future__ import annotations

import dataclasses
import os
from typing import Any, Optional, Sequence

from tidemark.drivers.base import Capabilities, CheckpointRow, CommitPattern, Driver
from tidemark.drivers.common.settings import config_schema
from tidemark.drivers.push import PushTransactor
from tidemark.drivers.push.local import StoreDriver, StoreTransactor, resource_name
from tidemark.drivers.webhook.chunks import plan_chunks
from tidemark.drivers.webhook.client import Delivered, WebhookClient
from tidemark.drivers.webhook.settings import DEFAULT_STATE, SETTINGS, WebhookConfig
from tidemark.errors import SpecError
from tidemark.faults import fault_point
from tidemark.protocol.messages import (
    Applied,
    Apply,
    BindingSpec,
    Open,
    Opened,
    SpecResponse,
    Store,
    Validate,
    Validated,
)

STATE_OPTIONS = ("path", "changelog", "max_uncommitted_bytes", "snapshot_every", "keep_snapshots", "spill_dir")

CAPABILITIES = Capabilities(
    commit_pattern=CommitPattern.STORE_AUTHORITATIVE,  # the local state store is the authority
    delta_updates=True,
    standard_updates=True,  # Loads come from the state store
    max_load_keys=10_000,
    max_store_docs=10_000,
    concurrent_shards=True,
    quarantine=True,  # kept in the state store with the transaction
)


def _state_options(state: Any) -> dict:
    if isinstance(state, str) and state:
        return {"path": state}
    if isinstance(state, dict) and isinstance(state.get("path"), str):
        unknown = set(state) - set(STATE_OPTIONS)
        if unknown:
            raise SpecError(
                f"endpoint webhook: unknown state option(s) {sorted(unknown)}; known: {list(STATE_OPTIONS)}"
            )
        return dict(state)
    raise SpecError("endpoint webhook: state must be a folder (e.g. state: webhook-state) or {path: FOLDER, …}")


class WebhookDriver(Driver):
    name = "webhook"

    def __init__(self, config: dict | None = None):
        super().__init__(config)
        self.hook = WebhookConfig.from_config(self.config)
        opts = _state_options(self.config.get("state", DEFAULT_STATE))
        if self.config.get("retry"):
            opts["retry"] = self.config["retry"]  # lock_timeout: how long an Open waits for a range's lock
        self.state = StoreDriver(opts)
        self._client: Optional[WebhookClient] = None

    def __repr__(self) -> str:
        return f"WebhookDriver(url={self.hook.display!r}, state={self.state.base.path!r})"

    @classmethod
    def resolve_config(cls, config: dict, base_dir: str) -> dict:
        """``state`` (default ``webhook-state``) against the spec's folder."""
        out = dict(config)
        state = out.get("state", DEFAULT_STATE)
        if isinstance(state, str):
            out["state"] = (
                state if os.path.isabs(state) or "://" in state else os.path.abspath(os.path.join(base_dir, state))
            )
        elif isinstance(state, dict):
            out["state"] = StoreDriver.resolve_config(state, base_dir)
        return out

    @property
    def client(self) -> WebhookClient:
        if self._client is None:
            self._client = WebhookClient(self.hook)
        return self._client

    def capabilities(self) -> Capabilities:
        return CAPABILITIES

    def spec(self) -> SpecResponse:
        return SpecResponse(
            config_schema=config_schema(SETTINGS),
            resource_schema={"type": "object", "required": ["name"], "properties": {"name": {"type": "string"}}},
        )

    # ------------------------------------------------------------- setup phase
    @staticmethod
    def _check_resources(bindings: Sequence[BindingSpec]) -> None:
        for b in bindings:
            res = b.resource if isinstance(b.resource, dict) else {}
            if not isinstance(res.get("name", res.get("table")), str):
                raise SpecError(
                    f"binding of {b.collection!r}: the webhook endpoint needs resource {{name: NAME}} (the "
                    f"name the receiver sees in each request), got {b.resource!r}"
                )

    def validate(self, req: Validate) -> Validated:
        self._check_resources(req.bindings)
        return self.state.validate(req)

    def apply(self, req: Apply) -> Applied:
        self._check_resources(req.bindings)
        applied = self.state.apply(req)
        return dataclasses.replace(
            applied,
            action_description=applied.action_description.replace("create store view", "create the state store of"),
        )

    # ------------------------------------------------------- transaction phase
    def open(self, req: Open) -> tuple["WebhookTransactor", Opened]:
        inner, opened = self.state.open(req)
        return WebhookTransactor(inner, self.client, self.hook, req.bindings), opened

    # -------------------------------------------------------------- inspection
    def dump(self, materialization: str, binding: BindingSpec):
        """The state store's documents of a standard binding.  Delta-updates rows are kept
        only by the receiver."""
        if binding.delta_updates:
            raise NotImplementedError("webhook: delta-update rows are kept only by the receiver, not by tidemark")
        return self.state.dump(materialization, binding)

    def checkpoints(self, materialization: str) -> list[CheckpointRow]:
        return self.state.checkpoints(materialization)

    def identities(self, materialization: str, bindings: Sequence[BindingSpec]) -> list[Optional[dict]]:
        """Kept in the state store's manifest, beside the documents the Loads read."""
        return self.state.identities(materialization, bindings)

    def quarantined(self, materialization: str) -> list[dict]:
        return self.state.quarantined(materialization)

    def drop(self, materialization: str, bindings: Sequence[BindingSpec]) -> list[str]:
        """Remove the state store of the view (what the receiver applied stays there)."""
        return self.state.drop(materialization, bindings)

    def close(self) -> None:
        if self._client is not None:
            self._client.close()
            self._client = None
        self.state.close()


class WebhookTransactor(PushTransactor):
    """A push endpoint whose state store's commit counts
    (:class:`~tidemark.drivers.push.PushTransactor`): the documents are POSTed inside it."""

    ENDPOINT_COMMITS = False

    def __init__(
        self, inner: StoreTransactor, client: WebhookClient, hook: WebhookConfig, bindings: Sequence[BindingSpec]
    ):
        super().__init__(
            inner, inner.materialization, [resource_name(b) for b in bindings], [b.delta_updates for b in bindings]
        )
        self.client = client
        self.hook = hook
        self._docs: list[list] = [[] for _ in bindings]
        self.delivered: Optional[Delivered] = None  # tidemark.drivers.webhook.Delivered of the last StartCommit

    def send(self, msg: Store) -> None:
        self._docs[msg.binding].extend(msg.docs)  # a delete sends its deletion document (_meta.op "d")

    def publish(self, cp: dict, batch, quarantined: list[dict]) -> None:
        """Steps 2 and 3 of the module docstring, inside the state store's commit: plan the
        chunks, POST them."""
        chunks = []
        for b, docs in enumerate(self._docs):
            if docs:
                chunks += plan_chunks(
                    self.materialization,
                    self.range,
                    cp,
                    docs,
                    chunk_docs=self.hook.chunk_docs,
                    chunk_bytes=self.hook.chunk_bytes,
                    resource=self.resources[b],
                )
        self.delivered = self.client.deliver(chunks)
        fault_point("webhook_after_post")

    def committed(self) -> None:
        self._docs = [[] for _ in self._docs]


__all__ = ["WebhookDriver", "WebhookTransactor", "CAPABILITIES"]
