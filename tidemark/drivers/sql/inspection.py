"""The inspection calls of :class:`~tidemark.drivers.sql.driver.SqlDriver`, written once over the
driver: ``dump`` (a view's documents), ``read_rows`` (what ``tidemark adopt`` reads), ``drop``
(``tidemark reset``), the view-identity records (``identities``) and the checkpoint rows
(``checkpoints``).  Each takes the driver first; the driver's methods of those names call them.
"""

from __future__ import annotations

import contextlib
import json
import re
from typing import TYPE_CHECKING, Any, Optional, Sequence

from tidemark.drivers.base import CheckpointRow
from tidemark.drivers.common.fences import load_checkpoint
from tidemark.drivers.common.identity import parse_record
from tidemark.drivers.sql import lean
from tidemark.drivers.sql.model import (
    CHECKPOINTS_TABLE,
    DOCUMENT_COLUMN,
    IDENTITIES_TABLE,
    QUARANTINE_TABLE,
    RESOURCES_TABLE,
    ROW_ID_COLUMN,
)
from tidemark.protocol.messages import BindingSpec, Doc, JsonObject, Key, Range

if TYPE_CHECKING:
    from tidemark.drivers.sql.host import SkeletonDriver


class _RollBack(Exception):
    """Ends :func:`read_rows`' transaction with a rollback (its rows are read by then)."""


def dump(driver: SkeletonDriver, materialization: str, binding: BindingSpec) -> dict[Key, Doc] | list[Doc]:
    model = driver.model(binding)
    dialect = driver.dialect
    doc = dialect.document_text(dialect.quote(DOCUMENT_COLUMN))

    def body() -> dict[Key, Doc] | list[Doc]:
        if model.delta:
            rows = driver.execute(
                driver.con, f"SELECT {doc} FROM {dialect.ident(model)} ORDER BY {dialect.quote(ROW_ID_COLUMN)}"
            )
            return [json.loads(x) for (x,) in rows.fetchall()]
        if model.lean:  # the row is the document
            return lean.documents(driver, model)
        return lean.full_documents(driver, model)  # the document, and the columns projected from it

    return driver.run(body, f"dump {model.display}")


def read_rows(driver: SkeletonDriver, source: str) -> list[dict[str, Any]]:
    """The rows of a table (``name``, or ``schema.name``; a bare name is in the endpoint's
    schema) or of a query (``SELECT …``/``WITH …``), read in a transaction that is rolled back."""
    text = source.strip().rstrip(";")
    if re.match(r"(?is)^\s*(select|with|values|table)\b", text):
        sql = text
    else:
        schema, _, name = text.rpartition(".")
        sql = f"SELECT * FROM {driver.dialect.table(schema or driver.schema, name)}"
    rows: list[dict[str, Any]] = []

    def body(con: Any) -> None:
        cur = driver.execute(con, sql)
        rows[:] = [dict(zip([column[0] for column in cur.description], r)) for r in cur.fetchall()]
        raise _RollBack  # nothing a query does is kept

    with contextlib.suppress(_RollBack):
        driver.atomically(body, f"read {text[:60]!r}")
    return rows


def drop(driver: SkeletonDriver, materialization: str, bindings: Sequence[BindingSpec]) -> list[str]:
    """Drop the bindings' tables and the materialization's checkpoint and quarantine rows."""
    models = [driver.base_model(b) for b in bindings]
    driver.__dict__.pop("_forms", None)
    dialect = driver.dialect
    p = dialect.placeholder

    def body(con: Any) -> list[str]:
        done: list[str] = []
        if dialect.ddl_lock:
            driver.execute(con, dialect.ddl_lock)
        for model in models:
            if driver.tables_exist(con, model.name, schema=model.schema):
                driver.execute(con, f"DROP TABLE {dialect.ident(model)}")
                done.append(f"dropped table {driver.resource_name(model)}")
        for table, name in ((driver.resources_table, RESOURCES_TABLE), (driver.identities_table, IDENTITIES_TABLE)):
            if driver.tables_exist(con, name):
                for model in models:
                    driver.execute(
                        con,
                        f"DELETE FROM {table} WHERE resource = {p}{dialect.name_collate} AND materialization = {p}",
                        (driver.resource_name(model), materialization),
                    )
        for table, name, what in (
            (driver.checkpoints_table, CHECKPOINTS_TABLE, "checkpoint rows"),
            (driver.quarantine_table, QUARANTINE_TABLE, "quarantine rows"),
        ):
            if driver.tables_exist(con, name):
                n = driver.execute(con, f"DELETE FROM {table} WHERE materialization = {p}", (materialization,)).rowcount
                if n:
                    done.append(f"deleted {n} {what} of {materialization!r}")
        return done

    return driver.atomically(body, "drop")


def identities(
    driver: SkeletonDriver, materialization: str, bindings: Sequence[BindingSpec]
) -> list[Optional[JsonObject]]:
    names = [driver.resource_name(driver.base_model(b)) for b in bindings]
    p = driver.dialect.placeholder

    def body() -> list[Optional[JsonObject]]:
        if not driver.tables_exist(driver.con, IDENTITIES_TABLE):
            return [None] * len(names)
        rows = [
            driver.execute(
                driver.con,
                f"SELECT record FROM {driver.identities_table} WHERE resource = {p}{driver.dialect.name_collate}",
                (name,),
            ).fetchone()
            for name in names
        ]
        return [None if r is None else parse_record(r[0]) for r in rows]

    return driver.run(body, "identities")


def checkpoints(driver: SkeletonDriver, materialization: str) -> list[CheckpointRow]:
    def body() -> Any:  # the client library's rows (a DB-API cursor's fetchall)
        if not driver.tables_exist(driver.con, CHECKPOINTS_TABLE):
            return []
        return driver.execute(
            driver.con,
            f"SELECT key_begin, key_end, fence, checkpoint FROM {driver.checkpoints_table} WHERE materialization = "
            f"{driver.dialect.placeholder} ORDER BY key_begin, key_end",
            (materialization,),
        ).fetchall()

    rows = driver.run(body, "checkpoints")
    return [CheckpointRow(materialization, Range(b, e), f, load_checkpoint(c)) for b, e, f, c in rows]
