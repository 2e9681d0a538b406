"""Endpoint settings: one rule for the keys a spec may give an endpoint.

A misspelt setting must not be ignored (``{sqlite: {paht: /data/views.db}}`` would write
``./views.db``): every endpoint refuses unknown keys with the same message, naming the
closest known one and the whole list, before it connects to anything.
"""

from __future__ import annotations

import difflib
from typing import Any, Iterable, Mapping

from tidemark.errors import SpecError


def refuse_unknown(endpoint: str, config: Mapping[str, Any], known: Iterable[str], *, also: str = "") -> None:
    """Raise SpecError for the keys of ``config`` that are not in ``known``.  ``also``: what
    else the endpoint accepts, in words (e.g. Kafka passes dotted keys to its client)."""
    known = sorted(set(known))
    unknown = sorted(k for k in config if k not in known)
    if not unknown:
        return
    named = []
    for key in unknown:
        close = difflib.get_close_matches(str(key), known, n=1)
        named.append(f"{key!r} (did you mean {close[0]!r}?)" if close else repr(key))
    raise SpecError(
        f"endpoint {endpoint}: unknown setting(s) {', '.join(named)}; its settings are "
        f"{', '.join(known)}{also}. Nothing was changed"
    )


__all__ = ["refuse_unknown"]
