"""Reduce in the endpoint: the statement that reduces a batch's staged documents into a
table's stored ones, in the commit's transaction, written once over a dialect.

A binding the runtime marks ``endpoint_reduce`` gets no Loads; its Stores carry the batch's
combined documents (one per key), staged as usual.  At commit, instead of the plain upsert,
one ``INSERT … SELECT … ON CONFLICT DO UPDATE`` sets each value column and the document
column from the stored row (``OLD``) and the staged one (``NEW``), by the SQL form of each
property's strategy (``Strategy.sql`` in :mod:`tidemark.collection.strategies`; the plan
from :func:`tidemark.collection.sql_plan.sql_reduction`):

* root ``merge``: the document is ``OLD || NEW`` (a later top-level value wins: every
  ``lastWriteWins`` property and every property the schema does not declare), then the
  reduced value of every other declared property on top; a typed column is computed from
  the stored column — or, where that is NULL, the stored *document*'s value (a column
  added after the row was written is NULL there) — and the staged column;
* root ``lastWriteWins``: the plain upsert; root ``firstWriteWins``: ``DO NOTHING``.

An object of declared members (``kind == "object"``: :attr:`FieldPlan.members`, each with a
strategy of its own) is reduced member by member (:func:`object_sql`): both sides' objects
merged shallowly as the root merges (a later value winning: each member last written, each
member the schema does not declare, whatever its value), then each other member set to its
strategy's result over the two sides' values; it is the lean row's JSON column, or a member
of the full row's document.  A member's ``sum`` that leaves its type fails the statement,
and the transactor names the key and ``/object/member`` (:meth:`ReduceSql.overflow_query`).

A nullable property (``type: [T, "null"]``, reduced by ``lastWriteWins`` /
``firstWriteWins``: :attr:`TableModel.nullable`) holds ``null`` as a value like any other,
apart from absent (:func:`~tidemark.collection.sql_forms.sql_present`): a side holds it where
its document has the member.  Its column is NULL for ``null`` as for absent; a full row's
document keeps the member ``null`` (the root merge keeps a later ``null``), a lean row's
remainder keeps it (the ``nulls`` of :meth:`ReduceSql.set_members`).

Only the keys and the document's JSON text are staged (``StoreTexts``: no Python object
per document); the value columns are read from the staged document in the statement
(:func:`reduce_sources`).  A key is staged once per transaction (the runtime combines per
key), so no row is affected twice.  :class:`ReduceSql` holds the dialect's pieces; PostgreSQL's is
``drivers/postgres/dialect.py``.
"""

from __future__ import annotations

from typing import Callable, Optional, Sequence

from tidemark.collection.formats import is_date_time_field
from tidemark.collection.plan import CompiledPlan, FieldPlan
from tidemark.collection.sql_forms import (
    sql_extreme_side,
    sql_nullable_extreme,
    sql_nullable_extreme_null,
    sql_present,
)
from tidemark.collection.strategies import STRATEGIES
from tidemark.drivers.common.columns import member_kind
from tidemark.drivers.sql.kept_forms import KeptOrderForms, LeanInstant
from tidemark.drivers.sql.model import (
    DOCUMENT_COLUMN,
    JSON,
    STAGED_DOCUMENT,
    TEXT,
    TIMESTAMP,
    Column,
    TableModel,
    staged_column,
)

OLD = "t"  # the stored row's alias
NEW = "excluded"  # the staged row, as ON CONFLICT names it

#: strategies whose reduced scalar is computed (typed) rather than picked as JSON
COMPUTED = frozenset(("sum", "maximize", "minimize"))


