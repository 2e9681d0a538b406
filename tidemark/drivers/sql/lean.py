"""The lean row: a view's row *is* its document.

A SQL view table keeps each key's reduced document in one of two forms:

* **lean** (new views, by default): every top-level property is a column -- scalars typed,
  objects and arrays as the endpoint's JSON type -- and ``flow_document`` holds only the
  *remainder*: the members no column holds (properties the schema does not declare), or
  NULL when there are none.  The column is nullable, which is how an existing table says
  its form.
* **full**: ``flow_document NOT NULL`` holds the whole document, and the columns are a
  projection of it (every view made before the lean form, and ``resource: {document: full}``).

A binding takes the lean form only where the row holds its document exactly
(:func:`lean_plan`): the endpoint can reduce it in SQL (a compiled plan, so every
property has one type, or one type and ``null``), every top-level property fits in a column name, the key
is made of top-level properties, and the table is not delta-updates.  A date-time is a
timestamp column where the dialect has one that keeps its instant (``Dialect.lean_date_times``:
PostgreSQL's ``timestamptz``, MariaDB's UTC ``datetime(6)``, SQLite's fixed-width UTC text
``Dialect.date_time_column``): its text is rebuilt from the instant (UTC, ``Z``, the
fraction's digits without trailing zeros: :func:`canonical_date_time`), and where the document
spells it otherwise (an offset, ``.500``, a leap second) the remainder keeps the text
(:func:`keeps_text`).  Otherwise the full form, and ``tidemark check`` says why.

Reading rebuilds the document from the row (:func:`document_of`): the remainder's
members, then each column that is not NULL, except a date-time whose text the remainder
keeps.  A NULL column is an absent property, or the ``null`` of a nullable property
(``type: [T, "null"]``, :attr:`TableModel.nullable`): the remainder then keeps the member
``"p": null`` (and never a ``null`` beside a column that holds a value).
"""

from __future__ import annotations

import dataclasses
import json
from decimal import Decimal
from typing import TYPE_CHECKING, Any, Callable, Optional, Sequence, cast

from tidemark.drivers.common.columns import BOOLEAN, DECIMAL, JSON, TIMESTAMP, Column, holds
from tidemark.drivers.common.datetimes import canonical_date_time, from_sortable_text, keeps_text
from tidemark.drivers.common.forms import FULL, LEAN, requested_form
from tidemark.drivers.sql.model import TableModel
from tidemark.protocol.messages import REMAINDER, BindingSpec, Doc, JsonObject, Key

if TYPE_CHECKING:
    from tidemark.collection.plan import CompiledPlan
    from tidemark.drivers.sql.dialect import Dialect
    from tidemark.drivers.sql.host import SkeletonDriver

Converter = Optional[Callable[[Any], Any]]  # how a column's value read back becomes the document's (None: as it is)


def lean_plan(binding: BindingSpec, strategies: frozenset[str], dialect: Dialect) -> tuple[Optional[CompiledPlan], str]:
    """The compiled plan by which a binding's rows hold its documents, or ``(None, why not)``.
    Where the endpoint does not reduce the binding (it Loads), the plan holds the properties
    that compile (:func:`binding_columns`): the rows keep the others whole in their remainder,
    and the second item names them ("" where there are none)."""
    from tidemark.collection.sql_plan import binding_reduction

    if binding.delta_updates:
        return None, "a delta-updates table keeps each stored document as it came"
    plan, why = binding_reduction(binding.schema, binding.key, strategies)
    note = ""
    if plan is None:
        plan, kept = binding_columns(binding)
        if plan is None:
            return None, f"not every property has a column of its own ({why})"
        if kept:
            note = f"{REMAINDER_ONLY}{', '.join(f'/{name}' for name in kept)}: they do not compile)"
    for f in plan.fields:
        if dialect.too_long(f.name):
            return None, f"/{f.name}: the name is too long for a column"
        if "multipleOf" in f.schema and not dialect.exact_decimals:
            return None, f"/{f.name}: an exact decimal, which a {dialect.title} column holds as a double"
        if f.kind == "scalar" and f.type == "string" and f.schema.get("format") == "date-time":
            if not dialect.lean_date_times:
                return None, f"/{f.name}: a date-time, which a {dialect.title} column does not keep as an instant"
            if f.name in plan.key:
                return None, f"/{f.name}: a date-time key (its text is the key)"
    return plan, note


#: How :func:`lean_plan` begins to name the properties a lean row keeps in its remainder only.
REMAINDER_ONLY = "lean, these properties in flow_document only ("


