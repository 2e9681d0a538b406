"""Where tidemark keeps things in Redis: data keys, the checkpoints hash, their encodings.

Data: each document is a JSON string value under ``<prefix><key JSON>``, where the key
JSON is the canonical compact array of :func:`tidemark.collection.keys.key_json`
(``orders:["c0001"]``).  The prefix comes from the binding (``resource: {prefix: …}``).

Checkpoints and fences: one hash per materialization, ``<namespace>checkpoints:<name>``
(namespace ``tidemark:`` by default), with two fields per key range::

    00000000-7fffffff:fence        "3"                  (decimal; bumped by every Open)
    00000000-7fffffff:checkpoint   {"batch_id": 7, …}   (absent until the range inherits or commits one)

Two fields, not one JSON value, so that the commit script compares the fence as a string
and never parses JSON (no cjson rounding of numbers in checkpoints).  A data key always
has ``[`` right after its prefix; tidemark's own keys never do, so they cannot collide
with a binding's data even when a prefix equals the namespace.
"""

from __future__ import annotations

import json
import re
from typing import Any, Optional

from tidemark.collection.keys import compact_json, key_json
from tidemark.drivers.common.fences import CheckpointState
from tidemark.errors import DocumentError, SpecError
from tidemark.protocol.messages import Key, Range

DEFAULT_NAMESPACE = "tidemark:"
FENCE, CHECKPOINT = "fence", "checkpoint"
_RANGE_FIELD = re.compile(r"^([0-9a-f]{8})-([0-9a-f]{8}):(fence|checkpoint)$")


def check_prefix(prefix: Any) -> str:
    """A binding's ``resource.prefix``: any string, the empty one too.  Two bindings of one
    endpoint must not share a prefix (their keys would collide); the driver checks that."""
    if not isinstance(prefix, str):
        raise SpecError(f"resource.prefix must be a string, got {prefix!r}")
    return prefix


def data_key(prefix: str, key: Key) -> bytes:
    """``<prefix><key JSON>`` as UTF-8 bytes (a key with a lone surrogate cannot be one)."""
    try:
        return (prefix + key_json(key)).encode("utf-8")
    except UnicodeEncodeError:
        raise DocumentError("the key holds a lone surrogate, which Redis key text cannot carry", key=key) from None


def encode_doc(doc: Any) -> bytes:
    """A document as compact JSON text (UTF-8; lone surrogates escaped, as ``json`` reads them)."""
    text = compact_json(doc)
    try:
        return text.encode("utf-8")
    except UnicodeEncodeError:
        return json.dumps(doc, separators=(",", ":")).encode("ascii")


def checkpoints_key(namespace: str, materialization: str) -> str:
    return f"{namespace}checkpoints:{materialization}"


def quarantine_key(namespace: str, materialization: str) -> str:
    """A list of the materialization's quarantined documents (JSON), oldest first."""
    return f"{namespace}quarantine:{materialization}"


def field(key_range: Range, what: str) -> str:
    return f"{key_range.name}:{what}"


def parse_states(raw: dict) -> list[CheckpointState]:
    """The rows of a checkpoints hash (``HGETALL``), sorted by range; unknown fields are ignored."""
    fences: dict[Range, int] = {}
    cps: dict[Range, Optional[dict]] = {}
    for f, v in raw.items():
        f = f.decode() if isinstance(f, bytes) else f
        m = _RANGE_FIELD.match(f)
        if not m:
            continue
        key_range = Range(int(m[1], 16), int(m[2], 16))
        if m[3] == FENCE:
            fences[key_range] = int(v)
        else:
            cps[key_range] = json.loads(v)
    return [CheckpointState(r, fences[r], cps.get(r)) for r in sorted(fences, key=lambda r: (r.key_begin, r.key_end))]


def glob_escape(text: str) -> str:
    """``text`` with Redis glob characters escaped, for ``SCAN MATCH <escaped>*``."""
    return re.sub(r"([*?\[\]\\])", r"\\\1", text)
