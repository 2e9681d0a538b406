"""What an endpoint cannot hold (:class:`ValueLimits`, data a driver declares in its
``Capabilities``), and the runtime's check of each Store against it."""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Callable, Optional, Sequence

from tidemark.errors import EndpointRefused
from tidemark.protocol.messages import AnyStore, BindingSpec, Key


@dataclass(frozen=True, slots=True)
class ValueLimits:
    """What an endpoint cannot hold, as data (None / True: no limit).  The runtime refuses a
    batch with a value beyond one (naming the key and the limit) before anything commits;
    the conformance kit draws values within them and checks the refusal beyond them."""

    max_key_bytes: Optional[int] = None  # a key's text (each component's), UTF-8 bytes
    max_key_characters: Optional[int] = None  # a key's text (each component's), characters
    max_document_bytes: Optional[int] = None  # a document's compact JSON text, UTF-8 bytes
    nul_in_strings: bool = True  # U+0000 inside a string (PostgreSQL's jsonb and text refuse it)
    max_depth: Optional[int] = None  # levels of nesting of a document (its root object is 1)

    def holds(self, size: int, nul: bool, depth: int = 1) -> bool:
        """True when a document of ``size`` bytes, ``depth`` levels deep (with a U+0000 when
        ``nul``) is within the limits."""
        return (
            (self.max_document_bytes is None or size <= self.max_document_bytes)
            and (self.nul_in_strings or not nul)
            and (self.max_depth is None or depth <= self.max_depth)
        )

    def holds_key(self, key: Key) -> bool:
        """True when a key is within the limits: each text of at most ``max_key_characters``,
        its texts together of at most ``max_key_bytes``."""
        texts = [v for v in key if v.__class__ is str]
        if self.max_key_characters is not None and any(len(t) > self.max_key_characters for t in texts):
            return False
        return self.max_key_bytes is None or sum(len(t.encode("utf-8")) for t in texts) <= self.max_key_bytes

    @property
    def limits_keys(self) -> bool:
        return self.max_key_bytes is not None or self.max_key_characters is not None

    def check_document(self, size: int, key: Key, where: str) -> None:
        """Refuse (:class:`~tidemark.errors.EndpointRefused`, naming the key) a document of
        ``size`` bytes beyond ``max_document_bytes``."""
        if self.max_document_bytes is not None and size > self.max_document_bytes:
            shown = json.dumps(list(key), ensure_ascii=False)
            shown = shown if len(shown) <= 300 else shown[:280] + f"… ({len(shown)} characters)"
            raise EndpointRefused(
                f"{where}: the document of key {shown} is {size:,} bytes; the endpoint holds documents of at most "
                f"{self.max_document_bytes:,} bytes: this shard's transaction was refused before its commit. "
                "Make the document smaller upstream (or raise the endpoint's message size limit)"
            )

    def check_keys(self, keys: Sequence[Key], where: str) -> None:
        """Refuse (:class:`~tidemark.errors.EndpointRefused`, naming the key) a key beyond the limits."""
        for key in keys:
            if not self.holds_key(key):
                shown = json.dumps(list(key), ensure_ascii=False)
                shown = shown if len(shown) <= 300 else shown[:280] + f"… ({len(shown)} characters)"
                raise EndpointRefused(
                    f"{where}: key {shown} is longer than the endpoint holds ({self.describe(keys_only=True)}): "
                    "this shard's transaction was refused before its commit. Shorten the key upstream (or "
                    "derive a shorter key, e.g. a hash, with select:)"
                )

    def describe(self, keys_only: bool = False) -> str:
        """The limits in words (``keys_only``: those of keys)."""
        parts = []
        if self.max_key_bytes is not None:
            parts.append(f"keys of at most {self.max_key_bytes:,} bytes (their texts together)")
        if self.max_key_characters is not None:
            parts.append(f"keys of at most {self.max_key_characters:,} characters")
        if keys_only:
            return ", ".join(parts)
        if self.max_document_bytes is not None:
            parts.append(f"documents of at most {self.max_document_bytes:,} bytes")
        if not self.nul_in_strings:
            parts.append("no U+0000 in strings")
        if self.max_depth is not None:
            parts.append(f"documents nested at most {self.max_depth} levels deep")
        return ", ".join(parts) or "no limits"


def store_check(limits: ValueLimits, bindings: Sequence[BindingSpec]) -> Optional[Callable[[AnyStore], None]]:
    """What the runtime checks of each Store before its driver gets it (:class:`RuntimeSession`'s
    ``check_store``): keys within the declared limits; None where nothing is declared."""
    if not limits.limits_keys:
        return None

    def check(msg: AnyStore) -> None:
        resource = "/".join(bindings[msg.binding].resource_path)
        limits.check_keys(msg.keys, f"binding {msg.binding} ({resource})")

    return check
