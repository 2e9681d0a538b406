"""What a refused commit is named as: the key of a document the view's document column
refuses, the key and property of a ``sum`` that left its type — found by a query over the
staged rows after the statement failed, so the user reads the key, not the database's error."""

from __future__ import annotations

from typing import Any, Callable, Optional, Sequence

from tidemark.collection.decimals import MAX_DIGITS
from tidemark.collection.members import flat_members
from tidemark.drivers.common.columns import member_kind
from tidemark.drivers.common.redact import redact
from tidemark.drivers.sql.dialect import Dialect
from tidemark.drivers.sql.model import (
    DOCUMENT_COLUMN,
    INTEGER,
    STAGED_DOCUMENT,
    Column,
    TableModel,
    scale_of_kind,
    staged_column,
)
from tidemark.drivers.sql.reduce import ReduceSql
from tidemark.errors import DriverError

Execute = Callable[[str], Any]  # a statement in the session's transaction -> its cursor


def refused_document(
    execute: Execute, dialect: Dialect, staged: Sequence[tuple[TableModel, str]], exc: Exception
) -> Optional[DriverError]:
    """A commit the view's document column refused (MariaDB's JSON check): the key of a
    staged document (``staged``: each binding's model and staging table) the dialect's
    ``invalid_document`` test finds, and why, or None."""
    if dialect.invalid_document is None or DOCUMENT_COLUMN not in str(exc):
        return None
    for model, staging in staged:
        keys = ", ".join(staged_column(j) for j in range(len(model.keys)))
        test = dialect.invalid_document.format(STAGED_DOCUMENT)
        try:
            row = execute(f"SELECT {keys} FROM {staging} WHERE {test}").fetchone()
        except Exception:  # noqa: BLE001 - the explanation is a courtesy; the commit's error stands
            return None
        if row is not None:
            return DriverError(
                f"{dialect.title}: {model.display}: the document of key {list(row)!r} is not JSON the view's "
                f"{DOCUMENT_COLUMN} column holds ({dialect.document_rule}): nothing of this transaction was "
                "committed. Change the document upstream (or its schema)"
            )
    return None


def sum_overflow(
    execute: Execute,
    model: TableModel,
    forms: ReduceSql,
    staging: str,
    typed: bool,
    exc: Exception,
    secrets: Sequence[str],
    title: str,
) -> Exception:
    """The key and property of a ``sum`` that left its type, found by a query over the
    staged and stored rows; else the endpoint's error (``secrets`` redacted)."""
    assert model.reduce is not None  # a binding the endpoint reduces
    keys = len(model.keys)
    for col in model.values:
        field = next((f for f in model.reduce.fields if f.name == col.name), None)
        if field is None or field.strategy != "sum":
            continue
        row = execute(forms.overflow_query(model, staging, field, col, typed)).fetchone()
        if row is not None:
            return sum_overflowed(model, field.name, col.kind, list(row[:keys]), row[keys], row[keys + 1])
    for field in model.reduce.fields:  # an object's members summed (named ``/object/member``)
        for member in flat_members(field):
            if member.strategy != "sum":
                continue
            kind = member_kind(member)
            query = forms.overflow_query(model, staging, member, Column(member.member, kind), typed, field)
            row = execute(query).fetchone()
            if row is not None:
                return sum_overflowed(model, member.name, kind, list(row[:keys]), row[keys], row[keys + 1])
    text = redact(exc, secrets).strip().splitlines()[0]
    return DriverError(
        f"{model.display}: reducing this batch in {title} failed: {text}. Nothing of this "
        "shard's transaction was committed."
    )


def sum_overflowed(model: TableModel, name: str, kind: str, key: list[Any], left: Any, right: Any) -> DriverError:
    """A ``sum`` of property ``name`` (a column of ``kind``) of ``key`` that left its type (a
    64-bit integer, a finite double, 15 significant digits of an exact decimal): what every
    SQL endpoint says, as reducing in Python would."""
    scale = scale_of_kind(kind)
    if scale is not None:
        what = f"would need more than the {MAX_DIGITS} significant digits an exact decimal of {scale} places keeps"
    else:
        what = "is beyond a 64-bit integer" if kind == INTEGER else "is not a finite number"
    return DriverError(
        f"{model.display}: key {key!r}: /{name}: 'sum' overflowed: the result {what} (left {left}, right {right}). "
        "Nothing of this shard's transaction was committed; the batch fails as it would reducing in Python."
    )