class ReduceSql(KeptOrderForms):
    """A dialect's SQL for reducing in the endpoint (PostgreSQL's is the reference)."""

    staged_alias = ""  # the staging table's alias in the statement's sources ("": none)
    null_document = "NULL"  # the staged document of typed values (there is none)
    staged_values = False  # set for a statement over typed values (``StoreRows``), not documents

    def __init__(self, quote: Callable[[str], str]):
        self.quote = quote

    def overflow_query(
        self,
        model: TableModel,
        staging: str,
        f: FieldPlan,
        col: Column,
        typed: bool,
        within: Optional[FieldPlan] = None,
    ) -> str:
        """The first staged key whose ``sum`` of ``f`` leaves its type: ``keys..., left, right``
        (``typed``: the staging table holds typed values, not the document; ``within``: the
        object ``f`` is a member of, ``col`` then the member's kind, named by the member)."""
        raise NotImplementedError

    # the strategies' building blocks (``Strategy.sql`` composes them)
    def coalesce(self, *xs: str) -> str:
        return f"COALESCE({', '.join(xs)})"

    def add(self, old: str, new: str, f: FieldPlan) -> str:
        return f"({old} + {new})"

    def greatest(self, old: str, new: str, f: FieldPlan) -> str:
        raise NotImplementedError

    def least(self, old: str, new: str, f: FieldPlan) -> str:
        raise NotImplementedError

    def precedes(self, a: str, b: str, f: FieldPlan) -> str:
        """True where the scalar ``a`` orders before ``b`` as the Python fold compares them
        (strings by code point; a ``date-time``'s texts by the instants they name): an
        event-time ``order``'s comparison, and a date-time's ``maximize`` / ``minimize``."""
        if is_date_time_field(f):
            return f"(({', '.join(self.instant(a))}) < ({', '.join(self.instant(b))}))"
        return f"({a} < {b})"

    def instant(self, text: str) -> tuple[str, str, str]:
        """A valid RFC 3339 date-time's text as the Python fold orders it
        (:func:`tidemark.collection.formats.instant`): the UTC second it names (a leap second
        as ``:59``), then whether it is a leap second, then its fraction's digits without
        trailing zeros (compared as bytes).  The positions are fixed: ``YYYY-MM-DDTHH:MM:SS``,
        an optional fraction, then ``Z`` or ``±HH:MM``."""
        raise NotImplementedError

    def concat_arrays(self, old: str, new: str) -> str:
        raise NotImplementedError

    def union_arrays(self, old: str, new: str, f: FieldPlan) -> str:
        """Both arrays' values (``f``'s items), each once, in the order first seen
        (``union``); NULL where either side is, or where both are empty."""
        raise NotImplementedError

    def merge_documents(self, old: str, new: str) -> str:
        """The root's shallow merge: every top-level member of both, the right side's winning
        whatever its value (an object replaced whole, a ``null`` kept); also an object of
        declared members' (:func:`object_sql`) and a map's (``merge``: an undeclared member
        of an open object may be an object or ``null``): ``old`` / ``new`` any JSON object
        expressions, NULL where absent."""
        raise NotImplementedError

    def column(self, side: str, quoted: str) -> str:
        """A column of the stored row (``side`` :data:`OLD`) or of the staged one (:data:`NEW`)."""
        return f"{side}.{quoted}"

    # documents
    def document(self, alias: str) -> str:
        """The row's document as the dialect's JSON value."""
        raise NotImplementedError

    def member(self, doc: str, name: str) -> str:
        """A top-level property of a document, as JSON (NULL where absent)."""
        raise NotImplementedError

    def typed(self, doc: str, name: str, col: Column) -> str:
        """A top-level property of a document, as the column ``col``'s SQL value."""
        raise NotImplementedError

    def typed_or_null(self, doc: str, name: str, col: Column) -> str:
        """A nullable property of a document as the column ``col``'s SQL value: NULL where the
        member is ``null``, as where it is absent (:meth:`typed` where it gives NULL for ``null``)."""
        return self.typed(doc, name, col)

    def holds_null(self, doc: str, name: str) -> str:
        """True where the document's member ``name`` is ``null`` (false where it is absent,
        or where the document is NULL): there, but no text."""
        return f"({self.member(doc, name)} IS NOT NULL AND {self.typed(doc, name, Column(name, TEXT))} IS NULL)"

    def staged_document(self, new_doc: str) -> str:
        """The staged side's document a lean statement asks whether it holds a member (a
        nullable property's ``null`` too): ``new_doc``, the staged row's remainder (``ON
        CONFLICT``'s row holds nothing else), or where the dialect can name it the whole
        staged document (one expression fewer to repeat)."""
        return new_doc

    def remainder(self, doc: str, names: Sequence[str]) -> str:
        """``doc`` without the members ``names``, NULL where nothing is left (a lean row's
        ``flow_document``)."""
        raise NotImplementedError

    def to_json(self, expr: str, col: Column) -> str:
        """A typed value as JSON, as :meth:`with_members` takes a member's expression."""
        raise NotImplementedError

    # a lean row's date-times (``Dialect.lean_date_times``): a column of the instant, the text
    # in the remainder where the instant does not give it back (drivers/sql/lean.py)
    def canonical_instant(self, expr: str) -> str:
        """The text a timestamp column's value gives back
        (:func:`~tidemark.drivers.common.datetimes.canonical_date_time`)."""
        raise NotImplementedError

    def to_timestamp(self, text: str) -> str:
        """A date-time's text as the timestamp column's value."""
        raise NotImplementedError

    def differs(self, a: str, b: str) -> str:
        """True where two texts differ in any character (case too)."""
        return f"({a} <> {b})"

    def set_members(self, doc: str, members: Sequence[tuple[str, str]], nulls: Sequence[tuple[str, str]] = ()) -> str:
        """``doc`` (a JSON object, or NULL for none) with each ``(name, text expression)`` of
        ``members`` set, or removed where the expression is NULL, then the member ``"name":
        null`` for each ``(name, SQL condition)`` of ``nulls`` whose condition holds (the member
        is not in the object there); NULL where nothing is left.  One call for both: MariaDB's
        and SQLite's JSON patches remove a member set to ``null`` (``nulls`` are inserted
        instead), and MariaDB 10.11 crashes on some ``NULLIF``s of JSON functions nested in
        one another."""
        raise NotImplementedError

    #: whether :meth:`with_members` sets a member that ``doc`` holds to ``null`` where its
    #: expression is SQL NULL (``JSON_REPLACE``, ``json_replace``); PostgreSQL leaves a member
    #: of ``members`` as it is there, and a nullable property maximized or minimized is set
    #: ``null`` after it (:meth:`set_members`)
    REPLACES_WITH_NULL = True

    def with_members(
        self,
        doc: str,
        members: Sequence[tuple[str, str]],
        nullable: Sequence[tuple[str, str]],
        present: Sequence[tuple[str, str]] = (),
    ) -> str:
        """``doc`` with each ``(name, JSON expression)`` set; ``members`` are NULL where the
        property is absent on both sides (and then left out), or (a nullable property
        maximized or minimized) where it is ``null``: see :attr:`REPLACES_WITH_NULL`; ``nullable`` may hold JSON
        ``null`` values inside (also left out where the expression is SQL NULL); ``present``
        are never NULL (required properties: every document has them)."""
        raise NotImplementedError

    def insert_head(self, table: str, target: str, source: str, staged: str) -> str:
        return f"INSERT INTO {table} AS {OLD} ({target}) SELECT {source} FROM {staged}"

    def on_conflict(self, keys: Sequence[str], sets: Sequence[tuple[str, str]]) -> str:
        if not sets:
            return f"ON CONFLICT ({', '.join(keys)}) DO NOTHING"
        return f"ON CONFLICT ({', '.join(keys)}) DO UPDATE SET " + ", ".join(f"{c} = {e}" for c, e in sets)


