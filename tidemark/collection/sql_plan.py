"""Which compiled plans an endpoint reduces itself, in SQL (pure Python, no Spark).

:func:`sql_reduction` takes a :class:`~tidemark.collection.plan.CompiledPlan` whose every
property has a SQL form for the strategies an endpoint reduces (``Capabilities.endpoint_reduce``);
a binding so reduced skips Load.  The SQL itself is each strategy's ``sql`` entry
(:mod:`tidemark.collection.sql_forms`), composed by the SQL skeleton (``drivers/sql/reduce.py``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Optional

from tidemark.collection.members import flat_members
from tidemark.collection.plan import CompiledPlan, compiled_properties
from tidemark.collection.strategies import STRATEGIES

#: In an endpoint's ``Capabilities.endpoint_reduce``: it sums exact decimals (``multipleOf``
#: 10^-s) as :func:`tidemark.collection.decimals.exact_sum` does -- rounded to the places,
#: refused past 15 significant digits.
EXACT_SUM = "sum of exact decimals"

#: The strategies every SQL endpoint reduces in its statement (``Capabilities.endpoint_reduce``),
#: exact decimals summed among them
SQL_STRATEGIES = frozenset(
    ("sum", "maximize", "minimize", "lastWriteWins", "firstWriteWins", "append", "union", "merge", EXACT_SUM)
)

#: In an endpoint's ``Capabilities.endpoint_reduce``: it reduces a property ordered by another one
#: that some documents lack, keeping the order value it came from (``FieldPlan.kept_order``)
KEPT_ORDER = "an order kept where documents lack it"

#: Why a compiled plan is not reduced in SQL, for what ``tidemark check`` says.
NOT_COMPILED = (
    "its schema has parts only the Python fold reduces (nested objects, keyed reductions, sets, "
    "deletions, $ref, conditionals, …)"
)


def sql_reduction(collection, strategies: frozenset) -> tuple[Optional[CompiledPlan], str]:
    """The plan by which an endpoint that reduces ``strategies`` in SQL reduces this
    collection's documents itself (a binding then skips Load), or ``(None, why not)``.

    It takes a compiled plan (:func:`compile_collection`) without deletions whose root is
    ``merge``, or ``lastWriteWins`` / ``firstWriteWins`` by the source order, and whose
    every property's strategy is in ``strategies`` with a SQL form for its shape
    (:data:`~tidemark.collection.strategies.Strategy.sql`; a value picked by an event-time
    order or a date-time's instant: :attr:`FieldPlan.picked_by`; a nullable property last or
    first written, maximized or minimized (``null`` the least value, a date-time by its instant), whose
    ``null`` the statement keeps apart from an absent property:
    :attr:`FieldPlan.nullable`; an object of declared members, each reduced by its own
    strategy: :attr:`FieldPlan.members`).  Nothing else needs the stored document in
    Python: the schema's assertions (bounds, lengths, ``required``) hold for each source
    document, and the reduced document is not validated again, on either path.  A sum
    beyond 64 bits (or not finite) fails the batch as the Python fold does."""
    if getattr(collection, "_has_deletions", False):
        return None, "it declares deletions"
    plan, reasons, apart = compiled_properties(collection)
    if plan is None:
        return None, "; ".join(reasons + [f"/{name}: {reason}" for name, reason in apart.items()]) or NOT_COMPILED
    if plan.order:
        return None, f"its root orders by /{plan.order} (event time, compared in Python)"
    if plan.root_strategy not in strategies:
        return None, f"the endpoint does not reduce the root's {plan.root_strategy!r}"
    why = {name: f"/{name}: {reason}" for name, reason in apart.items()}
    if plan.root_strategy == "merge":
        for f in plan.fields:
            reason = _field_reason(plan, f, strategies)
            if reason:
                why[f.name] = reason
    if why:  # each property named, in the schema's order
        props = collection.schema.get("properties") if isinstance(collection.schema, dict) else None
        names = [n for n in props if n in why] if isinstance(props, dict) else []
        return None, "; ".join(why[n] for n in names + [n for n in why if n not in names])
    return plan, ""


def unspellable(name: str) -> bool:
    """A name the reducing statement cannot spell in its JSON paths: a quote, a backslash or a
    control character in it."""
    return any(c in name for c in '"\\') or not name.isprintable()


def _field_reason(plan: CompiledPlan, f: Any, strategies: frozenset) -> str:
    """Why the endpoint does not reduce the compiled property ``f`` in SQL, named by its place
    ("": it does)."""
    strategy = STRATEGIES[f.strategy]
    place = f"/{f.name}: "
    if unspellable(f.name):
        return f"{place}a property name holding a quote, a backslash or a control character"
    if f.nullable and f.strategy not in ("lastWriteWins", "firstWriteWins", "maximize", "minimize"):
        return (
            f"{place}a nullable property reduced by {f.strategy} (the endpoint reduces one last or first "
            "written, maximized or minimized)"
        )
    if f.kept_order and KEPT_ORDER not in strategies:
        return (
            f"{place}ordered by /{f.order}, which some documents lack (the view keeps the order value of each "
            f"{f.name!r} that is not its document's own, which this endpoint's statement does not)"
        )
    named = [m for m in flat_members(f) if m.strategy != "lastWriteWins"]  # the statement names them
    if any(unspellable(m.member) for m in named):
        return f"{place}a member's name holding a quote, a backslash or a control character"
    unreduced = next((m for m in named if m.strategy not in strategies), None)
    inexact = next((m for m in named if m.scale is not None and m.strategy == "sum"), None)
    if inexact is not None and EXACT_SUM not in strategies:
        return f"/{inexact.name}: the endpoint does not sum exact decimals (multipleOf) itself"
    if unreduced is not None:
        return f"/{unreduced.name}: the endpoint does not reduce {unreduced.strategy!r}"
    if f.strategy not in strategies or strategy.sql is None:
        return f"{place}the endpoint does not reduce {f.strategy!r}"
    if f.scale is not None and f.strategy == "sum" and EXACT_SUM not in strategies:
        return f"{place}the endpoint does not sum exact decimals (multipleOf) itself"
    order = ("o", "n", next(o for o in plan.fields if o.name == f.picked_by)) if f.picked_by else None
    if (strategy.sql(_Probe, f, "o", "n", order) if order else strategy.sql(_Probe, f, "o", "n")) is None:
        return f"{place}{f.strategy!r} has no SQL form for a {f.kind} {f.type}"
    return ""


@dataclass(frozen=True)
class _Shape:
    """What :func:`sql_reduction` reads of a collection, from a binding's schema and key."""

    schema: Any
    key: tuple
    max_document_bytes: int = 0

    @property
    def _has_deletions(self) -> bool:
        import json

        return '"delete"' in json.dumps(self.schema, default=str)


def binding_reduction(schema: Any, key: tuple, strategies: frozenset) -> tuple[Optional[CompiledPlan], str]:
    """:func:`sql_reduction` of a binding's schema and key (what a driver learns at Open)."""
    return sql_reduction(_Shape(schema, tuple(key)), strategies)


def binding_properties(schema: Any, key: tuple) -> tuple[Optional[CompiledPlan], dict[str, str]]:
    """:func:`~tidemark.collection.plan.compiled_properties` of a binding's schema and key: the
    plan of the properties that compile, and the others with why (``None``, ``{}`` where the
    root or the key does not compile, or the schema declares deletions)."""
    shape = _Shape(schema, tuple(key))
    if shape._has_deletions:
        return None, {}
    plan, _, apart = compiled_properties(shape)
    return (None, {}) if plan is None else (plan, apart)


class _Probe:
    """SQL helpers that build nothing: does a property have a SQL form at all?"""

    @staticmethod
    def coalesce(*xs: str) -> str:
        return ""

    add = greatest = least = precedes = staticmethod(lambda *a: "")
    concat_arrays = union_arrays = merge_documents = staticmethod(lambda *a: "")
