"""Schema locations: which subschemas apply to a document, and their ``reduce`` annotations.

A reduction reads its strategy from the schema location of the *right-hand* document.
:class:`SchemaIndex` answers, for an instance at some location, which schema objects
apply to it: the location's own schema, ``$ref`` targets (local ``#/...`` only),
``allOf`` members, the ``then``/``else`` branch that the ``if`` selects, and the
``anyOf``/``oneOf`` members the instance validates against.  The ``reduce`` annotations
of those schemas, in that order, decide the strategy (a later one overrides an earlier
one), and ``reduce: {delete: true}`` marks a deletion.  ``reduce: {order: /pointer}`` makes
the value at the pointer (inside the location's value) decide which side is the later one
(:mod:`tidemark.collection.strategies`).

Pure Python (no Spark): executors import it.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any, Optional

# Keywords whose value is a schema, a list of schemas, or a map of schemas.
SCHEMA_KEYWORDS = ("additionalProperties", "additionalItems", "if", "then", "else", "not", "contains",
                   "propertyNames", "unevaluatedProperties", "unevaluatedItems")
LIST_KEYWORDS = ("allOf", "anyOf", "oneOf", "prefixItems")
MAP_KEYWORDS = ("properties", "patternProperties", "$defs", "definitions", "dependentSchemas")


@dataclass(frozen=True)
class Annotation:
    """The effective ``reduce`` annotation of one location for one instance."""

    strategy: str = "lastWriteWins"
    key: tuple[str, ...] = ()
    delete: bool = False
    order: str = ""  # ``reduce.order``: a JSON pointer inside the location's value ("" : source order)


DEFAULT = Annotation()


def unescape(token: str) -> str:
    return token.replace("~1", "/").replace("~0", "~")


def pointer_tokens(pointer: str) -> list[str]:
    if pointer in ("", "/"):
        return []
    return [unescape(t) for t in pointer.lstrip("/").split("/")]


def push(pointer: str, token: Any) -> str:
    return f"{pointer}/{str(token).replace('~', '~0').replace('/', '~1')}"


class SchemaIndex:
    """Resolves the schemas that apply to an instance, with cached sub-validators."""

    def __init__(self, root: Any):
        self.root = root
        self._validators: dict[int, Any] = {}
        self._base = None

    def __getstate__(self):
        return {"root": self.root}

    def __setstate__(self, state):
        self.__init__(state["root"])

    # ------------------------------------------------------------------ refs
    def resolve_ref(self, ref: str) -> Any:
        if not ref.startswith("#"):
            raise ValueError(f"only local $ref ('#/...') is supported, got {ref!r}")
        node = self.root
        for token in pointer_tokens(ref[1:]):
            if isinstance(node, dict) and token in node:
                node = node[token]
            elif isinstance(node, list) and token.isdigit() and int(token) < len(node):
                node = node[int(token)]
            else:
                raise ValueError(f"$ref {ref!r} does not resolve")
        return node

    # ------------------------------------------------------------------ validity
    def is_valid(self, schema: Any, instance: Any) -> bool:
        if schema is True or schema is None:
            return True
        if schema is False:
            return False
        v = self._validators.get(id(schema))
        if v is None:
            v = self._validators[id(schema)] = self._fast_validator(schema) or self._slow_validator(schema)
        try:
            return v.is_valid(instance)
        except Exception:  # jsonschema-rs could not take the value: jsonschema decides
            return self._slow_validator(schema).is_valid(instance)

    def _slow_validator(self, schema: Any):
        if self._base is None:
            from tidemark.collection.validate import slow_validator

            self._base = slow_validator(self.root if isinstance(self.root, dict) else {})
        return self._base.evolve(schema=schema)

    @staticmethod
    def _fast_validator(schema: Any):
        """``jsonschema-rs`` for a subschema that stands on its own (no references) and uses
        only keywords the two packages read alike (see :mod:`tidemark.collection.validate`);
        None otherwise.  Conditions (``if``, ``anyOf``, ``oneOf``) are evaluated for every
        document reduced, so this is where a schema with a deletion condition spends its time."""
        from tidemark.collection.validate import fast_validation_applies, fast_validator

        if not isinstance(schema, dict) or not fast_validation_applies(schema, standalone=True):
            return None
        try:
            return fast_validator(schema)
        except Exception:  # a subschema it does not take
            return None

    # ------------------------------------------------------------------ applicability
    def applicable(self, schemas, instance: Any) -> list[dict]:
        """Every schema object that applies to ``instance``, given the location's schemas."""
        out: list[dict] = []
        seen: set[int] = set()

        def visit(s: Any) -> None:
            if not isinstance(s, dict) or id(s) in seen:
                return
            seen.add(id(s))
            out.append(s)
            ref = s.get("$ref")
            if isinstance(ref, str):
                visit(self.resolve_ref(ref))
            for sub in s.get("allOf") or ():
                visit(sub)
            for kw in ("anyOf", "oneOf"):
                for sub in s.get(kw) or ():
                    if self.is_valid(sub, instance):
                        visit(sub)
            if "if" in s:
                branch = "then" if self.is_valid(s["if"], instance) else "else"
                if branch in s:
                    visit(s[branch])

        for s in schemas:
            visit(s)
        return out

    @staticmethod
    def annotation(applicable: list[dict]) -> Annotation:
        strategy: Optional[dict] = None
        delete = False
        for s in applicable:
            red = s.get("reduce")
            if not isinstance(red, dict):
                continue
            if "strategy" in red:
                strategy = red
            if "delete" in red:
                delete = bool(red["delete"])
        if strategy is None and not delete:
            return DEFAULT
        if strategy is None:
            return Annotation(delete=delete)
        return Annotation(str(strategy["strategy"]), tuple(strategy.get("key") or ()), delete,
                          str(strategy.get("order") or ""))

    @staticmethod
    def property_schemas(applicable: list[dict], prop: str) -> list:
        out = []
        for s in applicable:
            matched = False
            props = s.get("properties")
            if isinstance(props, dict) and prop in props:
                out.append(props[prop])
                matched = True
            pats = s.get("patternProperties")
            if isinstance(pats, dict):
                for pat, sub in pats.items():
                    if re.search(pat, prop):
                        out.append(sub)
                        matched = True
            if not matched and isinstance(s.get("additionalProperties"), dict):
                out.append(s["additionalProperties"])
        return out

    @staticmethod
    def item_schemas(applicable: list[dict], index: int) -> list:
        out = []
        for s in applicable:
            prefix = s.get("prefixItems")
            items = s.get("items")
            if isinstance(items, list):  # draft-07 tuple form
                prefix, items = items, s.get("additionalItems")
            if isinstance(prefix, list) and index < len(prefix):
                out.append(prefix[index])
            elif isinstance(items, dict):
                out.append(items)
        return out

    # ------------------------------------------------------------------ convenience
    def root_applicable(self, instance: Any) -> list[dict]:
        return self.applicable([self.root], instance)