def reduce_statement(
    forms: ReduceSql,
    table: str,
    model: TableModel,
    plan: CompiledPlan,
    staged: str,
    target: Sequence[str],
    source: Sequence[str],
) -> str:
    """The ``INSERT … ON CONFLICT`` that reduces the staged rows ``staged`` into ``model``'s
    table ``table`` (quoted; ``target``: its quoted columns, keys first, the document last;
    ``source``: the staging columns that fill them)."""
    quote = forms.quote
    n = len(model.keys)
    head = forms.insert_head(table, ", ".join(target), ", ".join(source), staged)
    keys = list(target[:n])
    if plan.root_strategy == "firstWriteWins":
        return f"{head} {forms.on_conflict(keys, [])}"
    if plan.root_strategy == "lastWriteWins":
        return f"{head} {forms.on_conflict(keys, [(c, forms.column(NEW, c)) for c in target[n:]])}"
    fields = {f.name: f for f in plan.fields}
    old_doc, new_doc = forms.document(OLD), forms.document(NEW)
    if model.lean:
        return f"{head} {forms.on_conflict(keys, _lean_sets(forms, model, fields, target, old_doc, new_doc))}"
    sets: list[tuple[str, str]] = []
    from tidemark.drivers.sql.kept_order import KeptOrder, held, with_kept_orders

    docs = (old_doc, new_doc)
    kept = {
        f.name: KeptOrder(forms, f, _order(forms, model, fields, f, *docs), docs, held(forms, f, docs))
        for f in plan.fields
        if f.kept_order
    }

    typed: dict[str, str] = {}  # a computed scalar's expression, per property
    extreme_nulls: list[tuple[str, str]] = []  # a nullable property maximized or minimized: where it is null
    for col in model.values:
        f = fields.get(col.name)
        if f is None or f.kind != "scalar":
            raise ValueError(f"column {col.name!r} is not a top-level scalar of the plan")
        # the stored column, or where it is NULL the document's value (a column added after
        # the row was written is NULL there; the document holds the value)
        old = forms.coalesce(forms.column(OLD, quote(col.name)), _typed(forms, model, old_doc, col))
        new = forms.column(NEW, quote(col.name))
        if f.kept_order:  # the side its kept order value picks
            sets.append((quote(col.name), kept[f.name].pick(old, new)))
            continue
        if f.nullable and f.picked_by == f.name:  # a date-time maximized or minimized: one side's value
            side = _extreme_side(forms, f, _order(forms, model, fields, f, old_doc, new_doc), old_doc, new_doc)
            sets.append((quote(col.name), f"(CASE {side} WHEN 'o' THEN {old} WHEN 'n' THEN {new} END)"))
            continue
        if f.nullable and f.strategy in ("maximize", "minimize"):  # null the least value
            old_null, new_null = forms.holds_null(old_doc, f.name), forms.holds_null(new_doc, f.name)
            expr = sql_nullable_extreme(forms, f, old, new, old_null, new_null)
            sets.append((quote(col.name), expr))
            typed[f.name] = forms.to_json(expr, col)  # NULL where null: see REPLACES_WITH_NULL
            if not forms.REPLACES_WITH_NULL:
                extreme_nulls.append((f.name, sql_nullable_extreme_null(f, old, new, old_null, new_null)))
            continue
        if f.nullable:  # a side holds it where its document has the member (``null`` too)
            old_present, new_present = (f"({forms.member(d, f.name)} IS NOT NULL)" for d in (old_doc, new_doc))
            expr = sql_present(forms, f, old, new, old_present, new_present)
        else:
            expr = _sql(f, forms, old, new, _order(forms, model, fields, f, old_doc, new_doc))
        sets.append((quote(col.name), expr))
        if f.strategy in COMPUTED and not f.picked_by:
            typed[f.name] = forms.to_json(expr, col)
    members: list[tuple[str, str]] = []
    nullable: list[tuple[str, str]] = []
    present: list[tuple[str, str]] = []
    for f in plan.fields:
        if f.strategy == "lastWriteWins" and not f.order:
            continue  # OLD || NEW
        if f.name in typed:
            (present if f.name in plan.required else members).append((f.name, typed[f.name]))
        elif f.kind == "scalar" and f.strategy in COMPUTED and not f.picked_by:  # no column (a long name)
            col = Column(f.name, member_kind(f))
            members.append(
                (
                    f.name,
                    forms.to_json(
                        _sql(f, forms, forms.typed(old_doc, f.name, col), forms.typed(new_doc, f.name, col)), col
                    ),
                )
            )
        elif f.kind == "object":  # member by member; an undeclared member may be null
            nullable.append(
                (f.name, object_sql(forms, f, forms.member(old_doc, f.name), forms.member(new_doc, f.name)))
            )
        else:  # picked or concatenated as JSON
            order = _order(forms, model, fields, f, old_doc, new_doc)
            old_member, new_member = forms.member(old_doc, f.name), forms.member(new_doc, f.name)
            if f.kept_order:
                members.append((f.name, kept[f.name].pick(old_member, new_member)))
                continue
            if f.nullable and f.picked_by == f.name:  # the side's date-time, or its null
                side = _extreme_side(forms, f, order, old_doc, new_doc)
                expr = f"(CASE {side} WHEN 'o' THEN {old_member} WHEN 'n' THEN {new_member} END)"
            else:
                expr = _sql(f, forms, old_member, new_member, order)
            # raw JSON and a map (its undeclared members may be null) are set as they are
            (nullable if f.kind in ("raw", "map") or f.nullable else members).append((f.name, expr))
    doc = forms.with_members(forms.merge_documents(old_doc, new_doc), members, nullable, present)
    if extreme_nulls:
        doc = forms.set_members(doc, (), extreme_nulls)
    if kept:
        doc = with_kept_orders(forms, doc, list(kept.values()))
    sets.append((target[-1], doc))
    return f"{head} {forms.on_conflict(keys, sets)}"