def binding_columns(binding: BindingSpec) -> tuple[Optional[CompiledPlan], dict[str, str]]:
    """The plan of a binding's properties that compile (a lean row's columns) and the others
    with why (kept whole in its remainder), or ``(None, {})`` where the root or key does not
    compile (:func:`~tidemark.collection.plan.compiled_properties`).  A name the reducing
    statement cannot spell stays in the remainder too."""
    from tidemark.collection.sql_plan import binding_properties, unspellable

    plan, apart = binding_properties(binding.schema, binding.key)
    if plan is None:
        return None, {}
    odd = [f.name for f in plan.fields if unspellable(f.name)]
    apart.update((name, "a name holding a quote, a backslash or a control character") for name in odd)
    return dataclasses.replace(plan, fields=tuple(f for f in plan.fields if f.name not in apart)), apart


def lean_model(model: TableModel, plan: CompiledPlan, binding: Optional[BindingSpec] = None) -> TableModel:
    """``model`` in the lean form: a column for every top-level property of ``plan`` (objects
    and arrays as JSON columns, after the scalars); a property of ``binding``'s schema that the
    plan leaves out has none (the remainder keeps it whole)."""
    props = binding.schema.get("properties") if binding is not None and isinstance(binding.schema, dict) else None
    planned = {f.name for f in plan.fields}
    values = tuple(c for c in model.values if c.name in planned or not isinstance(props, dict) or c.name not in props)
    have = {c.name for c in model.keys + values}
    extra = tuple(Column(f.name, JSON) for f in plan.fields if f.name not in have)
    return dataclasses.replace(model, values=values + extra, lean=True, nullable=nullable_properties(plan))


def nullable_properties(plan: CompiledPlan) -> frozenset[str]:
    """The names of the plan's properties that may hold ``null`` (:attr:`TableModel.nullable`)."""
    return frozenset(f.name for f in plan.fields if f.nullable)


def remainder(
    doc: JsonObject,
    names: frozenset[str],
    date_times: frozenset[str] = frozenset(),
    nullable: frozenset[str] = frozenset(),
) -> Optional[JsonObject]:
    """The members of ``doc`` no column holds (``names``: the columns), the texts of the
    date-time columns (``date_times``) that their instants do not spell, and the ``null``
    of each nullable property (``nullable``: a column is NULL for it as for absent), or None."""
    if date_times or nullable:
        rest = {
            k: v
            for k, v in doc.items()
            if k not in names or (v is None and k in nullable) or (k in date_times and v is not None and keeps_text(v))
        }
        return rest or None
    if names.issuperset(doc):
        return None
    return {k: v for k, v in doc.items() if k not in names}


def date_time_columns(model: TableModel) -> frozenset[str]:
    """The names of a lean model's date-time columns."""
    return frozenset(c.name for c in model.values if c.kind == TIMESTAMP)


def row_values(model: TableModel, doc: JsonObject) -> tuple[Any, ...]:
    """The value columns of ``doc``'s row (None: absent)."""
    get = doc.get
    return tuple([get(c.name) for c in model.values])


def _decimal(v: Any) -> Any:
    """An exact decimal column's value as the JSON number it holds."""
    if isinstance(v, Decimal):
        return int(v) if v == v.to_integral_value() else float(v)
    return v


def _timestamp(v: Any) -> Any:  # a date-time column: its instant's text (the remainder keeps another spelling)
    return from_sortable_text(v) if isinstance(v, str) else canonical_date_time(v)


def _json(v: Any) -> Any:
    return json.loads(v) if isinstance(v, (str, bytes)) else v


def converters(model: TableModel, dialect: Dialect) -> list[Converter]:
    """Per column (keys, values), how a value read back becomes the document's (None: as it is)."""
    out: list[Converter] = []
    for c in model.columns:
        if c.is_key:
            out.append(cast(Converter, lambda v, k=c.kind: dialect.read_value(k, v)))  # k: bound per column
        elif c.kind == BOOLEAN and dialect.bool_as_int:
            out.append(bool)
        elif c.kind == JSON:
            out.append(_json)
        elif c.kind == TIMESTAMP:
            out.append(_timestamp)
        elif c.kind.startswith(DECIMAL):
            out.append(_decimal)
        else:
            out.append(None)
    return out


