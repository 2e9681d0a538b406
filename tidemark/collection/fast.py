"""A specialised reducer for the schemas that compile to Spark.

A schema that :func:`tidemark.collection.plan.compile_collection` accepts with a ``merge``
root has only top-level properties with fixed strategies and no conditionals, so the
strategy of each property is known without looking at the document.  :func:`fast_reducer`
returns a function with exactly the generic :class:`~tidemark.collection.reduce.Reducer`'s
results (same values, same key order, same errors) that skips the per-location schema
walk: about 10x faster, which matters where the runtime reduces each loaded document with
the batch's combined one.  Each property's operation is its strategy's ``fast`` entry in
:data:`tidemark.collection.strategies.STRATEGIES`.  Anything unexpected (a non-object
side, a property of another shape) is handed to the generic reducer.
"""

from __future__ import annotations

from typing import Any, Callable, Optional

from tidemark.collection.plan import compile_collection
from tidemark.collection.reduce import Reducer
from tidemark.collection.strategies import STRATEGIES


def fast_reducer(collection, generic: Reducer) -> Optional[Callable[[Any, Any], Any]]:
    plan = compile_collection(collection)
    if plan is None or plan.root_strategy != "merge":
        return None
    ops: dict[str, Callable[[Any, Any], Any]] = {}
    for f in plan.fields:
        fast = STRATEGIES[f.strategy].fast
        if fast is None or f.order:  # e.g. a merged map, an event-time order: the generic fold
            return None
        op = fast(f)
        if op is not None:  # None: the right side, like an undeclared property
            ops[f.name] = op

    pairs = tuple(ops.items())

    def reduce(lhs: Any, rhs: Any) -> Any:
        if lhs.__class__ is not dict or rhs.__class__ is not dict:
            return generic.reduce(lhs, rhs)
        # lhs's properties in order, then rhs's new ones; rhs wins (lastWriteWins and
        # undeclared properties) except where both sides have a property with an operation
        out = {**lhs, **rhs}
        try:
            for name, op in pairs:
                if name in rhs and name in lhs:
                    out[name] = op(lhs[name], rhs[name])
        except Exception:  # noqa: BLE001 - raise the first error in rhs's order, as before
            return in_order(lhs, rhs)
        return out

    def in_order(lhs: dict, rhs: dict) -> dict:
        out = dict(lhs)
        for name, r in rhs.items():
            op = ops.get(name) if name in lhs else None
            out[name] = r if op is None else op(lhs[name], r)
        return out

    return reduce
