"""One shard session of a store-authoritative SQL endpoint, written once over a dialect.

A session has its own connection.  Loads are evaluated only after this session's
Acknowledged (read-committed; the commit is synchronous, so Acknowledged is immediate):
the keys go to a temp table, joined with the view.  Stores go to a temp staging table per
binding (a key stored twice: the last wins).  :meth:`SqlTransactor.start_commit` then
moves them in ONE transaction that also verifies the fence and writes the runtime
checkpoint and the quarantine rows (steps 1-5 in its docstring).

The generic Load and Store run ``executemany`` through the DB-API; an endpoint with a
faster path (PostgreSQL's COPY) overrides :meth:`SqlTransactor.lookup`,
:meth:`SqlTransactor.store`, :meth:`SqlTransactor.apply_staged` and :meth:`SqlTransactor.committed`.
"""

from __future__ import annotations

from typing import Any, Callable, Optional, Sequence, TypeVar

from tidemark import jsontext
from tidemark.drivers.base import Driver, ReadCommittedLoads, Transactor  # Driver: the SqlDriver that opened it
from tidemark.drivers.common.fences import fenced_off
from tidemark.drivers.sql import lean
from tidemark.drivers.sql.model import (
    DOCUMENT_COLUMN,
    INTEGER,
    IS_DELETE,
    STAGED_DOCUMENT,
    STORE_ORDER,
    TableModel,
    coerce,
    dumps,
    quarantine_rows,
    staged_column,
)
from tidemark.drivers.sql.reduce import reduce_sources, reduce_statement
from tidemark.errors import DriverError
from tidemark.faults import fault_point
from tidemark.protocol.messages import (
    Acknowledge,
    Acknowledged,
    Load,
    Loaded,
    Quarantine,
    Range,
    StartCommit,
    StartedCommit,
    Store,
)

T = TypeVar("T")


def stage_name(binding: int) -> str:
    return f"tidemark_stage_{binding}"


def typed_stage_name(binding: int) -> str:
    return f"tidemark_typed_{binding}"


def staged_columns(model: TableModel, quote: Callable[[str], str]) -> tuple[list[str], list[str]]:
    """The view's columns (quoted; keys, values, document) and the staging columns that fill them."""
    return (
        [quote(c.name) for c in model.columns] + [quote(DOCUMENT_COLUMN)],
        [staged_column(j) for j in range(len(model.columns))] + [STAGED_DOCUMENT],
    )


