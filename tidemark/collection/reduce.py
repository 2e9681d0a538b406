"""Reduction strategies (Estuary Flow semantics), pure Python.

``reduce(index, lhs, rhs)`` combines two documents of one key; ``rhs`` is the later one
and its schema location decides the strategy at every location.  Strategies:

============== ==============================================================================
lastWriteWins  take the right-hand value (the default)
firstWriteWins keep the left-hand value
sum            add two numbers; integers beyond int64 and non-finite numbers are errors
minimize       keep the smaller (by ``key`` pointers if given); ties without a key take the
maximize       right side, ties with a key deep-merge both sides; on a ``format: date-time``
               location, date-times compare as the instants they name
append         concatenate arrays (a ``null`` left side stays ``null``)
merge          deep merge of objects; arrays by index, or by ``key`` as a sorted merge
set            ``{add, intersect, remove}`` terms as arrays (sorted by ``key``) or objects
============== ==============================================================================

Values that a location does not hold on one side are taken from the other side.  Errors
are :class:`~tidemark.errors.ReductionError` naming the JSON pointer and the strategy.
Deletions and the reset marker are handled one level up, in
:class:`tidemark.collection.collection.Collection`.
"""

from __future__ import annotations

import math
from typing import Any, Sequence

from tidemark.collection.formats import instant
from tidemark.collection.schema import Annotation, SchemaIndex, pointer_tokens, push
from tidemark.errors import ReductionError

INT64_MIN = -(2**63)
INT64_MAX = 2**63 - 1

_MISSING = object()


def _short(v: Any) -> str:
    import json

    text = json.dumps(v, separators=(",", ":"), ensure_ascii=False, default=str)
    return text if len(text) <= 80 else text[:77] + "..."


def _error(ptr: str, strategy: str, what: str, lhs: Any = _MISSING, rhs: Any = _MISSING) -> ReductionError:
    where = ptr or "/"
    text = f"{where}: '{strategy}' {what}"
    if lhs is not _MISSING:
        text += f" (left {_short(lhs)}, right {_short(rhs)})"
    return ReductionError(text)


# ----------------------------------------------------------------------------- ordering


def _is_number(v: Any) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool)


def _rank(v: Any) -> int:
    if v is None:
        return 0
    if isinstance(v, bool):
        return 1
    if _is_number(v):
        return 2
    if isinstance(v, str):
        return 3
    if isinstance(v, list):
        return 4
    return 5


def compare(a: Any, b: Any) -> int:
    """Total order of JSON values: null < booleans < numbers < strings < arrays < objects."""
    ra, rb = _rank(a), _rank(b)
    if ra != rb:
        return -1 if ra < rb else 1
    if ra == 0:
        return 0
    if ra in (1, 2, 3):
        return -1 if a < b else (1 if a > b else 0)
    if ra == 4:
        for x, y in zip(a, b):
            c = compare(x, y)
            if c:
                return c
        return (len(a) > len(b)) - (len(a) < len(b))
    ia, ib = sorted(a.items()), sorted(b.items())
    for (ka, va), (kb, vb) in zip(ia, ib):
        if ka != kb:
            return -1 if ka < kb else 1
        c = compare(va, vb)
        if c:
            return c
    return (len(ia) > len(ib)) - (len(ia) < len(ib))


def compare_date_time(a: Any, b: Any) -> int:
    """The order of a ``format: date-time`` location: strings that are RFC 3339 date-times
    by the instant they name (offsets applied, so ``…T10:00:00Z`` is before
    ``…T09:30:00-05:00``; equal instants tie), before every other string (by code point, as
    in :func:`compare`); other values as in :func:`compare`.  A total order, so ``minimize``
    and ``maximize`` stay associative even with a stored value that is not a date-time."""
    ia, ib = instant(a), instant(b)
    if ia is not None and ib is not None:
        return (ia > ib) - (ia < ib)
    if ia is not None and isinstance(b, str):
        return -1
    if ib is not None and isinstance(a, str):
        return 1
    return compare(a, b)


def is_date_time_location(applicable: Sequence[dict]) -> bool:
    """True if a schema that applies at the location says ``format: date-time``."""
    return any(s.get("format") == "date-time" for s in applicable)


def query(doc: Any, pointer: str) -> Any:
    cur = doc
    for token in pointer_tokens(pointer):
        if isinstance(cur, dict) and token in cur:
            cur = cur[token]
        elif isinstance(cur, list) and token.isdigit() and int(token) < len(cur):
            cur = cur[int(token)]
        else:
            return _MISSING
    return cur


def compare_key(key: Sequence[str], a: Any, b: Any, orders: Sequence = ()) -> int:
    """Compare by key pointers; a pointer missing on one side orders before any value.
    ``orders``: per pointer, the comparison of its values (default :func:`compare`)."""
    for i, ptr in enumerate(key):
        x, y = query(a, ptr), query(b, ptr)
        if x is _MISSING and y is _MISSING:
            continue
        if x is _MISSING:
            return -1
        if y is _MISSING:
            return 1
        c = (orders[i] if i < len(orders) else compare)(x, y)
        if c:
            return c
    return 0


