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
from typing import Any, Iterator, Optional

# Keywords whose value is a schema, a list of schemas, or a map of schemas.
SCHEMA_KEYWORDS = (
    "additionalProperties",
    "additionalItems",
    "if",
    "then",
    "else",
    "not",
    "contains",
    "propertyNames",
    "unevaluatedProperties",
    "unevaluatedItems",
)
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
        except Exception:  # noqa: BLE001 - jsonschema-rs could not take the value: jsonschema decides
            return self._slow_validator(schema).is_valid(instance)

    def _slow_validator(self, schema: Any):
        base = self._base
        if base is None:
            from tidemark.collection.validate import slow_validator

            base = self._base = slow_validator(self.root if isinstance(self.root, dict) else {})
        return base.evolve(schema=schema)

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
        except Exception:  # noqa: BLE001 - a subschema jsonschema-rs does not take: jsonschema alone
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
        return Annotation(
            str(strategy["strategy"]), tuple(strategy.get("key") or ()), delete, str(strategy.get("order") or "")
        )

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


# ----------------------------------------------------------------------------- dead annotations
# A strategy that keeps or combines whole values (``lastWriteWins``, ``firstWriteWins``, ``sum``,
# ``append``, ``minimize`` / ``maximize`` without a key) never reduces the locations below it:
# a ``reduce`` there can never apply, and a spec that has one says something it does not do
# (``sum`` under a ``lastWriteWins`` root keeps the later amount).  The spec checks refuse it.

# strategies that reduce the locations below theirs (keyed minimize/maximize: ties deep-merge)
_RECURSING = frozenset(("merge", "set"))
_CHILD_SCHEMA_KEYWORDS = ("additionalProperties", "additionalItems", "unevaluatedProperties", "unevaluatedItems")


@dataclass(frozen=True)
class DeadReduce:
    """A ``reduce`` at ``path`` that can never apply: the location at ``above`` (an ancestor)
    is reduced with ``strategy``, which replaces or combines its whole value."""

    path: str  # the spec path of the dead annotation's schema object
    above: str  # the spec path of the schema object of the ancestor that decides
    pointer: str  # the ancestor's location as a JSON pointer of the document ("/" for the root)
    strategy: str
    order: str = ""
    default: bool = False  # the ancestor has no annotation: lastWriteWins by default

    @property
    def message(self) -> str:
        how = (
            "has no reduce annotation, so it is 'lastWriteWins'"
            if self.default
            else f"is reduced with {self.strategy!r}" + (f" (order {self.order})" if self.order else "")
        )
        return (
            f"this reduce can never apply: the location {self.pointer} above it {how}, which "
            f"{'keeps one side whole' if self.strategy in ('lastWriteWins', 'firstWriteWins') else 'combines whole values'}"
            f" and never reduces what is inside it. Declare `reduce: {{strategy: merge}}` at {self.pointer} "
            f"to reduce property by property, or remove this reduce"
        )


def dead_reductions(root: Any, path: str = "") -> Iterator[DeadReduce]:
    """Every ``reduce`` with a strategy below a location whose strategy never reduces inside
    its value.  A location whose strategy is conditional (a ``reduce`` in an ``anyOf`` /
    ``oneOf`` / ``then`` / ``else`` member) is not judged: its documents decide."""
    index = SchemaIndex(root)

    def members(node: dict, conditional: bool, seen: set) -> Iterator[tuple[dict, bool]]:
        """The schema objects of one location: ``(schema, conditional)``."""
        if id(node) in seen:
            return
        seen.add(id(node))
        yield node, conditional
        ref = node.get("$ref")
        if isinstance(ref, str):
            try:
                target = index.resolve_ref(ref)
            except ValueError:
                target = None
            if isinstance(target, dict):
                yield from members(target, conditional, seen)
        for sub in node.get("allOf") or ():
            if isinstance(sub, dict):
                yield from members(sub, conditional, seen)
        for kw in ("anyOf", "oneOf"):
            for sub in node.get(kw) or ():
                if isinstance(sub, dict):
                    yield from members(sub, True, seen)
        for kw in ("then", "else"):
            if isinstance(node.get(kw), dict):
                yield from members(node[kw], True, seen)

    def strategy_of(red: Any) -> Optional[dict]:
        return red if isinstance(red, dict) and isinstance(red.get("strategy"), str) else None

    def children(node: dict, where: str) -> Iterator[tuple[str, dict]]:
        for kw in ("properties", "patternProperties"):
            sub = node.get(kw)
            if isinstance(sub, dict):
                for name, s in sub.items():
                    if isinstance(s, dict):
                        yield f"{where}.{kw}.{name}", s
        for kw in ("prefixItems",):
            for i, s in enumerate(node.get(kw) or ()):
                if isinstance(s, dict):
                    yield f"{where}.{kw}[{i}]", s
        items = node.get("items")
        if isinstance(items, list):
            for i, s in enumerate(items):
                if isinstance(s, dict):
                    yield f"{where}.items[{i}]", s
        elif isinstance(items, dict):
            yield f"{where}.items", items
        for kw in _CHILD_SCHEMA_KEYWORDS:
            if isinstance(node.get(kw), dict):
                yield f"{where}.{kw}", node[kw]

    def paths_of(node: dict, where: str) -> dict[int, str]:
        """The spec path of each member of a location (for messages)."""
        out = {id(node): where}

        def visit(n: dict, w: str) -> None:
            for kw in ("allOf", "anyOf", "oneOf"):
                for i, sub in enumerate(n.get(kw) or ()):
                    if isinstance(sub, dict) and id(sub) not in out:
                        out[id(sub)] = f"{w}.{kw}[{i}]"
                        visit(sub, out[id(sub)])
            for kw in ("then", "else"):
                if isinstance(n.get(kw), dict) and id(n[kw]) not in out:
                    out[id(n[kw])] = f"{w}.{kw}"
                    visit(n[kw], out[id(n[kw])])

        visit(node, where)
        return out

    visited: set = set()

    def visit(
        node: dict, where: str, pointer: str, blocker: Optional[DeadReduce], in_set: bool = False
    ) -> Iterator[DeadReduce]:
        if (id(node), blocker is None) in visited:  # a recursive $ref
            return
        visited.add((id(node), blocker is None))
        location = list(members(node, False, set()))
        paths = paths_of(node, where)
        decided: Optional[dict] = None
        unknown = False
        for schema, conditional in location:
            red = strategy_of(schema.get("reduce"))
            if red is None:
                continue
            if blocker is not None:
                yield DeadReduce(
                    paths.get(id(schema), where) + ".reduce",
                    blocker.above,
                    blocker.pointer,
                    blocker.strategy,
                    blocker.order,
                    blocker.default,
                )
            if conditional:
                unknown = True
            else:
                decided = red
        below = blocker
        if below is None and not unknown and not (in_set and decided is None):
            # (``add`` / ``intersect`` / ``remove`` of a set: the set reduces their members)
            strategy = str(decided["strategy"]) if decided else "lastWriteWins"
            keyed = bool(decided and decided.get("key"))
            if strategy not in _RECURSING and not (strategy in ("minimize", "maximize") and keyed):
                below = DeadReduce(
                    "", where, pointer or "/", strategy, str((decided or {}).get("order") or ""), decided is None
                )
        for schema, _conditional in location:
            base = paths.get(id(schema), where)
            for child_path, child in children(schema, base):
                token = child_path.rsplit(".", 1)[-1]
                yield from visit(
                    child, child_path, f"{pointer}/{token}", below, bool(decided and decided["strategy"] == "set")
                )

    if isinstance(root, dict):
        yield from visit(root, path, "", None)
