"""Two real HTTP receivers for the webhook tests (stdlib ``http.server`` in a thread):
one applies each ``Idempotency-Key`` once, the other applies every request.

"Applying" a request counts each of its documents by ``id`` (when it has one) and keeps
it in ``rows`` with the body's materialization, resource and batch.  ``script`` queues what the
next requests get instead of a plain 200: ``(status, headers, body)`` (nothing applied),
``"drop"`` (connection closed, nothing applied) or ``"apply_then_drop"`` (applied, then
the connection closed before the reply: a lost acknowledgement)."""

from __future__ import annotations

import collections
import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest


class Receiver:
    def __init__(self, dedup: bool):
        self.dedup = dedup
        self.applied: collections.Counter = collections.Counter()
        self.seen: set[str] = set()
        self.requests: list[dict] = []  # per request: key, headers, outcome
        self.rows: list[tuple] = []  # per applied document: (materialization, resource, batch_id, document)
        self.script: collections.deque = collections.deque()
        self.lock = threading.Lock()
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"  # keep-alive, as real receivers
            disable_nagle_algorithm = True  # headers and body in separate writes: no delayed-ACK stall

            def log_message(self, *args):  # quiet
                pass

            def do_POST(self):
                body = self.rfile.read(int(self.headers.get("Content-Length", 0)))
                receiver.handle(self, body)

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.thread = threading.Thread(target=self.server.serve_forever, args=(0.05,), daemon=True)
        self.thread.start()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server.server_address[1]}/hook"

    def handle(self, h: BaseHTTPRequestHandler, body: bytes) -> None:
        key = h.headers.get("Idempotency-Key")
        with self.lock:
            action = self.script.popleft() if self.script else None
            record = {"key": key, "headers": dict(h.headers), "outcome": None}
            self.requests.append(record)
            if isinstance(action, tuple):
                status, headers, text = action
                record["outcome"] = status
            elif action == "drop":
                record["outcome"] = "dropped"
            else:
                if self.dedup and key in self.seen:
                    record["outcome"] = "duplicate"
                else:
                    payload = json.loads(body)
                    for doc in payload["documents"]:
                        if isinstance(doc, dict) and "id" in doc:
                            self.applied[doc["id"]] += 1
                        self.rows.append((payload.get("materialization"), payload.get("resource"),
                                          payload.get("batch_id"), doc))
                    self.seen.add(key)
                    record["outcome"] = "applied"
                status, headers, text = 200, {}, b'{"ok":true}'
        if action in ("drop", "apply_then_drop"):
            h.close_connection = True  # no reply: the client sees the connection end
            return
        text = text if isinstance(text, bytes) else str(text).encode()
        h.send_response(status)
        for name, value in headers.items():
            h.send_header(name, value)
        h.send_header("Content-Length", str(len(text)))
        h.end_headers()
        h.wfile.write(text)

    def documents(self, materialization: str, resource: str) -> list:
        """The documents applied for one binding of one materialization, in arrival order."""
        with self.lock:
            return [d for m, r, _b, d in self.rows if m == materialization and r == resource]

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def dedup_receiver():
    r = Receiver(dedup=True)
    yield r
    r.close()


@pytest.fixture
def naive_receiver():
    r = Receiver(dedup=False)
    yield r
    r.close()


def receiver_view(receiver: Receiver):
    """A webhook driver class whose ``dump`` of a delta-updates binding reads what
    ``receiver`` applied (tidemark keeps those rows nowhere else), for the conformance kit."""
    from tidemark.drivers.store.naming import resource_name
    from tidemark.drivers.webhook_driver import WebhookDriver

    class ReceiverView(WebhookDriver):
        def dump(self, materialization, binding):
            if binding.delta_updates:
                return receiver.documents(materialization, resource_name(binding))
            return super().dump(materialization, binding)

    return ReceiverView
