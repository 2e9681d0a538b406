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
  (:attr:`FieldPlan.members`) the JVM scan proves;
* ``map``: an object with ``additionalProperties`` of one scalar type, or with ``properties``
  that are plain scalars of one type, each reduced by ``lastWriteWins`` (:func:`_merged_object`);
* ``object``: an object reduced by ``merge`` whose ``properties`` are plain scalars of any
  types, each with a strategy of its own (:data:`MEMBER_STRATEGIES`; :attr:`FieldPlan.members`),
  or arrays of one scalar type appended or unioned;

reduced with a strategy whose Spark aggregation takes that shape (the table of
:mod:`tidemark.collection.strategies`: ``Strategy.spark_kinds`` / ``spark_types``).
Anything else (conditionals, ``$ref``, deletions, keyed strategies, sets, nested merges of
declared properties, nullable types reduced otherwise, ...) returns ``None``: the caller uses the vectorized
Python fallback.  The Spark side of a plan is :mod:`tidemark.spark.compile`; the fast
Python fold of one is :mod:`tidemark.collection.fast`.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any, Optional

from tidemark.collection.decimals import scale_of
from tidemark.collection.formats import ASSERTED as ASSERTED_FORMATS
from tidemark.collection.strategies import STRATEGIES

SCALARS = ("string", "integer", "number", "boolean")
ANNOTATIONS = ("title", "description", "format", "examples", "default", "$comment", "reduce")
SCALAR_KEYWORDS = (
    "type",
    "enum",
    "minimum",
    "maximum",
    "exclusiveMinimum",
    "exclusiveMaximum",
    "minLength",
    "maxLength",
) + ANNOTATIONS
# Asserted formats that native validation checks (the others are not compiled).
NATIVE_FORMATS = ("date-time", "date", "time", "uuid", "ipv4", "email")
ROOT_KEYWORDS = ("type", "properties", "required", "additionalProperties", "$schema", "$id", "$defs") + ANNOTATIONS


def _keywords(node: dict) -> set:
    """A schema node's keywords, without the user's own ``x-`` ones (annotations nothing reads)."""
    return {k for k in node if not (isinstance(k, str) and k.startswith("x-"))}


@dataclass(frozen=True)
class FieldPlan:
    name: str
    kind: str  # scalar | append | raw | map
    type: str  # JSON type of the value (scalar kinds), or of the items / map values
    strategy: str
    schema: dict
    order: str = ""  # ``reduce.order`` of a lastWriteWins / firstWriteWins property: another top-level property
    scale: Optional[int] = None  # an exact decimal's places (a number with ``multipleOf`` 10^-scale)
    nullable: bool = False  # ``type: [T, "null"]``: ``null`` is a value of its own, kept apart from absent
    # an ``object``'s members (named ``property/member``), each a scalar with its own strategy
    members: tuple[FieldPlan, ...] = ()
    # a merged ``object``'s members carried as written, last written (:func:`_carried_member`):
    # nullable scalars, objects and arrays picked whole; ``type`` is the scan's code for them
    carried: tuple[FieldPlan, ...] = ()
    # ordered by ``order``, where some documents lack one of the two: the combined document keeps
    # the order value its value came from where it is not the document's own
    # (:data:`tidemark.collection.reduce.TIDEMARK`); the SQL endpoints keep it too (drivers/sql/reduce.py KeptOrder)
    kept_order: bool = False

    @property
    def member(self) -> str:
        """A member's name within its object (the part after ``/``)."""
        return self.name.rsplit("/", 1)[-1]

    @property
    def picked_by(self) -> str:
        """The property whose values decide which side's value this one keeps, where the
        value is picked rather than computed: its event-time ``order``, or itself for a
        maximized / minimized ``date-time`` (compared as instants, kept as written)."""
        if self.order:
            return self.order
        if self.strategy in ("maximize", "minimize") and self.schema.get("format") == "date-time":
            return self.name
        return ""


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


