"""A writer process for the NATS kill tests: ``python -m tests.support.nats_writer URL STREAM N MAX_BATCH``.

Opens the channel and publishes batches 1..3 of :func:`batch_docs`.  It prints
``committed K`` after each batch and ``mid K`` when it encodes the middle document of
batch 2, so the test can SIGKILL it in the middle of that batch.
"""

from __future__ import annotations

import signal
import sys

from tidemark.drivers.nats.channel import NatsSettings, OutDoc
from tidemark.drivers.nats.client import NatsClient
from tidemark.drivers.nats.wire import BatchId, Channel
from tidemark.protocol.messages import Range

MATERIALIZATION = "kill_view"
CHECKPOINT = "cp-kill"


def subject(stream: str) -> str:
    return f"{stream}.customers"


def batch_docs(stream: str, batch: int, n: int) -> list[OutDoc]:
    """Batch ``k`` touches every key; every 7th key is deleted in batch 2."""
    out = []
    for i in range(n):
        key = [f"c{i:05d}"]
        if batch == 2 and i % 7 == 0:
            out.append(OutDoc(subject(stream), key, {"customer": key[0], "_meta": {"op": "d"}}, delete=True))
        else:
            out.append(OutDoc(subject(stream), key, {"customer": key[0], "batch": batch, "total": i * batch}))
    return out


def expected_view(batch: int, n: int) -> dict:
    """The committed view after batches ``1..batch``."""
    view: dict = {}
    for k in range(1, batch + 1):
        for i in range(n):
            key = (f"c{i:05d}",)
            if k == 2 and i % 7 == 0:
                view.pop(key, None)
            else:
                view[key] = {"customer": key[0], "batch": k, "total": i * k}
    return view


def checkpoint(batch: int) -> dict:
    return {"checkpoint_id": CHECKPOINT, "batch_id": batch, "materialization": MATERIALIZATION}


class _Announcing(OutDoc):
    """Prints ``mid K`` when its payload is encoded, i.e. while the batch is being written."""

    __slots__ = ()

    def payload(self) -> bytes:
        print(f"mid {self.document['batch'] if isinstance(self.document, dict) else '?'}", flush=True)
        signal.pause()  # hold the batch half-written until the test's SIGKILL arrives
        return OutDoc.payload(self)


def main(argv: list[str]) -> None:
    url, stream, n, max_batch = argv[0], argv[1], int(argv[2]), int(argv[3])
    with NatsClient(url, settings=NatsSettings(max_batch=max_batch)) as nc:
        ch = Channel(stream, MATERIALIZATION, Range())
        session = nc.open(ch)
        for k in (1, 2, 3):
            docs = batch_docs(stream, k, n)
            if k == 2:
                mid = n // 4
                d = docs[mid]
                docs[mid] = _Announcing(d.subject, d.key, d.document, d.delete)
            nc.publish_batch(session, BatchId(CHECKPOINT, k), docs, checkpoint(k))
            print(f"committed {k}", flush=True)


if __name__ == "__main__":
    main(sys.argv[1:])
