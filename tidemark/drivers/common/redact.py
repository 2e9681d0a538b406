"""Passwords out of every message: connection strings, ``password=`` pairs, known secrets."""

from __future__ import annotations

import re
from typing import Any, Iterable, Optional

_URL_PASSWORD = re.compile(r"(?P<pre>[a-z][a-z0-9+.-]*://[^:/@\s]*:)(?P<pw>[^@\s]*)(?P<post>@)", re.I)
_KV_PASSWORD = re.compile(r"(?P<pre>\bpassword\s*=\s*)(?P<pw>'(?:[^'\\]|\\.)*'|\S+)", re.I)
REDACTED = "********"


def redact(text: Any, secrets: Iterable[Optional[str]] = ()) -> str:
    """``text`` with passwords (URL, ``password=`` pairs and the given secrets) masked."""
    s = str(text)
    s = _URL_PASSWORD.sub(lambda m: m["pre"] + REDACTED + m["post"], s)
    s = _KV_PASSWORD.sub(lambda m: m["pre"] + REDACTED, s)
    for secret in secrets:
        if secret and len(secret) >= 1:
            s = s.replace(secret, REDACTED)
    return s


def redact_url(url: str) -> str:
    """``url`` with its password, or its token (``nats://TOKEN@host``: a user name without a
    password), masked."""
    from urllib.parse import urlsplit

    try:
        parts = urlsplit(url)
        secrets = [parts.password, parts.username if parts.password is None else None]
    except ValueError:
        secrets = []
    return redact(url, secrets)
