"""SQLite: the embedded, store-authoritative endpoint (stdlib ``sqlite3`` only).

Config: ``{path: "views.db", retry: {busy_timeout: 30, attempts: 5, ...}}``.
Resource: ``{table: NAME}``.

Several shards — separate processes, e.g. Spark's Python workers — write one database
file: WAL mode, every write transaction is ``BEGIN IMMEDIATE`` (take the write lock
first, so no transaction has to upgrade a read lock), ``busy_timeout`` waits for the
lock, and a remaining ``SQLITE_BUSY`` is retried under the driver's
:class:`~tidemark.policy.RetryPolicy`.

A session (:class:`SQLiteTransactor`) has its own connection.  Loads are answered only
after this session's Acknowledged (read-committed; commits are synchronous, so
Acknowledged is immediate).  Stores go to per-binding staging tables in the connection's
``temp`` database (no lock on the shared file), and :meth:`SQLiteTransactor.start_commit`
moves them into the tables in one transaction that also verifies the fence and writes
the runtime checkpoint.
"""

from __future__ import annotations

import dataclasses
import os
import sqlite3
from typing import Any, Callable, Optional, Sequence, TypeVar

from tidemark.drivers.base import Capabilities, CheckpointRow, CommitPattern, Driver, ReadCommittedLoads, Transactor
from tidemark.drivers.sql import (
    BOOLEAN, CHECKPOINTS_TABLE, DOCUMENT_COLUMN, INTEGER, JSON, NUMBER, QUARANTINE_TABLE, ROW_ID_COLUMN,
    RESOURCES_TABLE, CheckpointState, TableModel, check_columns, claim_resource, coerce, dumps, fenced_off,
    load_checkpoint, owner_positions, plan_open, quarantine_rows, quote_ident as q, resources_ddl,
)
from tidemark.errors import DriverError, EndpointUnavailable, TidemarkError
from tidemark.faults import fault_point
from tidemark.policy import RetryPolicy, retry
from tidemark.protocol.messages import (
    Acknowledge, Acknowledged, Applied, Apply, BindingSpec, Load, Loaded, Open, Opened, Quarantine,
    Range, SpecResponse, StartCommit, StartedCommit, Store, Validate, Validated, ValidatedBinding,
)

T = TypeVar("T")

SQL_TYPES = {INTEGER: "INTEGER", NUMBER: "REAL", BOOLEAN: "INTEGER"}  # others: TEXT (JSON as text)


def sql_type(kind: str) -> str:
    return SQL_TYPES.get(kind, "TEXT")


def widens(existing_type: str, col) -> bool:
    """integer -> number needs nothing in SQLite: an INTEGER column keeps a fractional value
    as REAL (and a whole one as INTEGER), so the column stays as it is.  SQLite cannot
    change a column's type in place, so every other change is refused."""
    return existing_type.upper() == "INTEGER" and col.kind == NUMBER


CK = f"main.{q(CHECKPOINTS_TABLE)}"
RT = f"main.{q(RESOURCES_TABLE)}"
QT = f"main.{q(QUARANTINE_TABLE)}"


def _translate(exc: sqlite3.Error, path: str) -> TidemarkError:
    text = str(exc)
    low = text.lower()
    if isinstance(exc, sqlite3.OperationalError) and ("locked" in low or "busy" in low):
        return EndpointUnavailable(f"SQLite database {path!r} is busy: {text}")
    if isinstance(exc, sqlite3.OperationalError) and "unable to open" in low:
        return EndpointUnavailable(f"cannot open SQLite database {path!r}: {text}")
    return DriverError(f"SQLite database {path!r}: {type(exc).__name__}: {text}")


CAPABILITIES = Capabilities(
    commit_pattern=CommitPattern.STORE_AUTHORITATIVE,
    delta_updates=True,
    max_load_keys=10_000,
    max_store_docs=10_000,
    concurrent_shards=True,
    quarantine=True,
)


