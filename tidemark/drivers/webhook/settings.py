"""The webhook endpoint's config, typed and checked once, and its URL without secrets.

``endpoint: {webhook: {url: https://…, headers: {Authorization: …}, chunk_docs: 500,
chunk_bytes: 1048576, retry: {attempts: 5, …}}}``
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import parse_qsl, urlsplit, urlunsplit

from tidemark.drivers.common.settings import Setting, read
from tidemark.errors import SpecError
from tidemark.policy import DEFAULT_POLICY, RetryPolicy

RESERVED_HEADERS = frozenset({"idempotency-key", "content-type", "content-length", "host"})
_TOKEN = re.compile(r"^[!#$%&'*+.^_`|~0-9A-Za-z-]+$")  # an HTTP header name (RFC 9110 token)
MASK = "****"
DEFAULT_STATE = "webhook-state"
SETTINGS = (
    Setting(
        "url", required=True, secret=True, description="https://HOST/PATH (a password or query in it is never shown)"
    ),
    Setting("headers", "object", secret=True, description="request headers, e.g. Authorization (never shown)"),
    Setting("chunk_docs", "integer", default=500, minimum=1, description="documents per request, at most"),
    Setting("chunk_bytes", "integer", default=1 << 20, minimum=1, description="JSON bytes of documents per request"),
    Setting("retry", "retry"),
    Setting(
        "state",
        "any",
        default=DEFAULT_STATE,
        description="the local state store: a folder (relative: the spec's folder) or {path: FOLDER, ...}",
    ),
)


@dataclass(frozen=True, slots=True)
class WebhookConfig:
    url: str
    headers: tuple[tuple[str, str], ...] = ()
    chunk_docs: int = 500  # documents per request, at most
    chunk_bytes: int = 1024 * 1024  # JSON bytes of documents per request, at most (a bigger document goes alone)
    policy: RetryPolicy = field(default=DEFAULT_POLICY)

    @staticmethod
    def from_config(config: Any) -> "WebhookConfig":
        """The config's settings (``state`` is the driver's, for its store)."""
        if not isinstance(config, dict):
            raise SpecError("endpoint webhook: needs {url: https://HOST/PATH}")
        v = read("webhook", config, SETTINGS)
        url = v["url"]
        parts = urlsplit(url)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise SpecError(f"endpoint webhook: url must be http:// or https:// with a host, got {display_url(url)!r}")
        headers = v["headers"] or {}
        pairs = []
        for name, value in headers.items():
            if not isinstance(name, str) or not _TOKEN.match(name):
                raise SpecError(f"endpoint webhook: invalid header name {name!r}")
            if name.lower() in RESERVED_HEADERS:
                raise SpecError(f"endpoint webhook: header {name!r} is set by tidemark")
            if not isinstance(value, str) or "\r" in value or "\n" in value:
                raise SpecError(f"endpoint webhook: header {name!r} must be a one-line string")  # value not shown
            pairs.append((name, value))
        return WebhookConfig(
            url, tuple(pairs), chunk_docs=v["chunk_docs"], chunk_bytes=v["chunk_bytes"], policy=v["retry"]
        )

    @property
    def display(self) -> str:
        return display_url(self.url)

    def __repr__(self) -> str:  # header values and the URL's password and query are secrets
        names = [n for n, _v in self.headers]
        return f"WebhookConfig(url={self.display!r}, headers={names!r}, chunk_docs={self.chunk_docs})"

    @property
    def secrets(self) -> list[str]:
        """Strings never to print: header values, the URL's password and query values."""
        parts = urlsplit(self.url)
        out = [v for _n, v in self.headers if len(v) >= 4]
        if parts.password:
            out.append(parts.password)
        out += [v for _k, v in parse_qsl(parts.query) if len(v) >= 4]
        return out


def display_url(url: str) -> str:
    """``url`` for messages: no user or password, query values masked, no fragment."""
    try:
        parts = urlsplit(url)
        host = parts.hostname or ""
    except ValueError:
        return "<unparseable url>"
    if ":" in host:
        host = f"[{host}]"
    netloc = (f"{MASK}@" if parts.username or parts.password else "") + host
    try:
        if parts.port:
            netloc += f":{parts.port}"
    except ValueError:
        pass
    query = "&".join(f"{k}={MASK}" for k, _v in parse_qsl(parts.query, keep_blank_values=True))
    return urlunsplit((parts.scheme, netloc, parts.path, query, ""))
