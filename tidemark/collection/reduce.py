"""The generic reducer (Estuary Flow semantics), pure Python.

``reduce(index, lhs, rhs)`` combines two documents of one key; ``rhs`` is the later one
and its schema location decides the strategy at every location: :class:`Reducer` walks the
schema and applies each location's strategy from the table of
:mod:`tidemark.collection.strategies` (which also lists what each strategy does).  The deep
``merge`` and the ``set`` terms, which recurse into the schema, are written here.

Values that a location does not hold on one side are taken from the other side.  Errors
are :class:`~tidemark.errors.ReductionError` naming the JSON pointer and the strategy.
Deletions and the reset marker are handled one level up, in
:class:`tidemark.collection.collection.Collection`.
"""

from __future__ import annotations

from typing import Any, Optional, Sequence, cast

from tidemark.collection.order import MISSING, compare, compare_date_time, compare_key, is_date_time_location
from tidemark.collection.schema import SchemaIndex, pointer_tokens, push
from tidemark.collection.strategies import STRATEGIES
from tidemark.collection.strategies import reduction_error as _error
from tidemark.collection.strategies import short as _short

_FOLDS = {name: s.fold for name, s in STRATEGIES.items()}


# ----------------------------------------------------------------------------- reduce


class Reducer:
    """Reduces documents against one schema."""

    roots: Optional[tuple] = None  # the two documents being reduced, where a property orders by them

    def __init__(self, index: SchemaIndex):
        self.index = index
        self.property_orders = has_property_order(index.root)

    def reduce(self, lhs: Any, rhs: Any) -> Any:
        if self.property_orders:  # a property ordered by a top-level property of its documents
            return _Rooted(self, lhs, rhs).at([self.index.root], lhs, rhs, "")
        return self.at([self.index.root], lhs, rhs, "")

    def at(self, schemas: list, lhs: Any, rhs: Any, ptr: str) -> Any:
        app = self.index.applicable(schemas, rhs)
        ann = SchemaIndex.annotation(app)
        fold = _FOLDS.get(ann.strategy)
        if fold is None:
            raise _error(ptr, ann.strategy, "is not a known reduction strategy")
        return fold(self, app, ann, lhs, rhs, ptr)

    # -- what the strategies' folds recurse into -----------------------------------
    def key_orders(self, app: list, key: Sequence[str], rhs: Any) -> list:
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

    def _prop(self, app: list, name: str, lhs: Any, rhs: Any, ptr: str) -> Any:
        return self.at(SchemaIndex.property_schemas(app, name), lhs, rhs, push(ptr, name))

    def _item(self, app: list, index: int, lhs: Any, rhs: Any, ptr: str) -> Any:
        return self.at(SchemaIndex.item_schemas(app, index), lhs, rhs, push(ptr, index))

    def merge(self, app: list, key: Sequence[str], lhs: Any, rhs: Any, ptr: str, strategy: str) -> Any:
        if isinstance(lhs, dict) and isinstance(rhs, dict):
            out = dict(lhs)
            for name, r in rhs.items():
                out[name] = self._prop(app, name, lhs[name], r, ptr) if name in lhs else r
            return out
        if isinstance(lhs, list) and isinstance(rhs, list):
            if not key:
                items = [self._item(app, i, lhs[i], r, ptr) if i < len(lhs) else r for i, r in enumerate(rhs)]
                items.extend(lhs[len(rhs) :])
                return items
            merged: list = []
            i = j = 0
            while i < len(lhs) and j < len(rhs):
                c = compare_key(key, lhs[i], rhs[j])
                if c < 0:
                    merged.append(lhs[i])
                    i += 1
                elif c > 0:
                    merged.append(rhs[j])
                    j += 1
                else:
                    merged.append(self._item(app, j, lhs[i], rhs[j], ptr))
                    i += 1
                    j += 1
            merged.extend(lhs[i:])
            merged.extend(rhs[j:])
            return merged
        if lhs is None and isinstance(rhs, (dict, list)):
            return None
        raise _error(ptr, strategy, "expects objects or arrays", lhs, rhs)

    # -- set ----------------------------------------------------------------------
    def reduce_set(self, app: list, key: Sequence[str], lhs: Any, rhs: Any, ptr: str) -> Any:
        terms_l = _set_terms(lhs, ptr)
        terms_r = _set_terms(rhs, ptr)
        kinds = {type(v) for v in (*terms_l.values(), *terms_r.values())}
        if len(kinds) > 1:
            raise _error(
                ptr, "set", "expects add/intersect/remove terms of one type (all arrays or all objects)", lhs, rhs
            )
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


#: The member of a reduced document that keeps, per top-level property ordered by another
#: one (``reduce: {strategy: lastWriteWins, order: /at}``), the order value of the document the
#: property's value came from, where the document's own (reduced) order value is another:
#: ``{"_tidemark": {"order": {"status": "2024-05-01T09:00:00Z"}}}`` (``null``: that document
#: had none).  Documents that lack the property or the order value make it so; with both in
#: every document it never appears.
TIDEMARK = "_tidemark"
ORDER = "order"


