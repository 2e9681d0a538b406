"""What Apply finds for a binding's table, and the identifier check Validate and Apply share."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

from tidemark.drivers.sql.dialect import Dialect
from tidemark.drivers.sql.model import Column, TableModel
from tidemark.errors import SpecError
from tidemark.protocol.messages import BindingSpec


@dataclass(frozen=True, slots=True)
class TablePlan:
    """What Apply finds for one binding."""

    binding: BindingSpec
    model: TableModel
    existing: Optional[dict[str, tuple[str, bool]]]  # {column: (type, is_primary_key)}; None: no table
    missing: Optional[list[Column]]  # columns to add; None: create the table
    widened: list[tuple[Column, str]]  # value columns whose type changes, with the type they have
    options: tuple[str, str] = ("", "")  # a new table's CREATE TABLE suffix, and Apply's words for it


def check_identifier(dialect: Dialect, where: str, what: str, name: Optional[str]) -> None:
    """A schema or table name the endpoint would cut (and so name another one): a SpecError."""
    if name and dialect.too_long(name):
        raise SpecError(
            f"{where}: {what} name {name!r} is {len(name.encode('utf-8'))} bytes; {dialect.title} cuts "
            f"identifiers at {dialect.max_identifier_bytes} bytes, so it would name another {what}. "
            "Choose a shorter one."
        )
