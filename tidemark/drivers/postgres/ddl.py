"""PostgreSQL's DDL beyond the skeleton's: the fillfactor of new tables, the widening
migrations (a value column whose type changes is recomputed from ``flow_document``, or
in a lean table converted where it is),
and Apply's words on columns no field writes."""

from __future__ import annotations

from typing import Any, Sequence

from psycopg import sql as pg_sql

from tidemark.drivers.postgres.dialect import MAX_IDENTIFIER_BYTES, sql_type
from tidemark.drivers.postgres.settings import PgSettings, parse_fillfactor
from tidemark.drivers.sql import DOCUMENT_COLUMN, JSON, ROW_ID_COLUMN, Column, TableModel, TablePlan
from tidemark.drivers.sql import quote_ident as q
from tidemark.drivers.sql.parts import SqlClient
from tidemark.protocol.messages import BindingSpec


def recompute_sql(col: Column, pointer: str, con) -> str:
    """The ``USING`` expression that recomputes a value column from ``flow_document``."""
    path = [part.replace("~1", "/").replace("~0", "~") for part in pointer.split("/")[1:]]
    lit = pg_sql.Literal(path).as_string(con) + "::text[]"  # quoted by psycopg, for this server
    if col.kind == JSON:
        return f"NULLIF({q(DOCUMENT_COLUMN)} #> {lit}, 'null'::jsonb)"
    return f"({q(DOCUMENT_COLUMN)} #>> {lit})::{sql_type(col.kind)}"


class PostgresMigrations:
    """PostgreSQL's :class:`~tidemark.drivers.sql.parts.Migrations`."""

    def __init__(self, settings: PgSettings):
        self.settings = settings

    def fillfactor(self, model: TableModel, binding: BindingSpec) -> int:
        """The fillfactor a new table gets: the resource's, else the endpoint's for a standard
        table; a delta-updates table is append-only and gets PostgreSQL's default (100)."""
        value = binding.resource.get("fillfactor") if isinstance(binding.resource, dict) else None
        if value is not None:
            return parse_fillfactor(value, f"binding {model.display!r}: resource fillfactor")
        return 100 if model.delta else self.settings.fillfactor

    def table_options(self, model: TableModel, binding: BindingSpec) -> tuple[str, str]:
        fillfactor = self.fillfactor(model, binding)
        if fillfactor == 100:
            return "", ""
        return f" WITH (fillfactor = {int(fillfactor)})", f" (fillfactor {fillfactor})"

    def notes(self, plan: TablePlan, omitted: Sequence[str]) -> list[str]:
        """Columns of an existing table that no field writes are left as they are (and said so)."""
        written = (
            {c.name for c in plan.model.columns}
            | {DOCUMENT_COLUMN, ROW_ID_COLUMN}
            | {n.encode()[:MAX_IDENTIFIER_BYTES].decode(errors="ignore") for n in omitted}
        )
        unwritten = sorted(set(plan.existing or ()) - written)
        return [f"leave column {name} of {plan.model.display} as it is: no field writes it" for name in unwritten]

    def migrate(self, client: SqlClient, con: Any, plan: TablePlan, dry_run: bool) -> list[str]:
        """Widen the value columns whose type changed, in one statement (the table is rewritten once)."""
        if not plan.widened:
            return []
        model = plan.model
        pointers = {f.name: f.pointer for f in plan.binding.fields}
        if model.lean:  # the column holds the value: converted where it is
            return self.widen_lean(client, con, model, plan.widened, dry_run)
        if not dry_run:
            client.execute(
                con,
                f"ALTER TABLE {model.ident} "
                + ", ".join(
                    f"ALTER COLUMN {q(col.name)} TYPE {sql_type(col.kind)} USING {recompute_sql(col, pointers[col.name], con)}"
                    for col, _ in plan.widened
                ),
            )
        return [
            f"change column {col.name} of {model.display} from {was} to {sql_type(col.kind)} "
            "(recomputed from flow_document)"
            for col, was in plan.widened
        ]

    def widen_lean(self, client: SqlClient, con: Any, model: TableModel, widened: list, dry_run: bool) -> list[str]:
        """Widen columns of a lean table (their values are converted: no document holds them)."""
        if not dry_run:
            client.execute(
                con,
                f"ALTER TABLE {model.ident} "
                + ", ".join(
                    f"ALTER COLUMN {q(col.name)} TYPE {sql_type(col.kind)} USING "
                    + (f"to_jsonb({q(col.name)})" if col.kind == JSON else f"{q(col.name)}::{sql_type(col.kind)}")
                    for col, _ in widened
                ),
            )
        return [
            f"change column {col.name} of {model.display} from {was} to {sql_type(col.kind)}" for col, was in widened
        ]