def _strategy(schema: dict) -> Optional[str]:
    red = schema.get("reduce")
    if red is None:
        return "lastWriteWins"
    if not isinstance(red, dict) or set(red) - {"strategy"}:
        return None  # keys, deletions, orders (see _field)
    return red.get("strategy", "lastWriteWins")


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
    extra = sorted(_keywords(root) - set(ROOT_KEYWORDS))
    if extra:
        why.append(f"the root uses {', '.join(extra)} (compiled: {', '.join(ROOT_KEYWORDS[:4])} and annotations)")
    red = root.get("reduce")
    order = red.get("order", "") if isinstance(red, dict) else ""
    root_strategy = _strategy(
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
    name_ = ordered or _strategy(sub)
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
    if nullable and t in ("object", "array") and _declares_members(t, sub):
        return None, f"type {sub.get('type')!r} of declared properties (compiled: without them, picked whole)"
    if strategy.name in ("lastWriteWins", "firstWriteWins") and _declares_members(t, sub):
        members, reason = _whole_members(name, t, sub)
        if members is None:
            return None, reason
        return FieldPlan(name, "raw", t, strategy.name, sub, order, members=members), ""
    shape, reason = _shape(t, sub)
    if shape is None:
        return None, reason
    if not strategy.compiles(*shape):
        return None, f"{strategy.name} of a {shape[0]} {shape[1]} has no compiled form"
    if nullable and shape[0] not in ("scalar", "raw", "append"):  # a map: its null is not told apart
        return None, f"type {sub.get('type')!r} with additionalProperties (compiled: an object without them)"
    scale = scale_of(sub.get("multipleOf")) if shape == ("scalar", "number") else None
    members = _members(name, sub) if shape[0] == "object" else ()
    carried = _carried(name, sub) if shape[0] == "object" else ()
    return FieldPlan(name, shape[0], shape[1], strategy.name, sub, order, scale, nullable, members, carried), ""


def _plain_scalar(child: Any, merged: bool = False) -> bool:
    """A member's schema that is only its scalar type and annotations (a ``reduce``, a
    ``format`` that asserts nothing): what the JVM scan proves of an object's member.  A
    ``date-time`` member too (the scan proves it); of a merged object's member (``merged``:
    parsed, so the combine checks it) also another format of :data:`NATIVE_FORMATS` and, of a
    number, a ``multipleOf`` of 10^-s (an exact decimal)."""
    if not isinstance(child, dict) or child.get("type") not in SCALARS:
        return False
    keywords = {"type", "reduce", *ANNOTATIONS} | ({"multipleOf"} if merged and child["type"] == "number" else set())
    if not _keywords(child) <= keywords:
        return False
    if "multipleOf" in child and scale_of(child["multipleOf"]) is None:
        return False
    fmt = child.get("format")
    if child["type"] != "string" or fmt not in ASSERTED_FORMATS:
        return True  # a format asserts something of strings only
    return fmt == "date-time" or (merged and fmt in NATIVE_FORMATS)


def _requires_declared(node: dict) -> bool:
    """``required`` (if any) is a list of declared properties (the JVM scan proves them present)."""
    required = node.get("required", [])
    return isinstance(required, list) and all(r in node["properties"] for r in required)


def required_members(f: FieldPlan) -> frozenset[str]:
    """The members an object (or an array's object items) of ``f`` must hold."""
    node = f.schema.get("items", {}) if f.type == "array" else f.schema
    return frozenset(node.get("required", ()))


def _declares_members(t: Any, sub: dict) -> bool:
    """An object with declared ``properties``, or an array whose ``items`` is one."""
    if t == "object":
        return "properties" in sub
    items = sub.get("items")
    return t == "array" and isinstance(items, dict) and items.get("type") == "object" and "properties" in items


def _whole_members(name: str, t: str, sub: dict) -> tuple[Optional[tuple[FieldPlan, ...]], str]:
    """The members of an object (or of an array's object items) picked whole by
    ``lastWriteWins`` / ``firstWriteWins`` (``raw``: its JSON text, what a member's own
    ``reduce`` would do does not apply), where the JVM scan can prove a value valid: each
    member a plain scalar (``{type: T}``), no other assertion; or None and why not.  A value's
    members the schema does not declare are kept as written where it allows them
    (``additionalProperties`` absent or true; else the document is a suspect, which the Python
    validator decides)."""
    what = "an object" if t == "object" else "an array of objects"
    shape = {"type", "properties", "additionalProperties", "required"}
    outer = sorted(_keywords(sub) - shape - {"items"} - set(ANNOTATIONS))
    node = sub if t == "object" else sub["items"]
    inner = sorted(_keywords(node) - shape - set(ANNOTATIONS))
    if outer or inner:
        return (
            None,
            f"{what} with {', '.join(outer + inner)} (compiled: type, properties, required, additionalProperties)",
        )
    props = node["properties"]
    if not isinstance(props, dict) or not props:
        return None, f"{what} whose properties is not a mapping of names to schemas"
    if not _requires_declared(node):
        return None, f"{what} whose required names undeclared properties"
    out = []
    for member, child in props.items():
        if not _plain_scalar(child):
            return None, (
                f"{what} whose property {member!r} is not a plain scalar (compiled where each is `{{type: T}}` "
                "of a scalar type; nested objects, arrays and other keywords are checked by the Python validator)"
            )
        out.append(FieldPlan(f"{name}/{member}", "scalar", child["type"], "lastWriteWins", child))
    return tuple(out), ""


def _shape(t: str, sub: dict) -> tuple[Optional[tuple[str, str]], str]:
    """(kind, type) of a property that Spark reads natively, or (None, why not)."""
    if t in SCALARS:
        extra = sorted(_keywords(sub) - set(SCALAR_KEYWORDS) - ({"multipleOf"} if t == "number" else set()))
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
        extra = sorted(_keywords(sub) - {"type", "items"} - set(ANNOTATIONS))
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
            return _merged_object(sub)
        extra = sorted(_keywords(sub) - {"type", "additionalProperties"} - set(ANNOTATIONS))
        if extra:
            return None, f"an object with {', '.join(extra)} (nested properties are reduced by the Python fold)"
        addl = sub.get("additionalProperties")
        if addl is None:
            return ("raw", "object"), ""
        if isinstance(addl, dict) and set(addl) <= {"type"} and addl.get("type") in SCALARS:
            return ("map", addl["type"]), ""
        return None, "an object whose additionalProperties is not one plain scalar type"
    return None, f"type {t!r}"


def _merged_object(sub: dict) -> tuple[Optional[tuple[str, str]], str]:
    """An object with declared ``properties`` reduced by ``merge``, each property a plain
    scalar (``{type: T}``, no assertion but its type, no format) with a strategy of its own
    (:data:`MEMBER_STRATEGIES`, by the source order).

    Where every property is of one type, reduced by ``lastWriteWins``, and undeclared members
    may be of that type too (``additionalProperties`` absent, true, or that type), it compiles
    as a map (``map``: each member merged, the later value winning).  Otherwise as an
    ``object`` of typed members (:func:`_members`), each reduced by its own strategy; a member
    the schema does not declare is last written, carried by the combine where the schema allows
    it (``additionalProperties`` absent or true; see :func:`tidemark.spark.jvm.carries_members`),
    else it makes the document a suspect (checked in Python), as does a member of another type."""
    extra = sorted(_keywords(sub) - {"type", "properties", "additionalProperties", "required"} - set(ANNOTATIONS))
    if extra:
        return None, f"an object with {', '.join(extra)} (compiled: properties, required and additionalProperties)"
    props = sub["properties"]
    if not isinstance(props, dict) or not props:
        return None, "an object whose properties is not a mapping of names to schemas"
    if not _requires_declared(sub):
        return None, "an object whose required names undeclared properties"
    types = set()
    strategies = set()
    carried = False
    for name, child in props.items():
        if "/" in name or "~" in name:
            return None, f"its property {name!r}: a name holding '/' or '~'"
        if not _plain_scalar(child, merged=True) and _carried_member(child) is not None:
            carried = True  # last written, as written (the combine carries its text)
            continue
        if _array_member(child):  # appended or unioned, in the source order
            types.add("array")
            strategies.add(_strategy(child))
            continue
        plain = _plain_scalar(child, merged=True)
        strategy = _strategy(child) if plain else None
        if not plain or strategy not in MEMBER_STRATEGIES:
            return None, (
                f"its property {name!r} is not a plain scalar with one of the strategies "
                f"{', '.join(MEMBER_STRATEGIES)} (an object's properties compile where each is `{{type: T}}` "
                f"of a scalar type, with annotations, a format of {', '.join(NATIVE_FORMATS)} or an exact decimal's "
                "multipleOf; last written also where it is nullable, an object without properties, or an array "
                "without items or of one scalar type; an array of one scalar type also appended or unioned; nested "
                "properties, other strategies and other assertions are reduced by the Python fold)"
            )
        if strategy == "sum" and child["type"] not in ("integer", "number"):
            return None, f"its property {name!r}: sum of a {child['type']}"
        types.add(child["type"])
        strategies.add(strategy)
    addl = sub.get("additionalProperties", True)
    asserts = any(set(child) & {"format", "multipleOf"} for child in props.values())  # a map's values assert nothing
    if len(types) == 1 and strategies == {"lastWriteWins"} and not sub.get("required") and not asserts and not carried:
        (t,) = types
        if addl is True or addl == {"type": t}:
            return ("map", t), ""
    if addl not in (True, False) and not (isinstance(addl, dict) and set(addl) <= {"type"}):
        return None, f"its additionalProperties is {addl!r} (compiled: absent, true, false, or {{type: T}})"
    return ("object", "object"), ""


#: The strategies of an object's members that compile (``object`` fields, :func:`_members`);
#: an array member of one plain scalar type also by ``append`` or ``union`` (:func:`_array_member`).
MEMBER_STRATEGIES = ("lastWriteWins", "firstWriteWins", "sum", "maximize", "minimize")
ARRAY_MEMBER_STRATEGIES = ("append", "union")


def _array_member(child: Any) -> bool:
    """A merged object's member that is an array of one plain scalar type (``items: {type:
    T}``, no other assertion) reduced by ``append`` or ``union``: an ``append`` member of its
    object (the scan proves its items, the combine and the SQL statements reduce it as a
    top-level property of that shape)."""
    if not isinstance(child, dict) or child.get("type") != "array" or _strategy(child) not in ARRAY_MEMBER_STRATEGIES:
        return False
    items = child.get("items")
    return (
        _keywords(child) <= {"type", "items", "reduce", *ANNOTATIONS} - {"format"}
        and isinstance(items, dict)
        and set(items) == {"type"}
        and items["type"] in SCALARS
    )


#: The scan's codes of what a carried member holds: ``null`` or a scalar (a nullable member),
#: an object or an array of any values, an array of one scalar type.
CARRIED_CODES = {"string": "s", "integer": "i", "number": "n", "boolean": "b"}


def _carried_member(child: Any) -> Optional[str]:
    """The scan's code of a merged object's member whose value the combine carries as written,
    last written (the default strategy, no ``order``), or None: a nullable scalar
    (``type: [T, "null"]``, annotations, a format of :data:`NATIVE_FORMATS` or an unasserted one, a
    number's ``multipleOf`` of 10^-s:
    ``d`` for a date-time, else ``s`` / ``i`` / ``n`` / ``b``; the combine checks the other
    formats and a ``multipleOf`` of 10^-s: :func:`checked_members`), an object without declared properties
    (``o``), an array without items (``a``) or of one plain scalar type (``S`` / ``I`` / ``N`` /
    ``B``), an object or an array of objects of declared members as an object picked whole
    may hold (``O`` / ``L``: :func:`_whole_members`).  The JVM scan proves it and gives its
    text back, so it is compiled only where the scan runs; the Python fold reduces it the same
    way (picked whole)."""
    if not isinstance(child, dict) or _strategy(child) != "lastWriteWins":
        return None
    json_type = child.get("type")
    keywords = _keywords(child) - {"reduce"} - set(ANNOTATIONS)
    if isinstance(json_type, list) and len(json_type) == 2 and "null" in json_type:
        others = [name for name in json_type if name != "null"]
        scalar = others[0] if len(others) == 1 else None
        fmt = child.get("format")
        exact = scalar == "number" and keywords == {"type", "multipleOf"} and scale_of(child["multipleOf"]) is not None
        if scalar not in CARRIED_CODES or (keywords != {"type"} and not exact):
            return None
        if scalar == "string" and fmt in ASSERTED_FORMATS:  # a date-time the scan proves, others the combine
            return "d" if fmt == "date-time" else ("s" if fmt in NATIVE_FORMATS else None)
        return CARRIED_CODES[scalar]
    if isinstance(json_type, str) and _declares_members(
        json_type, child
    ):  # an object (array of objects) of declared members
        members, _why = _whole_members("", json_type, child)
        return None if members is None else ("O" if json_type == "object" else "L")
    if json_type == "object":
        ok = keywords <= {"type", "additionalProperties"} and child.get("additionalProperties", True) is True
        return "o" if ok else None
    if json_type == "array" and keywords <= {"type", "items"}:
        items = child.get("items")
        if items is None:
            return "a"
        if isinstance(items, dict) and set(items) == {"type"} and items["type"] in CARRIED_CODES:
            return CARRIED_CODES[items["type"]].upper()
    return None


def checked_members(f: FieldPlan) -> tuple[FieldPlan, ...]:
    """A merged ``object`` field's carried members the combine checks on the parsed value: a
    nullable string of a :data:`NATIVE_FORMATS` format other than ``date-time`` (which the JVM
    scan proves) and a nullable exact decimal (``multipleOf`` 10^-s).  They are parsed beside the
    typed members (a string, a double)."""
    return tuple(
        m
        for m in f.carried
        if (m.type == "s" and m.schema.get("format") in NATIVE_FORMATS and m.schema["format"] != "date-time")
        or (m.type == "n" and "multipleOf" in m.schema)
    )


def _members(name: str, sub: dict) -> tuple[FieldPlan, ...]:
    """The plans of an ``object`` field's members (named ``name/member``, as errors name
    them), each a scalar reduced by its own strategy, or an array of scalars appended or
    unioned (kind ``append``; not the carried ones: :func:`_carried`)."""
    out = []
    for member, child in sub["properties"].items():
        if not _plain_scalar(child, merged=True) and _carried_member(child) is not None:
            continue
        strategy = _strategy(child)
        if _array_member(child):
            out.append(FieldPlan(f"{name}/{member}", "append", child["items"]["type"], str(strategy), child))
            continue
        scale = scale_of(child["multipleOf"]) if "multipleOf" in child else None
        out.append(FieldPlan(f"{name}/{member}", "scalar", child["type"], str(strategy), child, scale=scale))
    return tuple(out)


def _carried(name: str, sub: dict) -> tuple[FieldPlan, ...]:
    """The plans of a merged ``object`` field's members carried as written (:func:`_carried_member`;
    ``type``: the scan's code)."""
    out = []
    for member, child in sub["properties"].items():
        code = None if _plain_scalar(child, merged=True) else _carried_member(child)
        if code is None:
            continue
        inner: tuple[FieldPlan, ...] = ()
        if code in ("O", "L"):  # its own declared members, proved as an object picked whole
            inner = _whole_members(f"{name}/{member}", child["type"], child)[0] or ()
        out.append(FieldPlan(f"{name}/{member}", "carried", code, "lastWriteWins", child, members=inner))
    return tuple(out)


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
