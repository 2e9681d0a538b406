"""Keys: tuples of JSON scalars, their canonical JSON text and their 32-bit hash.

The canonical text of a key is a compact JSON array (``["a",1,true]``).  The hash is
``crc32`` of its UTF-8 bytes; Spark computes the same with ``crc32(key_json)``, so the
shard a key goes to does not depend on which side computed it.
"""

from __future__ import annotations

import json
import zlib
from typing import Any, Sequence

from tidemark.errors import DocumentError

KEY_TYPES = ("string", "integer", "boolean")


# ``json.dumps`` with keyword arguments builds a new encoder per call; one shared encoder
# writes the same text for about half the cost (keys and documents, once per document).
compact_json = json.JSONEncoder(ensure_ascii=False, separators=(",", ":")).encode


def key_json(key: Sequence[Any]) -> str:
    return compact_json(list(key))


def key_from_json(text: str) -> tuple:
    return tuple(json.loads(text))


def key_hash(key: Sequence[Any]) -> int:
    return zlib.crc32(key_json(key).encode("utf-8"))


def resolve_pointer(doc: Any, pointer: str, default: Any = ...) -> Any:
    """Resolve an RFC 6901 JSON pointer. Missing -> ``default`` or KeyError."""
    if pointer in ("", "/"):
        return doc
    cur = doc
    for raw in pointer.lstrip("/").split("/"):
        part = raw.replace("~1", "/").replace("~0", "~")
        if isinstance(cur, dict) and part in cur:
            cur = cur[part]
        elif isinstance(cur, list) and part.isdigit() and int(part) < len(cur):
            cur = cur[int(part)]
        else:
            if default is ...:
                raise KeyError(pointer)
            return default
    return cur


def extract_key(doc: Any, pointers: Sequence[str], location: str | None = None) -> tuple:
    """The key of ``doc``; a missing or non-scalar component is a DocumentError."""
    out = []
    for p in pointers:
        try:
            v = resolve_pointer(doc, p)
        except KeyError:
            raise DocumentError(f"document has no key component at {p}", location=location) from None
        if v is None or isinstance(v, (dict, list, float)):
            raise DocumentError(
                f"key component {p} must be a string, integer or boolean, got {json.dumps(v)[:80]}",
                location=location,
            )
        out.append(v)
    return tuple(out)
