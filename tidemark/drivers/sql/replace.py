"""A rebuild's cut-over on a SQL endpoint: the live table takes the shadow's contents in one transaction.

``tidemark rebuild`` (:mod:`tidemark.runtime.rebuild`) builds the edited view into a shadow
table (``T__tm_rebuild``) beside the live one; :func:`replace_contents` then, in ONE endpoint
transaction:

1. fences off the live materialization: its checkpoint rows are deleted and the shadow's
   take their place under the live name, each with a fence above every fence either had (a
   zombie session of the old view commits nothing after this);
2. replaces the live table's rows with the shadow's **in place** -- the same table, so its
   OID, grants, indexes, comments, dependent views and row-level policies survive -- and
   changes its shape to the shadow's where they differ (a new key, new or dropped columns,
   changed types; PostgreSQL's DDL is transactional). SQLite's ``ALTER`` cannot change a key
   or a type: there the shadow table takes the live name in the same transaction (SQLite
   has no grants; views refer to tables by name and keep working; the old table's own
   indexes and triggers go with it);
3. moves the owner, the view-identity record and the quarantine rows to the live name, and
   drops the shadow table.

MariaDB commits DDL implicitly, so there the cut-over takes two forms.  When every key and
column type stays, the rows are replaced in the one transaction as above (new columns are
added to the live table first, NULL until the rows come; the shadow table is dropped after,
with the rest of the shadow).  When a key or a type changes, the **tables change names**
instead: transaction 1 fences off the live materialization and moves the checkpoint rows,
the owner and identity records and the quarantine rows (fault point ``replace_contents``);
then ONE ``RENAME TABLE live TO live__tm_old, shadow TO live, ...`` -- atomic over all the
view's tables, so a reader sees the old tables or the new ones -- (``before_table_swap``
before it, ``after_table_swap`` after it), then the old tables are dropped.  A kill between
the steps is finished by the next attempt (:func:`cut_over_state` says ``partial``); the
fence of step 1 keeps a zombie of the old view from writing into either table.  Grants on the
table name stay with the name; triggers go with the old table.
"""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING, Any, Optional, cast

from tidemark.drivers.base import Driver, ReplaceContents
from tidemark.drivers.common.fences import load_checkpoint
from tidemark.drivers.common.identity import record_text
from tidemark.drivers.sql.model import (
    IDENTITIES_TABLE,
    QUARANTINE_TABLE,
    RESOURCES_TABLE,
    ROW_ID_COLUMN,
    Shape,
    TableModel,
    dumps,
)
from tidemark.errors import RecoveryError
from tidemark.faults import fault_point
from tidemark.protocol.messages import JsonObject

if TYPE_CHECKING:
    from tidemark.drivers.sql.host import SkeletonDriver

#: a rebuild's pair of tables: (live, shadow, the live shape (None: no live table yet), the shadow shape)
Pair = tuple[TableModel, TableModel, Optional[Shape], Shape]


def shadow_resource(resource: JsonObject, tag: str) -> JsonObject:
    """``{table: T, ...}`` -> ``{table: T__<tag>, ...}`` (same schema)."""
    return {**resource, "table": f"{resource['table']}__{tag}"}


RETIRED = "__tm_old"  # MariaDB's swap: the live table's name while it is dropped


def retired(model: TableModel) -> TableModel:
    """The name the live table takes in MariaDB's swap (then it is dropped)."""
    return dataclasses.replace(model, name=f"{model.name}{RETIRED}")


def _shape(existing: dict[str, tuple[str, bool]], required: list[str]) -> Shape:
    return {n: (t.lower(), pk, n in required) for n, (t, pk) in existing.items()}


def reshaped(live_shape: Optional[Shape], shadow_shape: Shape) -> bool:
    """A column's type or key role differs, or a key column goes: ``ALTER`` would be needed
    beyond adding columns (or no live table yet: a binding the edit added)."""
    if live_shape is None:
        return True
    return any(n in live_shape and live_shape[n][:2] != s[:2] for n, s in shadow_shape.items()) or any(
        n not in shadow_shape and s[1] for n, s in live_shape.items()
    )


