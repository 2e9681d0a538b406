"""Endpoint settings: one declaration per endpoint of the keys its config takes.

Each endpoint declares its settings once, as a tuple of :class:`Setting` (name, type,
default, allowed values, range, whether it is a secret).  From that one declaration:

* :func:`read` refuses unknown keys -- a misspelt setting must not be ignored
  (``{sqlite: {paht: /data/views.db}}`` would write ``./views.db``) -- naming the closest
  known one and the whole list, converts strings (Spark options and environment variables
  arrive as text: ``port: "5432"``, ``chunk_docs: "500"``), checks allowed
  values and ranges, and fills defaults, before the endpoint connects to anything;
* :func:`config_schema` is the JSON Schema the driver's ``spec()`` answers with (secrets
  marked ``"secret": true``).

The endpoint's own frozen settings class is built from :func:`read`'s values; its ``repr``
never shows a secret (tested for every endpoint).
"""

from __future__ import annotations

import difflib
import math
import re
from dataclasses import dataclass, fields
from typing import Any, Callable, Iterable, Mapping, Optional, Sequence

from tidemark.errors import SpecError

TYPES = ("string", "integer", "number", "boolean", "object", "array", "retry", "any")
_TRUE = ("true", "yes", "on", "1")
_FALSE = ("false", "no", "off", "0")
MASK = "***"


@dataclass(frozen=True)
class Setting:
    """One key of an endpoint's config."""

    name: str
    type: str = "string"  # one of TYPES; "retry": a retry policy (tidemark.policy.RetryPolicy)
    default: Any = None
    required: bool = False
    secret: bool = False
    choices: tuple = ()  # allowed values (strings: compared ignoring case, the declared spelling kept)
    minimum: Optional[float] = None
    maximum: Optional[float] = None
    description: str = ""
    properties: Optional[Mapping[str, Any]] = None  # more of its schema (an object's "properties", an "enum")

    def __post_init__(self):
        if self.type not in TYPES:
            raise ValueError(f"setting {self.name!r}: type {self.type!r} is not one of {TYPES}")

    def schema(self) -> dict:
        if self.type == "retry":
            from tidemark.policy import RetryPolicy

            props = {f.name: {"type": "integer" if f.name == "attempts" else "number"} for f in fields(RetryPolicy)}
            out: dict = {"type": "object", "properties": props, "additionalProperties": False}
        else:
            out = {} if self.type == "any" else {"type": self.type}
        out.update(self.properties or {})
        if self.default is not None and self.type != "retry":
            out["default"] = self.default
        if self.choices:
            out["enum"] = list(self.choices)
        if self.minimum is not None:
            out["minimum"] = self.minimum
        if self.maximum is not None:
            out["maximum"] = self.maximum
        if self.secret:
            out["secret"] = True
        if self.description:
            out["description"] = self.description
        return out

    def _bounds(self) -> str:
        lo, hi = self.minimum, self.maximum
        if lo is not None and hi is not None:
            return f" from {lo:g} to {hi:g}"
        return f" >= {lo:g}" if lo is not None else f" <= {hi:g}" if hi is not None else ""

    def convert(self, endpoint: str, value: Any) -> Any:
        """``value`` as this setting's type (strings converted), checked; SpecError naming the
        endpoint, the key and the rule otherwise."""
        where = f"endpoint {endpoint}: {self.name}"
        t = self.type
        if t == "retry":
            from tidemark.policy import RetryPolicy

            try:
                return RetryPolicy.from_config(value)
            except SpecError as exc:
                raise SpecError(f"{where}: {exc}") from None
        shown = MASK if self.secret else repr(value)
        if t == "string":
            if isinstance(value, bool) or not isinstance(value, (str, int, float)):
                raise SpecError(f"{where} must be a string, got {shown}")
            value = str(value)
        elif t == "integer":
            text = value.strip() if isinstance(value, str) else None
            if isinstance(value, bool) or not (isinstance(value, int) or (text and re.fullmatch(r"-?[0-9]+", text))):
                raise SpecError(f"{where} must be an integer{self._bounds()}, got {shown}")
            value = int(value)
        elif t == "number":
            try:
                if isinstance(value, bool):
                    raise ValueError
                value = float(value)
                if not math.isfinite(value):
                    raise ValueError
            except (TypeError, ValueError):
                raise SpecError(f"{where} must be a number{self._bounds()}, got {shown}") from None
        elif t == "boolean":
            if isinstance(value, str) and value.strip().lower() in _TRUE + _FALSE:
                value = value.strip().lower() in _TRUE
            elif not isinstance(value, bool):
                raise SpecError(f"{where} must be true or false, got {shown}")
        elif t == "object":
            if not isinstance(value, Mapping):
                raise SpecError(f"{where} must be a mapping, got {shown}")
        elif t == "array":
            if isinstance(value, (str, bytes)) or not isinstance(value, (list, tuple)):
                raise SpecError(f"{where} must be a list, got {shown}")
        if self.choices:
            match = [
                c for c in self.choices if c == value or (isinstance(c, str) and str(c).lower() == str(value).lower())
            ]
            if not match:
                raise SpecError(f"{where} must be one of {', '.join(map(str, self.choices))}, got {shown}")
            value = match[0]
        if self.minimum is not None and value < self.minimum or self.maximum is not None and value > self.maximum:
            kind = {"integer": "an integer", "number": "a number"}.get(t, "a value")
            raise SpecError(f"{where} must be {kind}{self._bounds()}, got {shown}")
        return value


