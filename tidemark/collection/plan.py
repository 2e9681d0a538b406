"""Which collection schemas compile to native Spark, and their plan (pure Python, no Spark).

:func:`compile_collection` returns a :class:`CompiledPlan` when every part of the schema
maps onto Spark: a root that is ``type: object`` reduced with ``merge`` (or
``lastWriteWins`` / ``firstWriteWins`` as a whole, by the source order or by an ``order`` that
names a top-level scalar property; a property may take its own such ``order``), a key of top-level ``string`` /
``integer`` / ``boolean`` properties, and top-level properties whose shape is one of

* ``scalar``: ``string``, ``integer``, ``number``, ``boolean`` (with ``enum``, bounds,
  lengths, a ``format`` of :data:`NATIVE_FORMATS` or an unasserted one, and for a number a
  ``multipleOf`` of ``10**-s``: an exact decimal, :attr:`FieldPlan.scale`); nullable
  (``type: [T, "null"]``, :attr:`FieldPlan.nullable`) where it is reduced by
  ``lastWriteWins`` / ``firstWriteWins`` by the source order, or ``maximize`` / ``minimize``
  (``null`` is then a value like any other, the least, kept apart from an absent property);
* ``append``: an array with ``items`` of one scalar type;
* ``raw``: an array without ``items`` or an object without ``additionalProperties``
  (carried as JSON text); picked whole (``lastWriteWins`` / ``firstWriteWins``), also an
  object of declared plain scalar ``properties`` or an array of such objects, whose members
  (:attr:`FieldPlan.members`) the JVM scan proves; such an array (or one without ``items``)
  also appended (``append``: the documents' texts joined);
* ``map``: an object with ``additionalProperties`` of one scalar type, or with ``properties``
  that are plain scalars of one type, each reduced by ``lastWriteWins`` (:func:`merged_object`);
* ``object``: an object reduced by ``merge`` whose ``properties`` are plain scalars of any
  types, each with a strategy of its own (:data:`MEMBER_STRATEGIES`; :attr:`FieldPlan.members`),
  arrays of one scalar type appended or unioned, or objects of such members merged (two levels;
  :mod:`tidemark.collection.members`);

reduced with a strategy whose Spark aggregation takes that shape (the table of
:mod:`tidemark.collection.strategies`: ``Strategy.spark_kinds`` / ``spark_types``).
Anything else (conditionals, ``$ref``, deletions, keyed strategies, sets, merges nested deeper
than an object's member, nullable types reduced otherwise, ...) returns ``None``: the caller uses the vectorized
Python fallback.  The Spark side of a plan is :mod:`tidemark.spark.compile`; the fast
Python fold of one is :mod:`tidemark.collection.fast`.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any, Optional

from tidemark.collection.decimals import scale_of
from tidemark.collection.formats import ASSERTED as ASSERTED_FORMATS
from tidemark.collection.members import (
    MEMBER_STRATEGIES,
    carried_of,
    checked_members,
    declares_members,
    members_of,
    merged_object,
    required_members,
    whole_members,
)
from tidemark.collection.shapes import (
    ANNOTATIONS,
    NATIVE_FORMATS,
    ROOT_KEYWORDS,
    SCALAR_KEYWORDS,
    SCALARS,
    FieldPlan,
    schema_keywords,
    strategy_of,
)
from tidemark.collection.strategies import STRATEGIES

__all__ = [
    "CompiledPlan",
    "FieldPlan",
    "MEMBER_STRATEGIES",
    "NATIVE_FORMATS",
    "checked_members",
    "compile_collection",
    "compiled_properties",
    "explain_collection",
    "ordered_by_instant",
    "required_members",
]


@dataclass(frozen=True)
class CompiledPlan:
    root_strategy: str  # merge | lastWriteWins | firstWriteWins
    fields: tuple[FieldPlan, ...]
    key: tuple[str, ...]  # top-level property names
    key_types: tuple[str, ...]
    required: tuple[str, ...]
    closed: bool  # additionalProperties: false
    max_bytes: int
    order: str = ""  # a lastWriteWins / firstWriteWins root's ``reduce.order``: a scalar property's name


def ordered_by_instant(plan: CompiledPlan) -> set[str]:
    """The properties whose date-times the combine orders by instant (minimized, maximized, the
    root's ``reduce.order`` or another property's ``order``): the instant order compares
    :data:`tidemark.spark.datetimes.FRACTION_DIGITS` (18) digits of their fraction, so a value with more is a suspect."""
    out = {f.name for f in plan.fields if f.strategy in ("minimize", "maximize")}
    out |= {f.order for f in plan.fields if f.order}
    if plan.order:
        out.add(plan.order)
    return out


#: The strategies of a nullable property that compile: null is a value (the least one to maximize / minimize;
#: summed, a null that meets another document's value is the Python fold's error).
NULLABLE_STRATEGIES = ("lastWriteWins", "firstWriteWins", "maximize", "minimize", "sum")


def _property_order(sub: dict) -> tuple[Optional[str], str]:
    """(strategy, order property's name) of a property reduced by event time (``reduce:
    {strategy: lastWriteWins, order: /ts}``), or ``(None, "")`` if it is not one."""
    red = sub.get("reduce")
    if not isinstance(red, dict) or set(red) != {"strategy", "order"}:
        return None, ""
    strategy, order = red["strategy"], red["order"]
    if strategy not in ("lastWriteWins", "firstWriteWins") or not isinstance(order, str):
        return None, ""
    name = order[1:]
    if not order.startswith("/") or not name or "/" in name or "~" in name:
        return None, ""
    return strategy, name


def compile_collection(collection) -> Optional[CompiledPlan]:
    """A :class:`CompiledPlan` for the collection, or None if it needs the Python fallback."""
    return explain_collection(collection)[0]


def explain_collection(collection) -> tuple[Optional[CompiledPlan], list[str]]:
    """:func:`compile_collection`'s plan, or ``(None, reasons)``: each part of the schema that
    keeps it off the compiled path, named by its place (``/status: …``), with what would
    compile instead where there is a simple change (what ``tidemark check`` prints)."""
    plan, why, apart = _explain(collection)
    if why or apart:
        return None, why + [f"/{name}: {reason}" for name, reason in apart.items()]
    return plan, []


def compiled_properties(collection) -> tuple[Optional[CompiledPlan], list[str], dict[str, str]]:
    """The plan of the properties that compile where the root and the key do, and, apart from it,
    each top-level property that does not, with why (``{name: reason}``): a lean SQL row holds
    the ones in the plan in columns and the others in its remainder.  ``(None, reasons, those
    properties)`` where the root or the key does not compile."""
    plan, why, apart = _explain(collection)
    return (None, why, apart) if why else (plan, [], apart)


def _explain(collection) -> tuple[Optional[CompiledPlan], list[str], dict[str, str]]:
    """The plan of the properties that compile, what keeps the root or the key off the compiled
    path, and each property that does not compile, with why."""
    root = collection.schema
    if not isinstance(root, dict) or root.get("type") != "object":
        return None, ["the root is not `type: object`"], {}
    why: list[str] = []
    apart: dict[str, str] = {}  # a property that does not compile: why
    extra = sorted(schema_keywords(root) - set(ROOT_KEYWORDS))
    if extra:
        why.append(f"the root uses {', '.join(extra)} (compiled: {', '.join(ROOT_KEYWORDS[:4])} and annotations)")
    red = root.get("reduce")
    order = red.get("order", "") if isinstance(red, dict) else ""
    root_strategy = strategy_of(
        {"reduce": {k: v for k, v in red.items() if k != "order"}} if order and isinstance(red, dict) else root
    )
    if root_strategy not in ("merge", "lastWriteWins", "firstWriteWins") or (order and root_strategy == "merge"):
        why.append(f"the root's reduce {red!r} (compiled: merge, or lastWriteWins/firstWriteWins)")
    addl = root.get("additionalProperties", True)
    if addl not in (True, False):
        why.append("the root's additionalProperties is a schema (compiled: true or false)")
    props = root.get("properties") or {}
    key_names, key_types = [], []
    for ptr in collection.key:
        tokens = ptr.lstrip("/").split("/")
        sub = props.get(tokens[0]) if len(tokens) == 1 and "~" not in ptr else None
        if not isinstance(sub, dict) or sub.get("type") not in ("string", "integer", "boolean"):
            why.append(f"key {ptr}: compiled keys are top-level string, integer or boolean properties")
            continue
        key_names.append(tokens[0])
        key_types.append(sub["type"])
    fields = []
    for name, sub in props.items():
        fp, reason = _field(name, sub)
        if fp is None:
            apart[name] = reason
        else:
            fields.append(fp)
    required = tuple(root.get("required") or ())
    undeclared = [r for r in required if r not in props]
    if undeclared:
        why.append(f"required names undeclared properties ({', '.join(map(str, undeclared))})")
    for j, f in enumerate(fields):
        if not f.order or _orders_by_a_winner(f, fields, required):
            continue
        if _orders_by_a_kept_value(f, fields):
            fields[j] = dataclasses.replace(f, kept_order=True)
            continue
        apart[f.name] = (
            f"ordered by /{f.order}, which compiles where /{f.order} is a string, integer or boolean (not "
            f"nullable) reduced by {'maximize' if f.strategy == 'lastWriteWins' else 'minimize'}"
        )
    fields = [f for f in fields if f.name not in apart]
    why.extend(f"key /{name}: {apart.pop(name)}" for name in key_names if name in apart)
    order_name = ""
    if order:  # event-time order by a top-level scalar property
        tokens = order.lstrip("/").split("/") if isinstance(order, str) else []
        order_name = tokens[0] if len(tokens) == 1 and "~" not in order else ""
        if not any(f.name == order_name and f.kind == "scalar" and not f.nullable for f in fields):
            why.append(f"the root's order {order!r}: compiled when it names a top-level scalar property (not nullable)")
    if why:
        return None, why, apart
    plan = CompiledPlan(
        str(root_strategy),
        tuple(fields),
        tuple(key_names),
        tuple(key_types),
        required,
        addl is False,
        collection.max_document_bytes,
        order_name,
    )
    return plan, [], apart


def _order_field(f: FieldPlan, fields: list) -> Optional[FieldPlan]:
    """The property ``f`` is ordered by, where it is a scalar (not nullable) reduced to its
    greatest (``lastWriteWins``; least for ``firstWriteWins``), else None."""
    order_field = next((o for o in fields if o.name == f.order), None)
    want = "maximize" if f.strategy == "lastWriteWins" else "minimize"
    if order_field is None or order_field.kind != "scalar" or order_field.nullable or order_field.strategy != want:
        return None
    return order_field


def _orders_by_a_winner(f: FieldPlan, fields: list, required: tuple) -> bool:
    """A property ordered by another one compiles where the kept order value is the winner's:
    the order property is :func:`_order_field` and every document holds both (what the spec
    checked before documents could lack them)."""
    order_field = _order_field(f, fields)
    return order_field is not None and f.name in required and order_field.name in required


def _orders_by_a_kept_value(f: FieldPlan, fields: list) -> bool:
    """A property ordered by another one that some documents lack (either of them): it compiles
    where the order property is :func:`_order_field` and not a number (whose kept value the
    combine writes as the fold does), the property a scalar (not nullable)."""
    order_field = _order_field(f, fields)
    return (
        order_field is not None
        and order_field.type in ("string", "integer", "boolean")
        and f.kind == "scalar"
        and not f.nullable
    )


def _field(name: str, sub: Any) -> tuple[Optional[FieldPlan], str]:
    """The plan of one top-level property: its shape, if Spark reads it, and its strategy,
    if the strategy's Spark aggregation takes that shape; or why not."""
    if not isinstance(sub, dict):
        return None, "its schema is not an object"
    t = sub.get("type")
    ordered, order = _property_order(sub)
    name_ = ordered or strategy_of(sub)
    strategy = STRATEGIES.get(name_) if isinstance(name_, str) else None
    nullable = False
    if isinstance(t, list) and len(t) == 2 and "null" in t:
        nullable, t = True, next(x for x in t if x != "null")
        whole = t in ("object", "array") and name_ in ("lastWriteWins", "firstWriteWins") and not order
        if t not in SCALARS and not whole:
            return None, (
                f"type {sub.get('type')!r}: a nullable type compiles for a scalar ({', '.join(SCALARS)}), and for "
                "an object or an array picked whole (lastWriteWins, firstWriteWins)"
            )
        if "enum" in sub and None not in sub["enum"]:
            return None, f"type {sub.get('type')!r} with an enum without null (null is not valid then)"
        sub = {**sub, "type": t}
        if "enum" in sub:  # null is one of them: the combine checks the others
            sub["enum"] = [v for v in sub["enum"] if v is not None]
    if not isinstance(t, str):
        return None, (
            f'type {t!r}: compiled types are one of {", ".join(SCALARS)}, array, object, or [T, "null"] of a scalar T'
        )
    if strategy is None:
        return None, f"reduce {sub.get('reduce')!r} (compiled: a strategy without keys or deletions)"
    if nullable and (strategy.name not in NULLABLE_STRATEGIES or order):
        return None, (
            f"a nullable {t} reduced by {strategy.name}{' with an order' if order else ''} (compiled: "
            f"{', '.join(NULLABLE_STRATEGIES)} by the source order; null is a value like any other, the least)"
        )
    if nullable and t in ("object", "array") and declares_members(t, sub):
        return None, f"type {sub.get('type')!r} of declared properties (compiled: without them, picked whole)"
    if strategy.name in ("lastWriteWins", "firstWriteWins", "append") and declares_members(t, sub):
        # picked whole, or (an array of objects) appended: as JSON text, the scan proving its members
        members, reason = whole_members(name, t, sub)
        if members is None:
            return None, reason
        return FieldPlan(name, "raw", t, strategy.name, sub, order, members=members), ""
    shape, reason = _shape(t, sub)
    if shape is None:
        return None, reason
    if not strategy.compiles(*shape) or (strategy.name == "append" and shape == ("raw", "object")):
        return None, f"{strategy.name} of a {shape[0]} {shape[1]} has no compiled form"
    if nullable and shape[0] not in ("scalar", "raw", "append"):  # a map: its null is not told apart
        return None, f"type {sub.get('type')!r} with additionalProperties (compiled: an object without them)"
    scale = scale_of(sub.get("multipleOf")) if shape == ("scalar", "number") else None
    members = members_of(name, sub) if shape[0] == "object" else ()
    carried = carried_of(name, sub) if shape[0] == "object" else ()
    return FieldPlan(name, shape[0], shape[1], strategy.name, sub, order, scale, nullable, members, carried), ""