def plan_pairs(driver: SkeletonDriver, con: Any, req: ReplaceContents) -> list[Pair]:
    """(live model, shadow model, live shape, shadow shape) per pair; refuses a pair whose
    tables are gone."""
    out: list[Pair] = []
    for i, (live_b, shadow_b) in enumerate(req.pairs):
        live, shadow = driver.base_model(live_b), driver.base_model(shadow_b)
        live_cols, live_req = driver.existing(con, live)
        shadow_cols, shadow_req = driver.existing(con, shadow)
        if shadow_cols is None:
            raise RecoveryError(
                f"rebuild of {req.materialization!r}: the shadow table {driver.resource_name(shadow)} is gone; "
                "abandon the rebuild (`tidemark rebuild SPEC -m NAME --abandon`) and start it again. Nothing was changed"
            )
        if live_cols is None and i not in req.added:
            raise RecoveryError(
                f"rebuild of {req.materialization!r}: the live table {driver.resource_name(live)} is gone (dropped?). "
                "Nothing was changed"
            )
        live_shape = None if live_cols is None else _shape(live_cols, live_req)  # None: a binding the edit added
        out.append((live, shadow, live_shape, _shape(shadow_cols, shadow_req)))
    return out


def replace_contents(driver: SkeletonDriver, req: ReplaceContents) -> list[str]:
    """The cut-over's transaction (see the module docstring); what it did, in words.  Without
    transactional DDL the shadow tables stay until the rebuild drops the shadow (``Driver.drop``)."""
    dialect = driver.dialect
    quote = dialect.quote

    if not dialect.transactional_ddl:
        # cast: the SqlDriver that calls this is a Driver (the default reads its positions)
        if Driver.cut_over_state(cast(Driver, driver), req) == "done":  # the records moved: a swap a kill interrupted
            return finish_swap(driver, req)
        pairs = driver.atomically(lambda con: plan_pairs(driver, con, req), "rebuild: plan", write=False)
        if any(reshaped(ls, ss) for _l, _s, ls, ss in pairs):
            return swap_tables(driver, req)
        # new columns first (NULL until the rows come): nothing to lose

        def add_columns(con: Any) -> None:
            for live, _shadow, live_shape, shadow_shape in plan_pairs(driver, con, req):
                for name, (typ, _pk, _req) in shadow_shape.items() if live_shape is not None else ():
                    if name not in cast(Shape, live_shape):  # the loop runs only where it is not None
                        driver.execute(con, f"ALTER TABLE {dialect.ident(live)} ADD COLUMN {quote(name)} {typ}")

        driver.atomically(add_columns, "rebuild: add columns")

    def body(con: Any) -> list[str]:
        if dialect.ddl_lock:
            driver.execute(con, dialect.ddl_lock)
        pairs = plan_pairs(driver, con, req)
        done = [move_checkpoints(driver, con, req)]
        for live, shadow, live_shape, shadow_shape in pairs:
            columns = [n for n in shadow_shape if n != ROW_ID_COLUMN]
            names = ", ".join(quote(n) for n in columns)
            if live_shape is None:  # a binding the edit added: the shadow table takes the live name
                driver.execute(con, f"ALTER TABLE {dialect.ident(shadow)} RENAME TO {quote(live.name)}")
                done.append(f"created table {driver.resource_name(live)} from {driver.resource_name(shadow)} (new)")
            elif live_shape == shadow_shape or not dialect.transactional_ddl:
                driver.execute(con, f"DELETE FROM {dialect.ident(live)}")
                driver.execute(
                    con, f"INSERT INTO {dialect.ident(live)} ({names}) SELECT {names} FROM {dialect.ident(shadow)}"
                )
                if dialect.transactional_ddl:
                    driver.execute(con, f"DROP TABLE {dialect.ident(shadow)}")
                done.append(f"replaced the rows of {driver.resource_name(live)} with {driver.resource_name(shadow)}'s")
            else:
                done.append(dialect.reshape(driver, con, live, shadow, live_shape, shadow_shape, columns))
        move_records(driver, con, req, pairs)
        fault_point("replace_contents")
        return done

    return driver.atomically(body, "rebuild: replace contents")