def document_of(
    model: TableModel, dialect: Dialect, row: Sequence[Any], convert: Optional[list[Converter]] = None
) -> JsonObject:
    """The document of a lean row read as ``keys…, values…, flow_document`` (``convert``:
    :func:`converters`, made once for many rows)."""
    rest = row[-1]
    doc: JsonObject = {} if rest is None else dict(_json(rest))
    kept = doc.keys() if rest is not None else ()
    for f, c, v in zip(convert or converters(model, dialect), model.columns, row):
        if v is not None and not (c.kind == TIMESTAMP and c.name in kept):
            doc[c.name] = v if f is None else f(v)
    return doc


def _every_row(driver: SkeletonDriver, model: TableModel) -> list[Any]:
    """Every row of ``model``'s table: its columns, then its document column."""
    from tidemark.drivers.sql.model import DOCUMENT_COLUMN

    dialect = driver.dialect
    cols = ", ".join(dialect.quote(c.name) for c in model.columns)
    return list(
        driver.execute(
            driver.con, f"SELECT {cols}, {dialect.quote(DOCUMENT_COLUMN)} FROM {dialect.ident(model)}"
        ).fetchall()
    )


def documents(driver: SkeletonDriver, model: TableModel) -> dict[Key, Doc]:
    """Every row of a lean table as ``{key: document}`` (``dump``)."""
    dialect = driver.dialect
    rows = _every_row(driver, model)
    n, convert = len(model.keys), converters(model, dialect)
    return {
        tuple(dialect.read_value(c.kind, v) for c, v in zip(model.keys, r[:n])): document_of(model, dialect, r, convert)
        for r in rows
    }


def full_documents(driver: SkeletonDriver, model: TableModel) -> dict[Key, Doc]:
    """Every row of a full table as ``{key: document}`` (``dump``): its ``flow_document``, with
    each value column read over the member it projects where they disagree (a person's
    ``UPDATE`` of a column shows; written by tidemark, the two are equal, or the column is the
    nearest double to a number it cannot hold exactly).  Date-time columns are left out (the
    document keeps the text as written)."""
    dialect = driver.dialect
    rows = _every_row(driver, model)
    n, convert = len(model.keys), converters(model, dialect)
    out: dict[Key, Doc] = {}
    for r in rows:
        doc = _json(r[-1])
        if isinstance(doc, dict):
            for f, c, v in zip(convert[n:], model.values, r[n:-1]):
                if c.kind != TIMESTAMP and (v is not None or (c.name in doc and holds(c.kind, doc[c.name]))):
                    value = v if f is None or v is None else f(v)
                    if value != doc.get(c.name) and not _rounded(c, doc.get(c.name), value):
                        doc = {**doc, c.name: value}
        out[tuple(dialect.read_value(c.kind, v) for c, v in zip(model.keys, r[:n]))] = doc
    return out


def _rounded(column: Column, member: Any, value: Any) -> bool:
    """True if ``value`` is what ``column`` holds of the document's ``member``, a number it cannot
    hold exactly (an integer beyond 2^53 in a double column): the document keeps the number."""
    return (
        member.__class__ is int
        and not holds(column.kind, member)
        and isinstance(value, float)
        and abs(member) <= 2**1023
        and value == float(member)
    )


def typed_rows(driver: SkeletonDriver, bindings: Sequence[BindingSpec]) -> list[bool]:
    """``Driver.typed_rows``: a lean binding the endpoint reduces, where the dialect stages typed
    values: with their remainder (a date-time's text, a nullable property's null), or where the
    binding has none of these."""
    dialect = driver.dialect
    return [
        dialect.typed_staging
        and m.lean
        and m.reduce is not None
        and (dialect.typed_remainder or (not date_time_columns(m) and not m.nullable))
        and all(c.name != REMAINDER for c in m.values)
        for m in map(driver.model, bindings)
    ]


def typed_remainder(driver: SkeletonDriver) -> bool:
    """``Driver.typed_remainder``: the dialect stages a typed row's remainder."""
    return driver.dialect.typed_staging and driver.dialect.typed_remainder


def row_forms(driver: SkeletonDriver, bindings: Sequence[BindingSpec]) -> list[str]:
    """``tidemark check``'s line per binding: its table's form, and why where it is full."""
    out = []
    for b in bindings:
        base = driver.base_model(b)
        if base.delta:
            continue
        table = table_form(driver, base)
        model = with_form(driver, base, b, table)
        where = f"table {base.display}" + ("" if table else " (new)")
        if model.lean:
            line = f"{where}: lean rows (a column per property; flow_document holds only what no column holds)"
            why = lean_plan(b, driver.capabilities().endpoint_reduce, driver.dialect)[1]
            out.append(f"{line}; {why.removeprefix('lean, ')}" if why else line)
        elif table == FULL:
            out.append(f"{where}: full documents in flow_document (the table was made so, and keeps its form)")
        else:
            out.append(f"{where}: full documents in flow_document: {why_full(driver, b)}")
    return out


