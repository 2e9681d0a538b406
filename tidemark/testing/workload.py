"""The kit's collections, workloads and reference model — deliberately tiny and self-contained.

Three bindings (four with ``reduced``):

``sums`` (standard updates)
    key ``/k``; documents ``{k, n, last}`` where ``n`` is sum-reduced and ``last`` is
    lastWriteWins; ``{"k": ..., "_meta": {"op": "d"}}`` deletes the key.
``appends`` (delta updates)
    the same add events; each transaction appends, per key, the transaction's combined
    delta ``{k, n, last}``.
``mirror`` (standard updates)
    the same keys and events, other documents (:func:`mirror`): ``n`` ten times and one
    more, ``last`` prefixed ``m:`` and, for some events, padded to 16 KiB–900 KB.  Two
    standard bindings with the same keys catch a Load that answers from another binding's
    resource; the big documents catch one that keeps only part of a document.
``reduced`` (only for a driver that reduces ``sum`` / ``lastWriteWins`` itself,
``Capabilities.endpoint_reduce``)
    the same add events, no deletes; each transaction Stores, per key, the transaction's
    combined delta as JSON text (``StoreTexts``, no Loads), which the endpoint reduces into
    its stored ``{k, n, last}``.

Nothing here imports tidemark.collection or Spark: the reductions are written out so
that a bug there cannot hide a driver bug.
"""

from __future__ import annotations

import json
import random
import zlib
from collections import Counter
from dataclasses import dataclass, field
from typing import Any, Optional

from tidemark.protocol.messages import BindingSpec, Field

SUMS, APPENDS, MIRROR, REDUCED = 0, 1, 2, 3
STANDARD = (SUMS, MIRROR)  # the bindings that get Loads

SCHEMA: dict[str, Any] = {
    "type": "object",
    "required": ["k"],
    "reduce": {"strategy": "merge"},
    "properties": {
        "k": {"type": "string"},
        "n": {"type": "integer", "reduce": {"strategy": "sum"}},
        "last": {"type": "string", "reduce": {"strategy": "lastWriteWins"}},
        "_meta": {"type": "object", "properties": {"op": {"type": "string"}}},
    },
}

FIELDS = (
    Field("k", "/k", "string", is_key=True, nullable=False),
    Field("n", "/n", "integer"),
    Field("last", "/last", "string"),
)

# Keys with non-ASCII text, so that encodings are exercised end to end.
KEY_WORDS = ("apple", "ключ", "キー", "naïve", "emoji🙂", 'quote"d', "tab\tkey", "z")


REDUCED_SCHEMA = {**SCHEMA, "properties": {k: v for k, v in SCHEMA["properties"].items() if k != "_meta"}}
REDUCED_STRATEGIES = frozenset(("merge", "sum", "lastWriteWins"))


def bindings(tag: str, endpoint_reduce: frozenset = frozenset()) -> tuple[BindingSpec, ...]:
    """The bindings, on resources unique to ``tag`` (e.g. ``kit_ab12cd``): ``reduced`` too
    where the driver reduces its strategies itself (``endpoint_reduce``)."""
    out: tuple[BindingSpec, ...] = (
        BindingSpec({"table": f"{tag}_sums"}, "kit/sums", ("/k",), FIELDS, SCHEMA, delta_updates=False),
        BindingSpec({"table": f"{tag}_appends"}, "kit/appends", ("/k",), FIELDS, SCHEMA, delta_updates=True),
        BindingSpec({"table": f"{tag}_mirror"}, "kit/mirror", ("/k",), FIELDS, SCHEMA, delta_updates=False),
    )
    if REDUCED_STRATEGIES <= endpoint_reduce:
        out += (
            BindingSpec(
                {"table": f"{tag}_reduced"}, "kit/reduced", ("/k",), FIELDS, REDUCED_SCHEMA, endpoint_reduce=True
            ),
        )
    return out


def key_hash(key: tuple) -> int:
    """crc32 of the key's compact JSON (the runtime's shard routing)."""
    return zlib.crc32(json.dumps(list(key), separators=(",", ":"), ensure_ascii=False).encode("utf-8"))


def canon(doc: Any) -> str:
    return json.dumps(doc, sort_keys=True, separators=(",", ":"), ensure_ascii=False)


def merge_patch(target: Any, patch: Any) -> Any:
    """RFC 7396."""
    if not isinstance(patch, dict):
        return patch
    out = dict(target) if isinstance(target, dict) else {}
    for k, v in patch.items():
        if v is None:
            out.pop(k, None)
        else:
            out[k] = merge_patch(out.get(k), v)
    return out


def apply_update(state: Any, update) -> Any:
    if update is None:
        return state
    return merge_patch(state, update.updated) if update.merge_patch else update.updated


# --------------------------------------------------------------------- events


@dataclass(frozen=True)
class Event:
    key: str
    n: int = 0  # > 0 for adds
    last: str = ""
    delete: bool = False


# Sizes of some ``mirror`` documents' ``last``: just over 16 KiB, and up to 900 KB (under
# the 1 MB that Kafka producers and NATS servers take by default).
BIG_SIZES = (16 * 1024 + 100, 17 * 1024, 64 * 1024, 300_000, 900_000)


