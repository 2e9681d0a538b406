"""A batch's documents as HTTP requests: deterministic chunks and idempotency keys.

The same documents in the same order (a replay of one batch: the runtime sorts each
shard's documents by key) give the same chunks, bodies and keys, so that a receiver
that remembers ``Idempotency-Key`` applies each chunk once however often it is sent.

A chunk closes when it holds ``chunk_docs`` documents or when the next document would
take its documents past ``chunk_bytes`` of JSON (a larger document goes alone).

``Idempotency-Key: tm1-<sha256 hex>`` of (materialization, range, batch identity, chunk
index, digest of the chunk's documents[, resource]).  The batch identity is the runtime's (checkpoint
id, batch id, Spark query id, source offsets; :func:`tidemark.drivers.common.fences.identity`), never
the batch number alone.  The documents' digest is there so that a replay that differs
(the chunk settings changed between the crash and the restart) gets new keys: a receiver
then applies documents twice rather than drops the ones it has not seen under an old key.

Body (``application/json``)::

    {"materialization": "view", "range": "00000000-ffffffff", "checkpoint_id": "…",
     "batch_id": 7, "resource": "customers", "chunk": 0, "chunks": 3, "documents": [{…}, …]}

(``resource`` only when the caller names one: the driver does, per binding.)
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from typing import Any, Iterable, Optional

from tidemark.collection.keys import compact_json
from tidemark.drivers.common.fences import identity
from tidemark.protocol.messages import Range

KEY_VERSION = "tm1"
_canonical = json.JSONEncoder(ensure_ascii=True, separators=(",", ":"), sort_keys=True).encode


@dataclass(frozen=True, slots=True)
class Chunk:
    index: int  # 0-based
    count: int  # chunks in the batch
    first: int  # index of its first document in the batch
    documents: int  # how many documents it holds
    key: str  # Idempotency-Key
    body: bytes

    @property
    def label(self) -> str:
        """``chunk 2/5 (documents 100-149)`` for messages (1-based chunk number)."""
        return f"chunk {self.index + 1}/{self.count} (documents {self.first}-{self.first + self.documents - 1})"


def encode_doc(doc: Any) -> bytes:
    text = compact_json(doc)
    try:
        return text.encode("utf-8")
    except UnicodeEncodeError:  # a lone surrogate: escaped, as JSON allows
        return json.dumps(doc, separators=(",", ":")).encode("ascii")


def idempotency_key(
    materialization: str,
    key_range: Range,
    checkpoint: Optional[dict],
    index: int,
    digest: str,
    resource: Optional[str] = None,
) -> str:
    ident = identity(checkpoint)
    parts = [KEY_VERSION, materialization, key_range.name, list(ident), index, digest]
    if resource is not None:  # one batch posts each binding's documents as chunks of their own
        parts.append(resource)
    text = _canonical(parts)
    return f"{KEY_VERSION}-{hashlib.sha256(text.encode()).hexdigest()}"


def plan_chunks(
    materialization: str,
    key_range: Range,
    checkpoint: dict,
    docs: Iterable[Any],
    *,
    chunk_docs: int = 500,
    chunk_bytes: int = 1024 * 1024,
    resource: Optional[str] = None,
) -> list[Chunk]:
    """The requests of one batch of one range (of one binding's ``resource``, which the body
    names and the key includes), in order (none for no documents)."""
    groups: list[list[bytes]] = []
    current: list[bytes] = []
    size = 0
    for doc in docs:
        data = encode_doc(doc)
        if current and (len(current) >= chunk_docs or size + len(data) + 1 > chunk_bytes):
            groups.append(current)
            current, size = [], 0
        current.append(data)
        size += len(data) + 1
    if current:
        groups.append(current)
    head = {
        "materialization": materialization,
        "range": key_range.name,
        "checkpoint_id": (checkpoint or {}).get("checkpoint_id"),
        "batch_id": (checkpoint or {}).get("batch_id"),
    }
    if resource is not None:
        head["resource"] = resource
    out, first = [], 0
    for i, group in enumerate(groups):
        documents = b"[" + b",".join(group) + b"]"
        digest = hashlib.sha256(documents).hexdigest()
        envelope = compact_json({**head, "chunk": i, "chunks": len(groups)}).encode("utf-8")
        body = envelope[:-1] + b',"documents":' + documents + b"}"
        out.append(
            Chunk(
                i,
                len(groups),
                first,
                len(group),
                idempotency_key(materialization, key_range, checkpoint, i, digest, resource),
                body,
            )
        )
        first += len(group)
    return out