__all__ = ["FULL", "LEAN", "requested_form", "lean_plan", "lean_model", "remainder", "row_values", "document_of"]


def form_of(existing: Optional[dict[str, tuple[str, bool]]], required: Sequence[str]) -> Optional[str]:
    """An existing table's form (None: no table): ``flow_document`` NOT NULL is the full form."""
    if existing is None:
        return None
    from tidemark.drivers.sql.model import DOCUMENT_COLUMN

    # no flow_document: a table tidemark did not make (Apply refuses it, naming the column)
    return FULL if DOCUMENT_COLUMN not in existing or DOCUMENT_COLUMN in required else LEAN


def table_form(driver: SkeletonDriver, base: TableModel, con: Any = None) -> Optional[str]:
    """The form of ``base``'s table (None: no table yet), read once per table and driver."""
    return table_columns(driver, base, con)[0]


def table_columns(
    driver: SkeletonDriver, base: TableModel, con: Any = None
) -> tuple[Optional[str], Optional[dict[str, tuple[str, bool]]]]:
    """The form of ``base``'s table and its columns (None, None: no table yet, or a dialect
    without lean rows), read once per table and driver."""
    forms = driver.__dict__.setdefault("_forms", {})
    got: Optional[tuple[str, dict[str, tuple[str, bool]]]] = forms.get(base.display)
    if got is None and driver.dialect.lean_rows and not base.delta:
        existing, required = driver.atomically(
            lambda c: driver.existing(c, base), "read the table's columns", con, False
        )
        form = form_of(existing, required)
        if form is None or existing is None:  # no table yet: Apply makes it
            return None, None
        got = forms[base.display] = (form, existing)
    return got if got is not None else (None, None)


def with_form(driver: SkeletonDriver, model: TableModel, binding: BindingSpec, table: Optional[str]) -> TableModel:
    """``model`` in the form its table has (``table``: :func:`form_of`), or for a new table
    the form the binding asks for and can take.  A lean table whose binding can no longer
    be lean (or asks for the full form) is refused: its rows do not hold full documents."""
    dialect = driver.dialect
    if not dialect.lean_rows or model.delta or table == FULL:
        return model
    want = requested_form(binding.resource)
    plan, why = lean_plan(binding, driver.capabilities().endpoint_reduce, dialect)
    if table == LEAN and (plan is None or want == FULL):
        from tidemark.errors import IncompatibleSchema

        reason = why if plan is None else "the resource asks for document: full"
        raise IncompatibleSchema(
            f"table {model.display!r} holds lean rows (a column per property), and this binding cannot be lean: "
            f"{reason}. Keep the schema's properties as they were, or rebuild the view in the full form "
            "(resource `document: full`, then `tidemark reset`). Nothing was changed"
        )
    if want == FULL or plan is None:
        return model
    return lean_model(model, plan, binding)


def columns_kept(model: TableModel, binding: BindingSpec, existing: Optional[dict[str, tuple[str, bool]]]) -> None:
    """Refuse a lean ``model`` that keeps in its remainder only a property its table
    (``existing``: its columns) holds in a column: the rows written before hold it there."""
    props = binding.schema.get("properties") if isinstance(binding.schema, dict) else None
    if not model.lean or existing is None or not isinstance(props, dict):
        return
    have = {c.name for c in model.columns}
    lost = [name for name in props if name in existing and name not in have]
    if lost:
        from tidemark.errors import IncompatibleSchema

        raise IncompatibleSchema(
            f"table {model.display!r} holds lean rows, with a column for {', '.join(f'/{n}' for n in lost)}, "
            "which this binding's schema no longer gives a column (it would keep the property in flow_document "
            "only, and the rows written before hold it in the column). Keep the property's schema as it was, "
            "or rebuild the view (`tidemark rebuild`). Nothing was changed"
        )


def why_full(driver: SkeletonDriver, binding: BindingSpec) -> str:
    """Why a new table of ``binding`` would take the full form ("" where it is lean)."""
    dialect = driver.dialect
    if not dialect.lean_rows:
        return f"{dialect.title} keeps full documents"
    if requested_form(binding.resource) == FULL:
        return "the resource asks for document: full"
    return lean_plan(binding, driver.capabilities().endpoint_reduce, dialect)[1]
