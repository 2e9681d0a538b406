"""The webhook endpoint's config, typed and checked once, and its URL without secrets.

``endpoint: {webhook: {url: https://…, headers: {Authorization: …}, chunk_docs: 500,
chunk_bytes: 1048576, retry: {attempts: 5, …}}}``
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import parse_qsl, urlsplit, urlunsplit

from tidemark.errors import SpecError
from tidemark.policy import DEFAULT_POLICY, RetryPolicy
from tidemark.drivers.common.settings import refuse_unknown

RESERVED_HEADERS = frozenset({"idempotency-key", "content-type", "content-length", "host"})
_TOKEN = re.compile(r"^[!#$%&'*+.^_`|~0-9A-Za-z-]+$")  # an HTTP header name (RFC 9110 token)
MASK = "****"


@dataclass(frozen=True, slots=True)
class WebhookConfig:
    url: str
    headers: tuple[tuple[str, str], ...] = ()
    chunk_docs: int = 500  # documents per request, at most
    chunk_bytes: int = 1024 * 1024  # JSON bytes of documents per request, at most (a bigger document goes alone)
    policy: RetryPolicy = field(default=DEFAULT_POLICY)

    @staticmethod
    def from_config(config: Any) -> "WebhookConfig":
        if not isinstance(config, dict) or not isinstance(config.get("url"), str):
            raise SpecError("endpoint webhook: needs {url: https://HOST/PATH}")
        refuse_unknown("webhook", config, ("url", "headers", "chunk_docs", "chunk_bytes", "retry"))
        url = config["url"]
        parts = urlsplit(url)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise SpecError(f"endpoint webhook: url must be http:// or https:// with a host, got {display_url(url)!r}")
        headers = config.get("headers") or {}
        if not isinstance(headers, dict):
            raise SpecError("endpoint webhook: headers must be a mapping of name to value")
        pairs = []
        for name, value in headers.items():
            if not isinstance(name, str) or not _TOKEN.match(name):
                raise SpecError(f"endpoint webhook: invalid header name {name!r}")
            if name.lower() in RESERVED_HEADERS:
                raise SpecError(f"endpoint webhook: header {name!r} is set by tidemark")
            if not isinstance(value, str) or "\r" in value or "\n" in value:
                raise SpecError(f"endpoint webhook: header {name!r} must be a one-line string")  # value not shown
            pairs.append((name, value))
        ints = {}
        for k in ("chunk_docs", "chunk_bytes"):
            if k in config:
                try:
                    ints[k] = int(config[k])
                except (TypeError, ValueError):
                    raise SpecError(f"endpoint webhook: {k} must be an integer, got {config[k]!r}") from None
                if ints[k] < 1:
                    raise SpecError(f"endpoint webhook: {k} must be >= 1")
        return WebhookConfig(url, tuple(pairs), policy=RetryPolicy.from_config(config.get("retry")), **ints)

    @property
    def display(self) -> str:
        return display_url(self.url)

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
