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
import os
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Optional

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
                        self.rows.append(
                            (payload.get("materialization"), payload.get("resource"), payload.get("batch_id"), doc)
                        )
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
    from tidemark.drivers.webhook.driver import WebhookDriver

    class ReceiverView(WebhookDriver):
        def dump(self, materialization, binding):
            if binding.delta_updates:
                return receiver.documents(materialization, resource_name(binding))
            return super().dump(materialization, binding)

    return ReceiverView


def webhook_spec(tmp, data, *, url, shards=1, **config) -> str:
    """The orders spec (tests/support/helpers.py) into a webhook: ``resource: {name: customers}``,
    the state store in ``tmp/webhook-state`` (the default, beside the spec)."""
    import yaml

    from tests.support.helpers import orders_spec

    path = orders_spec(
        tmp, data_dir=data, db_path=None, shards=shards, max_files=1, endpoint={"webhook": {"url": url, **config}}
    )
    with open(path) as f:
        spec = yaml.safe_load(f)
    spec["materializations"]["view"]["bindings"][0]["resource"] = {"name": "customers"}
    with open(path, "w") as f:
        yaml.safe_dump(spec, f)
    return path


def applied_view(receiver: Receiver, resource: str = "customers") -> dict:
    """What a receiver that keeps the latest document per customer holds: the applied
    documents in batch order (a deletion document removes the key)."""
    view: dict = {}
    with receiver.lock:
        rows = sorted(
            ((b, i, d) for i, (_m, r, b, d) in enumerate(receiver.rows) if r == resource),
            key=lambda row: (row[0], row[1]),
        )
    for _b, _i, doc in rows:
        if (doc.get("_meta") or {}).get("op") == "d":
            view.pop(doc["customer"], None)
        else:
            view[doc["customer"]] = doc
    return view


def applied_per_batch(receiver: Receiver, resource: str = "customers"):
    """Counter of (batch, customer): how often the receiver applied a customer's document in a batch."""
    with receiver.lock:
        return collections.Counter((b, d["customer"]) for _m, r, b, d in receiver.rows if r == resource)


def spark_batches(checkpoints) -> Optional[list[list[str]]]:
    """The input file names of each Spark batch of the one query under ``checkpoints``
    (:func:`tidemark.runtime.verify.file_batches`), or None without a Spark checkpoint (the
    plain runner reads one file a batch).  A batch may read two files: a run killed after the
    source logged its next file but before the offsets log named the batch takes that file
    and the next in one batch on restart (Spark's file source)."""
    from tidemark.runtime.verify import file_batches

    for root, dirs, _files in os.walk(checkpoints):
        if "offsets" in dirs and os.path.isdir(os.path.join(root, "sources", "0")):
            break
    else:
        return None
    last = max(int(n) for n in os.listdir(os.path.join(root, "offsets")) if n.isdigit())
    return [[os.path.basename(f) for f in files] for files in file_batches(os.path.dirname(root), 0, last)]


def expected_per_batch(directory, checkpoints=None) -> set:
    """(batch, customer) pairs a batch must deliver: every customer of the batch's files
    (:func:`spark_batches` of ``checkpoints``, else one file a batch), except a deletion of
    a customer the view does not hold."""
    batches = spark_batches(checkpoints) if checkpoints is not None else None
    if batches is None:
        batches = [[n] for n in sorted(n for n in os.listdir(directory) if n.endswith(".json"))]
    held: set = set()
    out = set()
    for batch, names in enumerate(batches):
        last: dict = {}
        for name in names:
            with open(os.path.join(directory, name)) as f:
                for line in f:
                    doc = json.loads(line)
                    last[doc["customer"]] = (doc.get("_meta") or {}).get("op") == "d"
        for customer, deleted in last.items():
            if deleted and customer not in held:
                continue
            out.add((batch, customer))
            (held.discard if deleted else held.add)(customer)
    return out


def add_delta_binding(spec_path: str, resource: dict) -> None:
    """Add a delta-updates binding of the orders collection to the spec's view."""
    import yaml

    with open(spec_path) as f:
        spec = yaml.safe_load(f)
    spec["materializations"]["view"]["bindings"].append(
        {"source": "orders", "resource": resource, "delta_updates": True}
    )
    with open(spec_path, "w") as f:
        yaml.safe_dump(spec, f)


def expected_delta_rows(directory) -> collections.Counter:
    """The rows a delta-updates binding of the orders files gets when each file is one batch:
    per file and customer, the file's lines folded (a deletion starts over), as
    ``(customer, amount, orders, deleted)``; without tidemark code."""
    import json
    import os

    rows: collections.Counter = collections.Counter()
    for name in sorted(n for n in os.listdir(directory) if n.endswith(".json")):
        folded: dict = {}
        with open(os.path.join(directory, name)) as f:
            for line in f:
                doc = json.loads(line)
                c = doc["customer"]
                if (doc.get("_meta") or {}).get("op") == "d":
                    folded[c] = (0, 0, True)
                else:
                    amount, orders, deleted = folded.get(c, (0, 0, False))
                    if deleted:
                        amount, orders = 0, 0
                    folded[c] = (amount + doc["amount"], orders + doc["orders"], False)
        rows.update((c, a, o, d) for c, (a, o, d) in folded.items())
    return rows


def delta_rows(docs) -> collections.Counter:
    """``(customer, amount, orders, deleted)`` of delta-update rows as an endpoint kept them."""
    return collections.Counter(
        (d["customer"], d.get("amount", 0), d.get("orders", 0), (d.get("_meta") or {}).get("op") == "d") for d in docs
    )
