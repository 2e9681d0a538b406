"""The SQL pieces a dialect gives :mod:`tidemark.drivers.sql.kept_order` (a property ordered by
another one that some documents lack, reduced in the statement): :class:`ReduceSql`'s base."""

from __future__ import annotations

from typing import Any, Optional, Sequence


class KeptOrderForms:
    """A dialect's SQL for :class:`~tidemark.drivers.sql.kept_order.KeptOrder`."""

    def set_members(self, doc: str, members: Sequence[tuple[str, str]], nulls: Sequence[tuple[str, str]] = ()) -> str:
        raise NotImplementedError  # ReduceSql's

    #: whether :class:`KeptOrder` decides in SQL where neither row keeps an order value (the
    #: dialect's functions decide the rest)
    KEPT_ORDER_ROWS = False

    #: the SQL run before the statement, in its transaction (the functions it calls), by name
    prelude: dict[str, str] = {}

    def kept_order(
        self, last: bool, by: Any, holds: tuple[str, str], old: tuple[str, str, str], new: tuple[str, str, str]
    ) -> tuple[str, str, str]:
        """:class:`KeptOrder`'s ``side``, its kept order value (typed SQL, NULL where none is kept
        or it is ``null``) and where it is ``null``, as calls of the dialect's functions of
        :func:`kept_order_rule` (an endpoint that reduces :data:`~tidemark.collection.sql_plan.KEPT_ORDER`):
        ``last``, ``lastWriteWins``; ``by``, the order property; ``holds``, where each side holds
        the property; ``old`` / ``new``, each side's (it keeps an order value for it, that value,
        its row's own order value)."""
        raise NotImplementedError

    def kept_member(self, kept: Sequence[Any]) -> Optional[str]:
        """The JSON object ``{"_tidemark": {"order": {…}}}`` of the order values ``kept`` keep, or
        ``{}``, where the dialect writes it at once (None: :func:`with_kept_orders` builds it)."""
        return None

    def with_member(self, doc: str, name: str, member: str) -> str:
        """``doc`` (a JSON object, or NULL) without its member ``name``, merged with the object
        ``member`` (which holds ``name`` or nothing); NULL where nothing is left."""
        raise NotImplementedError

    def object_of(self, members: Sequence[tuple[str, str, str]]) -> str:
        """A JSON object of ``(name, typed expression, SQL condition)`` members: each set to its
        expression's value where it is not NULL, to ``null`` where the condition holds, left
        out otherwise; NULL where none is set."""
        return self.set_members("NULL", [(n, e) for n, e, _ in members], [(n, c) for n, _, c in members])

    def with_object(self, doc: str, name: str, value: str) -> str:
        """``doc`` (a JSON object, or NULL) with the member ``name`` set to the JSON object
        ``value``, or removed where ``value`` is NULL; NULL where nothing is left (not
        :meth:`set_members`: MariaDB's and SQLite's JSON patches remove ``value``'s ``null``
        members)."""
        raise NotImplementedError


class LeanInstant(str):
    """A lean row's date-time on one side of the reduce statement, as an order value: the SQL
    of its text (the string itself: the remainder's, else the one its instant gives back),
    its column (the instant) and its remainder member (the text where kept, else NULL).  A
    dialect compares two by their columns where both texts name microsecond instants
    (:meth:`ReduceSql.precedes`), by their texts otherwise."""

    column: str
    kept: str

    def __new__(cls, text: str, column: str, kept: str) -> LeanInstant:
        out = super().__new__(cls, text)
        out.column, out.kept = column, kept
        return out