def _lean_sets(
    forms: ReduceSql, model: TableModel, fields: dict[str, FieldPlan], target: Sequence[str], old_doc: str, new_doc: str
) -> list[tuple[str, str]]:
    """The lean row's ``SET``s: each column reduced from the stored column and the staged
    one, the remainder (``flow_document``: what no column holds) merged as the root merges
    undeclared members, a later value winning.  A nullable property is held by a side where
    its column is not NULL or its remainder has the member (``null``); the remainder keeps
    the winner's ``null`` and nothing of the property beside a value."""
    quote = forms.quote
    sets: list[tuple[str, str]] = []
    # a date-time's text: the remainder's, else the one its column gives back
    texts = {c.name: _instants(forms, c, old_doc, new_doc) for c in model.values if c.kind == TIMESTAMP}
    reduced: list[tuple[str, str]] = []  # each date-time's text kept in the remainder (NULL: none)
    nulls: list[tuple[str, str]] = []  # each nullable property's null in the remainder: (name, where the winner's is)
    from tidemark.drivers.sql.kept_order import KeptOrder, with_kept_orders

    kept: list[KeptOrder] = []  # each property ordered by another that some documents lack
    # a property ordered by another one first: MariaDB assigns left to right, each assignment
    # seeing the ones before it, and the order property's stored value is read here
    for col in sorted(model.values, key=lambda c: not fields[c.name].order):
        f = fields[col.name]
        order = _order(forms, model, fields, f, old_doc, new_doc, texts)
        present = _lean_presence(forms, col, old_doc, new_doc) if f.nullable else None
        if present is not None and col.name in texts and f.strategy in ("maximize", "minimize"):
            # a date-time by its instant, null the least value: one side's column, text and null
            old, new = texts[col.name]
            old_null = forms.holds_null(old_doc, col.name)
            new_null = forms.holds_null(forms.staged_document(new_doc), col.name)
            held = (f"({old.column} IS NOT NULL)", f"({new.column} IS NOT NULL)")
            side = sql_extreme_side(forms, f, *held, old_null, new_null, order)
            nulls.append((col.name, sql_nullable_extreme_null(f, old.column, new.column, old_null, new_null)))
            sets.append((quote(col.name), f"(CASE {side} WHEN 'o' THEN {old.column} ELSE {new.column} END)"))
            reduced.append((col.name, f"(CASE {side} WHEN 'o' THEN {old.kept} ELSE {new.kept} END)"))
            continue
        if present is not None and f.strategy in ("maximize", "minimize"):  # null the least value
            old_null = forms.holds_null(old_doc, col.name)
            new_null = forms.holds_null(forms.staged_document(new_doc), col.name)
            old_value = forms.coalesce(forms.column(OLD, quote(col.name)), _read(forms, old_doc, col, True))
            new_value = forms.column(NEW, quote(col.name))
            nulls.append((col.name, sql_nullable_extreme_null(f, old_value, new_value, old_null, new_null)))
            sets.append((quote(col.name), sql_nullable_extreme(forms, f, old_value, new_value, old_null, new_null)))
            continue
        if present is not None:  # the winner's null, where it holds one
            old_null = forms.holds_null(old_doc, col.name)
            new_null = forms.holds_null(forms.staged_document(new_doc), col.name)
            nulls.append((col.name, sql_present(forms, f, old_null, new_null, *present)))
        if f.kept_order and col.name in texts:  # a date-time: the column and the text of the side picked
            old, new = texts[col.name]
            holds = (f"({old.column} IS NOT NULL)", f"({new.column} IS NOT NULL)")
            kept.append(KeptOrder(forms, f, order, (old_doc, new_doc), holds))
            sets.append((quote(col.name), kept[-1].pick(old.column, new.column)))
            reduced.append((col.name, kept[-1].pick(old.kept, new.kept)))
            continue
        if col.name in texts:  # picked as an instant: the winner's column, and its text if kept
            old, new = texts[col.name]
            if present is not None:
                side = sql_present(forms, f, "'o'", "'n'", *present)
            else:
                side = _sql(
                    f,
                    forms,
                    f"(CASE WHEN {old.column} IS NOT NULL THEN 'o' END)",
                    f"(CASE WHEN {new.column} IS NOT NULL THEN 'n' END)",
                    order,
                )
            sets.append((quote(col.name), f"(CASE {side} WHEN 'o' THEN {old.column} ELSE {new.column} END)"))
            reduced.append((col.name, f"(CASE {side} WHEN 'o' THEN {old.kept} ELSE {new.kept} END)"))
            continue
        # a column added after the row was written is NULL there; the remainder held its value
        old_value = forms.coalesce(forms.column(OLD, quote(col.name)), _read(forms, old_doc, col, f.nullable))
        new_value = forms.column(NEW, quote(col.name))
        if present is not None:
            sets.append((quote(col.name), sql_present(forms, f, old_value, new_value, *present)))
            continue
        if f.kept_order:
            holds = (f"({old_value} IS NOT NULL)", f"({new_value} IS NOT NULL)")
            kept.append(KeptOrder(forms, f, order, (old_doc, new_doc), holds))
            sets.append((quote(col.name), kept[-1].pick(old_value, new_value)))
            continue
        if f.kind == "object":
            sets.append((quote(col.name), object_sql(forms, f, old_value, new_value)))
            continue
        expr = _sql(f, forms, old_value, new_value, order)
        sets.append((quote(col.name), _absent_both(old_value, new_value, expr) if f.kind != "scalar" else expr))
    merged = forms.coalesce(forms.merge_documents(old_doc, new_doc), old_doc, new_doc)
    # a nullable property's member: only the winner's null, never beside a value (removed, then set where it is)
    removed = [(name, "NULL") for name, _ in nulls if name not in texts]
    if reduced or nulls:
        merged = forms.set_members(merged, removed + reduced, nulls)
    if kept:  # (its order value may be kept where neither side's remainder holds anything)
        merged = with_kept_orders(forms, merged, kept)
    sets.append((target[-1], merged if kept else _absent_both(old_doc, new_doc, merged)))
    return sets


