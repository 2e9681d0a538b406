"""The ``webhook`` endpoint per shard: Store + commit docs/s (the POSTs, with the local
state store) against the bare POSTs of the same chunks (no state store).

    python bench/bench_webhook.py [N] [BATCH] [CHUNK_DOCS]   # defaults: 100000 10000 500

A minimal receiver (``http.server``, keep-alive, answers 200 to everything) runs in a thread of
this process, so the numbers are a ceiling: a real receiver adds its own time per request.
Documents are about 100 bytes.  Prints one line per measurement.
"""

from __future__ import annotations

import sys
import tempfile
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from tidemark.drivers.webhook.chunks import plan_chunks
from tidemark.drivers.webhook.client import WebhookClient
from tidemark.drivers.webhook.driver import WebhookDriver
from tidemark.drivers.webhook.settings import WebhookConfig
from tidemark.protocol.messages import Acknowledge, BindingSpec, Field, Flush, Open, Range, StartCommit, Store

FIELDS = (Field("id", "/id", "string", is_key=True), Field("n", "/n", "integer"))
BINDING = BindingSpec({"name": "docs"}, "docs", ("/id",), FIELDS)


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    disable_nagle_algorithm = True

    def log_message(self, *args):
        pass

    def do_POST(self):
        self.rfile.read(int(self.headers.get("Content-Length", 0)))
        self.send_response(200)
        self.send_header("Content-Length", "0")
        self.end_headers()


def doc(i: int, batch: int) -> dict:
    return {"id": f"key-{i:09d}", "n": batch, "payload": "x" * 64}


def store_msg(docs: list[dict]) -> Store:
    n = len(docs)
    return Store(
        0, tuple((d["id"],) for d in docs), tuple((d["n"],) for d in docs), tuple(docs), (False,) * n, (False,) * n
    )


def main() -> None:
    n = int(sys.argv[1]) if len(sys.argv) > 1 else 100_000
    per_batch = int(sys.argv[2]) if len(sys.argv) > 2 else 10_000
    chunk_docs = int(sys.argv[3]) if len(sys.argv) > 3 else 500
    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    url = f"http://127.0.0.1:{server.server_address[1]}/hook"

    cp = lambda b: {"checkpoint_id": "bench", "batch_id": b, "materialization": "bench"}
    t0 = time.perf_counter()
    with WebhookClient(WebhookConfig.from_config({"url": url, "chunk_docs": chunk_docs})) as client:
        requests = 0
        for b, lo in enumerate(range(0, n, per_batch)):
            docs = [doc(j, b) for j in range(lo, min(n, lo + per_batch))]
            requests += client.deliver(plan_chunks("bench", Range(), cp(b), docs, chunk_docs=chunk_docs)).requests
    dt = time.perf_counter() - t0
    print(f"bare POSTs: {n / dt:,.0f} docs/s ({requests} requests of {chunk_docs} docs, {dt:.2f}s)")

    with tempfile.TemporaryDirectory() as state:
        driver = WebhookDriver({"url": url, "state": state, "chunk_docs": chunk_docs})
        txn, _ = driver.open(Open("bench", "v1", Range(), bindings=(BINDING,)))
        t0 = time.perf_counter()
        for b, lo in enumerate(range(0, n, per_batch)):
            txn.acknowledge(Acknowledge())
            txn.flush(Flush())
            for i in range(lo, min(n, lo + per_batch), 10_000):
                txn.store(store_msg([doc(j, b) for j in range(i, min(n, lo + per_batch, i + 10_000))]))
            txn.start_commit(StartCommit(cp(b)))
        dt = time.perf_counter() - t0
        print(
            f"driver (POSTs + state store): store+commit {n / dt:,.0f} docs/s ({n} docs, commits of {per_batch}, "
            f"{dt:.2f}s)"
        )
        txn.close()
        driver.close()
    server.shutdown()


if __name__ == "__main__":
    main()