class SQLiteDriver(Driver):
    name = "sqlite"

    def capabilities(self) -> Capabilities:
        return CAPABILITIES

    def __init__(self, config: dict | None = None):
        super().__init__(config)
        self.path = str(self.config.get("path", "views.db"))
        self.policy = RetryPolicy.from_config(self.config.get("retry"))
        self.synchronous = str(self.config.get("synchronous", "FULL")).upper()
        if self.synchronous not in ("FULL", "NORMAL", "EXTRA"):
            raise DriverError("sqlite: synchronous must be FULL, NORMAL or EXTRA")
        self._con: Optional[sqlite3.Connection] = None

    def __repr__(self) -> str:
        return f"SQLiteDriver(path={self.path!r})"

    # ------------------------------------------------------------ connections
    def run(self, fn: Callable[[], T], what: str) -> T:
        """Run ``fn`` translating sqlite3 errors, retrying busy/locked under the policy."""

        def attempt() -> T:
            try:
                return fn()
            except sqlite3.Error as exc:
                raise _translate(exc, self.path) from exc

        return retry(attempt, self.policy, what=f"sqlite {what}")

    def connect(self) -> sqlite3.Connection:
        if self.path != ":memory:" and not self.path.startswith("file:"):
            os.makedirs(os.path.dirname(os.path.abspath(self.path)), exist_ok=True)

        def setup() -> sqlite3.Connection:
            con = sqlite3.connect(self.path, timeout=self.policy.busy_timeout, isolation_level=None,
                                  check_same_thread=False, uri=self.path.startswith("file:"))
            try:
                con.execute(f"PRAGMA busy_timeout={int(self.policy.busy_timeout * 1000)}")
                con.execute("PRAGMA journal_mode=WAL")
                con.execute(f"PRAGMA synchronous={self.synchronous}")
                con.execute(
                    f"CREATE TABLE IF NOT EXISTS {CK} (materialization TEXT NOT NULL, key_begin INTEGER NOT NULL, "
                    "key_end INTEGER NOT NULL, fence INTEGER NOT NULL, checkpoint TEXT, "
                    "PRIMARY KEY (materialization, key_begin, key_end))"
                )
                con.execute(resources_ddl(RT))
            except BaseException:
                con.close()
                raise
            return con

        return self.run(setup, "connect")

    @property
    def con(self) -> sqlite3.Connection:
        if self._con is None:
            self._con = self.connect()
        return self._con

    def close(self) -> None:
        if self._con is not None:
            self._con.close()
            self._con = None

    def transaction(self, con: sqlite3.Connection, body: Callable[[], T], what: str) -> T:
        """``BEGIN IMMEDIATE``; body; ``COMMIT`` — rolled back on any error, retried when busy."""

        def tx() -> T:
            con.execute("BEGIN IMMEDIATE")
            try:
                out = body()
                con.execute("COMMIT")
                return out
            except BaseException:
                if con.in_transaction:
                    con.execute("ROLLBACK")
                raise

        return self.run(tx, what)

    # ------------------------------------------------------------ setup phase
    def spec(self) -> SpecResponse:
        return SpecResponse(
            config_schema={"type": "object", "properties": {"path": {"type": "string", "default": "views.db"},
                                                             "retry": {"type": "object"}}},
            resource_schema={"type": "object", "required": ["table"], "properties": {"table": {"type": "string"}}},
        )

    def model(self, binding: BindingSpec) -> TableModel:
        return dataclasses.replace(TableModel.of(binding), schema="main")

    def _existing(self, con: sqlite3.Connection, table: str) -> tuple[Optional[dict[str, tuple[str, bool]]], list[str]]:
        """The table's columns ``{name: (type, is_primary_key)}`` (None: no table), and the
        columns an INSERT must fill (NOT NULL, no default, not the rowid)."""
        rows = con.execute('SELECT name, type, pk, "notnull" AND dflt_value IS NULL FROM pragma_table_info(?, \'main\')',
                           (table,)).fetchall()
        required = [name for name, typ, pk, must in rows if must and not (pk and typ.upper() == "INTEGER")]
        return {name: (typ, pk > 0) for name, typ, pk, _ in rows} or None, required

    def _plan(self, con: sqlite3.Connection, bindings: Sequence[BindingSpec]) -> list[tuple[TableModel, Optional[list]]]:
        out = []
        for b in bindings:
            model = self.model(b)
            existing, required = self._existing(con, model.name)
            if existing is None:
                out.append((model, None))
            else:
                missing = check_columns(model, existing, sql_type, has_row_id=ROW_ID_COLUMN in existing,
                                        required=required, widens=widens)
                out.append((model, missing))
        return out

    def validate(self, req: Validate) -> Validated:
        self._plan(self.con, req.bindings)
        return Validated(tuple(ValidatedBinding(b.resource_path, b.delta_updates) for b in req.bindings))

    def apply(self, req: Apply) -> Applied:
        con = self.con
        actions: list[str] = []

        created: list[tuple] = []

        def body() -> None:
            actions.clear()
            created.clear()
            for b, (model, missing) in zip(req.bindings, self._plan(con, req.bindings)):
                if missing is None:
                    actions.append(f"create table {model.display}")
                    created.append(b.resource_path)
                    if not req.dry_run:
                        con.execute(create_table_sql(model))
                    continue
                for col in missing:
                    actions.append(f"add column {col.name} {sql_type(col.kind)} to {model.display}")
                    if not req.dry_run:
                        con.execute(f"ALTER TABLE {model.ident} ADD COLUMN {q(col.name)} {sql_type(col.kind)}")
            if not req.dry_run and req.checkpoint_id:
                for b in req.bindings:
                    claim_resource(con.execute, "?", RT, self.model(b).name, req.materialization, req.checkpoint_id)
            if not req.dry_run:
                con.execute(
                    f"CREATE TABLE IF NOT EXISTS {QT} (id INTEGER PRIMARY KEY AUTOINCREMENT, "
                    "materialization TEXT NOT NULL, batch_id INTEGER, location TEXT, key_json TEXT, "
                    "reason TEXT NOT NULL, value TEXT)"
                )

        self.transaction(con, body, "apply")
        return Applied("; ".join(actions) or "nothing to do", tuple(created))

    # ------------------------------------------------------ transaction phase
    def open(self, req: Open) -> tuple["SQLiteTransactor", Opened]:
        con = self.connect()
        try:
            plan = self.transaction(con, lambda: open_range(con, req.materialization, req.range), "open")
        except BaseException:
            con.close()
            raise
        models = [self.model(b) for b in req.bindings]
        return SQLiteTransactor(self, con, req.materialization, req.range, plan.fence, models), Opened(plan.checkpoint)

    # ------------------------------------------------------------- inspection
    def dump(self, materialization: str, binding: BindingSpec):
        model = self.model(binding)
        cols = ", ".join(q(c.name) for c in model.keys)
        if model.delta:
            rows = self.con.execute(f"SELECT {q(DOCUMENT_COLUMN)} FROM {model.ident} ORDER BY {q(ROW_ID_COLUMN)}")
            return [load_checkpoint(d) for (d,) in rows]
        rows = self.con.execute(f"SELECT {cols}, {q(DOCUMENT_COLUMN)} FROM {model.ident}").fetchall()
        return {key_of(model, r[:-1]): load_checkpoint(r[-1]) for r in rows}

    def drop(self, materialization: str, bindings: Sequence[BindingSpec]) -> list[str]:
        """Drop the bindings' tables and the materialization's checkpoint and quarantine rows."""
        con = self.con
        models = [self.model(b) for b in bindings]
        done: list[str] = []

        def body() -> None:
            done.clear()
            for model in models:
                if self._existing(con, model.name)[0] is not None:
                    con.execute(f"DROP TABLE {model.ident}")
                    done.append(f"dropped table {model.name}")
            con.executemany(f"DELETE FROM {RT} WHERE resource=? AND materialization=?",
                            [(m.name, materialization) for m in models])
            n = con.execute(f"DELETE FROM {CK} WHERE materialization=?", (materialization,)).rowcount
            if n:
                done.append(f"deleted {n} checkpoint rows of {materialization!r}")
            if con.execute("SELECT 1 FROM main.sqlite_master WHERE name=?", (QUARANTINE_TABLE,)).fetchone():
                n = con.execute(f"DELETE FROM {QT} WHERE materialization=?", (materialization,)).rowcount
                if n:
                    done.append(f"deleted {n} quarantine rows of {materialization!r}")

        self.transaction(con, body, "drop")
        return done

    def positions(self, materialization: str, bindings: Sequence[BindingSpec]):
        rows = self.con.execute(f"SELECT resource, materialization, checkpoint_id FROM {RT}").fetchall()
        return super().positions(materialization, bindings) + owner_positions(
            rows, materialization, bindings, lambda b: self.model(b).name)

    def checkpoints(self, materialization: str) -> list[CheckpointRow]:
        rows = self.con.execute(
            f"SELECT key_begin, key_end, fence, checkpoint FROM {CK} WHERE materialization=? ORDER BY key_begin, key_end",
            (materialization,),
        ).fetchall()
        return [CheckpointRow(materialization, Range(b, e), f, load_checkpoint(c)) for b, e, f, c in rows]


