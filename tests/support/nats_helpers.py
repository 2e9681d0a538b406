"""Helpers of the NATS endpoint's end-to-end and chaos tests: the orders spec on a ``nats``
endpoint, its committed view, and what the stream holds."""

from __future__ import annotations

from collections import Counter

import yaml

from tests.support.helpers import orders_spec

STREAM = "ORDERS"
SUBJECT = "orders.customers"


def nats_spec(tmp_path, data, shards: int, url: str, **config) -> str:
    """The orders spec with ``endpoint: {nats: {...}}`` and ``resource: {stream, subject}``."""
    path = orders_spec(
        tmp_path,
        data_dir=data,
        db_path=None,
        shards=shards,
        max_files=1,
        endpoint={"nats": {"url": url, "state": str(tmp_path / "state"), **config}},
    )
    with open(path) as f:
        spec = yaml.safe_load(f)
    spec["materializations"]["view"]["bindings"][0]["resource"] = {"stream": STREAM, "subject": SUBJECT}
    with open(path, "w") as f:
        yaml.safe_dump(spec, f)
    return path


def committed_view(url: str) -> dict:
    """customer -> document, read-committed (tidemark.drivers.nats.read_view)."""
    import tidemark.drivers.nats

    return {k[0]: doc for k, doc in tidemark.drivers.nats.read_view(url, STREAM, SUBJECT).items()}


def raw_last_per_key(url: str) -> dict:
    """customer -> the LAST message of the key in the stream, as a plain consumer sees it."""
    from tidemark.drivers.nats import wire
    from tidemark.drivers.nats.client import NatsClient

    view: dict = {}
    with NatsClient(url) as nc:
        for seq, subject, headers, data in nc.scan(STREAM, 1, [SUBJECT]):
            d = wire.decode_data(seq, subject, headers, data)
            if d.delete:
                view.pop(d.key[0], None)
            else:
                view[d.key[0]] = d.document
    return view


def committed_copies(url: str) -> Counter:
    """(range, checkpoint, batch, counter) -> copies in the stream, for every data message
    of a COMMITTED batch (the progress records say which)."""
    from tidemark.drivers.nats import wire
    from tidemark.drivers.nats.client import NatsClient

    out: Counter = Counter()
    with NatsClient(url) as nc:
        msgs = nc.scan(STREAM)
        committed: set = set()
        prefix = wire.default_prefix(STREAM) + ".progress."
        for seq, subject, headers, data in msgs:
            if subject.startswith(prefix):
                rec = wire.ProgressRecord.decode(data)
                if rec.kind == wire.KIND_COMMIT:
                    committed.add((rec.range, rec.committed))
        for seq, subject, headers, data in msgs:
            d = wire.decode_data(seq, subject, headers, data)
            if d is not None and (d.range, d.batch) in committed:
                out[(d.range, d.batch.checkpoint_id, d.batch.batch_id, d.counter)] += 1
    return out