def swap_tables(driver: SkeletonDriver, req: ReplaceContents) -> list[str]:
    """MariaDB, a key or a type changed (see the module docstring): the records first, in one
    transaction, then :func:`finish_swap`."""

    def body(con: Any) -> list[str]:
        out = [move_checkpoints(driver, con, req)]
        move_records(driver, con, req, plan_pairs(driver, con, req))
        fault_point("replace_contents")
        return out

    return driver.atomically(body, "rebuild: move the records") + finish_swap(driver, req)


def finish_swap(driver: SkeletonDriver, req: ReplaceContents) -> list[str]:
    """After the records moved: one ``RENAME TABLE`` of every pair whose shadow table is still
    there with another shape, then the old tables dropped.  Idempotent (a kill may stop it
    anywhere)."""
    dialect = driver.dialect
    models = [(driver.base_model(live_b), driver.base_model(shadow_b)) for live_b, shadow_b in req.pairs]

    def swap(con: Any) -> list[str]:
        for live, _shadow in models:  # a leftover: an earlier swap's, which a kill kept from dropping it
            driver.execute(con, f"DROP TABLE IF EXISTS {dialect.ident(retired(live))}")
        kinds = [_pending(driver, con, live, shadow) for live, shadow in models]
        if not any(k in ("swap", "new") for k in kinds):
            return []  # swapped already (no shadow table is left), or nothing to swap
        # every pair whose shadow is there changes names, the unchanged ones too: one statement
        pending = [(live, shadow, "new" if k == "new" else "swap") for (live, shadow), k in zip(models, kinds) if k]
        fault_point("before_table_swap")
        renames = ", ".join(
            (f"{dialect.ident(live)} TO {dialect.ident(retired(live))}, " if new == "swap" else "")
            + f"{dialect.ident(shadow)} TO {dialect.ident(live)}"
            for live, shadow, new in pending
        )
        driver.execute(con, f"RENAME TABLE {renames}")  # atomic over all of them
        fault_point("after_table_swap")
        return [
            f"created table {driver.resource_name(live)} from {driver.resource_name(shadow)} (new; one RENAME TABLE)"
            if new == "new"
            else f"replaced table {driver.resource_name(live)} by {driver.resource_name(shadow)} (its key or types "
            "changed: one RENAME TABLE)"
            for live, shadow, new in pending
        ]

    done = driver.atomically(swap, "rebuild: swap the tables")

    def drop_old(con: Any) -> None:
        for live, _shadow in models:
            driver.execute(con, f"DROP TABLE IF EXISTS {dialect.ident(retired(live))}")

    driver.atomically(drop_old, "rebuild: drop the old tables")
    return done


def _pending(driver: SkeletonDriver, con: Any, live: TableModel, shadow: TableModel) -> str:
    """A pair's tables as a swap sees them: ``"swap"`` (the shadow has another shape), ``"new"``
    (no live table yet), ``"same"`` (the shadow has the live table's shape) or ``""`` (no
    shadow table: swapped already, or dropped)."""
    (live_cols, live_req), (shadow_cols, shadow_req) = driver.existing(con, live), driver.existing(con, shadow)
    if shadow_cols is None:
        return ""
    if live_cols is None:
        return "new"
    return "swap" if reshaped(_shape(live_cols, live_req), _shape(shadow_cols, shadow_req)) else "same"


