"""A child process that runs one transaction of the webhook driver:
``python webhook_driver_child.py URL STATE BATCH N``.

Documents ``{"customer": "c<i>", "amount": i}`` for i < N, stored as batch BATCH of
materialization ``view`` on the whole key range.  Arm ``TIDEMARK_FAULTS`` (e.g.
``webhook_after_post:kill``) to SIGKILL it between the POSTs and the state store's commit.
Prints ``opened <batch or none>`` and ``committed`` (or ``skipped``, if the range holds the
batch already)."""

from __future__ import annotations

import sys

from tidemark.drivers.webhook.driver import WebhookDriver
from tidemark.protocol.messages import (
    Acknowledge,
    BindingSpec,
    Field,
    Flush,
    Open,
    Range,
    StartCommit,
    Store,
)

BINDING = BindingSpec(
    {"name": "customers"},
    "orders",
    ("/customer",),
    (Field("customer", "/customer", "string", is_key=True), Field("amount", "/amount", "integer")),
)


def checkpoint(batch: int) -> dict:
    return {
        "checkpoint_id": "ck-1",
        "materialization": "view",
        "batch_id": batch,
        "query_id": "q-1",
        "offsets": {"files": batch},
    }


def docs(n: int) -> list[dict]:
    return [{"customer": f"c{i:04d}", "amount": i} for i in range(n)]


def run(url: str, state: str, batch: int, n: int, chunk_docs: int = 10) -> str:
    driver = WebhookDriver({"url": url, "state": state, "chunk_docs": chunk_docs})
    t, opened = driver.open(Open("view", "v1", Range(), bindings=(BINDING,)))
    have = (opened.runtime_checkpoint or {}).get("batch_id", -1)
    print(f"opened {have if have >= 0 else 'none'}", flush=True)
    if have >= batch:
        t.close()
        return "skipped"
    t.acknowledge(Acknowledge())
    t.flush(Flush())
    ds = docs(n)
    t.store(
        Store(
            0,
            tuple((d["customer"],) for d in ds),
            tuple((d["amount"],) for d in ds),
            tuple(ds),
            (False,) * n,
            (False,) * n,
        )
    )
    t.start_commit(StartCommit(checkpoint(batch)))
    t.close()
    driver.close()
    return "committed"


if __name__ == "__main__":
    print(run(sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])), flush=True)