def mirror(e: Event) -> Event:
    """The ``mirror`` binding's event for ``e``: the same key, another document; and for some
    keys another kind (a delete that ``mirror`` does not have, an add that it deletes), so
    that each binding holds keys the other has not."""
    kind = zlib.crc32(f"{e.key}|{e.last}".encode("utf-8")) % 8
    if e.delete:
        return Event(e.key, 1, f"m:{e.last}") if kind == 0 and e.last else e
    if kind == 1:
        return Event(e.key, delete=True, last=e.last)
    pick = zlib.crc32(e.last.encode("utf-8")) % 250  # 1 event in 50 padded, 1 in 250 to 900 KB
    pad = "~" * BIG_SIZES[pick] if pick < len(BIG_SIZES) else ""
    return Event(e.key, e.n * 10 + 1, f"m:{e.last}{pad}")


def make_batch(draw: random.Random, keys: list[str], size: int, batch_id: int, deletes: float = 0.12) -> list[Event]:
    out = []
    for i in range(size):
        k = draw.choice(keys)
        if draw.random() < deletes:
            out.append(Event(k, delete=True, last=f"b{batch_id}.{i}"))
        else:
            out.append(Event(k, draw.randint(1, 9), f"b{batch_id}.{i}"))
    return out


def key_space(draw: random.Random, n: int) -> list[str]:
    return [f"{draw.choice(KEY_WORDS)}-{i:03d}" for i in range(n)]


# -------------------------------------------------------------------- combine


@dataclass
class Combined:
    """A transaction's combination of one key's events: relative (add to the loaded
    document) or absolute (a delete happened: the result ignores the loaded document)."""

    absolute: bool = False
    doc: Optional[dict] = None  # absolute: the document (None = deleted)
    n: int = 0  # relative
    last: Optional[str] = None  # relative

    def add(self, e: Event) -> None:
        if e.delete:
            self.absolute, self.doc = True, None
        elif self.absolute:
            if self.doc is None:
                self.doc = {"k": e.key, "n": e.n, "last": e.last}
            else:
                self.doc = {"k": e.key, "n": self.doc["n"] + e.n, "last": e.last}
        else:
            self.n += e.n
            self.last = e.last

    def over(self, key: str, loaded: Optional[dict]) -> Optional[dict]:
        """``loaded ⊕ combined``: the document to store (None = deleted / absent)."""
        if self.absolute:
            return None if self.doc is None else dict(self.doc)
        if self.last is None:  # no adds at all
            return loaded
        base = loaded.get("n", 0) if isinstance(loaded, dict) else 0
        if not isinstance(base, int) or isinstance(base, bool):
            base = 0
        return {"k": key, "n": base + self.n, "last": self.last}


def combine(events: list[Event]) -> dict[str, Combined]:
    out: dict[str, Combined] = {}
    for e in events:
        out.setdefault(e.key, Combined()).add(e)
    return out


def deltas(events: list[Event]) -> dict[str, dict]:
    """Per key, the transaction's delta document (adds only) for the delta binding."""
    out: dict[str, dict] = {}
    for e in events:
        if e.delete:
            continue
        d = out.get(e.key)
        out[e.key] = {"k": e.key, "n": (d["n"] if d else 0) + e.n, "last": e.last}
    return out


def deletion_doc(key: str) -> dict:
    return {"k": key, "_meta": {"op": "d"}}


# ---------------------------------------------------------------------- model


@dataclass
class Model:
    """What an exactly-once endpoint must hold after the committed batches."""

    view: dict[str, dict] = field(default_factory=dict)
    appends: Counter = field(default_factory=Counter)  # canonical delta docs
    appended_sum: int = 0
    deleted: set = field(default_factory=set)  # keys deleted at some point and absent now
    batches: list[int] = field(default_factory=list)
    reduced: dict[str, dict] = field(default_factory=dict)  # the ``reduced`` binding's view
    mirror: dict[str, dict] = field(default_factory=dict)  # the ``mirror`` binding's view
    mirror_deleted: set = field(default_factory=set)

    def views(self, binding: int) -> tuple[dict, set]:
        """A standard binding's view and its deleted keys."""
        return (self.mirror, self.mirror_deleted) if binding == MIRROR else (self.view, self.deleted)

    def commit(self, batch_id: int, events: list[Event]) -> None:
        for view, deleted, evs in (
            (self.view, self.deleted, events),
            (self.mirror, self.mirror_deleted, [mirror(e) for e in events]),
        ):
            for key, c in combine(evs).items():
                doc = c.over(key, view.get(key))
                if doc is None:
                    if key in view:
                        deleted.add(key)
                    view.pop(key, None)
                else:
                    view[key] = doc
                    deleted.discard(key)
        for key, doc in deltas(events).items():
            self.appends[canon(doc)] += 1
            self.appended_sum += doc["n"]
            prior = self.reduced.get(key)
            self.reduced[key] = {"k": key, "n": doc["n"] + (prior["n"] if prior else 0), "last": doc["last"]}
        self.batches.append(batch_id)


__all__ = [
    "SUMS",
    "APPENDS",
    "MIRROR",
    "REDUCED",
    "STANDARD",
    "mirror",
    "SCHEMA",
    "FIELDS",
    "bindings",
    "key_hash",
    "canon",
    "merge_patch",
    "apply_update",
    "Event",
    "make_batch",
    "key_space",
    "Combined",
    "combine",
    "deltas",
    "deletion_doc",
    "Model",
]
