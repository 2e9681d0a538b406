"""The store-authoritative SQL endpoint, written once and assembled from parts.

:class:`SqlDriver` holds everything but the parts (:mod:`tidemark.drivers.sql.parts`):
tidemark's own tables (``tidemark_checkpoints``, ``tidemark_resources``,
``tidemark_quarantine``, ``tidemark_identities``), Validate and Apply (create, add columns,
claim the tables), Open (bump the fence of the range and of every overlapping range, inherit
the checkpoint; see :mod:`tidemark.drivers.common.fences`), and the inspection calls
(``dump``, ``checkpoints``, ``positions``, ``drop``; the queries of most are in
:mod:`tidemark.drivers.sql.inspection`).  The session is
:class:`~tidemark.drivers.sql.transactor.SqlTransactor`.

An endpoint's driver class names its :class:`~tidemark.drivers.sql.parts.SqlEndpoint` (how
its config becomes a client, a row writer and migrations; the client names the dialect) and
overrides nothing.  ``docs/dev/sql-skeleton.md`` says what a new SQL endpoint writes.
"""

from __future__ import annotations

import dataclasses
from functools import cached_property
from typing import Any, Callable, ClassVar, Optional, Sequence, TypeVar, cast

from tidemark.collection.sql_plan import binding_reduction
from tidemark.drivers.base import Capabilities, CheckpointRow, CommitPattern, Driver, Position, ReplaceContents
from tidemark.drivers.common.fences import CheckpointState, OpenPlan, load_checkpoint, plan_open
from tidemark.drivers.common.identity import record_text
from tidemark.drivers.sql import inspection, lean, replace
from tidemark.drivers.sql.dialect import Dialect
from tidemark.drivers.sql.model import (
    CHECKPOINTS_TABLE,
    DOCUMENT_COLUMN,
    IDENTITIES_TABLE,
    QUARANTINE_TABLE,
    RESOURCES_TABLE,
    ROW_ID_COLUMN,
    TableModel,
    check_columns,
    dumps,
)
from tidemark.drivers.sql.parts import SqlEndpoint
from tidemark.drivers.sql.plan import TablePlan, check_identifier
from tidemark.drivers.sql.transactor import SqlTransactor
from tidemark.errors import IncompatibleSchema, RecoveryError
from tidemark.protocol.messages import (
    Applied,
    Apply,
    BindingSpec,
    Doc,
    JsonObject,
    Key,
    Open,
    Opened,
    Range,
    SpecResponse,
    Validate,
    Validated,
    ValidatedBinding,
)

T = TypeVar("T")


def sql_capabilities(chunk: int, endpoint_reduce: frozenset[str], dialect: Dialect) -> Capabilities:
    """What an endpoint on the skeleton can do: store-authoritative, standard and delta
    updates, quarantine, any number of shards; Load and Store in chunks of ``chunk``; reduce
    in the endpoint the strategies of ``endpoint_reduce``; the dialect's limits."""
    return Capabilities(
        commit_pattern=CommitPattern.STORE_AUTHORITATIVE,
        delta_updates=True,
        max_load_keys=chunk,
        max_store_docs=chunk,
        concurrent_shards=True,
        quarantine=True,
        endpoint_reduce=endpoint_reduce,
        limits=dialect.limits,
    )