# ----------------------------------------------------------------------------- reduce


class Reducer:
    """Reduces documents against one schema."""

    def __init__(self, index: SchemaIndex):
        self.index = index

    def reduce(self, lhs: Any, rhs: Any) -> Any:
        return self.at([self.index.root], lhs, rhs, "")

    def at(self, schemas: list, lhs: Any, rhs: Any, ptr: str) -> Any:
        app = self.index.applicable(schemas, rhs)
        ann = SchemaIndex.annotation(app)
        s = ann.strategy
        if s == "lastWriteWins":
            return rhs
        if s == "firstWriteWins":
            return lhs
        if s == "sum":
            return self._sum(lhs, rhs, ptr)
        if s in ("minimize", "maximize"):
            return self._minmax(app, ann, lhs, rhs, ptr)
        if s == "append":
            return self._append(lhs, rhs, ptr)
        if s == "merge":
            return self._merge(app, ann.key, lhs, rhs, ptr, "merge")
        if s == "set":
            return self._set(app, ann.key, lhs, rhs, ptr)
        raise _error(ptr, s, "is not a known reduction strategy")

    # -- strategies -------------------------------------------------------------
    @staticmethod
    def _sum(lhs: Any, rhs: Any, ptr: str) -> Any:
        if not (_is_number(lhs) and _is_number(rhs)):
            raise _error(ptr, "sum", "expects numbers", lhs, rhs)
        out = lhs + rhs
        if isinstance(out, int):
            if not INT64_MIN <= out <= INT64_MAX:
                raise _error(ptr, "sum", "overflowed: the result is beyond a 64-bit integer", lhs, rhs)
        elif not math.isfinite(out):
            raise _error(ptr, "sum", "overflowed: the result is not a finite number", lhs, rhs)
        return out

    def _minmax(self, app: list, ann: Annotation, lhs: Any, rhs: Any, ptr: str) -> Any:
        if ann.key:
            c = compare_key(ann.key, lhs, rhs, self._key_orders(app, ann.key, rhs))
        elif is_date_time_location(app):
            c = compare_date_time(lhs, rhs)
        else:
            c = compare(lhs, rhs)
        if ann.strategy == "maximize":
            c = -c
        if c < 0:
            return lhs
        if c > 0 or not ann.key:
            return rhs
        return self._merge(app, (), lhs, rhs, ptr, ann.strategy)

    def _key_orders(self, app: list, key: Sequence[str], rhs: Any) -> list:
        """Per key pointer of a keyed ``minimize`` / ``maximize``: :func:`compare_date_time`
        where the schema at the pointer (below the location, for the right-hand value) says
        ``format: date-time``, else :func:`compare`."""
        out = []
        for ptr in key:
            schemas, inst = app, rhs
            for token in pointer_tokens(ptr):
                if isinstance(inst, list) and token.isdigit():
                    subs = SchemaIndex.item_schemas(schemas, int(token))
                    inst = inst[int(token)] if int(token) < len(inst) else None
                else:
                    subs = SchemaIndex.property_schemas(schemas, token)
                    inst = inst.get(token) if isinstance(inst, dict) else None
                schemas = self.index.applicable(subs, inst)
            out.append(compare_date_time if is_date_time_location(schemas) else compare)
        return out

    @staticmethod
    def _append(lhs: Any, rhs: Any, ptr: str) -> Any:
        if isinstance(lhs, list) and isinstance(rhs, list):
            return lhs + rhs
        if lhs is None and isinstance(rhs, list):
            return None
        raise _error(ptr, "append", "expects arrays", lhs, rhs)

    def _prop(self, app: list, name: str, lhs: Any, rhs: Any, ptr: str) -> Any:
        return self.at(SchemaIndex.property_schemas(app, name), lhs, rhs, push(ptr, name))

    def _item(self, app: list, index: int, lhs: Any, rhs: Any, ptr: str) -> Any:
        return self.at(SchemaIndex.item_schemas(app, index), lhs, rhs, push(ptr, index))

    def _merge(self, app: list, key: Sequence[str], lhs: Any, rhs: Any, ptr: str, strategy: str) -> Any:
        if isinstance(lhs, dict) and isinstance(rhs, dict):
            out = dict(lhs)
            for name, r in rhs.items():
                out[name] = self._prop(app, name, lhs[name], r, ptr) if name in lhs else r
            return out
        if isinstance(lhs, list) and isinstance(rhs, list):
            if not key:
                out = [self._item(app, i, lhs[i], r, ptr) if i < len(lhs) else r for i, r in enumerate(rhs)]
                out.extend(lhs[len(rhs):])
                return out
            out = []
            i = j = 0
            while i < len(lhs) and j < len(rhs):
                c = compare_key(key, lhs[i], rhs[j])
                if c < 0:
                    out.append(lhs[i])
                    i += 1
                elif c > 0:
                    out.append(rhs[j])
                    j += 1
                else:
                    out.append(self._item(app, j, lhs[i], rhs[j], ptr))
                    i += 1
                    j += 1
            out.extend(lhs[i:])
            out.extend(rhs[j:])
            return out
        if lhs is None and isinstance(rhs, (dict, list)):
            return None
        raise _error(ptr, strategy, "expects objects or arrays", lhs, rhs)

    # -- set ----------------------------------------------------------------------
    def _set(self, app: list, key: Sequence[str], lhs: Any, rhs: Any, ptr: str) -> Any:
        terms_l = _set_terms(lhs, ptr)
        terms_r = _set_terms(rhs, ptr)
        kinds = {type(v) for v in (*terms_l.values(), *terms_r.values())}
        if len(kinds) > 1:
            raise _error(ptr, "set", "expects add/intersect/remove terms of one type (all arrays or all objects)", lhs, rhs)
        is_obj = kinds == {dict}
        key = tuple(key) or ("",)
        la, li, lr = terms_l.get("add"), terms_l.get("intersect"), terms_l.get("remove")
        ra, ri, rr = terms_r.get("add"), terms_r.get("intersect"), terms_r.get("remove")
        add_app = [self.index.applicable(SchemaIndex.property_schemas(app, "add"), ra)] if ra is not None else [[]]
        ctx = _SetCtx(self, add_app[0], key, is_obj, push(ptr, "add"))
        out: dict = {}
        if ri is not None:
            # add: (LA ∩ RI) ∪ RA
            add = ctx.term(la, ri, True, "union", ra)
            if li is not None:
                inter = ctx.term(li, None, False, "both", ri, reduce_both=False)
            else:
                inter = ctx.term(lr, None, False, "right", ri, reduce_both=False)
        else:
            # add: (LA - RR) ∪ RA
            add = ctx.term(la, rr, False, "union", ra)
            if li is not None:
                inter = ctx.term(li, None, False, "left", rr, reduce_both=False)
            else:
                inter = None
                rem = ctx.term(lr, None, False, "union", rr, reduce_both=False)
                if add is not None:
                    out["add"] = add
                if rem is not None:
                    out["remove"] = rem
                return out
        if add is not None:
            out["add"] = add
        if inter is not None:
            out["intersect"] = inter
        return out


