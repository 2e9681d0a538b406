"""Parsing and JSON Schema validation of documents.

Validity is decided by ``jsonschema-rs`` (compiled, about a hundred times faster) where it
reads the schema as ``jsonschema`` does, and by ``jsonschema`` for everything else: every
document it does not call valid, and every schema that uses a keyword the two could read
differently (:data:`PYTHON_ONLY_KEYWORDS`).  Violations are always ``jsonschema``'s: short
human-readable strings that start with the JSON pointer of the offending location:
``/total: 'x' is not of type 'number'``.

Both validators assert the formats of :mod:`tidemark.collection.formats` (``date-time``,
``date``, ``time``, ``uuid``, ``email``, ``ipv4``, ``ipv6``) with the same Python functions,
and treat every other ``format`` as an annotation: build them with :func:`slow_validator`
and :func:`fast_validator`, never directly.
"""

from __future__ import annotations

import json
import math
import re
from typing import Any

from tidemark.collection.decimals import is_multiple
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
        if line.startswith("\ufeff"):  # e.g. files concatenated after an editor wrote a BOM
            raise DocumentError(
                "unparseable JSON: the line starts with a byte order mark (U+FEFF), which "
                "JSON text must not have; write the file as UTF-8 without a BOM",
                location=location,
            ) from None
        # (some of json's messages end in "at": "Unterminated string starting at")
        where = f"column {exc.colno}" if exc.msg.endswith(" at") else f"at column {exc.colno}"
        raise DocumentError(f"unparseable JSON: {exc.msg} {where}", location=location) from None
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
        bad = exc.object[exc.start : exc.end]
        raise ValueError(f"a lone surrogate {bad.encode('unicode_escape').decode()} is not valid Unicode") from None


def pointer_of(path) -> str:
    if not path:
        return "/"
    return "".join("/" + str(p).replace("~", "~0").replace("/", "~1") for p in path)


# Keywords the two validators could read differently: regular expressions (Python's
# ``re`` in ``jsonschema``, an ECMA 262 dialect in ``jsonschema-rs``) and ``multipleOf`` of
# fractions (each rounds differently).  A schema with any of them, with a reference
# outside itself (which ``jsonschema-rs`` might try to fetch), or naming another draft in
# ``$schema`` (``jsonschema-rs`` would follow it; tidemark validates by draft 2020-12), is
# validated by ``jsonschema`` alone.
PYTHON_ONLY_KEYWORDS = frozenset({"pattern", "patternProperties", "multipleOf", "$dynamicRef", "$recursiveRef"})
DRAFT_2020_12 = ("https://json-schema.org/draft/2020-12/schema", "https://json-schema.org/draft/2020-12/schema#")


# Keywords that refer to or name other schemas: a subschema holding one does not stand alone.
REFERENCE_KEYWORDS = frozenset({"$ref", "$dynamicRef", "$recursiveRef", "$id", "$anchor", "$dynamicAnchor"})


def fast_validation_applies(schema: Any, standalone: bool = False) -> bool:
    """True if ``jsonschema-rs`` may decide validity under ``schema``; with ``standalone``,
    only if the schema also holds no reference (a subschema validated apart from its root)."""
    todo = [schema]
    while todo:
        node = todo.pop()
        if isinstance(node, dict):
            for k, v in node.items():
                if k in PYTHON_ONLY_KEYWORDS or (standalone and k in REFERENCE_KEYWORDS):
                    return False
                if k == "$ref" and not (isinstance(v, str) and v.startswith("#")):
                    return False
                if k == "$schema" and v not in DRAFT_2020_12:  # jsonschema-rs would switch drafts
                    return False
                todo.append(v)
        elif isinstance(node, list):
            todo.extend(node)
    return True


def _multiple_of(validator, multiple, instance, schema):
    """``multipleOf`` on the numbers' decimal text: ``jsonschema`` divides doubles, and finds
    ``0.07`` no multiple of ``0.01`` (``7.000000000000001``)."""
    from jsonschema.exceptions import ValidationError

    if not validator.is_type(instance, "number"):
        return
    if isinstance(multiple, float) or isinstance(instance, float):
        if not is_multiple(instance, multiple):
            yield ValidationError(f"{instance!r} is not a multiple of {multiple!r}")
    elif instance % multiple:
        yield ValidationError(f"{instance!r} is not a multiple of {multiple!r}")


_SLOW = None


def slow_validator_class():
    """``jsonschema``'s draft 2020-12 validator, with ``multipleOf`` on decimal text."""
    global _SLOW
    if _SLOW is None:
        from jsonschema import Draft202012Validator, validators

        _SLOW = validators.extend(Draft202012Validator, {"multipleOf": _multiple_of})
    return _SLOW


def slow_validator(schema: Any):
    """A ``jsonschema`` validator of ``schema`` (draft 2020-12) asserting tidemark's formats."""
    from tidemark.collection.formats import format_checker

    return slow_validator_class()(schema, format_checker=format_checker())


def fast_validator(schema: Any):
    """A ``jsonschema-rs`` validator of ``schema`` asserting tidemark's formats (raises if it
    does not take the schema)."""
    import jsonschema_rs

    from tidemark.collection.formats import rs_formats

    return jsonschema_rs.Draft202012Validator(schema, formats=rs_formats(schema), validate_formats=True)


class Validator:
    """A compiled JSON Schema validator; picklable (compiled lazily per process)."""

    def __init__(self, schema: dict):
        self.schema = schema
        self._v = None
        self._fast = None

    def __getstate__(self):
        return {"schema": self.schema}

    def __setstate__(self, state):
        self.__init__(state["schema"])

    @property
    def compiled(self):
        if self._v is None:
            self._v = slow_validator(self.schema)
        return self._v

    @property
    def fast(self):
        """The ``jsonschema-rs`` validator, or False where it does not apply."""
        if self._fast is None:
            self._fast = False
            if fast_validation_applies(self.schema):
                try:
                    self._fast = fast_validator(self.schema)
                except Exception:  # noqa: BLE001 - a schema it does not take: jsonschema alone
                    self._fast = False
        return self._fast

    def _fast_valid(self, doc: Any) -> bool:
        """True only if ``jsonschema-rs`` calls the document valid (False: not known)."""
        fast = self.fast
        if fast is False:
            return False
        try:
            return fast.is_valid(doc)
        except Exception:  # noqa: BLE001 - a value it cannot take: jsonschema decides
            return False

    def is_valid(self, doc: Any) -> bool:
        return self._fast_valid(doc) or self.compiled.is_valid(doc)

    def violations(self, doc: Any) -> list[str]:
        if self._fast_valid(doc):
            return []
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
