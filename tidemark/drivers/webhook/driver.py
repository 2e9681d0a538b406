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

The log part of the push endpoints' one driver (:class:`~tidemark.drivers.push.PushDriver`):
the local store's commit counts, and the receiver keeps nothing tidemark reads back, so the
driver answers dump, checkpoints, identities and quarantine from the local store.
StartCommit, per range (:class:`~tidemark.drivers.push.PushTransactor`):

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

import os
from typing import Any, Optional, Sequence

from tidemark.drivers.common.settings import config_schema
from tidemark.drivers.push import PushDriver, PushLog
from tidemark.drivers.push.local import StoreDriver, resource_name
from tidemark.drivers.webhook.chunks import plan_chunks
from tidemark.drivers.webhook.client import Delivered, WebhookClient
from tidemark.drivers.webhook.settings import DEFAULT_STATE, SETTINGS, WebhookConfig
from tidemark.errors import SpecError
from tidemark.faults import fault_point
from tidemark.protocol.messages import BindingSpec, Open, Range, SpecResponse, Store

STATE_OPTIONS = ("path", "changelog", "max_uncommitted_bytes", "snapshot_every", "keep_snapshots", "spill_dir")


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


class WebhookLog(PushLog):
    """The webhook's log part: a receiver, POSTed to inside the local store's commit."""

    name = "webhook"
    commits = False  # the local state store is the authority

    def __init__(self, config: dict):
        self.settings = WebhookConfig.from_config(config)
        self.store_options = _state_options(config.get("state", DEFAULT_STATE))
        self._client: Optional[WebhookClient] = None

    @staticmethod
    def resolve_config(config: dict, base_dir: str) -> dict:
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
            self._client = WebhookClient(self.settings)
        return self._client

    def close(self) -> None:
        if self._client is not None:
            self._client.close()
            self._client = None

    def spec(self) -> SpecResponse:
        return SpecResponse(
            config_schema=config_schema(SETTINGS),
            resource_schema={"type": "object", "required": ["name"], "properties": {"name": {"type": "string"}}},
        )

    def resources(self, materialization: str, bindings: Sequence[BindingSpec]) -> list[str]:
        out = []
        for b in bindings:
            res = b.resource if isinstance(b.resource, dict) else {}
            if not isinstance(res.get("name", res.get("table")), str):
                raise SpecError(
                    f"binding of {b.collection!r}: the webhook endpoint needs resource {{name: NAME}} (the "
                    f"name the receiver sees in each request), got {b.resource!r}"
                )
            out.append(resource_name(b))
        return out

    def fence(self, req: Open, resources: Sequence[str]) -> "WebhookSession":
        return WebhookSession(self.client, self.settings, req.materialization, req.range, resources)


class WebhookSession:
    """A range's deliveries: the batch's documents, POSTed inside the local store's commit."""

    checkpoint: Optional[dict] = None  # the local store's counts
    place = "the local state store"

    def __init__(self, client: WebhookClient, hook: WebhookConfig, materialization: str, key_range: Range, resources):
        self.client, self.hook, self.materialization, self.range = client, hook, materialization, key_range
        self.resources = list(resources)
        self._docs: list[list] = [[] for _ in self.resources]
        self.delivered: Optional[Delivered] = None  # tidemark.drivers.webhook.Delivered of the last StartCommit

    def send(self, msg: Store) -> None:
        self._docs[msg.binding].extend(msg.docs)  # a delete sends its deletion document (_meta.op "d")

    def publish(self, cp: dict, batch: Optional[int], quarantined: list[dict]) -> None:
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

    def close(self) -> None:
        pass  # the client is the driver's


class WebhookDriver(PushDriver):
    name = "webhook"
    log_part = WebhookLog


__all__ = ["WebhookDriver", "WebhookLog"]