def _shape(t: str, sub: dict) -> tuple[Optional[tuple[str, str]], str]:
    """(kind, type) of a property that Spark reads natively, or (None, why not)."""
    if t in SCALARS:
        extra = sorted(schema_keywords(sub) - set(SCALAR_KEYWORDS) - ({"multipleOf"} if t == "number" else set()))
        if t == "number" and "multipleOf" in sub and scale_of(sub["multipleOf"]) is None:
            return None, f"a number with multipleOf {sub['multipleOf']!r} (compiled: a power of ten, 0.01 and the like)"
        if extra:
            return None, f"a {t} with {', '.join(extra)} (compiled: {', '.join(SCALAR_KEYWORDS[1:8])})"
        if "enum" in sub and not all(
            _json_type(v) == t or (t == "number" and _json_type(v) == "integer") for v in sub["enum"]
        ):
            return None, f"an enum with values of other types than {t}"
        fmt = sub.get("format")
        if t == "string" and fmt in ASSERTED_FORMATS and fmt not in NATIVE_FORMATS:
            return None, f"format {fmt!r} is checked in Python only (compiled: {', '.join(NATIVE_FORMATS)})"
        return ("scalar", t), ""
    if t == "array":
        extra = sorted(schema_keywords(sub) - {"type", "items"} - set(ANNOTATIONS))
        if extra:
            return None, f"an array with {', '.join(extra)} (compiled: type and items)"
        if "items" not in sub:
            return ("raw", "array"), ""
        items = sub["items"]
        if isinstance(items, dict) and set(items) <= {"type"} and items.get("type") in SCALARS:
            return ("append", items["type"]), ""
        return None, "an array whose items are not one plain scalar type (compiled: items: {type: string}, …)"
    if t == "object":
        if "properties" in sub:
            return merged_object(sub)
        extra = sorted(schema_keywords(sub) - {"type", "additionalProperties"} - set(ANNOTATIONS))
        if extra:
            return None, f"an object with {', '.join(extra)} (nested properties are reduced by the Python fold)"
        addl = sub.get("additionalProperties")
        if addl is None:
            return ("raw", "object"), ""
        if isinstance(addl, dict) and set(addl) <= {"type"} and addl.get("type") in SCALARS:
            return ("map", addl["type"]), ""
        return None, "an object whose additionalProperties is not one plain scalar type"
    return None, f"type {t!r}"


def _json_type(v: Any) -> str:
    if isinstance(v, bool):
        return "boolean"
    if isinstance(v, int):
        return "integer"
    if isinstance(v, float):
        return "number"
    if isinstance(v, str):
        return "string"
    return "other"
