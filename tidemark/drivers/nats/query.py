"""``tidemark query SPEC --view NAME`` over a ``nats`` view: the committed documents only.

The stream is read from its start through the read-committed reader
(:meth:`tidemark.drivers.nats.NatsClient.read_committed`): a message is used only when the progress
record of its batch is in the stream, so a query never shows part of a batch.  The result
is the last committed document per key (deleted keys absent), in key order; a
delta-updates view yields every committed row, in commit order.
"""

from __future__ import annotations

from typing import Any, Iterator, Optional

from tidemark.collection.keys import compact_json
from tidemark.drivers.nats import settings as conf
from tidemark.errors import SpecError
from tidemark.protocol.messages import BindingSpec


def find_view(spec, name: str) -> Optional[tuple[Any, BindingSpec, conf.Target]]:
    """``(materialization, binding, target)`` of the nats view ``name`` (its subject, its
    resource name, or ``MATERIALIZATION/SUBJECT``), or None when no nats view has that name."""
    found = []
    for mat in spec.materializations.values():
        if mat.driver_name != "nats":
            continue
        default = (mat.driver_config or {}).get("stream")
        for b in mat.bindings:
            coll = spec.collections[b.source]
            bs = BindingSpec(dict(b.resource), coll.name, tuple(coll.key), (), dict(coll.schema), bool(b.delta_updates))
            t = conf.target(bs, default)
            names = {t.subject, f"{mat.name}/{t.subject}", str(bs.resource.get("name", bs.resource.get("table")))}
            if name in names or (name == mat.name and len(mat.bindings) == 1):
                found.append((mat, bs, t))
    if len(found) > 1:
        raise SpecError(
            f"nats view {name!r} is ambiguous; name one of {', '.join(f'{m.name}/{t.subject}' for m, _, t in found)}"
        )
    return found[0] if found else None


def documents(mat, binding: BindingSpec, t: conf.Target, keys=None, prefix=None) -> Iterator[bytes]:
    """The committed documents of the view as JSON lines (bytes, without the newline)."""
    from tidemark.drivers.nats.driver import NatsDriver
    from tidemark.drivers.push.local import key_order

    with NatsDriver(mat.driver_config) as driver:
        msgs = driver.log.read_committed(mat.name, [t.subject], t.stream)
        if binding.delta_updates:
            for m in msgs:
                if m.subject == t.subject and _wanted(m.key, keys, prefix):
                    yield bytes(m.message.data)
            return
        view: dict[tuple, bytes] = {}
        for m in msgs:
            if m.subject != t.subject:
                continue
            if m.delete:
                view.pop(tuple(m.key), None)
            else:
                view[tuple(m.key)] = bytes(m.message.data)
    for key in sorted(view, key=key_order):
        if _wanted(key, keys, prefix):
            yield view[key] or compact_json(None).encode()


def _wanted(key, keys, prefix) -> bool:
    key = tuple(key)
    if keys:
        return key in keys
    return prefix is None or key[: len(prefix)] == tuple(prefix)