def _lean_presence(forms: ReduceSql, col: Column, old_doc: str, new_doc: str) -> tuple[str, str]:
    """Where the stored and the staged lean row hold a nullable property: its column is not
    NULL, or its remainder has the member (its ``null``; or a value, kept there before the
    property had a column)."""
    return (
        f"({forms.column(OLD, forms.quote(col.name))} IS NOT NULL OR {forms.member(old_doc, col.name)} IS NOT NULL)",
        f"({forms.column(NEW, forms.quote(col.name))} IS NOT NULL OR "
        f"{forms.member(forms.staged_document(new_doc), col.name)} IS NOT NULL)",
    )


#: what decides a picked property's value: (stored, staged, the order property)
Order = tuple[str, str, FieldPlan]


def _instants(forms: ReduceSql, c: Column, old_doc: str, new_doc: str) -> tuple[LeanInstant, LeanInstant]:
    out = []
    for side, doc in ((OLD, old_doc), (NEW, new_doc)):
        column = forms.column(side, forms.quote(c.name))
        kept = forms.typed(doc, c.name, Column(c.name, TEXT))
        out.append(LeanInstant(forms.coalesce(kept, forms.canonical_instant(column)), column, kept))
    return out[0], out[1]


def _kept(forms: ReduceSql, text: str) -> str:
    """A date-time's text where its instant does not give it back, else NULL (not kept)."""
    canonical = forms.canonical_instant(forms.to_timestamp(text))
    return f"(CASE WHEN {forms.differs(text, canonical)} THEN {text} END)"


