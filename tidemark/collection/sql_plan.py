"""Which compiled plans an endpoint reduces itself, in SQL (pure Python, no Spark).

:func:`sql_reduction` takes a :class:`~tidemark.collection.plan.CompiledPlan` whose every
property has a SQL form for the strategies an endpoint reduces (``Capabilities.endpoint_reduce``);
a binding so reduced skips Load.  The SQL itself is each strategy's ``sql`` entry
(:mod:`tidemark.collection.sql_forms`), composed by the SQL skeleton (``drivers/sql/reduce.py``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Optional

from tidemark.collection.plan import CompiledPlan, explain_collection
from tidemark.collection.strategies import STRATEGIES

#: In an endpoint's ``Capabilities.endpoint_reduce``: it sums exact decimals (``multipleOf``
#: 10^-s) as :func:`tidemark.collection.decimals.exact_sum` does -- rounded to the places,
#: refused past 15 significant digits.
EXACT_SUM = "sum of exact decimals"

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
    plan, reasons = explain_collection(collection)
    if plan is None:
        return None, "; ".join(reasons) or NOT_COMPILED
    if plan.order:
        return None, f"its root orders by /{plan.order} (event time, compared in Python)"
    if plan.root_strategy not in strategies:
        return None, f"the endpoint does not reduce the root's {plan.root_strategy!r}"
    if plan.root_strategy != "merge":
        return plan, ""
    for f in plan.fields:
        strategy = STRATEGIES[f.strategy]
        if any(c in f.name for c in '"\\') or not f.name.isprintable():
            return None, f"/{f.name}: a property name holding a quote, a backslash or a control character"
        if f.kept_order:
            return (
                None,
                f"/{f.name}: ordered by /{f.order}, which some documents lack (the view keeps the order value of "
                f"each {f.name!r} that is not its document's own, which the endpoint's statement does not)",
            )
        if f.nullable and f.strategy not in ("lastWriteWins", "firstWriteWins", "maximize", "minimize"):
            return (
                None,
                f"/{f.name}: a nullable property reduced by {f.strategy} (the endpoint reduces one last or first "
                "written, maximized or minimized)",
            )
        named = [m for m in f.members if m.strategy != "lastWriteWins"]  # the statement names them
        if any(any(c in m.member for c in '"\\') or not m.member.isprintable() for m in named):
            return None, f"/{f.name}: a member's name holding a quote, a backslash or a control character"
        unreduced = next((m for m in named if m.strategy not in strategies), None)
        inexact = next((m for m in named if m.scale is not None and m.strategy == "sum"), None)
        if inexact is not None and EXACT_SUM not in strategies:
            return None, f"/{inexact.name}: the endpoint does not sum exact decimals (multipleOf) itself"
        if unreduced is not None:
            return None, f"/{unreduced.name}: the endpoint does not reduce {unreduced.strategy!r}"
        if f.strategy not in strategies or strategy.sql is None:
            return None, f"/{f.name}: the endpoint does not reduce {f.strategy!r}"
        if f.scale is not None and f.strategy == "sum" and EXACT_SUM not in strategies:
            return None, f"/{f.name}: the endpoint does not sum exact decimals (multipleOf) itself"
        order = ("o", "n", next(o for o in plan.fields if o.name == f.picked_by)) if f.picked_by else None
        if (strategy.sql(_Probe, f, "o", "n", order) if order else strategy.sql(_Probe, f, "o", "n")) is None:
            return None, f"/{f.name}: {f.strategy!r} has no SQL form for a {f.kind} {f.type}"
    return plan, ""


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


class _Probe:
    """SQL helpers that build nothing: does a property have a SQL form at all?"""

    @staticmethod
    def coalesce(*xs: str) -> str:
        return ""

    add = greatest = least = precedes = staticmethod(lambda *a: "")
    concat_arrays = union_arrays = merge_documents = staticmethod(lambda *a: "")
