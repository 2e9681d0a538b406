"""Where the ``store`` endpoint keeps what: directories, binding ids, the keys of
delta-updates rows and of quarantined documents.

* One store directory per materialization: ``<path>/<materialization>`` (and
  ``<changelog>/<materialization>``), the name percent-quoted, so views never share
  ranges, fences or checkpoints.
* A binding's id (the 2-byte binding field of :func:`tidemark.store.tidemark_key`) is
  derived from its resource name — ``crc32(name) & 0xFFFF`` — not from its position in
  the spec, so reordering bindings moves nothing and a shard on any machine knows the ids
  without reading anything.  Two names of one materialization with the same id are
  refused by Validate (rename one).  :data:`QUARANTINE_ID` is reserved.
* Standard bindings: one entry per key, ``tidemark_key(key, id)`` → the document's JSON.
* Delta-updates bindings: every stored document is kept, under
  ``tidemark_key(key, id) ‖ seq8 ‖ n4`` where ``seq8`` is the committed batch the
  transaction builds on + 1 (unique per committed transaction of a range, and growing) and
  ``n4`` counts the transaction's rows: a key's rows read back in append order.
* Quarantined documents: ``hash(range.key_begin) ‖ QUARANTINE_ID ‖ batch8 ‖ n4``, written
  by the transaction of the range that received them (shard 0: key_begin 0).
"""

from __future__ import annotations

import os
import struct
from typing import Sequence
from urllib.parse import quote

from tidemark.drivers.store.ids import QUARANTINE_ID, binding_id
from tidemark.errors import IncompatibleSchema, SpecError
from tidemark.protocol.messages import BindingSpec, Range
from tidemark.store import encode_key, tidemark_key

_U16 = struct.Struct(">H")
_SEQ = struct.Struct(">QI")
SUFFIX = _SEQ.size  # bytes after the key text of a delta-updates row


def resource_name(binding: BindingSpec) -> str:
    """The view's name: ``resource: {name: NAME}`` (``table`` is accepted as an alias)."""
    res = binding.resource if isinstance(binding.resource, dict) else {}
    name = res.get("name", res.get("table"))
    if not isinstance(name, str) or not name:
        raise SpecError(
            f"binding of {binding.collection!r}: the store endpoint needs resource {{name: NAME}}, "
            f"got {binding.resource!r}"
        )
    extra = set(res) - {"name", "table"}
    if extra or ("name" in res and "table" in res):
        raise SpecError(f"binding {name!r}: resource takes only `name` (got {sorted(res)})")
    return name


def binding_ids(bindings: Sequence[BindingSpec]) -> list[int]:
    """The ids of ``bindings``; refuses two names with one id (or one name twice)."""
    names = [resource_name(b) for b in bindings]
    seen: dict[int, str] = {}
    for name in names:
        i = binding_id(name)
        if i in seen:
            why = "is bound twice" if seen[i] == name else f"and {seen[i]!r} share the store's 16-bit binding id {i}"
            raise IncompatibleSchema(f"store: resource {name!r} {why}; give one of them another name")
        if i == QUARANTINE_ID:
            raise IncompatibleSchema(
                f"store: resource name {name!r} has the binding id reserved for quarantined "
                "documents; give it another name"
            )
        seen[i] = name
    return [binding_id(n) for n in names]


def dir_name(materialization: str) -> str:
    name = quote(materialization, safe="")
    return "%2E" + name[1:] if name.startswith(".") else name


def local_dir(path: str, materialization: str) -> str:
    return os.path.join(path, dir_name(materialization))


def changelog_dir(uri: str, materialization: str) -> str:
    return uri.rstrip("/") + "/" + dir_name(materialization)


def delta_key(key: Sequence, bid: int, seq: int, n: int) -> bytes:
    return tidemark_key(key, bid) + _SEQ.pack(seq, n)


def quarantine_prefix(key_begin: int) -> bytes:
    return encode_key(key_begin, _U16.pack(QUARANTINE_ID))


def quarantine_key(key_range: Range, batch: int, n: int) -> bytes:
    return quarantine_prefix(key_range.key_begin) + _SEQ.pack(batch, n)


def split_key(skey: bytes, delta: bool) -> tuple[int, str]:
    """``(binding id, key JSON text)`` of a data key."""
    bid = _U16.unpack_from(skey, 4)[0]
    text = skey[6:-SUFFIX] if delta else skey[6:]
    return bid, text.decode("utf-8")
