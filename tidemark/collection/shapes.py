"""The parts of a compiled plan every shape shares (pure Python, no Spark): the scalar types and
keywords that compile, a schema node's keywords and strategy, and :class:`FieldPlan`, the plan of
one property (or of an object's member).  :mod:`tidemark.collection.plan` compiles a schema's
properties, :mod:`tidemark.collection.members` an object's members."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

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


def schema_keywords(node: dict) -> set:
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
    # an ``object``'s members (named ``property/member``), each with its own strategy: a scalar, an
    # array appended or unioned (``append``), or a merged object of such members (``object``)
    members: tuple[FieldPlan, ...] = ()
    # a merged ``object``'s members carried as written, last written (:func:`carried_member`):
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


def strategy_of(schema: dict) -> Optional[str]:
    red = schema.get("reduce")
    if red is None:
        return "lastWriteWins"
    if not isinstance(red, dict) or set(red) - {"strategy"}:
        return None  # keys, deletions, orders (see _field)
    return red.get("strategy", "lastWriteWins")