def key_of(model: TableModel, values: Sequence[Any]) -> tuple:
    out = []
    for col, v in zip(model.keys, values):
        if col.kind == BOOLEAN and v is not None:
            v = bool(v)
        elif col.kind == JSON and isinstance(v, str):
            v = load_checkpoint(v)
        out.append(v)
    return tuple(out)


def create_table_sql(model: TableModel) -> str:
    cols = [f"{q(c.name)} {sql_type(c.kind)} NOT NULL" for c in model.keys]
    cols += [f"{q(c.name)} {sql_type(c.kind)}" for c in model.values]
    cols.append(f"{q(DOCUMENT_COLUMN)} TEXT NOT NULL")
    if model.delta:
        cols.insert(0, f"{q(ROW_ID_COLUMN)} INTEGER PRIMARY KEY AUTOINCREMENT")
    else:
        cols.append(f"PRIMARY KEY ({', '.join(q(c.name) for c in model.keys)})")
    return f"CREATE TABLE IF NOT EXISTS {model.ident} ({', '.join(cols)})"


def open_range(con: sqlite3.Connection, materialization: str, rng: Range):
    """Inside the Open transaction: bump overlapping fences, inherit, insert (see drivers.sql)."""
    over = (materialization, rng.key_begin, rng.key_end)
    rows = con.execute(
        f"SELECT key_begin, key_end, fence, checkpoint FROM {CK} WHERE materialization=? AND key_end>=? AND key_begin<=?",
        over,
    ).fetchall()
    plan = plan_open(materialization, rng, [CheckpointState(Range(b, e), f, load_checkpoint(c)) for b, e, f, c in rows])
    con.execute(f"UPDATE {CK} SET fence=fence+1 WHERE materialization=? AND key_end>=? AND key_begin<=?", over)
    if plan.insert:
        con.execute(
            f"INSERT INTO {CK} (materialization, key_begin, key_end, fence, checkpoint) VALUES (?,?,?,?,?)",
            (*over, plan.fence, None if plan.checkpoint is None else dumps(plan.checkpoint)),
        )
    elif plan.refresh:
        con.execute(f"UPDATE {CK} SET checkpoint=? WHERE materialization=? AND key_begin=? AND key_end=?",
                    (dumps(plan.checkpoint), *over))
    return plan