def cut_over_state(driver: SkeletonDriver, req: ReplaceContents) -> str:
    """Without transactional DDL, a swap (see :func:`swap_tables`) can stop between its steps:
    ``partial`` while the records have moved but a shadow table still has a changed shape, or
    an old table is left."""
    state = Driver.cut_over_state(cast(Driver, driver), req)  # cast: the calling SqlDriver is a Driver
    if state != "done" or driver.dialect.transactional_ddl:
        return state

    def pending(con: Any) -> bool:
        for live_b, shadow_b in req.pairs:
            live, shadow = driver.base_model(live_b), driver.base_model(shadow_b)
            gone = retired(live)
            if driver.tables_exist(con, gone.name, schema=gone.schema):
                return True
            if _pending(driver, con, live, shadow) in ("swap", "new"):
                return True
        return False

    return "partial" if driver.atomically(pending, "rebuild: read the cut-over", write=False) else "done"


def move_checkpoints(driver: SkeletonDriver, con: Any, req: ReplaceContents) -> str:
    """The shadow's checkpoint rows become the live materialization's, fenced above both."""
    dialect, table = driver.dialect, driver.checkpoints_table
    p = dialect.placeholder  # (the DB-API marker, as the SQL skeleton names it)
    rows = driver.execute(
        con,
        f"SELECT materialization, key_begin, key_end, fence, checkpoint FROM {table} WHERE materialization IN "
        f"({p}, {p}){dialect.for_update}",
        (req.materialization, req.shadow),
    ).fetchall()
    top = max((int(r[3]) for r in rows), default=0)
    shadow_rows = [r for r in rows if r[0] == req.shadow]
    if not shadow_rows:
        raise RecoveryError(
            f"rebuild of {req.materialization!r}: the shadow view {req.shadow!r} holds no committed batch. "
            "Nothing was changed"
        )
    driver.execute(con, f"DELETE FROM {table} WHERE materialization IN ({p}, {p})", (req.materialization, req.shadow))
    for _m, b, e, _f, cp in shadow_rows:
        checkpoint = load_checkpoint(cp)
        if isinstance(checkpoint, dict):
            checkpoint = {**checkpoint, "materialization": req.materialization}
        driver.execute(
            con,
            f"INSERT INTO {table} (materialization, key_begin, key_end, fence, checkpoint) "
            f"VALUES ({p}, {p}, {p}, {p}, {dialect.json_param})",
            (req.materialization, b, e, top + 1, None if checkpoint is None else dumps(checkpoint)),
        )
    return f"moved {len(shadow_rows)} checkpoint row(s) of {req.shadow!r} to {req.materialization!r} (fence {top + 1})"


def move_records(driver: SkeletonDriver, con: Any, req: ReplaceContents, pairs: list[Pair]) -> None:
    """Owner, view identity and quarantine rows: the shadow's become the live name's."""
    dialect = driver.dialect
    p, collate = dialect.placeholder, dialect.name_collate
    for i, (live, shadow, _ls, _ss) in enumerate(pairs):
        live_name, shadow_name = driver.resource_name(live), driver.resource_name(shadow)
        for table, name in ((driver.resources_table, RESOURCES_TABLE), (driver.identities_table, IDENTITIES_TABLE)):
            if driver.tables_exist(con, name):
                driver.execute(
                    con,
                    f"DELETE FROM {table} WHERE resource = {p}{collate} OR resource = {p}{collate}",
                    (live_name, shadow_name),
                )
        driver.execute(
            con,
            f"INSERT INTO {driver.resources_table} (resource, materialization, checkpoint_id) VALUES ({p}, {p}, {p})",
            (live_name, req.materialization, req.checkpoint_id),
        )
        if i < len(req.identities) and req.identities[i] is not None:
            driver.execute(
                con,
                f"INSERT INTO {driver.identities_table} (resource, materialization, record) VALUES ({p}, {p}, {p})",
                (live_name, req.materialization, record_text(req.identities[i], dialect.resolved_name(live_name))),
            )
    if driver.tables_exist(con, QUARANTINE_TABLE):
        quarantine = driver.quarantine_table
        driver.execute(con, f"DELETE FROM {quarantine} WHERE materialization = {p}", (req.materialization,))
        driver.execute(
            con,
            f"UPDATE {quarantine} SET materialization = {p} WHERE materialization = {p}",
            (req.materialization, req.shadow),
        )


__all__ = ["cut_over_state", "replace_contents", "shadow_resource"]
