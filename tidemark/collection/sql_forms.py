"""The strategies' SQL forms: the ``sql`` of each :class:`~tidemark.collection.strategies.Strategy`
(what it is: that module's docstring), for endpoints that reduce a batch's combined documents
into the stored ones themselves.  No SQL dialect is named here: everything SQL comes in ``Q``.
"""

from __future__ import annotations

from typing import Any

from tidemark.collection.formats import is_date_time_field


def sql_last(Q, f, old, new, order=None):
    """The later value; with an event-time ``order`` (``(stored, staged, order property)``,
    typed SQL values): the staged one unless its order value precedes the stored one's."""
    if order is not None:
        old_by, new_by, by = order
        return Q.coalesce(f"(CASE WHEN {Q.precedes(new_by, old_by, by)} THEN {old} ELSE {new} END)", new, old)
    return Q.coalesce(new, old)


def sql_first(Q, f, old, new, order=None):
    """The earlier value; with an event-time ``order``: the staged one only where its order
    value precedes the stored one's."""
    if order is not None:
        old_by, new_by, by = order
        return Q.coalesce(f"(CASE WHEN {Q.precedes(new_by, old_by, by)} THEN {new} ELSE {old} END)", old, new)
    return Q.coalesce(old, new)


def sql_present(Q: Any, f: Any, old: str, new: str, old_present: str, new_present: str) -> str:
    """A nullable property's pick (``type: [T, "null"]``, by the source order): ``null`` is a
    value like any other, so a side holds the property where ``old_present`` /
    ``new_present`` (SQL conditions) say, whatever its value; ``lastWriteWins`` takes the
    staged side's ``new`` where it holds it, else the stored ``old``; ``firstWriteWins`` the
    stored side's where it holds it, else the staged one's.  (:func:`sql_last`'s
    ``COALESCE(new, old)`` would take the stored value over a later ``null``.)"""
    if f.strategy == "firstWriteWins":
        return f"(CASE WHEN {old_present} THEN {old} ELSE {new} END)"
    return f"(CASE WHEN {new_present} THEN {new} ELSE {old} END)"


def sql_nullable_extreme(Q: Any, f: Any, old: str, new: str, old_null: str, new_null: str) -> str:
    """A nullable property maximized or minimized (``type: [T, "null"]``): ``null`` is the
    least value, as the Python fold orders JSON values.  ``old`` / ``new`` are SQL NULL for
    ``null`` as for absent; ``old_null`` / ``new_null`` say where a side holds ``null``.
    ``maximize`` is the greater value (``null`` only where no side holds one:
    :func:`sql_nullable_extreme_null`); ``minimize`` is ``null`` wherever a side holds it."""
    value = sql_minmax(f.strategy == "maximize")(Q, f, old, new)
    if f.strategy == "maximize":
        return value
    return f"(CASE WHEN {old_null} OR {new_null} THEN NULL ELSE {value} END)"


def sql_nullable_extreme_null(f: Any, old: str, new: str, old_null: str, new_null: str) -> str:
    """Where the result of :func:`sql_nullable_extreme` is ``null`` (not absent)."""
    if f.strategy == "maximize":
        return f"({old} IS NULL AND {new} IS NULL AND ({old_null} OR {new_null}))"
    return f"({old_null} OR {new_null})"


def sql_extreme_side(Q: Any, f: Any, old_held: str, new_held: str, old_null: str, new_null: str, order) -> str:
    """Which side a nullable date-time maximized or minimized (``type: [string, "null"]``,
    ``format: date-time``) keeps, as ``'o'`` (stored) or ``'n'`` (staged), NULL where neither
    side holds it: its value, its text and its ``null`` all come from that side.  ``old_held``
    / ``new_held``: where a side holds a date-time (SQL conditions; not ``null``, not absent);
    ``old_null`` / ``new_null``: where it holds ``null``; ``order``: the two sides' order values
    (:func:`sql_minmax`'s).  ``null`` is the least value (the Python fold's order of JSON
    values): ``maximize`` takes a date-time over it, ``minimize`` takes it wherever a side
    holds it; equal instants go to the staged side, as the fold's ties go to the later
    document."""
    old_by, new_by, by = order
    maximize = f.strategy == "maximize"
    keep_old = Q.precedes(new_by, old_by, by) if maximize else Q.precedes(old_by, new_by, by)
    values = f"WHEN NOT {old_held} THEN 'n' WHEN NOT {new_held} THEN 'o' WHEN {keep_old} THEN 'o' ELSE 'n'"
    if maximize:  # a date-time over null; null where no side holds one
        return (
            f"(CASE WHEN {old_held} OR {new_held} THEN (CASE {values} END) "
            f"WHEN {new_null} THEN 'n' WHEN {old_null} THEN 'o' END)"
        )
    return f"(CASE WHEN {new_null} THEN 'n' WHEN {old_null} THEN 'o' WHEN {old_held} OR {new_held} THEN (CASE {values} END) END)"


def sql_sum(Q, f, old, new):
    return Q.coalesce(Q.add(old, new, f), old, new)


def sql_minmax(maximize: bool):
    def form(Q, f, old, new, order=None):
        if is_date_time_field(f):  # compared as instants, kept as written: picked by ``order`` (itself)
            if order is None:
                return None
            old_by, new_by, by = order
            keep_old = Q.precedes(new_by, old_by, by) if maximize else Q.precedes(old_by, new_by, by)
            return Q.coalesce(f"(CASE WHEN {keep_old} THEN {old} ELSE {new} END)", new, old)
        return Q.coalesce((Q.greatest if maximize else Q.least)(old, new, f), old, new)

    return form


def sql_append(Q, f, old, new):
    return Q.coalesce(Q.concat_arrays(old, new), old, new)


def sql_union(Q, f, old, new):
    return Q.coalesce(Q.union_arrays(old, new, f), old, new)


def sql_merge(Q, f, old, new):
    # a map: the later value of each member wins, shallowly -- an undeclared member of an open
    # object may be an object (replaced whole) or null (kept), as the root merges
    return Q.coalesce(Q.merge_documents(old, new), old, new)
