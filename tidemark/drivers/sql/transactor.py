"""One shard session of a store-authoritative SQL endpoint, written once over a dialect.

A session has its own connection.  Loads are evaluated only after this session's
Acknowledged (read-committed; the commit is synchronous, so Acknowledged is immediate):
the keys go to a temp table, joined with the view.  Stores go to a temp staging table per
binding.  :meth:`SqlTransactor.start_commit` then moves them in ONE transaction that also
verifies the fence and writes the runtime checkpoint and the quarantine rows (steps 1-5 in
its docstring).

An endpoint supplies, and overrides no step: its dialect (the SQL text, the staging tables'
types, how the commit deletes, updates in place and dedupes, and its reducing statement:
:class:`~tidemark.drivers.sql.dialect.Dialect`), its row writer (how rows reach a temp
table: :class:`~tidemark.drivers.sql.writer.RowWriter`) and its client
(:class:`~tidemark.drivers.sql.parts.SqlClient`: ``check_session``).
"""

from __future__ import annotations

import re
from typing import Any, Callable, Optional, Protocol, Sequence, TypeVar

from tidemark import jsontext
from tidemark.drivers.base import ReadCommittedLoads, Transactor
from tidemark.drivers.common.columns import INTEGER, NUMBER, held, holds
from tidemark.drivers.common.fences import fenced_off
from tidemark.drivers.sql import lean
from tidemark.drivers.sql.dialect import Dialect, Reduction
from tidemark.drivers.sql.model import (
    DOCUMENT_COLUMN,
    IS_DELETE,
    STAGED_DOCUMENT,
    STORE_ORDER,
    WAS_LOADED,
    TableModel,
    dumps,
    quarantine_rows,
    staged_column,
)
from tidemark.drivers.sql.parts import SqlClient
from tidemark.drivers.sql.reduce import reduce_sources, reduce_statement
from tidemark.drivers.sql.refusals import refused_document, sum_overflow
from tidemark.drivers.sql.writer import DOC, FLAG, ORDER, Chunk, KeyChunk, RowWriter
from tidemark.errors import DriverError
from tidemark.faults import fault_point
from tidemark.protocol.messages import (
    Acknowledge,
    Acknowledged,
    AnyStore,
    JsonObject,
    Key,
    Load,
    Loaded,
    Quarantine,
    Range,
    StartCommit,
    StartedCommit,
    Store,
    StoreRows,
    StoreTexts,
)

T = TypeVar("T")


#: a run of 16 digits: a number a 64-bit or double column may not hold exactly (``numbers_held``)
_LONG_DIGITS = re.compile(r"[0-9]{16}")