class SqlTransactor(ReadCommittedLoads, Transactor):
    """One shard session on its own connection (see the module docstring)."""

    def __init__(
        self,
        driver: Driver,
        con: Any,
        materialization: str,
        rng: Range,
        fence: int,
        models: list[TableModel],
        kept: Optional[list[Optional[tuple[int, ...]]]] = None,
        session: Any = None,
    ):
        self.driver = driver
        self.dialect = driver.dialect
        self.con = con
        self.materialization = materialization
        self.range = rng
        self.fence = fence
        self.models = models
        self.kept = kept or [None] * len(models)  # per binding: the value positions that are columns
        self.session = session  # what the driver's session_info read at Open
        self._acknowledged = False
        self._deferred: list[Load] = []
        self._staged: set[int] = set()  # bindings with staged rows
        self._created: set[str] = set()  # temp tables this session made
        self._quarantine: list[dict] = []
        self._seq = 0  # Store order within the transaction
        self._reduced_keys: dict[int, set] = {}  # per binding the endpoint reduces: the keys staged
        self._typed: set[int] = set()  # bindings staged as typed values (Store.rows)

    # --------------------------------------------------------------- helpers
    def execute(self, sql: str, params: Optional[Sequence[Any]] = None) -> Any:
        return self.driver.execute(self.con, sql, params)

    def executemany(self, sql: str, rows: Sequence[Sequence[Any]]) -> None:
        self.driver.executemany(self.con, sql, rows)

    def check_session(self) -> None:
        """First in each of the session's transactions: raise if it must not go on."""

    def transaction(self, body: Callable[[], T], write: bool = True) -> T:
        """``body()`` in one transaction of this session, after :meth:`check_session` (once)."""

        def checked() -> T:
            self.check_session()
            return body()

        return self.driver.transaction(self.con, checked, write)

    def in_transaction(self, body: Callable[[], T], what: str, write: bool = True) -> T:
        """:meth:`transaction`, retried as the driver's ``run`` retries."""
        return self.driver.run(lambda: self.transaction(body, write), what, self.con)

    def temp(self, name: str, columns: Sequence[str], options: str = "") -> tuple[str, Optional[str]]:
        """A temp table's name in statements, and the statement that creates it if this
        session has not yet: the caller runs it inside its transaction, and adds ``name`` to
        ``_created`` once that transaction has committed."""
        create = None if name in self._created else self.dialect.create_temp(name, columns, options)
        return self.dialect.temp(name), create

    def values_of(self, msg: Store) -> Sequence[tuple]:
        """``msg.values`` without the fields that are not columns (names too long)."""
        kept = self.kept[msg.binding]
        if kept is None:
            return msg.values
        return [tuple([v[j] for j in kept]) for v in msg.values]

    # ---------------------------------------------------------------- phases
    def acknowledge(self, msg: Acknowledge) -> Acknowledged:
        # start_commit committed synchronously: the previous transaction is visible.
        self._acknowledged = True
        return Acknowledged()

    def _evaluate(self, msg: Load) -> list[Loaded]:
        if not msg.keys:
            return []
        rows = self.lookup(msg.binding, self.models[msg.binding], msg.keys)
        if not rows:
            return []
        keys, loads = msg.keys, jsontext.loads
        return [
            Loaded(
                msg.binding,
                tuple([keys[i] for i, _ in rows]),
                tuple([d if d.__class__ is dict else loads(d) for _, d in rows]),
            )
        ]

    def lean_select(self, model: TableModel, alias: str) -> str:
        """The stored row's columns and ``flow_document`` (its document: :func:`lean.document_of`)."""
        q = self.dialect.quote
        return ", ".join(f"{alias}.{q(c.name)}" for c in model.columns) + f", {alias}.{q(DOCUMENT_COLUMN)}"

    def lean_rows(self, model: TableModel, found: list) -> list:
        """``(i, document)`` of the rows a lean Load read as ``(i, columns…, flow_document)``."""
        convert = lean.converters(model, self.dialect)
        return [(r[0], lean.document_of(model, self.dialect, r[1:], convert)) for r in found]

    def lookup(self, binding: int, model: TableModel, keys: Sequence[tuple]) -> list[tuple[int, str]]:
        """``(i, document text)`` of each stored key ``keys[i]``, in the order of ``keys``."""
        dialect = self.dialect
        name = f"tidemark_load_{binding}"
        kinds = [c.kind for c in model.keys]
        lt, create = self.temp(
            name,
            [f"i {dialect.sql_type(INTEGER)} PRIMARY KEY"]
            + [f"k{j} {dialect.column_type(c)}" for j, c in enumerate(model.keys)],
        )
        on = " AND ".join(f"t.{dialect.quote(c.name)} = l.k{j}" for j, c in enumerate(model.keys))
        rows = [(i, *(coerce(k, v) for k, v in zip(kinds, key))) for i, key in enumerate(keys)]
        stored = (
            self.lean_select(model, "t") if model.lean else f"t.{dialect.document_text(dialect.quote(DOCUMENT_COLUMN))}"
        )
        select = f"SELECT l.i, {stored} FROM {lt} l JOIN {dialect.ident(model)} t ON {on}"

        def body() -> list:
            if create:
                self.execute(create)
            self.execute(f"DELETE FROM {lt}")
            self.executemany(f"INSERT INTO {lt} VALUES ({dialect.params(len(kinds) + 1)})", rows)
            return self.execute(select).fetchall()

        found = self.in_transaction(body, f"load {model.display}", write=False)
        self._created.add(name)
        found.sort()
        return self.lean_rows(model, found) if model.lean else found

    def store(self, msg: Store) -> None:
        if not msg.keys:
            return
        dialect = self.dialect
        model = self.models[msg.binding]
        if msg.rows is not None:
            self.store_typed(model, msg)
            return
        if model.reduce is not None:
            self.store_texts(model, msg)
            return
        kinds = [c.kind for c in model.columns]
        n = len(model.keys)
        name = stage_name(msg.binding)
        staging, create = self.stage_table(model, msg.binding)
        seq = self._seq
        self._seq = seq + len(msg.keys)
        values, docs = self.row_parts(model, msg)
        rows = [
            (seq + i, int(bool(x)), *(coerce(k, v) for k, v in zip(kinds, (*key, *vals))), doc)
            for i, (key, vals, doc, x) in enumerate(zip(msg.keys, values, docs, msg.deletes))
        ]
        names = [STORE_ORDER, IS_DELETE] + [staged_column(j) for j in range(len(kinds))] + [STAGED_DOCUMENT]
        sql = f"INSERT INTO {staging} ({', '.join(names)}) VALUES ({dialect.params(len(names))})"
        if not model.delta:  # a key stored twice: the last wins
            sql += " " + dialect.upsert(names[2 : 2 + n], names[:2] + names[2 + n :])

        def body() -> None:
            if create:
                self.execute(create)
            self.executemany(sql, rows)

        self.in_transaction(body, f"store {model.display}", write=False)
        self._created.add(name)
        self._staged.add(msg.binding)

    def row_parts(
        self, model: TableModel, msg: Store, dumps: Callable[[Any], str] = dumps
    ) -> tuple[Sequence[tuple], list]:
        """The value columns and the ``flow_document`` text of each stored document: a lean
        row's columns are the document's properties, its ``flow_document`` what no column
        holds (None where nothing)."""
        if not model.lean:
            return self.values_of(msg), [dumps(doc) for doc in msg.docs]
        names = frozenset(c.name for c in model.columns)
        rests = [lean.remainder(doc, names) for doc in msg.docs]
        return [lean.row_values(model, doc) for doc in msg.docs], [None if r is None else dumps(r) for r in rests]

    def stage_table(self, model: TableModel, binding: int) -> tuple[str, Optional[str]]:
        dialect = self.dialect
        n = len(model.keys)
        columns = (
            [f"{STORE_ORDER} {dialect.sql_type(INTEGER)}", f"{IS_DELETE} {dialect.sql_type(INTEGER)}"]
            + [f"{staged_column(j)} {dialect.column_type(c)}" for j, c in enumerate(model.columns)]
            + [f"{STAGED_DOCUMENT} {dialect.document_type}"]
        )
        if not model.delta:
            columns.append(f"PRIMARY KEY ({', '.join(staged_column(j) for j in range(n))})")
        return self.temp(stage_name(binding), columns)

    def staged_once(self, model: TableModel, msg: Store) -> None:
        """A binding the endpoint reduces stages each key once per transaction (the runtime
        combines each key once per batch): a key stored twice is refused."""
        seen = self._reduced_keys.setdefault(msg.binding, set())
        if len(set(msg.keys)) != len(msg.keys) or not seen.isdisjoint(msg.keys):
            raise DriverError(
                f"{model.display}: a key was stored twice in one transaction of a binding {self.dialect.title} "
                "reduces itself (the runtime combines each key once per batch): nothing was committed"
            )
        seen.update(msg.keys)

    def store_texts(self, model: TableModel, msg: Store) -> None:
        """Stage a binding the endpoint reduces: the keys and each combined document's JSON
        text (the value columns are read from it by the commit's statement,
        :mod:`tidemark.drivers.sql.reduce`).  A key staged twice in one transaction is
        refused: the runtime combines each key once per batch."""
        dialect = self.dialect
        self.staged_once(model, msg)
        kinds = [c.kind for c in model.keys]
        n = len(kinds)
        table, create = self.stage_table(model, msg.binding)
        texts = self.driver.staged_texts(msg.texts) if msg.texts else tuple(dumps(doc) for doc in msg.docs)
        seq = self._seq
        self._seq = seq + len(msg.keys)
        rows = [
            (seq + i, 0, *(coerce(k, v) for k, v in zip(kinds, key)), text)
            for i, (key, text) in enumerate(zip(msg.keys, texts))
        ]
        names = [STORE_ORDER, IS_DELETE] + [staged_column(j) for j in range(n)] + [STAGED_DOCUMENT]
        self._stage_rows(
            model,
            table,
            create,
            f"INSERT INTO {table} ({', '.join(names)}) VALUES ({dialect.params(len(names))})",
            rows,
        )
        self._created.add(stage_name(msg.binding))
        self._staged.add(msg.binding)

    def _stage_rows(self, model: TableModel, table: str, create: Optional[str], insert: str, rows: list) -> None:
        """Insert ``rows`` into the session's staging ``table`` (created first where ``create``
        says how), in the transaction: what both kinds of a reduced binding's Stores share."""

        def body() -> None:
            if create:
                self.execute(create)
            self.executemany(insert, rows)

        self.in_transaction(body, f"store {model.display}", write=False)

    def store_typed(self, model: TableModel, msg: Store) -> None:
        """Stage a lean binding's combined documents given as typed values (``Store.rows``,
        an Arrow table) into a staging table of the view's column types, read by the
        commit's statement as they are."""
        dialect = self.dialect
        if msg.binding in self._staged and msg.binding not in self._typed:
            raise DriverError(
                f"{model.display}: typed rows and JSON texts staged in one transaction: nothing was committed"
            )
        self.staged_once(model, msg)
        name = typed_stage_name(msg.binding)
        table, create = self.temp(
            name, [f"{staged_column(j)} {dialect.column_type(c)}" for j, c in enumerate(model.columns)]
        )
        rows = list(zip(*(msg.rows.column(c.name).to_pylist() for c in model.columns)))
        self._stage_rows(
            model, table, create, f"INSERT INTO {table} VALUES ({dialect.params(len(model.columns))})", rows
        )
        self._created.add(name)
        self._staged.add(msg.binding)
        self._typed.add(msg.binding)

    def quarantine(self, msg: Quarantine) -> None:
        """Invalid documents for ``tidemark_quarantine``, written by this transaction's commit."""
        self._quarantine.extend(msg.rows)

    def start_commit(self, msg: StartCommit) -> StartedCommit:
        """Commit the transaction.

        Step 1: begin (the driver's :meth:`~SqlDriver.transaction`; SQLite takes the write
        lock), then :meth:`check_session`.
        Step 2: write the runtime checkpoint where the fence is still ours; no row ⇒ FencedOff
        (the row stays locked until the commit: a newer Open waits for it).
        Step 3: per staged binding, :meth:`apply_staged`: deletes, then the upsert (or the
        append, delta updates).
        Step 4: dead-letter rows.
        Step 5: commit; then :meth:`committed` (the staging tables)."""
        dialect = self.dialect
        p = dialect.placeholder
        cp = msg.runtime_checkpoint

        def body() -> None:
            cur = self.execute(  # Step 2
                f"UPDATE {self.driver.checkpoints_table} SET checkpoint = {dialect.json_param} WHERE materialization = {p} "
                f"AND key_begin = {p} AND key_end = {p} AND fence = {p}",
                (dumps(cp), self.materialization, self.range.key_begin, self.range.key_end, self.fence),
            )
            if cur.rowcount != 1:
                raise fenced_off(self.materialization, self.range, self.fence)
            for b in sorted(self._staged):  # Step 3
                self.apply_staged(b)
            if self._quarantine:  # Step 4
                self.executemany(
                    f"INSERT INTO {self.driver.quarantine_table} (materialization, batch_id, location, key_json, reason, value) "
                    f"VALUES ({dialect.params(6)})",
                    quarantine_rows(self.materialization, cp.get("batch_id"), self._quarantine),
                )
            fault_point("before_endpoint_commit")

        self.in_transaction(body, f"commit {self.range.name}")  # Step 1 and Step 5
        fault_point("after_endpoint_commit")
        self.committed()
        self._staged.clear()
        self._quarantine = []
        self._acknowledged = False
        self._seq = 0
        self._reduced_keys.clear()
        return StartedCommit()

    def apply_staged(self, binding: int) -> None:
        """Inside the commit: move one binding's staged rows into its table."""
        dialect = self.dialect
        model = self.models[binding]
        staging = dialect.temp(stage_name(binding))
        table = dialect.ident(model)
        n = len(model.keys)
        names, sources = staged_columns(model, dialect.quote)
        target, source = ", ".join(names), ", ".join(sources)
        if model.delta:
            self.execute(f"INSERT INTO {table} ({target}) SELECT {source} FROM {staging} ORDER BY {STORE_ORDER}")
            return
        if model.reduce is not None:  # the endpoint reduces: one statement (drivers/sql/reduce.py)
            forms = self.driver.reduce_sql(model)
            if binding in self._typed:  # typed values: the staging table's columns as they are
                typed = [staged_column(j) for j in range(len(model.columns))] + ["NULL"]
                sql = reduce_statement(
                    forms, table, model, model.reduce, dialect.temp(typed_stage_name(binding)), names, typed
                )
            else:
                sql = reduce_statement(forms, table, model, model.reduce, staging, names, reduce_sources(forms, model))
            try:
                self.execute(sql)
            except Exception as exc:
                refused = self.driver.reduce_refused(model, exc)
                if refused is None:
                    raise
                raise refused from None
            return
        self.execute(
            f"DELETE FROM {table} WHERE ({', '.join(names[:n])}) IN "
            f"(SELECT {', '.join(sources[:n])} FROM {staging} WHERE {IS_DELETE} = 1)"
        )
        self.execute(
            f"INSERT INTO {table} ({target}) SELECT {source} FROM {staging} WHERE {IS_DELETE} = 0 "
            + dialect.upsert(names[:n], names[n:])
        )

    def committed(self) -> None:
        """After the commit: empty the staging tables it applied."""
        for b in self._staged:
            staging = self.dialect.temp(typed_stage_name(b) if b in self._typed else stage_name(b))
            self.driver.run(lambda staging=staging: self.execute(f"DELETE FROM {staging}"), "clear staging", self.con)
        self._typed.clear()

    def close(self) -> None:
        try:
            self.con.close()
        except Exception:  # noqa: BLE001 - a connection that is gone is closed
            pass