class SQLiteTransactor(ReadCommittedLoads, Transactor):
    """One shard session on its own connection."""

    def __init__(self, driver: SQLiteDriver, con: sqlite3.Connection, materialization: str, rng: Range,
                 fence: int, models: list[TableModel]):
        self.driver = driver
        self.con = con
        self.materialization = materialization
        self.range = rng
        self.fence = fence
        self.models = models
        self._acknowledged = False
        self._deferred: list[Load] = []
        self._staged: set[int] = set()  # bindings with staged rows
        self._created: set[str] = set()
        self._quarantine: list[dict] = []

    # --------------------------------------------------------------- phases
    def acknowledge(self, msg: Acknowledge) -> Acknowledged:
        # start_commit committed synchronously: the previous transaction is visible.
        self._acknowledged = True
        return Acknowledged()

    def _temp(self, name: str, ddl: str) -> str:
        ident = f"temp.{q(name)}"
        if name not in self._created:
            self.driver.run(lambda: self.con.execute(f"CREATE TEMP TABLE IF NOT EXISTS {q(name)} ({ddl})"), "staging")
            self._created.add(name)
        return ident

    def _evaluate(self, msg: Load) -> list[Loaded]:
        if not msg.keys:
            return []
        model = self.models[msg.binding]
        n = len(model.keys)
        lt = self._temp(f"tidemark_load_{msg.binding}", ", ".join(["i INTEGER PRIMARY KEY"] + [f"k{j}" for j in range(n)]))
        on = " AND ".join(f"t.{q(c.name)} = l.k{j}" for j, c in enumerate(model.keys))
        kinds = [c.kind for c in model.keys]
        con = self.con

        def body() -> list:
            con.execute("BEGIN")
            try:
                con.execute(f"DELETE FROM {lt}")
                con.executemany(
                    f"INSERT INTO {lt} VALUES ({', '.join('?' * (n + 1))})",
                    ((i, *(coerce(k, v) for k, v in zip(kinds, key))) for i, key in enumerate(msg.keys)),
                )
                rows = con.execute(f"SELECT l.i, t.{q(DOCUMENT_COLUMN)} FROM {lt} l JOIN {model.ident} t ON {on}").fetchall()
                con.execute("COMMIT")
                return rows
            except BaseException:
                if con.in_transaction:
                    con.execute("ROLLBACK")
                raise

        rows = self.driver.run(body, "load")
        if not rows:
            return []
        rows.sort()
        return [Loaded(msg.binding, tuple(msg.keys[i] for i, _ in rows), tuple(load_checkpoint(d) for _, d in rows))]

    def _stage_table(self, binding: int) -> str:
        model = self.models[binding]
        n, m = len(model.keys), len(model.values)
        cols = [f"c{j}" for j in range(n + m)] + ["d TEXT", "x INTEGER"]
        if not model.delta:
            cols.append(f"PRIMARY KEY ({', '.join(f'c{j}' for j in range(n))})")
        return self._temp(f"tidemark_stage_{binding}", ", ".join(cols))

    def store(self, msg: Store) -> None:
        if not msg.keys:
            return
        model = self.models[msg.binding]
        st = self._stage_table(msg.binding)
        kk = [c.kind for c in model.keys]
        vk = [c.kind for c in model.values]
        rows = [
            (*(coerce(k, v) for k, v in zip(kk, key)), *(coerce(k, v) for k, v in zip(vk, vals)), dumps(doc), int(bool(d)))
            for key, vals, doc, d in zip(msg.keys, msg.values, msg.docs, msg.deletes)
        ]
        verb = "INSERT" if model.delta else "INSERT OR REPLACE"  # a key stored twice: the last wins
        sql = f"{verb} INTO {st} VALUES ({', '.join('?' * (len(kk) + len(vk) + 2))})"
        con = self.con

        def body() -> None:
            con.execute("BEGIN")
            try:
                con.executemany(sql, rows)
                con.execute("COMMIT")
            except BaseException:
                if con.in_transaction:
                    con.execute("ROLLBACK")
                raise

        self.driver.run(body, "store")
        self._staged.add(msg.binding)

    def quarantine(self, msg: Quarantine) -> None:
        """Invalid documents for ``tidemark_quarantine``, written by this transaction's commit."""
        self._quarantine.extend(msg.rows)

    def start_commit(self, msg: StartCommit) -> StartedCommit:
        """Commit the transaction.

        Step 1: ``BEGIN IMMEDIATE`` (the write lock).
        Step 2: write the runtime checkpoint where the fence is still ours; none ⇒ FencedOff.
        Step 3: move each binding's staged rows: deletes, upserts (or appends for delta updates).
        Step 4: dead-letter rows.
        Step 5: ``COMMIT``; then clear the staging tables."""
        con = self.con
        cp = msg.runtime_checkpoint

        def body() -> None:
            # Step 2
            cur = con.execute(
                f"UPDATE {CK} SET checkpoint=? WHERE materialization=? AND key_begin=? AND key_end=? AND fence=?",
                (dumps(cp), self.materialization, self.range.key_begin, self.range.key_end, self.fence),
            )
            if cur.rowcount != 1:
                raise fenced_off(self.materialization, self.range, self.fence)
            # Step 3
            for b in sorted(self._staged):
                self._apply_staged(b)
            # Step 4
            if self._quarantine:
                con.executemany(
                    f"INSERT INTO {QT} (materialization, batch_id, location, key_json, reason, value) VALUES (?,?,?,?,?,?)",
                    quarantine_rows(self.materialization, cp.get("batch_id"), self._quarantine),
                )
            fault_point("before_endpoint_commit")

        self.driver.transaction(con, body, "commit")  # Step 1 and Step 5
        fault_point("after_endpoint_commit")
        for b in self._staged:
            self.driver.run(lambda: con.execute(f"DELETE FROM temp.{q(f'tidemark_stage_{b}')}"), "clear staging")
        self._staged.clear()
        self._quarantine = []
        self._acknowledged = False
        return StartedCommit()

    def _apply_staged(self, binding: int) -> None:
        model = self.models[binding]
        st = f"temp.{q(f'tidemark_stage_{binding}')}"
        n = len(model.keys)
        cols = [c.name for c in model.columns] + [DOCUMENT_COLUMN]
        target = ", ".join(q(c) for c in cols)
        source = ", ".join([f"c{j}" for j in range(len(model.columns))] + ["d"])
        if model.delta:
            self.con.execute(f"INSERT INTO {model.ident} ({target}) SELECT {source} FROM {st} ORDER BY rowid")
            return
        keys = ", ".join(q(c.name) for c in model.keys)
        self.con.execute(
            f"DELETE FROM {model.ident} WHERE ({keys}) IN (SELECT {', '.join(f'c{j}' for j in range(n))} FROM {st} WHERE x = 1)"
        )
        sets = ", ".join(f"{q(c)} = excluded.{q(c)}" for c in cols[n:])
        self.con.execute(
            f"INSERT INTO {model.ident} ({target}) SELECT {source} FROM {st} WHERE x = 0 "
            f"ON CONFLICT ({keys}) DO UPDATE SET {sets}"
        )

    def close(self) -> None:
        try:
            self.con.close()
        except sqlite3.Error:
            pass