class SessionDriver(Protocol):
    """What a :class:`SqlTransactor` uses of the SQL driver that opened it (its dialect, its
    client, its table names and its row writer)."""

    writer: RowWriter
    client: SqlClient
    settings: Any

    @property
    def dialect(self) -> Dialect: ...

    @property
    def checkpoints_table(self) -> str: ...

    @property
    def quarantine_table(self) -> str: ...

    def execute(self, con: Any, sql: str, params: Optional[Sequence[Any]] = None) -> Any: ...

    def executemany(self, con: Any, sql: str, rows: Sequence[Sequence[Any]]) -> None: ...

    def transaction(self, con: Any, body: Callable[[], T], write: bool = True) -> T: ...

    def run(self, fn: Callable[[], T], what: str, con: Any = None) -> T: ...


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
        driver: SessionDriver,
        con: Any,
        materialization: str,
        key_range: Range,
        fence: int,
        models: list[TableModel],
        kept: Optional[list[Optional[tuple[int, ...]]]] = None,
        session: Any = None,
    ):
        self.driver = driver  # the SqlDriver that opened it
        self.dialect = driver.dialect
        self.con = con
        self.materialization = materialization
        self.range = key_range
        self.fence = fence
        self.models = models
        self.kept = kept or [None] * len(models)  # per binding: the value positions that are columns
        self.session = session  # what the driver's session_info read at Open
        self._acknowledged = False
        self._deferred: list[Load] = []
        self._staged: set[int] = set()  # bindings with staged rows
        self._created: set[str] = set()  # temp tables this session made
        self._quarantine: list[JsonObject] = []
        self._seq = 0  # Store order within the transaction
        self._reduced_keys: dict[int, set[Key]] = {}  # per binding the endpoint reduces: the keys staged
        self._typed: set[int] = set()  # bindings staged as typed values (StoreRows)
        self._stale: set[str] = set()  # temp tables still holding committed rows (emptied when next used)
        self._hashes: dict[
            int, set[int]
        ] = {}  # per binding: hashes of stored keys (unkeyed staging: to skip the dedupe)
        self._dupes: set[int] = set()  # bindings where a key may have been stored twice
        self._deletes: set[int] = set()  # bindings with deletes staged
        self._updates: dict[int, int] = {}  # per binding: staged documents whose key was Loaded
        self.writer = driver.writer  # how rows reach the temp tables

    # --------------------------------------------------------------- helpers
    def execute(self, sql: str, params: Optional[Sequence[Any]] = None) -> Any:
        return self.driver.execute(self.con, sql, params)

    def executemany(self, sql: str, rows: Sequence[Sequence[Any]]) -> None:
        self.driver.executemany(self.con, sql, rows)

    def check_session(self) -> None:
        """First in each of the session's transactions: raise if it must not go on (the
        driver's ``check_session``: PostgreSQL refuses another server process than Open's)."""
        self.driver.client.check_session(self.con, self.session)

    def transaction(self, body: Callable[[], T], write: bool = True) -> T:
        """``body()`` in one transaction of this session, after :meth:`check_session` (once)."""

        def checked() -> T:
            self.check_session()
            return body()

        return self.driver.transaction(self.con, checked, write)

    def in_transaction(self, body: Callable[[], T], what: str, write: bool = True) -> T:
        """:meth:`transaction`, retried as the driver's ``run`` retries."""
        return self.driver.run(lambda: self.transaction(body, write), what, self.con)

    def reduction(self) -> Reduction:
        """The dialect's statement by which the endpoint reduces a binding itself."""
        reduction = self.dialect.reduction
        if reduction is None:
            raise DriverError(f"{self.dialect.title} does not reduce in the endpoint")
        return reduction

    def temp(self, name: str, columns: Sequence[str], options: str = "") -> tuple[str, Optional[str]]:
        """A temp table's name in statements, and the statement that creates it if this
        session has not yet: the caller runs it inside its transaction, and adds ``name`` to
        ``_created`` once that transaction has committed."""
        create = None if name in self._created else self.dialect.create_temp(name, columns, options)
        return self.dialect.temp(name), create

    def values_of(self, msg: Store) -> Sequence[tuple[Any, ...]]:
        """``msg.values`` without the fields that are not columns (names too long), each None
        where its column cannot hold it exactly (an integer beyond 64 bits: the document keeps it)."""
        kept = self.kept[msg.binding]
        values = msg.values if kept is None else [tuple([v[j] for j in kept]) for v in msg.values]
        kinds = [c.kind for c in self.models[msg.binding].values]
        if not any(k in (INTEGER, NUMBER) for k in kinds):
            return values
        return [held(kinds, v) for v in values]

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

    def lean_rows(self, model: TableModel, found: list[Any]) -> list[tuple[int, JsonObject]]:
        """``(i, document)`` of the rows a lean Load read as ``(i, columns…, flow_document)``."""
        convert = lean.converters(model, self.dialect)
        return [(r[0], lean.document_of(model, self.dialect, r[1:], convert)) for r in found]

    def lookup(self, binding: int, model: TableModel, keys: Sequence[Key]) -> list[tuple[int, Any]]:
        """``(i, document text)`` (a lean row: ``(i, document)``) of each stored key ``keys[i]``, in the order of ``keys``."""
        dialect = self.dialect
        name = f"tidemark_load_{binding}"
        names = ["key_index"] + [staged_column(j) for j in range(len(model.keys))]
        lt, create = self.temp(
            name,
            [f"key_index {dialect.load_index_type}"]
            + [f"{staged_column(j)} {dialect.staged_type(c)}" for j, c in enumerate(model.keys)],
            dialect.load_table_options,
        )
        prepare = [create] if create else ([] if dialect.load_table_options else [dialect.empty_table(lt)])
        on = " AND ".join(f"t.{dialect.quote(c.name)} = l.{staged_column(j)}" for j, c in enumerate(model.keys))
        stored = (
            self.lean_select(model, "t") if model.lean else f"t.{dialect.document_text(dialect.quote(DOCUMENT_COLUMN))}"
        )
        select = f"SELECT l.key_index, {stored} FROM {lt} l JOIN {dialect.ident(model)} t ON {on}"
        found = list(self.writer.load(self, KeyChunk(lt, prepare, names, model, keys, select, f"load {model.display}")))
        self._created.add(name)
        found.sort()
        return self.lean_rows(model, found) if model.lean else found

    def store(self, msg: AnyStore) -> None:
        if not msg.keys:
            return
        model = self.models[msg.binding]
        if isinstance(msg, StoreRows):
            self.store_typed(model, msg)
        elif model.reduce is not None:
            self.store_texts(model, msg)
        elif isinstance(msg, Store):
            self.store_documents(model, msg)
        else:
            raise DriverError(f"{model.display}: JSON texts for a binding {self.dialect.title} does not reduce")

    def store_documents(self, model: TableModel, msg: Store) -> None:
        """Stage documents with their value columns, deletes and whether Load found their key."""
        self.track(model, msg)
        seq = self._seq
        self._seq = seq + len(msg.keys)
        # the value columns (without the fields whose names are too long for a column), and
        # what flow_document holds: the document, or a lean row's remainder
        values, texts = self.row_parts(model, msg, self.writer.dumps)
        rows = [
            (seq + i, x, e, *key, *vals, text)
            for i, (key, vals, text, x, e) in enumerate(zip(msg.keys, values, texts, msg.deletes, msg.exists))
        ]
        names = [STORE_ORDER, IS_DELETE, WAS_LOADED] + [staged_column(j) for j in range(len(model.columns))]
        kinds = [ORDER, FLAG, FLAG] + [c.kind for c in model.columns] + [DOC]
        keyed = self.dialect.staging_keyed and not model.delta  # a key stored twice: the last wins
        self.stage(model, msg, names + [STAGED_DOCUMENT], kinds, rows, names[3 : 3 + len(model.keys)] if keyed else ())

    def track(self, model: TableModel, msg: Store) -> None:
        """What the commit needs to know of a binding's Stores: deletes, keys Load found, and
        (unkeyed staging) whether a key may have been stored twice."""
        if not self.dialect.staging_keyed and not model.delta:
            seen = self._hashes.setdefault(msg.binding, set())
            before = len(seen)
            seen.update(map(hash, msg.keys))
            if len(seen) - before != len(msg.keys):
                self._dupes.add(msg.binding)  # a key stored twice (or a hash collision): deduplicate at commit
        if any(msg.deletes):
            self._deletes.add(msg.binding)
        self._updates[msg.binding] = self._updates.get(msg.binding, 0) + sum(
            1 for e, x in zip(msg.exists, msg.deletes) if e and not x
        )

    def stage(
        self,
        model: TableModel,
        msg: Store | StoreTexts,
        names: list[str],
        kinds: list[str],
        rows: list[tuple[Any, ...]],
        key_names: Sequence[str],
    ) -> None:
        """``rows`` into the binding's staging table (made, or emptied of a committed
        transaction's rows, first), by the endpoint's writer."""
        table, prepare = self.staging_table(model, msg.binding, stage_name(msg.binding))

        def docs() -> Sequence[Any]:
            return msg.docs if isinstance(msg, Store) else [jsontext.loads(t) for t in msg.texts]

        chunk = Chunk(table, prepare, names, kinds, rows, key_names, model, msg.keys, docs, f"store {model.display}")
        self.writer.stage(self, chunk)
        self._created.add(stage_name(msg.binding))
        self._stale.discard(stage_name(msg.binding))
        self._staged.add(msg.binding)

    def row_parts(
        self, model: TableModel, msg: Store, dumps: Callable[[Any], str] = dumps
    ) -> tuple[Sequence[tuple[Any, ...]], list[Optional[str]]]:
        """The value columns and the ``flow_document`` text of each stored document: a lean
        row's columns are the document's properties, its ``flow_document`` what no column
        holds (a nullable property's ``null`` too; None where nothing)."""
        if not model.lean:
            return self.values_of(msg), [dumps(doc) for doc in msg.docs]
        names = frozenset(c.name for c in model.columns)
        times = lean.date_time_columns(model)
        rests = [lean.remainder(doc, names, times, model.nullable) for doc in msg.docs]
        values = [lean.row_values(model, doc) for doc in msg.docs]
        if any(c.kind in (INTEGER, NUMBER) for c in model.values):
            self.unheld_in_remainder(model, msg, values, rests)
        if times and self.dialect.date_time_column is not None:  # the column's value of each date-time's text
            convert = self.dialect.date_time_column
            positions = {j for j, c in enumerate(model.values) if c.name in times}  # of the date-time columns
            values = [
                tuple(convert(v) if j in positions and v is not None else v for j, v in enumerate(row))
                for row in values
            ]
        return values, [None if r is None else dumps(r) for r in rests]

    def unheld_in_remainder(
        self, model: TableModel, msg: Store, values: list[tuple[Any, ...]], rests: list[Optional[dict[str, Any]]]
    ) -> None:
        """A number a lean row's column cannot hold exactly (an integer beyond 64 bits; beyond
        2^53 in a double column): the column NULL, the remainder keeping the number, as a full
        row's document keeps it (Load and dumps read a NULL column's property there)."""
        kinds = [c.kind for c in model.values]
        for i, row in enumerate(values):
            kept = held(kinds, row)
            if kept == row:
                continue
            doc = msg.docs[i]
            unheld = [c.name for c, v, k in zip(model.values, row, kept) if v is not None and k is None]
            values[i] = kept
            rests[i] = {**(rests[i] or {}), **{name: doc[name] for name in unheld}}

    def staging_table(self, model: TableModel, binding: int, name: str) -> tuple[str, list[str]]:
        """The staging table ``name`` of a binding and the statements that make it, or empty
        it of what a committed transaction left there."""
        dialect = self.dialect
        if name == typed_stage_name(binding):
            columns = [f"{staged_column(j)} {dialect.staged_type(c)}" for j, c in enumerate(model.columns)]
            if dialect.typed_remainder:  # each row's remainder (StoreRows' REMAINDER)
                columns.append(f"{STAGED_DOCUMENT} {dialect.staged_document_type or dialect.document_type}")
        else:
            columns = (
                [f"{STORE_ORDER} {dialect.order_type}", f"{IS_DELETE} {dialect.flag_type}"]
                + [f"{WAS_LOADED} {dialect.flag_type}"]
                + [f"{staged_column(j)} {dialect.staged_type(c)}" for j, c in enumerate(model.columns)]
                + [f"{STAGED_DOCUMENT} {dialect.staged_document_type or dialect.document_type}"]
            )
            if dialect.staging_keyed and not model.delta:
                columns.append(f"PRIMARY KEY ({', '.join(staged_column(j) for j in range(len(model.keys)))})")
        table, create = self.temp(name, columns)
        if create:
            return table, [create]
        return table, [dialect.empty_table(table)] if name in self._stale else []

    def staged_once(self, model: TableModel, msg: AnyStore) -> None:
        """A binding the endpoint reduces stages each key once per transaction (the runtime
        combines each key once per batch): a key stored twice is refused."""
        seen = self._reduced_keys.setdefault(msg.binding, set())
        if len(set(msg.keys)) != len(msg.keys) or not seen.isdisjoint(msg.keys):
            raise DriverError(
                f"{model.display}: a key was stored twice in one transaction of a binding {self.dialect.title} "
                "reduces itself (the runtime combines each key once per batch): nothing was committed"
            )
        seen.update(msg.keys)

    def store_texts(self, model: TableModel, msg: Store | StoreTexts) -> None:
        """Stage a binding the endpoint reduces: the keys and each combined document's JSON
        text (the value columns are read from it by the commit's statement,
        :mod:`tidemark.drivers.sql.reduce`); documents sent for it are staged as their texts.
        A key staged twice in one transaction is refused: the runtime combines each key once
        per batch."""
        if msg.binding in self._typed:
            raise DriverError(
                f"{model.display}: typed rows and JSON texts staged in one transaction: nothing was committed"
            )
        self.staged_once(model, msg)
        n = len(model.keys)
        if isinstance(msg, StoreTexts):
            texts = self.reduction().staged_texts(msg.texts)
        else:
            texts = tuple(self.writer.dumps(d) for d in msg.docs)
        if model.lean:
            self.numbers_held(model, msg.keys, texts)
        seq = self._seq
        self._seq = seq + len(msg.keys)
        rows = [(seq + i, False, False, *key, text) for i, (key, text) in enumerate(zip(msg.keys, texts))]
        names = [STORE_ORDER, IS_DELETE, WAS_LOADED] + [staged_column(j) for j in range(n)] + [STAGED_DOCUMENT]
        kinds = [ORDER, FLAG, FLAG] + [c.kind for c in model.keys] + [DOC]
        self.stage(model, msg, names, kinds, rows, ())

    def numbers_held(self, model: TableModel, keys: Sequence[tuple[Any, ...]], texts: Sequence[str]) -> None:
        """Refuse, naming the key and the property, a staged number a lean view's column cannot
        hold exactly (an integer beyond 64 bits; beyond 2^53 in a double column): the statement
        reduces the columns, and would fail on it (PostgreSQL, MariaDB) or round it (SQLite
        reads it as a double).  Only texts with 16 digits in a row are parsed."""
        columns = [(c.name, c.kind) for c in model.values if c.kind in (INTEGER, NUMBER)]
        if not columns:
            return
        for key, text in zip(keys, texts):
            if _LONG_DIGITS.search(text) is None:
                continue
            doc = jsontext.loads(text)
            for name, kind in columns:
                value = doc.get(name)
                if value is not None and value.__class__ is int and not holds(kind, value):
                    raise DriverError(
                        f"{model.display}: key {list(key)!r}: /{name}: {value} is beyond what the view's {kind} "
                        f"column holds exactly, and {self.dialect.title} reduces this view in its columns: nothing "
                        "of this transaction was committed. Keep such numbers within 64 bits (2^53 for a "
                        "number) upstream, or reduce this view in Python (options: {endpoint_reduce: false}), "
                        "whose lean rows keep such a number in flow_document."
                    )

    def store_typed(self, model: TableModel, msg: StoreRows) -> None:
        """Stage a lean binding's combined documents given as typed values (:class:`StoreRows`,
        an Arrow table) into a staging table of the view's column types, read by the
        commit's statement as they are."""
        if msg.binding in self._staged and msg.binding not in self._typed:
            raise DriverError(
                f"{model.display}: typed rows and JSON texts staged in one transaction: nothing was committed"
            )
        self.staged_once(model, msg)
        name = typed_stage_name(msg.binding)
        table, prepare = self.staging_table(model, msg.binding, name)
        self.writer.stage_typed(self, table, prepare, model, msg.rows, msg.keys, f"store {model.display}")
        self._created.add(name)
        self._stale.discard(name)
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

        try:
            self.in_transaction(body, f"commit {self.range.name}")  # Step 1 and Step 5
        except DriverError as exc:
            staged = [(self.models[b], self.dialect.temp(stage_name(b))) for b in sorted(self._staged)]
            raise refused_document(self.execute, self.dialect, staged, exc) or exc from None
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
            self.reduce(model, binding, table, staging, names)
            return
        if binding in self._dupes:  # unkeyed staging, a key stored twice: its last Store wins
            latest = dialect.latest_staged(staging, sources[:n])
        else:
            latest = f"{staging} s"
        match = " AND ".join(f"t.{name} = s.{src}" for name, src in zip(names[:n], sources))
        if binding in self._deletes:
            self.execute(dialect.delete_staged(table, latest, match, names[:n], sources[:n]))
        upsert = (
            f"INSERT INTO {table} ({target}) SELECT {source} FROM {latest} WHERE s.{IS_DELETE} = {dialect.flag_false}"
        )
        updates = self._updates.get(binding, 0)
        assign = ", ".join(f"{c} = s.{src}" for c, src in zip(names[n:], sources[n:]))
        update = dialect.update_staged(table, assign, latest, match) if updates and binding not in self._dupes else None
        if update is not None:
            # Keys that Load found are updated in place and the others inserted, as the Store
            # flags say: an UPDATE joined to the staging table is cheaper than an upsert that
            # first tries to insert every row.  The fence keeps other tidemark writers out of
            # this range; if a row was removed behind our back all the same (fewer rows
            # updated than staged), the upsert below writes every staged row again.
            if self.execute(update).rowcount == updates:
                upsert += f" AND s.{WAS_LOADED} = {dialect.flag_false}"
        self.execute(f"{upsert} {dialect.upsert(names[:n], names[n:])}")

    def reduce(self, model: TableModel, binding: int, table: str, staging: str, names: list[str]) -> None:
        """Reduce the staged combined documents into the stored ones, in this transaction; a
        sum past its type is refused naming the key and the property."""
        dialect = self.dialect
        forms = self.reduction().forms(model, dialect)
        typed = binding in self._typed
        if typed:  # typed values: the staging table's columns as they are
            forms.staged_values = True
            staging = dialect.temp(typed_stage_name(binding))
            rest = STAGED_DOCUMENT if dialect.typed_remainder else forms.null_document
            sources = [staged_column(j) for j in range(len(model.columns))] + [rest]
        else:
            sources = reduce_sources(forms, model, forms.staged_alias)
        assert model.reduce is not None  # a binding the endpoint reduces
        sql = reduce_statement(forms, table, model, model.reduce, staging, names, sources)
        savepoint = dialect.error_aborts_transaction
        try:
            if savepoint:  # the error below is named from the same rows
                self.execute("SAVEPOINT tidemark_reduce")
            for made in forms.prelude.values():
                self.execute(made)
            self.execute(sql)
        except Exception as exc:
            if savepoint:
                self.execute("ROLLBACK TO SAVEPOINT tidemark_reduce")
            refused = self.reduction().refused(model, exc)
            if refused is None and dialect.out_of_range(exc):
                secrets = getattr(self.driver.settings, "secrets", ())
                refused = sum_overflow(self.execute, model, forms, staging, typed, exc, secrets, dialect.title)
            if refused is None:
                raise
            raise refused from None

    def committed(self) -> None:
        """After the commit: the staging tables it applied are emptied when next used (most
        sessions end here, one per shard and batch; an empty table costs a statement, in
        PostgreSQL a catalog change with a WAL flush of its own)."""
        for b in self._staged:
            self._stale.add(typed_stage_name(b) if b in self._typed else stage_name(b))
        self._typed.clear()
        self._hashes.clear()
        self._dupes.clear()
        self._deletes.clear()
        self._updates.clear()

    def close(self) -> None:
        try:
            self.con.close()
        except Exception:  # noqa: BLE001 - a connection that is gone is closed
            pass