def iter_schemas(node: Any, path: str = ""):
    """Yield ``(path, schema)`` for every schema object below ``node`` (spec checks)."""
    if not isinstance(node, dict):
        return
    yield path, node
    for kw in SCHEMA_KEYWORDS:
        if kw in node:
            yield from iter_schemas(node[kw], f"{path}.{kw}")
    for kw in LIST_KEYWORDS:
        sub = node.get(kw)
        if isinstance(sub, list):
            for i, s in enumerate(sub):
                yield from iter_schemas(s, f"{path}.{kw}[{i}]")
    items = node.get("items")
    if isinstance(items, list):
        for i, s in enumerate(items):
            yield from iter_schemas(s, f"{path}.items[{i}]")
    elif isinstance(items, dict):
        yield from iter_schemas(items, f"{path}.items")
    for kw in MAP_KEYWORDS:
        sub = node.get(kw)
        if isinstance(sub, dict):
            for name, s in sub.items():
                yield from iter_schemas(s, f"{path}.{kw}.{name}")


def types_of(schema: Any) -> Optional[tuple[str, ...]]:
    """The declared ``type`` of a schema as a tuple, or None if undeclared."""
    if not isinstance(schema, dict) or "type" not in schema:
        return None
    t = schema["type"]
    return (t,) if isinstance(t, str) else tuple(t)