def _set_terms(v: Any, ptr: str) -> dict:
    if not isinstance(v, dict):
        raise _error(ptr, "set", f"expects an object having only 'add', 'intersect' and 'remove' properties (got {_short(v)})")
    for name, term in v.items():
        if name not in ("add", "intersect", "remove") or not isinstance(term, (list, dict)):
            raise _error(push(ptr, name), "set", "expects only 'add', 'intersect' and 'remove' properties holding arrays or objects")
    if "intersect" in v and "remove" in v:
        raise _error(ptr, "set", "does not allow 'intersect' and 'remove' in one document")
    return v


class _SetCtx:
    def __init__(self, reducer: Reducer, add_app: list, key, is_obj: bool, ptr: str):
        self.r, self.add_app, self.key, self.is_obj, self.ptr = reducer, add_app, key, is_obj, ptr

    def _cmp(self, a, b) -> int:
        if self.is_obj:
            return (a[0] > b[0]) - (a[0] < b[0])
        return compare_key(self.key, a, b)

    def term(self, lhs, sub, naught: bool, mask: str, rhs, reduce_both: bool = True):
        """``(LHS op1 SUB) op2 RHS`` as a sorted merge (Flow's set term builder)."""
        if rhs is None and lhs is None:
            return None
        left = list((lhs or {}).items()) if self.is_obj else list(lhs or [])
        right = list((rhs or {}).items()) if self.is_obj else list(rhs or [])
        if self.is_obj:
            left.sort(key=lambda kv: kv[0])
            right.sort(key=lambda kv: kv[0])
        if sub is not None:
            subs = sorted(sub.items(), key=lambda kv: kv[0]) if self.is_obj else list(sub)
            kept = []
            j = 0
            for item in left:
                while j < len(subs) and self._cmp(subs[j], item) < 0:
                    j += 1
                found = j < len(subs) and self._cmp(subs[j], item) == 0
                if found == naught:
                    kept.append(item)
            left = kept
        out = []
        i = j = 0
        while i < len(left) or j < len(right):
            if j >= len(right):
                c = -1
            elif i >= len(left):
                c = 1
            else:
                c = self._cmp(left[i], right[j])
            if c < 0:
                if mask in ("left", "union"):
                    out.append(left[i])
                i += 1
            elif c > 0:
                if mask in ("right", "union"):
                    out.append(right[j])
                j += 1
            else:
                if mask in ("both", "union"):
                    if reduce_both:
                        out.append(self._reduce_both(left[i], right[j], j))
                    else:
                        out.append(right[j])
                i += 1
                j += 1
        if self.is_obj:
            return dict(out)
        return out

    def _reduce_both(self, l, r, j):
        if self.is_obj:
            name = r[0]
            return (name, self.r._prop(self.add_app, name, l[1], r[1], self.ptr))
        return self.r._item(self.add_app, j, l, r, self.ptr)


def reduce(index: SchemaIndex, lhs: Any, rhs: Any) -> Any:
    return Reducer(index).reduce(lhs, rhs)
