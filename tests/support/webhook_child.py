"""A child process that delivers one batch to a webhook: ``python webhook_child.py URL N CHUNK_DOCS``.

The batch is always the same (documents ``{"id": i}`` for i < N, one fixed batch identity),
so a second run is the replay of the first.  Arm ``TIDEMARK_FAULTS=webhook_after_chunk:kill@K``
to SIGKILL it after its K-th acknowledged chunk."""

from __future__ import annotations

import sys

from tidemark.drivers.webhook.chunks import plan_chunks
from tidemark.drivers.webhook.client import WebhookClient
from tidemark.drivers.webhook.settings import WebhookConfig
from tidemark.protocol.messages import Range

CHECKPOINT = {
    "checkpoint_id": "ck-1",
    "materialization": "view",
    "batch_id": 4,
    "query_id": "q-1",
    "offsets": {"files": 12},
}


def batch(n: int):
    return [{"id": i, "customer": f"c{i:04d}", "amount": i % 7} for i in range(n)]


def main(url: str, n: int, chunk_docs: int) -> None:
    chunks = plan_chunks("view", Range(), CHECKPOINT, batch(n), chunk_docs=chunk_docs)
    with WebhookClient(WebhookConfig.from_config({"url": url})) as client:
        done = client.deliver(chunks)
    print(f"delivered {done.chunks} chunks", flush=True)


if __name__ == "__main__":
    main(sys.argv[1], int(sys.argv[2]), int(sys.argv[3]))
