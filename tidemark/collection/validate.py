"""Parsing and JSON Schema validation of documents (pure Python, uses ``jsonschema``).

Violations are short human-readable strings that start with the JSON pointer of the
offending location: ``/total: 'x' is not of type 'number'``.
"""

from __future__ import annotations

import json
import math
import re
from typing import Any

from tidemark.errors import DocumentError

DEFAULT_MAX_DOCUMENT_BYTES = 16 * 2**20


def _reject_constant(name: str):
    raise ValueError(f"{name} is not valid JSON")


def _parse_float(text: str) -> float:
    v = float(text)
    if not math.isfinite(v):
        raise ValueError(f"number {text} is out of range (not finite)")
    return v


_DECODER = json.JSONDecoder(parse_constant=_reject_constant, parse_float=_parse_float)
_SURROGATE_ESCAPE = re.compile(r"\\u[dD][89a-fA-F]")


def parse_document(line: str, location: str | None = None, max_bytes: int = DEFAULT_MAX_DOCUMENT_BYTES) -> Any:
    """``json.loads`` that rejects NaN/Infinity, non-finite numbers and oversized documents."""
    size = len(line) if len(line) * 4 <= max_bytes else len(line.encode("utf-8"))
    if size > max_bytes:
        raise DocumentError(f"document is {size} bytes, more than the maximum of {max_bytes} bytes", location=location)
    try:
        doc = _DECODER.decode(line)
        if _SURROGATE_ESCAPE.search(line):
            _check_unicode(doc)
        return doc
    except json.JSONDecodeError as exc:
        raise DocumentError(f"unparseable JSON: {exc.msg} at column {exc.colno}", location=location) from None
    except ValueError as exc:
        raise DocumentError(f"unparseable JSON: {exc}", location=location) from None
    except RecursionError:
        raise DocumentError("unparseable JSON: nested too deeply", location=location) from None


def _check_unicode(doc: Any) -> None:
    """JSON may escape half of a surrogate pair alone (``"\\ud800"``); such a string is not
    Unicode and cannot be stored as UTF-8.  Checked only when the text has such an escape."""
    try:
        json.dumps(doc, ensure_ascii=False).encode("utf-8")
    except UnicodeEncodeError as exc:
        bad = exc.object[exc.start:exc.end]
        raise ValueError(f"a lone surrogate {bad.encode('unicode_escape').decode()} is not valid Unicode") from None


def pointer_of(path) -> str:
    if not path:
        return "/"
    return "".join("/" + str(p).replace("~", "~0").replace("/", "~1") for p in path)


class Validator:
    """A compiled JSON Schema validator; picklable (compiled lazily per process)."""

    def __init__(self, schema: dict):
        self.schema = schema
        self._v = None

    def __getstate__(self):
        return {"schema": self.schema}

    def __setstate__(self, state):
        self.__init__(state["schema"])

    @property
    def compiled(self):
        if self._v is None:
            from jsonschema import Draft202012Validator

            self._v = Draft202012Validator(self.schema)
        return self._v

    def is_valid(self, doc: Any) -> bool:
        return self.compiled.is_valid(doc)

    def violations(self, doc: Any) -> list[str]:
        v = self.compiled
        if v.is_valid(doc):
            return []
        errors = sorted(v.iter_errors(doc), key=lambda e: (list(map(str, e.absolute_path)), e.message))
        out = []
        for e in errors:
            msg = e.message
            if len(msg) > 200:
                msg = msg[:197] + "..."
            out.append(f"{pointer_of(e.absolute_path)}: {msg}")
        return out
