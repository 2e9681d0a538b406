"""A lake table as tidemark keeps it: the binding's columns, the staged files' schema, and the
properties tidemark sets on the table (key, mode, owner) -- one model for Delta and Iceberg."""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from typing import Any, Callable, Optional, Sequence

import pyarrow as pa

from tidemark.drivers.common.columns import DECIMAL, DOCUMENT_COLUMN, NUMBER, Column, arrow_type, dumps, field_kind
from tidemark.errors import IncompatibleSchema, SpecError
from tidemark.protocol.messages import BindingSpec

KEY_PROPERTY = "tidemark.key"  # table properties, written by Apply
MODE_PROPERTY = "tidemark.deltaUpdates"
OWNER_PROPERTY = "tidemark.owner"  # {"materialization", "checkpoint_id"}: the one checkpoint that writes the table
DELETE_COLUMN = "_tidemark_delete"  # the staged files only: the row is a deletion


@dataclass(frozen=True, slots=True)
class LakeTable:
    """One binding's table."""

    name: str  # how stages and messages name it: a Delta table's location, an Iceberg table's NAMESPACE.TABLE
    keys: tuple[Column, ...]
    values: tuple[Column, ...]
    delta: bool
    identifier: tuple[str, ...] = ()  # Iceberg: namespace levels + table name
    partition_by: Optional[str] = None  # Iceberg: a column, identity partitions (resource ``partition_by``)

    @property
    def columns(self) -> tuple[Column, ...]:
        return self.keys + self.values

    def arrow_schema(self) -> pa.Schema:
        """The table's schema (keys not null, the document not null)."""
        fields = [pa.field(c.name, arrow_type(c.kind), nullable=not c.is_key) for c in self.columns]
        return pa.schema(fields + [pa.field(DOCUMENT_COLUMN, pa.string(), nullable=False)])

    def staged_schema(self) -> pa.Schema:
        """A staged file's schema: the columns, the document, the delete marker."""
        fields = [pa.field(c.name, arrow_type(c.kind)) for c in self.columns]
        return pa.schema(fields + [pa.field(DOCUMENT_COLUMN, pa.string()), pa.field(DELETE_COLUMN, pa.bool_())])


def lake_table(
    label: str,
    name: str,
    binding: BindingSpec,
    *,
    identifier: tuple[str, ...] = (),
    partition_by: Optional[str] = None,
) -> LakeTable:
    """The binding's table ``name``; refuses a binding without a key and columns whose names
    collide (``label``: "delta table", "iceberg table")."""
    keys = tuple(Column(f.name, field_kind(f), True) for f in binding.key_fields)
    if not keys:
        raise SpecError(f"{label} {name!r}: no key fields")
    values = tuple(Column(f.name, field_kind(f)) for f in binding.value_fields)
    names = [c.name for c in keys + values] + [DOCUMENT_COLUMN, DELETE_COLUMN]
    dup = sorted({n for n in names if names.count(n) > 1})
    if dup:
        raise IncompatibleSchema(
            f"{label} {name!r}: column names collide: {dup} ({DOCUMENT_COLUMN!r} and {DELETE_COLUMN!r} are reserved)"
        )
    return LakeTable(name, keys, values, bool(binding.delta_updates), identifier, partition_by)


def is_uri(p: str) -> bool:
    return "://" in p


def join_path(root: str, name: str) -> str:
    """``name`` under ``root``, a folder or a URI."""
    return root.rstrip("/") + "/" + name if is_uri(root) else os.path.join(root, name)


def json_property(properties: dict, name: str) -> Optional[dict]:
    """A table property holding a JSON object, or None."""
    text = properties.get(name)
    if not text:
        return None
    try:
        obj = json.loads(text)
    except ValueError:
        return None
    return obj if isinstance(obj, dict) else None


def owner_of(properties: dict) -> Optional[tuple[str, str]]:
    """(materialization, checkpoint id) of the table's owner property, or None."""
    obj = json_property(properties, OWNER_PROPERTY)
    try:
        return (str(obj["materialization"]), str(obj["checkpoint_id"])) if obj else None
    except KeyError:
        return None


def owner_text(materialization: str, checkpoint_id: Any) -> str:
    return dumps({"materialization": materialization, "checkpoint_id": str(checkpoint_id)})


def stages_of(state: Any) -> list[dict]:
    """The stages in a driver checkpoint: one per range's session, each naming its batch and files."""
    stages = state.get("stages") if isinstance(state, dict) else None
    return [s for s in (stages or {}).values() if isinstance(s, dict)]


def columns_to_add(
    where: str,
    keys: Sequence[Column],
    columns: Sequence[Column],
    delta: bool,
    properties: dict,
    existing: dict,
    type_of: Callable[[str], Any],
) -> list[Column]:
    """The columns an existing table lacks, after checking that it is this binding's: its mode
    and key properties, the document column, and each column's type (``existing``: name ->
    type as ``type_of(kind)`` gives it).  Raises :class:`~tidemark.errors.IncompatibleSchema`
    naming ``where``."""
    if MODE_PROPERTY in properties and (properties[MODE_PROPERTY] == "true") != delta:
        mode = "delta-updates" if delta else "standard"
        raise IncompatibleSchema(
            f"{where} exists in the other mode; cannot switch it to {mode} updates (drop the table or use another one)"
        )
    names = [c.name for c in keys]
    if KEY_PROPERTY in properties and json.loads(properties[KEY_PROPERTY]) != names:
        raise IncompatibleSchema(
            f"{where}: key is {properties[KEY_PROPERTY]}, the binding's key is {names}; the key cannot change"
        )
    if DOCUMENT_COLUMN not in existing:
        raise IncompatibleSchema(f"{where} has no {DOCUMENT_COLUMN!r} column: not a tidemark table")
    missing = []
    for col in columns:
        have = existing.get(col.name)
        if have is None:
            if col.is_key:
                raise IncompatibleSchema(f"{where}: key column {col.name!r} is missing; the key cannot change")
            missing.append(col)
        elif have != type_of(col.kind) and not (col.kind.startswith(DECIMAL) and have == type_of(NUMBER)):
            # (an exact decimal in a double column: a table of a tidemark before 2026-11-28 keeps
            # its column, and each apply casts to it)
            raise IncompatibleSchema(
                f"{where}: column {col.name!r} is {have}, the binding needs "
                f"{type_of(col.kind)} (an incompatible type change)"
            )
    return missing