def object_sql(forms: ReduceSql, f: FieldPlan, old: str, new: str) -> str:
    """An object of declared members (``f.kind == "object"``) reduced member by member, from
    the stored object ``old`` and the staged one ``new`` (JSON, NULL where absent): both
    merged shallowly as the root merges (:meth:`ReduceSql.merge_documents`: the later value
    of each member last written and of each the schema does not declare, an object or a
    ``null`` among them, replaced whole as the Python fold replaces it), then each other
    member set to its strategy's result over the two sides' values -- typed where computed
    (``sum``, ``maximize``, ``minimize``: :meth:`ReduceSql.typed`, back to JSON by
    :meth:`ReduceSql.to_json`), as JSON where picked (``firstWriteWins``).  A member absent
    on both sides stays absent (its result is NULL); the object absent on both sides is NULL."""
    merged = forms.coalesce(forms.merge_documents(old, new), old, new)
    reduced: list[tuple[str, str]] = []  # (member, its reduced JSON): NULL where both sides lack it
    for part in f.members:
        if part.strategy == "lastWriteWins":  # the merge's later value
            continue
        if part.kind == "object":  # a merged object member: member by member, as its object
            old_member, new_member = forms.member(old, part.member), forms.member(new, part.member)
            reduced.append((part.member, object_sql(forms, part, old_member, new_member)))
        elif part.picked_by:  # a date-time maximized or minimized: the value of the side its instant picks
            text = Column(part.member, TEXT)
            order = (forms.typed(old, part.member, text), forms.typed(new, part.member, text), part)
            old_member, new_member = forms.member(old, part.member), forms.member(new, part.member)
            reduced.append((part.member, _sql(part, forms, old_member, new_member, order)))
        elif part.strategy in COMPUTED:
            col = Column(part.member, member_kind(part))
            typed_old, typed_new = forms.typed(old, part.member, col), forms.typed(new, part.member, col)
            reduced.append((part.member, forms.to_json(_sql(part, forms, typed_old, typed_new), col)))
        else:
            reduced.append(
                (part.member, _sql(part, forms, forms.member(old, part.member), forms.member(new, part.member)))
            )
    return _absent_both(old, new, forms.with_members(merged, reduced, ()) if reduced else merged)


