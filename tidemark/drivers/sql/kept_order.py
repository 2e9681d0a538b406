"""A property ordered by another one that some documents lack (:attr:`FieldPlan.kept_order`),
reduced in the endpoint's statement (``drivers/sql/reduce.py``): the side whose value the
property keeps, and the order value the reduced row keeps for it in ``_tidemark``, as the
Python fold reduces them (:func:`kept_order_rule`; a dialect runs the rule as its functions:
:meth:`ReduceSql.kept_order`)."""

from __future__ import annotations

from typing import Any, Callable, Optional, Sequence

from tidemark.collection.plan import FieldPlan
from tidemark.collection.reduce import ORDER, TIDEMARK
from tidemark.drivers.common.columns import member_kind
from tidemark.drivers.sql.kept_forms import KeptOrderForms, LeanInstant
from tidemark.drivers.sql.model import Column

#: a dialect's SQL (``drivers/sql/reduce.py``'s ReduceSql, which imports this module)
ReduceSql = Any


class KeptOrder:
    """How the statement reduces a property ordered by another one that some documents lack
    (:attr:`FieldPlan.kept_order`), as the Python fold does
    (:meth:`tidemark.collection.reduce._Rooted._keep_times`): each side's order value for
    the property is the one its row keeps for it (``{"_tidemark": {"order": {name: …}}}``,
    ``null``: none), else the row's own order value; a side without one orders first.  The
    property's value is the side's that ``side`` names (``'o'`` stored, ``'n'`` staged; NULL
    where neither holds it): ``lastWriteWins`` the later side's (ties to the staged one),
    ``firstWriteWins`` the earlier's (ties to the stored one).  ``entry`` is the order value
    the reduced row keeps for it (JSON; NULL where it keeps none, or where it keeps ``null``:
    ``null`` says where), kept where it is not the row's reduced order value by comparison.
    The rule itself is the dialect's function (:meth:`ReduceSql.kept_order`): in SQL, each
    comparison of two order values repeats both (a date-time's instant reads its text eight
    times), and the rule compares each several times."""

    def __init__(
        self,
        forms: ReduceSql,
        f: FieldPlan,
        order: Optional[tuple[str, str, FieldPlan]],
        docs: tuple[str, str],
        holds: tuple[str, str],
    ):
        assert order is not None  # the stored and the staged order values, and the order property
        old_o, new_o, by = order
        self.f = f
        kind = member_kind(by)  # the kept value's: a date-time's text, a string, an integer or a boolean
        sides = []  # each side's (it keeps an order value for f, that value, its row's own)
        for doc, own in ((docs[0], old_o), (forms.staged_document(docs[1]), new_o)):
            values = forms.member(forms.member(doc, TIDEMARK), ORDER)
            held = f"({forms.member(values, f.name)} IS NOT NULL)"
            sides.append((held, forms.typed_or_null(values, f.name, Column(f.name, kind)), str(own)))
        last = f.strategy == "lastWriteWins"
        calls = self.calls = forms.kept_order(last, by, holds, sides[0], sides[1])
        self.kept = f"({sides[0][0]} OR {sides[1][0]})"  # a row keeps an order value for f
        self.rows: Optional[tuple[str, str, str]] = None
        if forms.KEPT_ORDER_ROWS:  # where neither row keeps an order value for f, the rows' own decide, in SQL
            self.rows = _rows_order(forms, last, by, holds, old_o, new_o)
            side, time, null = (f"(CASE WHEN {self.kept} THEN {a} ELSE {b} END)" for a, b in zip(calls, self.rows))
            # the side in SQL too (one comparison: a function call costs more), of each side's order value
            times = [f"(CASE WHEN {held} THEN {value} ELSE {own} END)" for held, value, own in sides]
            side = f"(CASE WHEN {self.kept} THEN {_side_sql(forms, last, by, holds, *times)} ELSE {self.rows[0]} END)"
            calls = side, time, null
        self.side, time, self.null = calls
        self.entry = forms.to_json(time, Column(f.name, kind))

    def pick(self, old: str, new: str) -> str:
        """The property's reduced value of the stored ``old`` and the staged ``new``."""
        return f"(CASE {self.side} WHEN 'o' THEN {old} WHEN 'n' THEN {new} END)"


def held(forms: ReduceSql, f: FieldPlan, docs: tuple[str, str]) -> tuple[str, str]:
    """Where the stored and the staged full document hold ``f``."""
    return f"({forms.member(docs[0], f.name)} IS NOT NULL)", f"({forms.member(docs[1], f.name)} IS NOT NULL)"


def _no_value(x: str) -> str:
    return f"({x.column} IS NULL)" if isinstance(x, LeanInstant) else f"({x} IS NULL)"