def refuse_unknown(endpoint: str, config: Mapping[str, Any], known: Iterable[str], *, also: str = "") -> None:
    """Raise SpecError for the keys of ``config`` that are not in ``known``.  ``also``: what
    else the endpoint accepts, in words (e.g. Kafka passes dotted keys to its client)."""
    known = sorted(set(known))
    unknown = sorted(str(k) for k in config if k not in known)
    if not unknown:
        return
    named = []
    for key in unknown:
        close = difflib.get_close_matches(key, known, n=1)
        named.append(f"{key!r} (did you mean {close[0]!r}?)" if close else repr(key))
    raise SpecError(
        f"endpoint {endpoint}: unknown setting(s) {', '.join(named)}; its settings are "
        f"{', '.join(known)}{also}. Nothing was changed"
    )


def read(
    endpoint: str,
    config: Optional[Mapping[str, Any]],
    settings: Sequence[Setting],
    *,
    passthrough: Optional[Callable[[str], bool]] = None,
    also: str = "",
) -> dict[str, Any]:
    """Every setting's value from ``config`` (converted and checked; its default where the
    key is absent or null), after refusing unknown keys.  ``passthrough(key)``: keys the
    endpoint hands on as they are (described by ``also``), left out of the result."""
    config = dict(config or {})
    if not all(isinstance(k, str) for k in config):
        raise SpecError(f"endpoint {endpoint}: setting names must be strings, got {sorted(map(repr, config))}")
    own = {k: v for k, v in config.items() if passthrough is None or not passthrough(k)}
    refuse_unknown(endpoint, own, (s.name for s in settings), also=also)
    out = {}
    for s in settings:
        value = own.get(s.name)
        if s.required and (value is None or value == ""):
            what = f" ({s.description})" if s.description else ""
            raise SpecError(f"endpoint {endpoint}: {s.name} is required{what}. Nothing was changed")
        if value is None:
            value = s.convert(endpoint, s.default) if s.type == "retry" else s.default
        else:
            value = s.convert(endpoint, value)
        out[s.name] = value
    return out


def config_schema(settings: Sequence[Setting], *, additional: bool = False) -> dict:
    """The JSON Schema of a config with ``settings`` (``spec()``'s ``config_schema``)."""
    out = {
        "type": "object",
        "properties": {s.name: s.schema() for s in settings},
        "additionalProperties": additional,
    }
    required = [s.name for s in settings if s.required]
    if required:
        out["required"] = required
    return out


__all__ = ["Setting", "read", "config_schema", "refuse_unknown", "MASK"]
