"""A specialised reducer for the schemas the Spark side compiles.

A schema that :func:`tidemark.spark.compile.compile_collection` accepts with a ``merge``
root has only top-level properties with fixed strategies and no conditionals, so the
strategy of each property is known without looking at the document.  :func:`fast_reducer`
returns a function with exactly the generic :class:`~tidemark.collection.reduce.Reducer`'s
results (same values, same key order, same errors) that skips the per-location schema
walk: about 10x faster, which matters where the runtime reduces each loaded document with
the batch's combined one.  Anything unexpected (a non-object side, a property of another
shape) is handed to the generic reducer.
"""

from __future__ import annotations

from typing import Any, Callable, Optional

from tidemark.collection.formats import instant
from tidemark.collection.reduce import INT64_MAX, INT64_MIN, Reducer, compare, compare_date_time
from tidemark.collection.validate import pointer_of


_PLAIN = frozenset((int, float))  # numbers that Python compares as JSON does (not bool)


def fast_reducer(collection, generic: Reducer) -> Optional[Callable[[Any, Any], Any]]:
    from tidemark.spark.compile import compile_collection

    plan = compile_collection(collection)
    if plan is None or plan.root_strategy != "merge" or any(f.kind == "map" for f in plan.fields):
        return None
    ops: dict[str, Callable[[Any, Any], Any]] = {}
    for f in plan.fields:
        ptr = pointer_of((f.name,))
        if f.strategy == "lastWriteWins":
            continue  # the right side, like an undeclared property
        if f.strategy == "firstWriteWins":
            ops[f.name] = lambda lhs, rhs: lhs
        elif f.strategy == "sum":
            ops[f.name] = _sum(ptr)
        elif f.strategy in ("minimize", "maximize") and f.schema.get("format") == "date-time":
            ops[f.name] = _minmax_date_time(f.strategy == "maximize")
        elif f.strategy in ("minimize", "maximize"):
            ops[f.name] = _minmax(f.strategy == "maximize")
        elif f.strategy == "append":
            ops[f.name] = lambda lhs, rhs, ptr=ptr: Reducer._append(lhs, rhs, ptr)
        else:  # pragma: no cover - compile_collection admits nothing else
            return None

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


def _sum(ptr: str):
    """``sum``: two integers whose sum fits 64 bits are added here; anything else (floats,
    overflow, wrong types) goes to :meth:`Reducer._sum` for its result or error."""

    def add(lhs: Any, rhs: Any) -> Any:
        if lhs.__class__ is int and rhs.__class__ is int:
            out = lhs + rhs
            if INT64_MIN <= out <= INT64_MAX:
                return out
        return Reducer._sum(lhs, rhs, ptr)

    return add


def _minmax(maximize: bool):
    """``minimize`` / ``maximize`` without a key: ties take the right side."""

    def pick(lhs: Any, rhs: Any) -> Any:
        lc, rc = lhs.__class__, rhs.__class__
        if (lc in _PLAIN and rc in _PLAIN) or (lc is str and rc is str):
            if maximize:
                return lhs if lhs > rhs else rhs
            return lhs if lhs < rhs else rhs
        c = compare(lhs, rhs)
        if maximize:
            c = -c
        return lhs if c < 0 else rhs

    return pick


def _minmax_date_time(maximize: bool):
    """``minimize`` / ``maximize`` of a ``format: date-time`` property: by instant
    (:func:`~tidemark.collection.reduce.compare_date_time`); ties take the right side."""

    def pick(lhs: Any, rhs: Any) -> Any:
        il, ir = instant(lhs), instant(rhs)
        c = ((il > ir) - (il < ir)) if il is not None and ir is not None else compare_date_time(lhs, rhs)
        if maximize:
            c = -c
        return lhs if c < 0 else rhs

    return pick
