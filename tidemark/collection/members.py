"""The members of an object property that compile (pure Python, no Spark): an object reduced by
``merge`` whose declared members each have a strategy of their own (:func:`merged_object`,
:func:`members_of`), the members carried as written (:func:`carried_member`, :func:`carried_of`),
and the members of an object picked whole (:func:`whole_members`)."""

from __future__ import annotations

from typing import Any, Optional

from tidemark.collection.decimals import scale_of
from tidemark.collection.formats import ASSERTED as ASSERTED_FORMATS
from tidemark.collection.shapes import (
    ANNOTATIONS,
    NATIVE_FORMATS,
    SCALARS,
    FieldPlan,
    schema_keywords,
    strategy_of,
)


def plain_scalar(child: Any, merged: bool = False) -> bool:
    """A member's schema that is only its scalar type and annotations (a ``reduce``, a
    ``format`` that asserts nothing): what the JVM scan proves of an object's member.  A
    ``date-time`` member too (the scan proves it); of a merged object's member (``merged``:
    parsed, so the combine checks it) also another format of :data:`NATIVE_FORMATS` and, of a
    number, a ``multipleOf`` of 10^-s (an exact decimal)."""
    if not isinstance(child, dict) or child.get("type") not in SCALARS:
        return False
    keywords = {"type", "reduce", *ANNOTATIONS} | ({"multipleOf"} if merged and child["type"] == "number" else set())
    if not schema_keywords(child) <= keywords:
        return False
    if "multipleOf" in child and scale_of(child["multipleOf"]) is None:
        return False
    fmt = child.get("format")
    if child["type"] != "string" or fmt not in ASSERTED_FORMATS:
        return True  # a format asserts something of strings only
    return fmt == "date-time" or (merged and fmt in NATIVE_FORMATS)


def requires_declared(node: dict) -> bool:
    """``required`` (if any) is a list of declared properties (the JVM scan proves them present)."""
    required = node.get("required", [])
    return isinstance(required, list) and all(r in node["properties"] for r in required)


def required_members(f: FieldPlan) -> frozenset[str]:
    """The members an object (or an array's object items) of ``f`` must hold."""
    node = f.schema.get("items", {}) if f.type == "array" else f.schema
    return frozenset(node.get("required", ()))


def declares_members(t: Any, sub: dict) -> bool:
    """An object with declared ``properties``, or an array whose ``items`` is one."""
    if t == "object":
        return "properties" in sub
    items = sub.get("items")
    return t == "array" and isinstance(items, dict) and items.get("type") == "object" and "properties" in items


def whole_members(name: str, t: str, sub: dict) -> tuple[Optional[tuple[FieldPlan, ...]], str]:
    """The members of an object (or of an array's object items) picked whole by
    ``lastWriteWins`` / ``firstWriteWins``, or of an array of objects appended (``raw``: its JSON
    text, what a member's own ``reduce`` would do does not apply), where the JVM scan can prove a value valid: each
    member a plain scalar (``{type: T}``), no other assertion; or None and why not.  A value's
    members the schema does not declare are kept as written where it allows them
    (``additionalProperties`` absent or true; else the document is a suspect, which the Python
    validator decides)."""
    what = "an object" if t == "object" else "an array of objects"
    shape = {"type", "properties", "additionalProperties", "required"}
    outer = sorted(schema_keywords(sub) - shape - {"items"} - set(ANNOTATIONS))
    node = sub if t == "object" else sub["items"]
    inner = sorted(schema_keywords(node) - shape - set(ANNOTATIONS))
    if outer or inner:
        return (
            None,
            f"{what} with {', '.join(outer + inner)} (compiled: type, properties, required, additionalProperties)",
        )
    props = node["properties"]
    if not isinstance(props, dict) or not props:
        return None, f"{what} whose properties is not a mapping of names to schemas"
    if not requires_declared(node):
        return None, f"{what} whose required names undeclared properties"
    out = []
    for member, child in props.items():
        if not plain_scalar(child):
            return None, (
                f"{what} whose property {member!r} is not a plain scalar (compiled where each is `{{type: T}}` "
                "of a scalar type; nested objects, arrays and other keywords are checked by the Python validator)"
            )
        out.append(FieldPlan(f"{name}/{member}", "scalar", child["type"], "lastWriteWins", child))
    return tuple(out), ""