def _extreme_side(forms: ReduceSql, f: FieldPlan, order: Optional[Order], old_doc: str, new_doc: str) -> str:
    """The side a full row's nullable date-time maximized or minimized comes from
    (:func:`~tidemark.collection.sql_forms.sql_extreme_side`), by the documents' texts."""
    assert order is not None  # picked by itself
    held = (f"({order[0]} IS NOT NULL)", f"({order[1]} IS NOT NULL)")
    nulls = (forms.holds_null(old_doc, f.name), forms.holds_null(new_doc, f.name))
    return sql_extreme_side(forms, f, *held, *nulls, order)


def _absent_both(old: str, new: str, expr: str) -> str:
    """``expr``, NULL where the property is absent on both sides (a dialect's JSON functions
    may make an empty object of two NULLs)."""
    return f"(CASE WHEN {old} IS NULL AND {new} IS NULL THEN NULL ELSE {expr} END)"


def _read(forms: ReduceSql, doc: str, col: Column, nullable: bool = False) -> str:
    """A lean column's value in a document: JSON, or typed (``nullable``: NULL for ``null`` too)."""
    if col.kind == JSON:
        return forms.member(doc, col.name)
    return forms.typed_or_null(doc, col.name, col) if nullable else forms.typed(doc, col.name, col)