class SqlDriver(Driver):
    """A store-authoritative SQL endpoint (see the module docstring)."""

    reports_created = True
    endpoint: ClassVar[SqlEndpoint]  # the endpoint's parts, named by its driver class

    def __init__(self, config: JsonObject | None = None):
        super().__init__(config)
        parts = self.endpoint.assemble(self.config)
        self.parts = parts
        self.client = parts.client
        self.settings = parts.settings
        self.schema = parts.schema
        self.writer = parts.writer
        self.migrations = parts.migrations
        self._con: Any = None  # the driver's own connection (see :attr:`con`)

    @classmethod
    def resolve_config(cls, config: JsonObject, base_dir: str) -> JsonObject:
        return cls.endpoint.resolve(config, base_dir)

    def __repr__(self) -> str:
        return self.parts.describe

    @property
    def dialect(self) -> Dialect:
        return self.client.dialect

    def capabilities(self) -> Capabilities:
        """Store-authoritative (:func:`sql_capabilities`); the strategies the dialect reduces
        in the endpoint (MySQL or MariaDB: known from a connection's handshake)."""
        if not self.client.dialect_known:
            self.con  # noqa: B018 - the handshake names the server
        reduction = self.dialect.reduction
        strategies = frozenset() if reduction is None else reduction.strategies
        return sql_capabilities(self.parts.chunk, strategies, self.dialect)

    def spec(self) -> SpecResponse:
        return self.parts.spec

    # -------------------------------------------------------- the client's
    def connect(self) -> Any:
        """A new connection for a session (retried under the endpoint's policy)."""
        return self.client.connect()

    @property
    def con(self) -> Any:
        """The driver's own connection (setup and inspection), made again when it is gone."""
        if self._con is None or not self.client.usable(self._con):
            self._con = self.client.connect(retrying=False)  # used inside run(), which retries
        return self._con

    def close(self) -> None:
        if self._con is not None:
            self.client.close(self._con)
            self._con = None

    def run(self, fn: Callable[[], T], what: str, con: Any = None) -> T:
        return self.client.run(fn, what, con)

    def transaction(self, con: Any, body: Callable[[], T], write: bool = True) -> T:
        return self.client.transaction(con, body, write)

    def execute(self, con: Any, sql: str, params: Optional[Sequence[Any]] = None) -> Any:
        return self.client.execute(con, sql, params)

    def executemany(self, con: Any, sql: str, rows: Sequence[Sequence[Any]]) -> None:
        self.client.executemany(con, sql, rows)

    def atomically(self, body: Callable[[Any], T], what: str, con: Any = None, write: bool = True) -> T:
        """``body(con)`` in one transaction, retried as :meth:`run` retries; without ``con``,
        on the driver's own connection (fetched again by each attempt)."""

        def attempt() -> T:
            c = self.con if con is None else con
            return self.transaction(c, lambda: body(c), write)

        return self.run(attempt, what, con)

    # ------------------------------------------------------------ own tables
    @cached_property
    def checkpoints_table(self) -> str:
        return self.dialect.table(self.schema, CHECKPOINTS_TABLE)

    @cached_property
    def resources_table(self) -> str:
        return self.dialect.table(self.schema, RESOURCES_TABLE)

    @cached_property
    def identities_table(self) -> str:
        return self.dialect.table(self.schema, IDENTITIES_TABLE)

    @cached_property
    def quarantine_table(self) -> str:
        return self.dialect.table(self.schema, QUARANTINE_TABLE)

    def tables_exist(self, con: Any, *names: str, schema: Optional[str] = None) -> bool:
        sql, params = self.dialect.exists(schema or self.schema, names)
        return all(v is not None and v != 0 for v in self.execute(con, sql, params).fetchone())

    def ensure_tables(self, con: Any) -> None:
        """tidemark's own tables (and the schema), serialized with other DDL."""
        if self.tables_exist(con, CHECKPOINTS_TABLE, QUARANTINE_TABLE, RESOURCES_TABLE, IDENTITIES_TABLE):
            return
        dialect = self.dialect

        def body() -> None:
            if dialect.ddl_lock:
                self.execute(con, dialect.ddl_lock)
            if dialect.schemas:
                self.execute(con, dialect.create_schema(self.schema))
            for statement in dialect.system_tables(
                self.checkpoints_table, self.resources_table, self.quarantine_table, self.identities_table
            ):
                self.execute(con, statement)

        self.transaction(con, body)

    # ------------------------------------------------------------ setup phase
    def model(self, binding: BindingSpec, con: Any = None) -> TableModel:
        """The binding's table, in the form its table has (lean or full: :mod:`~tidemark.drivers.sql.lean`;
        read once per table and driver, on ``con`` or the driver's own connection)."""
        base = self.base_model(binding)
        form, existing = lean.table_columns(self, base, con)
        model = lean.with_form(self, base, binding, form)
        lean.columns_kept(model, binding, existing)
        return model

    row_forms, typed_rows, typed_remainder = lean.row_forms, lean.typed_rows, lean.typed_remainder

    def base_model(self, binding: BindingSpec) -> TableModel:
        """The binding's table, without its form.  Where the dialect limits identifiers, a longer schema, table
        or key name is refused here (from Validate, before any data moves); a longer value
        field is left out of the columns, its value stays in the document (Validate reports
        it as a constraint and Apply says so)."""
        dialect = self.dialect
        model = TableModel.of(binding, self.schema if dialect.schemas else None)
        if not dialect.schemas:
            model = dataclasses.replace(model, schema=self.schema)
        dialect.check_binding(binding, model)
        if binding.endpoint_reduce and not binding.delta_updates:
            plan, why = binding_reduction(binding.schema, binding.key, self.capabilities().endpoint_reduce)
            if plan is None:
                raise IncompatibleSchema(
                    f"table {model.display!r}: {dialect.title} cannot reduce this binding itself: {why}"
                )
            model = dataclasses.replace(model, reduce=plan, nullable=lean.nullable_properties(plan))
        if dialect.max_identifier_bytes is None:
            return model
        for what, name in (("schema", model.schema), ("table", model.name)):
            check_identifier(dialect, f"binding of {binding.collection!r}", what, name)
        long_keys = [c.name for c in model.keys if dialect.too_long(c.name)]
        if long_keys:
            raise IncompatibleSchema(
                f"table {model.display!r}: key field(s) {long_keys} are longer than {dialect.title}'s "
                f"{dialect.max_identifier_bytes}-byte column names, and a key must be a column: rename the property"
            )
        if any(dialect.too_long(c.name) for c in model.values):
            model = dataclasses.replace(model, values=tuple(c for c in model.values if not dialect.too_long(c.name)))
        return model

    def resource_name(self, model: TableModel) -> str:
        """How ``tidemark_resources`` (and ``drop``) name a binding's table."""
        return model.display if self.dialect.schemas else model.name

    def omitted_fields(self, binding: BindingSpec) -> list[str]:
        """Value fields with names too long for a column: their values stay in the document."""
        return [f.name for f in binding.value_fields if self.dialect.too_long(f.name)]

    def kept_values(self, binding: BindingSpec) -> Optional[tuple[int, ...]]:
        """Positions of the value fields that are columns, or None when all of them are."""
        kept = tuple(i for i, f in enumerate(binding.value_fields) if not self.dialect.too_long(f.name))
        return None if len(kept) == len(binding.value_fields) else kept

    @property
    def omitted_reason(self) -> str:
        return f"its name is longer than {self.dialect.name_limit}; its value stays in {DOCUMENT_COLUMN}"

    def existing(self, con: Any, model: TableModel) -> tuple[Optional[dict[str, tuple[str, bool]]], list[str]]:
        """The table's columns ``{name: (type, is_primary_key)}`` (None: no table), and the
        columns an INSERT must fill."""
        # cast: base_model sets the schema
        return self.dialect.read_columns(
            self.execute(con, *self.dialect.columns(cast(str, model.schema), model.name)).fetchall()
        )

    def plan(self, con: Any, bindings: Sequence[BindingSpec]) -> list[TablePlan]:
        dialect = self.dialect
        out = []
        self.__dict__.pop("_forms", None)  # Apply may make or change tables
        for b in bindings:
            model = self.base_model(b)
            existing, required = self.existing(con, model)
            model = lean.with_form(self, model, b, lean.form_of(existing, required))
            lean.columns_kept(model, b, existing)
            missing = (
                None
                if existing is None
                else check_columns(
                    model,
                    existing,
                    dialect.column_type,
                    has_row_id=ROW_ID_COLUMN in existing,
                    document_types=dialect.document_types,
                    required=required,
                    widens=dialect.widens,
                )
            )
            widened = [
                (c, existing[c.name][0])
                for c in model.values
                if existing and c.name in existing and existing[c.name][0].lower() != dialect.column_type(c).lower()
            ]
            out.append(TablePlan(b, model, existing, missing, widened, self.migrations.table_options(model, b)))
        return out

    def notes(self, plan: TablePlan) -> list[str]:
        """Apply's words on what it leaves as it is."""
        omitted = self.omitted_fields(plan.binding)
        return self.migrations.notes(plan, omitted) + [
            f"leave field {name} out of {plan.model.display}'s columns ({self.omitted_reason})" for name in omitted
        ]

    def validate(self, req: Validate) -> Validated:
        self.run(lambda: self.plan(self.con, req.bindings), "validate")
        return Validated(
            tuple(
                ValidatedBinding(
                    b.resource_path, b.delta_updates, {name: self.omitted_reason for name in self.omitted_fields(b)}
                )
                for b in req.bindings
            )
        )

    def apply(self, req: Apply) -> Applied:
        dialect = self.dialect
        created: list[tuple[str, ...]] = []

        def body(con: Any) -> list[str]:
            actions: list[str] = []
            created.clear()
            if not req.dry_run and dialect.ddl_lock:
                self.execute(con, dialect.ddl_lock)
            for plan in self.plan(con, req.bindings):
                model = plan.model
                actions.extend(self.notes(plan))
                if plan.missing is None:
                    options, note = plan.options
                    actions.append(f"create table {model.display}{note}")
                    created.append(plan.binding.resource_path)
                    if not req.dry_run:
                        if dialect.schemas:
                            self.execute(con, dialect.create_schema(cast(str, model.schema)))
                        self.execute(con, dialect.create_table(model, options))
                    continue
                for col in plan.missing:
                    actions.append(f"add column {col.name} {dialect.column_type(col)} to {model.display}")
                    if not req.dry_run:
                        self.execute(con, dialect.add_column(model, col))
                actions.extend(self.migrations.migrate(self.client, con, plan, req.dry_run))
            if not req.dry_run and req.checkpoint_id:
                for i, b in enumerate(req.bindings):
                    self.claim(
                        con,
                        self.resource_name(self.base_model(b)),
                        req.materialization,
                        req.checkpoint_id,
                        req.identities[i] if i < len(req.identities) else None,
                    )
            return actions

        def attempt() -> list[str]:
            con = self.con
            if not req.dry_run:
                self.ensure_tables(con)
            return self.transaction(con, lambda: body(con))

        actions = self.run(attempt, "apply")
        return Applied("; ".join(actions) or "nothing to do", tuple(created))

    def claim(
        self, con: Any, resource: str, materialization: str, checkpoint_id: str, record: Optional[JsonObject] = None
    ) -> None:
        """Inside Apply's transaction: record that ``materialization`` of tidemark checkpoint
        ``checkpoint_id`` writes the table ``resource`` (a table of an older tidemark, recorded by
        nobody, is taken); refuse a table another materialization or checkpoint writes.  Keep the
        view-identity ``record`` in ``tidemark_identities`` where the table has none."""
        p = self.dialect.placeholder
        if (
            record is not None
            and self.execute(
                con,
                f"SELECT 1 FROM {self.identities_table} WHERE resource = {p}{self.dialect.name_collate}",
                (resource,),
            ).fetchone()
            is None
        ):
            self.execute(
                con,
                f"INSERT INTO {self.identities_table} (resource, materialization, record) VALUES ({p}, {p}, {p})",
                (resource, materialization, record_text(record, self.dialect.resolved_name(resource))),
            )
        row = self.execute(
            con,
            f"SELECT materialization, checkpoint_id FROM {self.resources_table} WHERE resource = {p}{self.dialect.name_collate}",
            (resource,),
        ).fetchone()
        if row is None:
            self.execute(
                con,
                f"INSERT INTO {self.resources_table} (resource, materialization, checkpoint_id) VALUES ({p}, {p}, {p})",
                (resource, materialization, checkpoint_id),
            )
        elif tuple(row) != (materialization, checkpoint_id):
            raise RecoveryError(
                f"table {resource!r} is written by materialization {row[0]!r} of tidemark checkpoint {row[1]}, not by "
                f"{materialization!r} of checkpoint {checkpoint_id}; give this view its own table. Nothing was changed"
            )

    # ------------------------------------------------------ transaction phase
    def open(self, req: Open) -> tuple[SqlTransactor, Opened]:
        con = self.connect()
        try:
            self.run(lambda: self.ensure_tables(con), "open", con)
            plan, info = self.atomically(
                lambda c: (self.open_range(c, req.materialization, req.range), self.client.session_info(c)),
                f"open {req.range.name}",
                con,
            )
        except BaseException:
            self.client.close(con)
            raise
        models = [self.model(b, con) for b in req.bindings]
        transactor = SqlTransactor(
            self,
            con,
            req.materialization,
            req.range,
            plan.fence,
            models,
            [self.kept_values(b) for b in req.bindings],
            info,
        )
        return transactor, Opened(plan.checkpoint)

    def open_range(self, con: Any, materialization: str, key_range: Range) -> OpenPlan:
        """Inside the Open transaction: lock, bump overlapping fences, inherit, insert (see
        :mod:`tidemark.drivers.common.fences`)."""
        dialect, checkpoints = self.dialect, self.checkpoints_table
        p = dialect.placeholder
        lock = dialect.open_lock(self.schema, materialization)
        if lock is not None:
            self.execute(con, *lock)
        over = (materialization, key_range.key_begin, key_range.key_end)
        overlapping = f"materialization = {p} AND key_end >= {p} AND key_begin <= {p}"
        rows = self.execute(
            con,
            f"SELECT key_begin, key_end, fence, checkpoint FROM {checkpoints} WHERE {overlapping} "
            f"ORDER BY key_begin, key_end{dialect.for_update}",
            over,
        ).fetchall()
        plan = plan_open(
            materialization, key_range, [CheckpointState(Range(b, e), f, load_checkpoint(c)) for b, e, f, c in rows]
        )
        self.execute(con, f"UPDATE {checkpoints} SET fence = fence + 1 WHERE {overlapping}", over)
        if plan.insert:
            self.execute(
                con,
                f"INSERT INTO {checkpoints} (materialization, key_begin, key_end, fence, checkpoint) "
                f"VALUES ({p}, {p}, {p}, {p}, {dialect.json_param})",
                (*over, plan.fence, None if plan.checkpoint is None else dumps(plan.checkpoint)),
            )
        elif plan.refresh:
            self.execute(
                con,
                f"UPDATE {checkpoints} SET checkpoint = {dialect.json_param} WHERE materialization = {p} "
                f"AND key_begin = {p} AND key_end = {p}",
                (dumps(plan.checkpoint), *over),
            )
        return plan

    # ------------------------------------------------------------- inspection
    def dump(self, materialization: str, binding: BindingSpec) -> dict[Key, Doc] | list[Doc]:
        return inspection.dump(self, materialization, binding)

    def read_rows(self, source: str) -> list[dict[str, Any]]:
        return inspection.read_rows(self, source)

    def drop(self, materialization: str, bindings: Sequence[BindingSpec]) -> list[str]:
        return inspection.drop(self, materialization, bindings)

    def shadow_resource(self, resource: JsonObject, tag: str) -> Optional[JsonObject]:
        return replace.shadow_resource(resource, tag)

    def cut_over_state(self, req: ReplaceContents) -> str:
        return replace.cut_over_state(self, req)

    def replace_contents(self, req: ReplaceContents) -> list[str]:
        self.__dict__.pop("_forms", None)  # the live tables change
        return replace.replace_contents(self, req)

    def identities(self, materialization: str, bindings: Sequence[BindingSpec]) -> list[Optional[JsonObject]]:
        return inspection.identities(self, materialization, bindings)

    def positions(self, materialization: str, bindings: Sequence[BindingSpec]) -> list[Position]:
        def body() -> Any:  # the client library's rows (a DB-API cursor's fetchall)
            if not self.tables_exist(self.con, RESOURCES_TABLE):
                return []
            return self.execute(
                self.con, f"SELECT resource, materialization, checkpoint_id FROM {self.resources_table}"
            ).fetchall()

        owners = {r[0]: (r[1], r[2]) for r in self.run(body, "positions")}
        out = super().positions(materialization, bindings)
        assert out is not None  # the default reads checkpoints, which this driver has
        for b in bindings:
            owner = owners.get(self.resource_name(self.base_model(b)))
            if owner is not None:
                out.append(
                    Position(
                        f"table {self.resource_name(self.base_model(b))}",
                        owner[0],
                        owner[1],
                        self.last_batch(owner[0], owner[1]),
                        resource=b.resource_path,
                    )
                )
        return out

    def last_batch(self, materialization: str, checkpoint_id: Optional[str]) -> int:
        """The last batch of (materialization, checkpoint) any range of it holds (-1: none)."""
        batches = [
            r.runtime_checkpoint.get("batch_id")
            for r in self.checkpoints(materialization)
            if isinstance(r.runtime_checkpoint, dict) and r.runtime_checkpoint.get("checkpoint_id") == checkpoint_id
        ]
        return max((b for b in batches if isinstance(b, int)), default=-1)

    def checkpoints(self, materialization: str) -> list[CheckpointRow]:
        return inspection.checkpoints(self, materialization)