class _Rooted(Reducer):
    """One reduction of two documents, which the folds below can read (``roots``): the
    reducer is shared (between threads too), this is not."""

    def __init__(self, base: Reducer, lhs: Any, rhs: Any):
        self.index = base.index
        self.property_orders = base.property_orders
        self.roots = (lhs, rhs)

    def timed_roots(self, ptr: str, order: str) -> tuple[Any, Any]:
        """The two documents as the property at ``ptr`` (top level) orders them: each one's
        own order value, or the one it keeps for that property (:data:`TIDEMARK`)."""
        name = ptr[1:].replace("~1", "/").replace("~0", "~")
        other = order[1:].replace("~1", "/").replace("~0", "~")
        lroot, rroot = cast(tuple, self.roots)
        return _timed(lroot, name, other), _timed(rroot, name, other)

    def at(self, schemas: list, lhs: Any, rhs: Any, ptr: str) -> Any:
        out = super().at(schemas, lhs, rhs, ptr)
        if ptr or not isinstance(out, dict) or not isinstance(lhs, dict) or not isinstance(rhs, dict):
            return out
        if SchemaIndex.annotation(self.index.applicable(schemas, rhs)).strategy != "merge":
            return out  # one side whole: its properties were not reduced one by one
        return self._keep_times(out, lhs, rhs)

    def _keep_times(self, out: dict, lhs: dict, rhs: dict) -> dict:
        """``out`` with :data:`TIDEMARK` set for each top-level property ordered by another one
        whose value came from a document whose order value is not ``out``'s."""
        kept: dict = {}
        app = self.index.applicable([self.index.root], out)
        for name, other, first in property_orders(self.index.root):
            if name not in out:
                continue
            ptr, key = push("", name), (push("", other),)
            sides = [side for side in (lhs, rhs) if name in side]
            if len(sides) == 2:
                lroot, rroot = self.timed_roots(ptr, key[0])
                orders = self.key_orders(app, key, rroot)
                later = compare_key(key, lroot, rroot, orders) > 0
                winner = (lhs, rhs)[int(later) if first else int(not later)]
            else:
                winner = sides[0]
            time = _timed(winner, name, other).get(other, MISSING)
            own = out.get(other, MISSING)
            if time is MISSING and own is MISSING:
                continue
            same = time is not MISSING and own is not MISSING
            if same and compare_key(key, {other: time}, {other: own}, self.key_orders(app, key, out)):
                same = False
            if not same:
                kept[name] = None if time is MISSING else time
        # tidemark's own: a reduction rewrites it whole (a source document's other members of it
        # would stay or go with how the documents were split into batches)
        if kept:
            return {**out, TIDEMARK: {ORDER: kept}}
        if TIDEMARK in out:
            out = {k: v for k, v in out.items() if k != TIDEMARK}
        return out


def _timed(root: Any, name: str, other: str) -> Any:
    """``root`` as property ``name`` orders it: ``{other: the order value it keeps for name}``
    where it keeps one (:data:`TIDEMARK`; ``{}`` for none), else ``root`` itself."""
    meta = root.get(TIDEMARK) if isinstance(root, dict) else None
    kept = meta.get(ORDER) if isinstance(meta, dict) else None
    if isinstance(kept, dict) and name in kept:
        return {} if kept[name] is None else {other: kept[name]}
    return root


def property_orders(root: Any) -> list[tuple[str, str, bool]]:
    """Each top-level property (not an object) ordered by another top-level property: ``(name,
    the order property's name, firstWriteWins)``."""
    out: list[tuple[str, str, bool]] = []
    if not isinstance(root, dict):
        return out
    for s in [root, *(m for m in root.get("allOf") or () if isinstance(m, dict))]:
        for name, sub in (s.get("properties") or {}).items():
            red = sub.get("reduce") if isinstance(sub, dict) else None
            types = sub.get("type") if isinstance(sub, dict) else None
            order = red.get("order") if isinstance(red, dict) else None
            if isinstance(red, dict) and isinstance(order, str) and order and types != "object":
                other = order[1:].replace("~1", "/").replace("~0", "~")
                out.append((name, other, red.get("strategy") == "firstWriteWins"))
    return out


def has_property_order(root: Any) -> bool:
    """True if a top-level property that is not an object has ``reduce.order``."""
    return bool(property_orders(root))


def _set_terms(v: Any, ptr: str) -> dict:
    if not isinstance(v, dict):
        raise _error(
            ptr, "set", f"expects an object having only 'add', 'intersect' and 'remove' properties (got {_short(v)})"
        )
    for name, term in v.items():
        if name not in ("add", "intersect", "remove") or not isinstance(term, (list, dict)):
            raise _error(
                push(ptr, name),
                "set",
                "expects only 'add', 'intersect' and 'remove' properties holding arrays or objects",
            )
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

    def _reduce_both(self, left, r, j):
        if self.is_obj:
            name = r[0]
            return (name, self.r._prop(self.add_app, name, left[1], r[1], self.ptr))
        return self.r._item(self.add_app, j, left, r, self.ptr)


def reduce(index: SchemaIndex, lhs: Any, rhs: Any) -> Any:
    return Reducer(index).reduce(lhs, rhs)
