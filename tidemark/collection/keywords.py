"""Known keywords: a schema object may hold only those of JSON Schema, ``reduce``, and ``x-`` extensions.

The spec checks refuse the others (:func:`unknown_keywords`), naming the closest known one
(:func:`closest`).  Pure Python (no Spark).
"""

from __future__ import annotations

import difflib
from dataclasses import dataclass
from typing import Any, Iterator, Optional

from tidemark.collection.schema import LIST_KEYWORDS, MAP_KEYWORDS, SCHEMA_KEYWORDS, push

# A keyword that nothing reads is a quiet wrong: ``redcue: {strategy: sum}`` would leave the
# location ``lastWriteWins``.  So a schema object may hold only the keywords of JSON Schema
# (draft 2020-12, and those of draft 2019-09 / draft-07 that its meta-schema still
# describes), tidemark's own ``reduce``, and extensions of the user's that start with
# ``x-``; :func:`unknown_keywords` finds the others (the spec checks refuse them).

JSON_SCHEMA_KEYWORDS = frozenset(
    {
        # core
        "$schema",
        "$id",
        "$ref",
        "$anchor",
        "$dynamicRef",
        "$dynamicAnchor",
        "$vocabulary",
        "$comment",
        "$defs",
        "$recursiveRef",
        "$recursiveAnchor",
        "definitions",
        # applicators
        "allOf",
        "anyOf",
        "oneOf",
        "not",
        "if",
        "then",
        "else",
        "dependentSchemas",
        "dependencies",
        "prefixItems",
        "items",
        "additionalItems",
        "contains",
        "properties",
        "patternProperties",
        "additionalProperties",
        "propertyNames",
        "unevaluatedItems",
        "unevaluatedProperties",
        # validation
        "type",
        "const",
        "enum",
        "multipleOf",
        "maximum",
        "exclusiveMaximum",
        "minimum",
        "exclusiveMinimum",
        "maxLength",
        "minLength",
        "pattern",
        "maxItems",
        "minItems",
        "uniqueItems",
        "maxContains",
        "minContains",
        "maxProperties",
        "minProperties",
        "required",
        "dependentRequired",
        # meta-data, format, content
        "title",
        "description",
        "default",
        "deprecated",
        "readOnly",
        "writeOnly",
        "examples",
        "format",
        "contentEncoding",
        "contentMediaType",
        "contentSchema",
    }
)
TIDEMARK_KEYWORDS = frozenset({"reduce"})
KNOWN_KEYWORDS = JSON_SCHEMA_KEYWORDS | TIDEMARK_KEYWORDS
REDUCE_FIELDS = ("strategy", "key", "order", "delete")  # what ``reduce: {...}`` may hold
EXTENSION_PREFIX = "x-"

# Every keyword whose value is a schema, a list of schemas, or a map of names to schemas:
# all of them, unlike iter_schemas (whose paths the recovery log records).
_ALL_SCHEMA_KEYWORDS = SCHEMA_KEYWORDS + ("contentSchema",)
_ALL_MAP_KEYWORDS = MAP_KEYWORDS + ("dependencies",)  # draft-07 ``dependencies``: a schema or a list of names


def walk_schemas(node: Any, tokens: tuple = ()) -> Iterator[tuple[tuple, dict]]:
    """Yield ``(tokens, schema)`` for ``node`` and every schema object below it, through every
    keyword whose value is a schema; ``tokens`` are the JSON pointer's (``int`` for an index).
    Values that are data (``default``, ``examples``, ``const``, ``enum``, ``x-...``) are not
    entered, and names under ``properties``, ``$defs``, ... are tokens, not keywords."""
    if not isinstance(node, dict):
        return
    yield tokens, node
    for kw in _ALL_SCHEMA_KEYWORDS:
        if kw in node:
            yield from walk_schemas(node[kw], tokens + (kw,))
    for kw in LIST_KEYWORDS:
        sub = node.get(kw)
        if isinstance(sub, list):
            for i, s in enumerate(sub):
                yield from walk_schemas(s, tokens + (kw, i))
    items = node.get("items")
    if isinstance(items, list):  # draft-07 tuple form
        for i, s in enumerate(items):
            yield from walk_schemas(s, tokens + ("items", i))
    else:
        yield from walk_schemas(items, tokens + ("items",))
    for kw in _ALL_MAP_KEYWORDS:
        sub = node.get(kw)
        if isinstance(sub, dict):
            for name, s in sub.items():
                yield from walk_schemas(s, tokens + (kw, name))


def pointer_of_tokens(tokens: tuple) -> str:
    """The JSON pointer of ``tokens`` (``/`` for the root, as reduction errors write it)."""
    out = ""
    for t in tokens:
        out = push(out, t)
    return out or "/"


@dataclass(frozen=True)
class UnknownKeyword:
    """A keyword nothing reads: in a schema object, or a field in its ``reduce``."""

    tokens: tuple  # where the schema object holding it is (JSON pointer tokens)
    keyword: str
    in_reduce: bool = False  # a field of the object's ``reduce: {...}``

    @property
    def pointer(self) -> str:
        return pointer_of_tokens(self.tokens)

    @property
    def suggestion(self) -> Optional[str]:
        return closest(self.keyword, REDUCE_FIELDS if self.in_reduce else KNOWN_KEYWORDS)

    @property
    def message(self) -> str:
        hint = f" (did you mean `{self.suggestion}`?)" if self.suggestion else ""
        if self.in_reduce:
            return (
                f"unknown field {self.keyword!r} (allowed: {', '.join(REDUCE_FIELDS)}) in the `reduce` "
                f"at {self.pointer}{hint}"
            )
        return (
            f"unknown keyword `{self.keyword}` in the schema at {self.pointer}{hint}: it is neither a JSON "
            f"Schema keyword nor tidemark's `reduce`, so nothing would read it; keywords of your own must "
            f"start with `{EXTENSION_PREFIX}`"
        )


def closest(word: str, known) -> Optional[str]:
    """The known word closest to ``word`` (case aside), if one is close."""
    by_lower = {k.lower(): k for k in known}
    starting = [k for k in by_lower if len(word) >= 3 and k.startswith(word.lower())]
    if len(starting) == 1:  # an abbreviation: ``max`` for ``maximize``
        return by_lower[starting[0]]
    match = difflib.get_close_matches(word.lower(), list(by_lower), n=1, cutoff=0.6)
    return by_lower[match[0]] if match else None


def unknown_keywords(schema: Any) -> Iterator[UnknownKeyword]:
    """Every keyword of ``schema``'s schema objects that is neither JSON Schema's, nor
    ``reduce``, nor an ``x-`` extension; and every unknown field of a ``reduce: {...}``."""
    for tokens, node in walk_schemas(schema):
        for k in node:
            if isinstance(k, str) and (k in KNOWN_KEYWORDS or k.startswith(EXTENSION_PREFIX)):
                continue
            yield UnknownKeyword(tokens, str(k))
        red = node.get("reduce")
        if isinstance(red, dict):
            for k in red:
                if k not in REDUCE_FIELDS:
                    yield UnknownKeyword(tokens, str(k), in_reduce=True)
