"""The collection schema's part of the spec check (:mod:`tidemark.spec`): the schema is a JSON
Schema, and each ``reduce`` in it names a strategy that takes its location's type, with a
``key`` and an ``order`` it can use (docs/reductions.md).  Every error is returned, each
with its place in the spec, so that one check reports them all."""

from __future__ import annotations

from typing import Any, Callable, Optional

from tidemark.collection.keywords import closest, unknown_keywords
from tidemark.collection.reduce import TIDEMARK
from tidemark.collection.schema import SchemaIndex, dead_reductions, iter_schemas, types_of
from tidemark.collection.strategies import STRATEGIES
from tidemark.errors import SpecError


class SchemaChecks:
    """The checks of one collection schema at ``path`` in the spec (``fail``: builds the
    spec error of a place)."""

    def __init__(self, fail: Callable[[str, str], SpecError], schema: dict, path: str):
        self.fail = fail
        self._schema_root, self._schema_path = schema, path  # (check_order: a property ordered by the root's)

    def run(self) -> list[SpecError]:
        """Every error of the schema: the JSON Schema check first (nothing else is read of a
        schema that fails it), then each unknown keyword, each ``$ref``, each ``reduce`` and
        each dead reduction, each with its place."""
        from jsonschema import Draft202012Validator
        from jsonschema.exceptions import SchemaError

        schema, path = self._schema_root, self._schema_path
        try:
            Draft202012Validator.check_schema(schema)
        except SchemaError as exc:
            where = "".join(f"[{p}]" if isinstance(p, int) else f".{p}" for p in exc.absolute_path)
            return [self.fail(path + where, f"not a valid JSON Schema: {exc.message}")]
        errors: list[SpecError] = []
        for bad in unknown_keywords(schema):  # a typo would be ignored (``redcue``: lastWriteWins)
            where = "".join(f"[{t}]" if isinstance(t, int) else f".{t}" for t in bad.tokens)
            errors.append(self.fail(f"{path}{where}{'.reduce' if bad.in_reduce else ''}.{bad.keyword}", bad.message))
        index = SchemaIndex(schema)
        for sub_path, node in iter_schemas(schema, path):
            ref = node.get("$ref")
            if isinstance(ref, str):
                try:
                    index.resolve_ref(ref)
                except ValueError as exc:
                    errors.append(self.fail(f"{sub_path}.$ref", str(exc)))
            if "reduce" in node:
                try:
                    self.check_reduce(node, f"{sub_path}.reduce")
                except SpecError as exc:
                    errors.append(exc)
        if errors:  # a dead reduction is read off a schema whose references and reductions hold
            return errors
        return [self.fail(dead.path, dead.message) for dead in dead_reductions(schema, path)]

    def check_reduce(self, node: dict, path: str) -> None:
        red = node["reduce"]
        if not isinstance(red, dict):
            raise self.fail(path, f"must be a mapping like {{strategy: merge}}, got {type_name(red)}")
        for k in red:
            if k not in ("strategy", "key", "delete", "order"):
                raise self.fail(f"{path}.{k}", f"unknown field {k!r} (allowed: strategy, key, order, delete)")
        if "delete" in red and not isinstance(red["delete"], bool):
            raise self.fail(f"{path}.delete", "must be true or false")
        if "strategy" not in red:
            if "key" in red:
                keyed = ", ".join(n for n, s in STRATEGIES.items() if s.keyed)
                raise self.fail(path, f"'key' needs a strategy (one of {keyed})")
            if "delete" not in red:
                raise self.fail(path, "needs a strategy (or delete: true)")
            return
        strategy = red["strategy"]
        if not isinstance(strategy, str) or strategy not in STRATEGIES:
            near = closest(strategy, STRATEGIES) if isinstance(strategy, str) else None
            hint = f"; did you mean `{near}`?" if near else ""
            raise self.fail(
                f"{path}.strategy", f"unknown reduction strategy {strategy!r} (known: {', '.join(STRATEGIES)}{hint})"
            )
        if "key" in red:
            if not STRATEGIES[strategy].keyed:
                raise self.fail(f"{path}.key", f"strategy {strategy!r} takes no key")
            k = red["key"]
            if not isinstance(k, list) or not all(isinstance(p, str) and (p == "" or p.startswith("/")) for p in k):
                raise self.fail(f"{path}.key", "must be a list of JSON pointers, e.g. [/id]")
        types = types_of(node)
        if "order" in red:
            self.check_order(red, strategy, types, f"{path}.order")
        allowed = STRATEGIES[strategy].location_types
        if types is not None and allowed is not None and set(types) - {"null"} - allowed:
            raise self.fail(
                f"{path}.strategy",
                f"strategy {strategy!r} expects {STRATEGIES[strategy].expects}, "
                f"but the location has type {'/'.join(types)}",
            )

    def check_order(self, red: dict, strategy: str, types, path: str) -> None:
        """``reduce.order``: a pointer inside the location's value, for a strategy that keeps
        the later (or earlier) side (docs/reductions.md, "Event-time order")."""
        ordered = STRATEGIES[strategy].ordered
        if not ordered:
            takes = ", ".join(n for n, s in STRATEGIES.items() if s.ordered)
            raise self.fail(path, f"strategy {strategy!r} takes no order (those that do: {takes})")
        if ordered == "keyed" and not red.get("key"):
            raise self.fail(path, f"order on {strategy!r} breaks ties of its key: give key too, e.g. key: [/id]")
        order = red["order"]
        if not isinstance(order, str) or not order.startswith("/") or order == "/":
            raise self.fail(
                path, f"must be a JSON pointer inside the value at this location, e.g. /updated_at, got {order!r}"
            )
        if types is not None and "object" not in types:
            prop = self._top_level_property(path)
            if prop is not None:
                return self.check_property_order(prop, order, strategy, path)
            raise self.fail(
                path,
                f"order {order} is read inside the value at this location, which has type "
                f"{'/'.join(types)}; put the reduce (with its order) on the object that holds "
                f"both, or on a top-level property (ordered by another top-level property)",
            )

    def _top_level_property(self, path: str) -> Optional[str]:
        """The name of the root's property whose ``reduce.order`` is at ``path``, or None."""
        prefix, suffix = f"{getattr(self, '_schema_path', '')}.properties.", ".reduce.order"
        if not (path.startswith(prefix) and path.endswith(suffix)):
            return None
        name = path[len(prefix) : -len(suffix)]
        props = (getattr(self, "_schema_root", {}) or {}).get("properties") or {}
        return name if name in props else None

    def check_property_order(self, prop: str, order: str, strategy: str, path: str) -> None:
        """``order:`` on a top-level property that is not an object: the value of the document
        holding it whose top-level ``order`` property is the greatest (``lastWriteWins``) or
        least (``firstWriteWins``); the order property is reduced to the greatest (least)
        itself, and where the property's value came from a document with another order value
        (one without the property, or without an order value, was later), the reduced document
        keeps that value in ``/_tidemark/order`` (docs/reductions.md, "Event-time order")."""
        root = self._schema_root
        if strategy not in ("lastWriteWins", "firstWriteWins"):
            raise self.fail(
                path, "order on a property takes lastWriteWins or firstWriteWins (the value of the latest event)"
            )
        other = order.lstrip("/")
        props = root.get("properties") or {}
        if "/" in other or "~" in other or other not in props or other == prop:
            raise self.fail(
                path,
                f"order {order} on property {prop!r} names a top-level property of the document that holds both "
                f"(another than {prop!r}), e.g. /updated_at; known: {', '.join(sorted(p for p in props if p != prop))}",
            )
        need = "maximize" if strategy == "lastWriteWins" else "minimize"
        red = (props[other] or {}).get("reduce") if isinstance(props[other], dict) else None
        if not (isinstance(red, dict) and red.get("strategy") == need and not red.get("key")):
            raise self.fail(
                path,
                f"order {order} on property {prop!r}: the view keeps one /{other} per key, which must be the "
                f"{'latest' if need == 'maximize' else 'earliest'} event's for {prop!r}'s to be; declare "
                f"`{other}: {{..., reduce: {{strategy: {need}}}}}`",
            )
        if TIDEMARK in props:
            raise self.fail(
                path,
                f"order {order} on property {prop!r}: the schema declares /{TIDEMARK}, where a reduced document keeps "
                f"the order value of each such property that came from another document than its /{other}; "
                f"rename that property",
            )


def type_name(v: Any) -> str:
    if v is None:
        return "null"
    return {
        dict: "a mapping",
        list: "a list",
        str: "a string",
        bool: "a boolean",
        int: "a number",
        float: "a number",
    }.get(type(v), type(v).__name__)