def _side_sql(forms: ReduceSql, last: bool, by: FieldPlan, holds: tuple[str, str], old: str, new: str) -> str:
    """:func:`kept_order_rule`'s side, of the two sides' order values ``old`` / ``new``."""
    old_holds, new_holds = holds
    staged_first = f"(NOT {_no_value(old)} AND ({_no_value(new)} OR {forms.precedes(new, old, by)}))"  # none first
    if last:
        return (
            f"(CASE WHEN NOT {new_holds} THEN (CASE WHEN {old_holds} THEN 'o' END) WHEN NOT {old_holds} THEN 'n' "
            f"WHEN {staged_first} THEN 'o' ELSE 'n' END)"
        )
    return (
        f"(CASE WHEN NOT {old_holds} THEN (CASE WHEN {new_holds} THEN 'n' END) WHEN NOT {new_holds} THEN 'o' "
        f"WHEN {staged_first} THEN 'n' ELSE 'o' END)"
    )


def _rows_order(
    forms: ReduceSql, last: bool, by: FieldPlan, holds: tuple[str, str], old: str, new: str
) -> tuple[str, str, str]:
    """:func:`kept_order_rule` where neither row keeps an order value for the property (each
    side's is its row's own, ``old`` / ``new``, compared as :meth:`ReduceSql.precedes` compares
    them: a lean date-time by its column where it can): ``(side, kept value, it is null)``."""
    precedes = forms.precedes
    no_old, no_new = (_no_value(x) for x in (old, new))
    side = _side_sql(forms, last, by, holds, old, new)
    # a side's own order value is the row's reduced one (the greater for lastWriteWins, the
    # lesser for firstWriteWins) where the other side's does not pass it
    old_own = f"(NOT {no_old} AND ({no_new} OR NOT {precedes(old, new, by) if last else precedes(new, old, by)}))"
    new_own = f"(NOT {no_new} AND ({no_old} OR NOT {precedes(new, old, by) if last else precedes(old, new, by)}))"
    time = (
        f"(CASE {side} WHEN 'o' THEN (CASE WHEN NOT {old_own} THEN {old} END) "
        f"WHEN 'n' THEN (CASE WHEN NOT {new_own} THEN {new} END) END)"
    )
    null = (
        f"((CASE {side} WHEN 'o' THEN {no_old} WHEN 'n' THEN {no_new} ELSE false END) AND NOT ({no_old} AND {no_new}))"
    )
    return side, time, null


def kept_order_rule(
    last: Any,
    key: Optional[Callable[[Any], Any]],
    old_holds: Any,
    new_holds: Any,
    has_old: Any,
    kept_old: Any,
    old_at: Any,
    has_new: Any,
    kept_new: Any,
    new_at: Any,
) -> tuple[Optional[str], Any, int]:
    """:class:`KeptOrder`'s rule, as the Python fold reduces it
    (:meth:`tidemark.collection.reduce._Rooted._keep_times`): ``(side, the kept order value or
    None, 1 where it is null else 0)``; ``key`` orders the order values (None: as they are; a
    date-time's: :func:`~tidemark.collection.formats.instant`).  SQLite runs it as its
    functions; PostgreSQL's functions are the same rule in PL/pgSQL (``drivers/postgres/dialect.py``)."""

    def order(v: Any) -> Any:
        return v if key is None else key(v)

    def before(a: Any, b: Any) -> bool:  # a side without an order value first
        return b is not None and (a is None or order(a) < order(b))

    t_old, t_new = (kept_old if has_old else old_at), (kept_new if has_new else new_at)
    if not old_holds and not new_holds:
        return None, None, 0
    if not old_holds or not new_holds:
        side = "o" if old_holds else "n"
    else:
        side = ("o" if last else "n") if before(t_new, t_old) else ("n" if last else "o")
    if old_at is None or new_at is None:
        own = new_at if old_at is None else old_at
    else:  # the row's reduced order value (maximized for lastWriteWins, minimized for firstWriteWins)
        own = old_at if (before(new_at, old_at) if last else before(old_at, new_at)) else new_at
    time = t_old if side == "o" else t_new
    if own is None and time is None or own is not None and time is not None and order(own) == order(time):
        return side, None, 0  # nothing kept: the row's own
    return side, time, int(time is None)


def with_kept_orders(forms: KeptOrderForms, doc: str, kept: Sequence[KeptOrder]) -> str:
    """The reduced document ``doc`` with its ``_tidemark`` member (:data:`TIDEMARK`): ``{"order":
    {…}}`` of the order values ``kept`` keep, removed where they keep none (tidemark's own
    member, rewritten whole by each reduction); NULL where nothing is left."""
    member = forms.kept_member(kept)
    if member is not None:  # {"_tidemark": …} or {}, each value once
        return forms.with_member(doc, TIDEMARK, member)
    values = forms.object_of([(k.f.name, k.entry, k.null) for k in kept])
    return forms.with_object(doc, TIDEMARK, forms.with_object("NULL", ORDER, values))
