"""The view-identity record as an endpoint keeps it (:mod:`tidemark.runtime.view_identity`):
the dict ``Apply.identities`` gives for a resource, plus ``resolved`` (the endpoint's name
for the resource), as JSON text where the endpoint keeps text."""

from __future__ import annotations

import json
from typing import Any, Optional

from tidemark.drivers.common.columns import dumps

#: the table property that keeps it (Delta and Iceberg)
PROPERTY = "tidemark.identity"


def kept(record: dict, resolved: str) -> dict:
    """The record as kept: Apply's, plus the endpoint's name for the resource."""
    return {**record, "resolved": resolved}


def record_text(record: dict, resolved: str) -> str:
    return dumps(kept(record, resolved))


def parse_record(text: Any) -> Optional[dict]:
    """A kept record's text read back; None for no text, or text that is not a record."""
    try:
        obj = json.loads(text) if text else None
    except (TypeError, ValueError):
        return None
    return obj if isinstance(obj, dict) else None


__all__ = ["PROPERTY", "kept", "parse_record", "record_text"]