def _typed(forms: ReduceSql, model: TableModel, doc: str, col: Column) -> str:
    """A document's value of the column ``col`` (NULL for a nullable property's ``null``)."""
    if col.name in model.nullable:
        return forms.typed_or_null(doc, col.name, col)
    return forms.typed(doc, col.name, col)


def reduce_sources(forms: ReduceSql, model: TableModel, staged: str = "") -> list[str]:
    """The staging expressions that fill the table's columns (keys, values, document) when
    only the keys (``col0``…) and the document's JSON (``document``) were staged: each value column
    is read from the staged document (``staged``: the staging table's alias, if any); a
    lean row's ``flow_document`` is the members no column holds (a nullable property's
    ``null`` among them), NULL where none."""
    at = f"{staged}." if staged else ""
    doc = f"{at}{STAGED_DOCUMENT}"
    if model.lean:
        times = [c for c in model.values if c.kind == TIMESTAMP]
        names = [c.name for c in model.columns if c not in times]
        rest = forms.remainder(doc, names + [c.name for c in times])
        # a nullable property's null stays (its column is NULL for it as for absent)
        nulls = [(c.name, forms.holds_null(doc, c.name)) for c in model.values if c.name in model.nullable]
        if times:  # a date-time's text stays where its instant does not give it back
            texts = [(c.name, forms.typed(doc, c.name, Column(c.name, TEXT))) for c in times]
            rest = forms.set_members(forms.remainder(doc, names), [(n, _kept(forms, t)) for n, t in texts], nulls)
        elif nulls:
            rest = forms.set_members(rest, (), nulls)
        return (
            [f"{at}{staged_column(j)}" for j in range(len(model.keys))]
            + [_read(forms, doc, c, c.name in model.nullable) for c in model.values]
            + [rest]
        )
    return (
        [f"{at}{staged_column(j)}" for j in range(len(model.keys))]
        + [_typed(forms, model, doc, c) for c in model.values]
        + [doc]
    )


def _order(
    forms: ReduceSql,
    model: TableModel,
    fields: dict[str, FieldPlan],
    f: FieldPlan,
    old_doc: str,
    new_doc: str,
    texts: Optional[dict[str, tuple[LeanInstant, LeanInstant]]] = None,
) -> Optional[Order]:
    """The ``(stored, staged, order property)`` values that decide a picked property's value
    (:attr:`FieldPlan.picked_by`), or None: typed SQL (the column, or where the table has none
    or it is NULL, the document's value); a date-time's text from the documents (a full row's:
    a column holds the instant, not the text; a lean row's: ``texts``)."""
    if not f.picked_by:
        return None
    order_field = fields[f.picked_by]
    if texts and order_field.name in texts:
        return (*texts[order_field.name], order_field)
    col = next((c for c in model.values if c.name == order_field.name), None)
    if col is None or is_date_time_field(order_field):  # no column (a long name), or a date-time: the texts
        col = Column(order_field.name, member_kind(order_field))
        return forms.typed(old_doc, order_field.name, col), forms.typed(new_doc, order_field.name, col), order_field
    quote = forms.quote
    return (
        forms.coalesce(forms.column(OLD, quote(col.name)), forms.typed(old_doc, order_field.name, col)),
        forms.column(NEW, quote(col.name)),
        order_field,
    )


def _sql(f: FieldPlan, forms: ReduceSql, old: str, new: str, order: Optional[Order] = None) -> str:
    sql = STRATEGIES[f.strategy].sql
    expr: Optional[str] = (
        None if sql is None else (sql(forms, f, old, new, order) if order else sql(forms, f, old, new))
    )
    if expr is None:  # sql_reduction() let it through: a bug, not a user's mistake
        raise ValueError(f"/{f.name}: {f.strategy!r} has no SQL form for this property")
    return expr


__all__ = ["ReduceSql", "LeanInstant", "reduce_statement", "reduce_sources", "DOCUMENT_COLUMN", "OLD", "NEW"]