def merged_object(sub: dict) -> tuple[Optional[tuple[str, str]], str]:
    """An object with declared ``properties`` reduced by ``merge``, each property a plain
    scalar (``{type: T}``, no assertion but its type, no format) with a strategy of its own
    (:data:`MEMBER_STRATEGIES`, by the source order).

    Where every property is of one type, reduced by ``lastWriteWins``, and undeclared members
    may be of that type too (``additionalProperties`` absent, true, or that type), it compiles
    as a map (``map``: each member merged, the later value winning).  Otherwise as an
    ``object`` of typed members (:func:`members_of`), each reduced by its own strategy; a member
    the schema does not declare is last written, carried by the combine where the schema allows
    it (``additionalProperties`` absent or true; see :func:`tidemark.spark.jvm.carries_members`),
    else it makes the document a suspect (checked in Python), as does a member of another type."""
    extra = sorted(schema_keywords(sub) - {"type", "properties", "additionalProperties", "required"} - set(ANNOTATIONS))
    if extra:
        return None, f"an object with {', '.join(extra)} (compiled: properties, required and additionalProperties)"
    props = sub["properties"]
    if not isinstance(props, dict) or not props:
        return None, "an object whose properties is not a mapping of names to schemas"
    if not requires_declared(sub):
        return None, "an object whose required names undeclared properties"
    types = set()
    strategies = set()
    carried = False
    for name, child in props.items():
        if "/" in name or "~" in name:
            return None, f"its property {name!r}: a name holding '/' or '~'"
        if not plain_scalar(child, merged=True) and carried_member(child) is not None:
            carried = True  # last written, as written (the combine carries its text)
            continue
        if array_member(child):  # appended or unioned, in the source order
            types.add("array")
            strategies.add(strategy_of(child))
            continue
        if nested_merged(child):  # merged, member by member
            types.add("object")
            strategies.add("merge")
            continue
        plain = plain_scalar(child, merged=True)
        strategy = strategy_of(child) if plain else None
        if not plain or strategy not in MEMBER_STRATEGIES:
            return None, (
                f"its property {name!r} is not a plain scalar with one of the strategies "
                f"{', '.join(MEMBER_STRATEGIES)} (an object's properties compile where each is `{{type: T}}` "
                f"of a scalar type, with annotations, a format of {', '.join(NATIVE_FORMATS)} or an exact decimal's "
                "multipleOf; last written also where it is nullable, an object without properties, or an array "
                "without items or of one scalar type; an array of one scalar type also appended or unioned; an "
                f"object of such properties also merged, {MAX_NESTING} levels deep; deeper merges, other strategies and other "
                "assertions are reduced by the Python fold)"
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


#: The strategies of an object's members that compile (``object`` fields, :func:`members_of`);
#: an array member of one plain scalar type also by ``append`` or ``union`` (:func:`array_member`).
MEMBER_STRATEGIES = ("lastWriteWins", "firstWriteWins", "sum", "maximize", "minimize")
ARRAY_MEMBER_STRATEGIES = ("append", "union")


#: How deep merged objects nest within a top-level object and still compile (the SQL statement
#: repeats each level's expressions: SQLite's parser overflowed at three; the JVM scan's spec
#: has a separator for each level: ``tidemark.spark.jvm``)
MAX_NESTING = 2


def nested_merged(child: Any, depth: int = 1) -> bool:
    """A merged object's member that is itself an object reduced by ``merge`` (at most
    :data:`MAX_NESTING` levels below the top-level object), whose declared members are each a
    plain scalar with a strategy of its own (:data:`MEMBER_STRATEGIES`), an array appended or
    unioned (:func:`array_member`), or such an object in turn: an ``object`` member of its
    object, reduced member by member as its object is.  The JVM scan proves its members and
    takes a member it does not declare as a suspect's (the Python fold reduces that key), so the
    combine's struct never drops one."""
    if not isinstance(child, dict) or child.get("type") != "object" or strategy_of(child) != "merge":
        return False
    props = child.get("properties")
    if schema_keywords(child) - {"type", "properties", "required", "additionalProperties", *ANNOTATIONS}:
        return False
    if not isinstance(props, dict) or not props or not requires_declared(child):
        return False
    if child.get("additionalProperties", True) not in (True, False):
        return False
    for name, sub in props.items():
        if "/" in name or "~" in name:
            return False
        if array_member(sub) or (depth < MAX_NESTING and nested_merged(sub, depth + 1)):
            continue
        strategy = strategy_of(sub)
        if not plain_scalar(sub, merged=True) or strategy not in MEMBER_STRATEGIES:
            return False
        if strategy == "sum" and sub["type"] not in ("integer", "number"):
            return False
    return True


def flat_members(f: FieldPlan) -> list[FieldPlan]:
    """``f``'s members, and the members of each that is an object (:func:`nested_merged`), in order."""
    out: list[FieldPlan] = []
    for part in f.members:
        out.append(part)
        if part.kind == "object":
            out += flat_members(part)
    return out


def array_member(child: Any) -> bool:
    """A merged object's member that is an array of one plain scalar type (``items: {type:
    T}``, no other assertion) reduced by ``append`` or ``union``: an ``append`` member of its
    object (the scan proves its items, the combine and the SQL statements reduce it as a
    top-level property of that shape)."""
    if not isinstance(child, dict) or child.get("type") != "array" or strategy_of(child) not in ARRAY_MEMBER_STRATEGIES:
        return False
    items = child.get("items")
    return (
        schema_keywords(child) <= {"type", "items", "reduce", *ANNOTATIONS} - {"format"}
        and isinstance(items, dict)
        and set(items) == {"type"}
        and items["type"] in SCALARS
    )


#: The scan's codes of what a carried member holds: ``null`` or a scalar (a nullable member),
#: an object or an array of any values, an array of one scalar type.
CARRIED_CODES = {"string": "s", "integer": "i", "number": "n", "boolean": "b"}


def carried_member(child: Any) -> Optional[str]:
    """The scan's code of a merged object's member whose value the combine carries as written,
    last written (the default strategy, no ``order``), or None: a nullable scalar
    (``type: [T, "null"]``, annotations, a format of :data:`NATIVE_FORMATS` or an unasserted one, a
    number's ``multipleOf`` of 10^-s:
    ``d`` for a date-time, else ``s`` / ``i`` / ``n`` / ``b``; the combine checks the other
    formats and a ``multipleOf`` of 10^-s: :func:`checked_members`), an object without declared properties
    (``o``), an array without items (``a``) or of one plain scalar type (``S`` / ``I`` / ``N`` /
    ``B``), an object or an array of objects of declared members as an object picked whole
    may hold (``O`` / ``L``: :func:`whole_members`).  The JVM scan proves it and gives its
    text back, so it is compiled only where the scan runs; the Python fold reduces it the same
    way (picked whole)."""
    if not isinstance(child, dict) or strategy_of(child) != "lastWriteWins":
        return None
    json_type = child.get("type")
    keywords = schema_keywords(child) - {"reduce"} - set(ANNOTATIONS)
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
    if isinstance(json_type, str) and declares_members(
        json_type, child
    ):  # an object (array of objects) of declared members
        members, _why = whole_members("", json_type, child)
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


def members_of(name: str, sub: dict) -> tuple[FieldPlan, ...]:
    """The plans of an ``object`` field's members (named ``name/member``, as errors name
    them), each a scalar reduced by its own strategy, or an array of scalars appended or
    unioned (kind ``append``; not the carried ones: :func:`carried_of`)."""
    out = []
    for member, child in sub["properties"].items():
        if not plain_scalar(child, merged=True) and carried_member(child) is not None:
            continue
        strategy = strategy_of(child)
        if array_member(child):
            out.append(FieldPlan(f"{name}/{member}", "append", child["items"]["type"], str(strategy), child))
            continue
        if nested_merged(child):
            inner = members_of(f"{name}/{member}", child)
            out.append(FieldPlan(f"{name}/{member}", "object", "object", "merge", child, members=inner))
            continue
        scale = scale_of(child["multipleOf"]) if "multipleOf" in child else None
        out.append(FieldPlan(f"{name}/{member}", "scalar", child["type"], str(strategy), child, scale=scale))
    return tuple(out)


def carried_of(name: str, sub: dict) -> tuple[FieldPlan, ...]:
    """The plans of a merged ``object`` field's members carried as written (:func:`carried_member`;
    ``type``: the scan's code)."""
    out = []
    for member, child in sub["properties"].items():
        code = None if plain_scalar(child, merged=True) else carried_member(child)
        if code is None:
            continue
        inner: tuple[FieldPlan, ...] = ()
        if code in ("O", "L"):  # its own declared members, proved as an object picked whole
            inner = whole_members(f"{name}/{member}", child["type"], child)[0] or ()
        out.append(FieldPlan(f"{name}/{member}", "carried", code, "lastWriteWins", child, members=inner))
    return tuple(out)
