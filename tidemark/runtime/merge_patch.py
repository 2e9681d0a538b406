"""RFC 7396 JSON merge patch."""

from __future__ import annotations

import copy
from typing import Any, Optional

from tidemark.protocol.messages import StateUpdate


def merge_patch(target: Any, patch: Any) -> Any:
    """Apply ``patch`` to ``target`` (neither is modified) and return the result."""
    if not isinstance(patch, dict):
        return copy.deepcopy(patch)
    result = dict(target) if isinstance(target, dict) else {}
    for key, value in patch.items():
        if value is None:
            result.pop(key, None)
        else:
            result[key] = merge_patch(result.get(key), value)
    return result


def apply_update(state: Any, update: Optional[StateUpdate]) -> Any:
    """Apply a :class:`~tidemark.protocol.messages.StateUpdate` (or None) to a driver checkpoint."""
    if update is None:
        return state
    if update.merge_patch:
        return merge_patch(state, update.updated)
    return copy.deepcopy(update.updated)
