"""A PostgreSQL shard session: the skeleton's session with COPY fast paths.

Load COPYs keys into a temp table (``ON COMMIT DELETE ROWS``) and joins — only after this
session's Acknowledged (read-committed).  Store COPYs into a temp staging table per
binding (psycopg formats the rows in C; a value it cannot write falls back to COPY text
built value by value); the commit (the skeleton's steps 1-5) then deletes
(``DELETE … USING``), updates the keys Load found in place, and upserts (``INSERT …
SELECT [DISTINCT ON] … ON CONFLICT DO UPDATE``) or appends (delta updates).  Every
transaction first checks that it runs in Open's server process (a pooler in transaction
mode would hand it another session's temp tables).
"""

from __future__ import annotations

from typing import Any, Callable, Optional, Sequence

import psycopg

from tidemark import jsontext
from tidemark.drivers.postgres.copytext import COPY_CONTEXT, copy_converter, encode_at, json_dumps, nul_path
from tidemark.drivers.postgres.dialect import REDUCE, literal, sql_type
from tidemark.drivers.sql import DOCUMENT_COLUMN, INTEGER, JSON, SqlTransactor, TableModel, redact
from tidemark.drivers.sql.model import IS_DELETE, STAGED_DOCUMENT, STORE_ORDER, WAS_LOADED, staged_column
from tidemark.drivers.sql.reduce import reduce_sources, reduce_statement
from tidemark.drivers.sql.transactor import stage_name, staged_columns, typed_stage_name
from tidemark.errors import DriverError
from tidemark.protocol.messages import Store


def csv_of(rows, names: list[str]) -> bytes:
    """The columns ``names`` of an Arrow table as CSV (strings quoted, NULL empty), as
    ``COPY … (FORMAT csv)`` reads them: written by Arrow, no Python per row."""
    import io

    import pyarrow.csv as pacsv

    buf = io.BytesIO()
    pacsv.write_csv(rows.select(names), buf, pacsv.WriteOptions(include_header=False))
    return buf.getvalue()


def backend_pid(con) -> int:
    """The server process this statement ran in (``pg_backend_pid()``; libpq's own
    ``backend_pid`` is a pooler's, where there is one)."""
    return con.execute("SELECT pg_backend_pid()").fetchone()[0]


class PostgresTransactor(SqlTransactor):
    """One shard session on its own connection."""

    def __init__(self, *args: Any, **kwargs: Any):
        super().__init__(*args, **kwargs)
        self._stale: set[int] = set()  # staging tables still holding committed rows (emptied on reuse)
        self._hashes: dict[int, set] = {}  # per binding: hashes of stored keys (to skip DISTINCT ON)
        self._dupes: set[int] = set()  # bindings where a key may have been stored twice
        self._deletes: set[int] = set()  # bindings with deletes staged
        self._updates: dict[int, int] = {}  # per binding: staged documents whose key was Loaded
        self._typed: set[int] = set()  # bindings staged as typed values (Store.rows)
        self._stale_typed: set[int] = set()  # typed staging tables still holding committed rows

    @property
    def backend(self) -> Optional[int]:
        """``pg_backend_pid()`` at Open: every later transaction must run there."""
        return self.session

    def check_session(self) -> None:
        """Inside a transaction: refuse to go on in another server process than Open's.

        Staged rows live in this session's temp tables, so a Store, a Load or the commit that
        reaches another process (a pooler in transaction or statement mode hands each
        transaction any server connection) would write or read another session's tables.
        The check runs first in each of those transactions, so nothing of it is done."""
        if self.backend is None:
            return
        now = backend_pid(self.con)
        if now != self.backend:
            s = self.driver.settings
            raise DriverError(
                f"PostgreSQL at {s.where}: this session's transactions reached two server processes (pid "
                f"{self.backend}, then {now}). A connection pooler in transaction or statement mode (PgBouncer's "
                "pool_mode = transaction, say) is between tidemark and PostgreSQL. tidemark stages rows in "
                "temp tables of its own session, so it needs a session of its own: connect to PostgreSQL "
                "directly, or through a pooler in session mode. Nothing of this transaction was committed."
            )

    def _name_nul(self, model: TableModel, keys: Sequence[tuple], docs: Optional[Sequence[Any]] = None) -> None:
        """After PostgreSQL refused a chunk: if a key (or, given ``docs``, a document) in it
        holds U+0000, raise an error that names it (PostgreSQL's own names a line of the COPY)."""
        for i, key in enumerate(keys):
            at = nul_path(list(key))
            what = f"key {list(key)!r}"
            if at is None and docs is not None:
                at = nul_path(docs[i])
                what = f"document of key {list(key)!r} (at {at})"
            if at is not None:
                raise DriverError(
                    f"PostgreSQL at {self.driver.settings.where}: {model.display}: the {what} holds U+0000 (NUL), "
                    "which PostgreSQL cannot store in text or jsonb. Remove or replace it upstream; nothing of "
                    "this shard's transaction was committed."
                )

    def _name_refused(self, model: TableModel, keys: Sequence[tuple], exc: psycopg.DataError) -> None:
        """After PostgreSQL refused a value of the careful COPY text (one line per row, columns
        ``col0…``): raise an error that names the key and the field, not the staging line."""
        found = COPY_CONTEXT.search(exc.diag.context or "")
        if found is None:
            return
        row, col = int(found.group(1)) - 1, int(found.group(2))
        if not (0 <= row < len(keys) and 0 <= col < len(model.columns)):
            return
        text = redact(exc, self.driver.settings.secrets).strip().splitlines()[0]
        raise DriverError(
            f"PostgreSQL at {self.driver.settings.where}: {model.display}: the document of key {list(keys[row])!r}: "
            f"field {model.columns[col].name!r} ({sql_type(model.columns[col].kind)}) was refused: {text}. "
            "Nothing of this shard's transaction was committed."
        )

    # --------------------------------------------------------------- phases
    def lookup(self, binding: int, model: TableModel, keys: Sequence[tuple]) -> list[tuple[int, str]]:
        kinds = [c.kind for c in model.keys]
        # ON COMMIT DELETE ROWS: each Load's transaction empties it, no TRUNCATE round trip
        name = f"tidemark_load_{binding}"
        lt, create = self.temp(
            name, ["i integer"] + [f"k{j} {sql_type(k)}" for j, k in enumerate(kinds)], " ON COMMIT DELETE ROWS"
        )
        q = self.dialect.quote
        on = " AND ".join(f"t.{q(c.name)} = l.k{j}" for j, c in enumerate(model.keys))
        stored = self.lean_select(model, "t") if model.lean else f"t.{self.dialect.document_text(q(DOCUMENT_COLUMN))}"
        if len(kinds) == 1:
            conv = copy_converter(kinds[0])
            payload = "".join([f"{i}\t{conv(key[0])}\n" for i, key in enumerate(keys)])
        else:
            convs = [copy_converter(k) for k in kinds]
            payload = "".join(
                [f"{i}\t" + "\t".join([c(v) for c, v in zip(convs, key)]) + "\n" for i, key in enumerate(keys)]
            )
        con = self.con

        def body() -> list:
            if create:
                con.execute(create)
            with con.cursor() as cur:
                with cur.copy(f"COPY {lt} FROM STDIN") as copy:
                    copy.write(payload)
                cur.execute(f"SELECT l.i, {stored} FROM {lt} l JOIN {model.ident} t ON {on}")
                return cur.fetchall()

        def checked() -> list:
            try:
                return self.transaction(body)
            except psycopg.DataError:
                self._name_nul(model, keys)
                raise

        rows = self.driver.run(checked, f"load {model.display}", con)
        self._created.add(name)
        return self.lean_rows(model, rows) if model.lean else rows

    def store(self, msg: Store) -> None:
        if not msg.keys:
            return
        model = self.models[msg.binding]
        if msg.rows is not None:
            self._store_typed(model, msg)
            return
        if model.reduce is not None:
            self._store_texts(model, msg)
            return
        n = len(model.columns)
        name = stage_name(msg.binding)
        staging, create = self.temp(
            name,
            [f"{STORE_ORDER} bigint", f"{IS_DELETE} boolean", f"{WAS_LOADED} boolean"]
            + [f"{staged_column(j)} {sql_type(c.kind)}" for j, c in enumerate(model.columns)]
            + [f"{STAGED_DOCUMENT} jsonb"],
        )
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
        seq = self._seq
        self._seq = seq + len(msg.keys)
        # the value columns (without the fields whose names are too long for a column), and
        # what flow_document holds: the document, or a lean row's remainder
        values, texts = self.row_parts(model, msg, json_dumps)
        # Fast path: psycopg formats the COPY rows in C; JSON columns are encoded here.
        json_at = [3 + j for j, c in enumerate(model.columns) if c.kind == JSON]
        rows = [
            (seq + i, dele, ex, *key, *vals, text)
            for i, (key, vals, text, dele, ex) in enumerate(zip(msg.keys, values, texts, msg.deletes, msg.exists))
        ]
        if json_at:
            rows = [encode_at(r, json_at) for r in rows]
        con = self.con
        stale = msg.binding in self._stale  # a reused session: empty what the last commit applied
        copy_sql = f"COPY {staging} ({', '.join([STORE_ORDER, IS_DELETE, WAS_LOADED] + [staged_column(j) for j in range(n)] + [STAGED_DOCUMENT])}) FROM STDIN"

        def careful() -> str:
            """COPY text built value by value (e.g. ``3.0`` in an integer column becomes ``3``)."""
            kc = [copy_converter(c.kind) for c in model.keys]
            vc = [copy_converter(c.kind) for c in model.values]
            lines = [
                "\t".join(
                    [
                        str(seq + i),
                        "t" if dele else "f",
                        "t" if ex else "f",
                        *[c(v) for c, v in zip(kc, key)],
                        *["\\N" if v is None else c(v) for c, v in zip(vc, vals)],
                        "\\N" if text is None else text.replace("\\", "\\\\"),
                    ]
                )
                for i, (key, vals, text, dele, ex) in enumerate(zip(msg.keys, values, texts, msg.deletes, msg.exists))
            ]
            lines.append("")
            return "\n".join(lines)

        def stage(write_into: Callable[[Any], None]) -> None:
            self._copy(staging, create, stale, copy_sql, write_into)

        def fast(copy) -> None:
            write = copy.write_row
            for r in rows:
                write(r)

        def staged() -> None:
            try:
                stage(fast)
            except (psycopg.DataError, psycopg.ProgrammingError):
                # a value psycopg cannot write as the column wants it: nothing was staged
                # (the transaction rolled back); stage the careful text instead
                try:
                    stage(lambda copy: copy.write(careful()))
                except psycopg.DataError as exc:
                    self._name_nul(model, msg.keys, msg.docs)
                    self._name_refused(model, msg.keys, exc)
                    raise

        self.driver.run(staged, f"store {model.display}", con)
        self._created.add(name)
        self._stale.discard(msg.binding)
        self._staged.add(msg.binding)

    def committed(self) -> None:
        # The staging tables are emptied lazily, by the next Store of this session: most
        # sessions end here (one per shard and batch), and a TRUNCATE is a catalog change
        # with a WAL flush of its own.
        self._stale |= self._staged - self._typed
        self._stale_typed |= self._typed
        self._typed.clear()
        self._hashes.clear()
        self._dupes.clear()
        self._deletes.clear()
        self._updates.clear()

    def apply_staged(self, binding: int) -> None:
        model = self.models[binding]
        staging = self.dialect.temp(stage_name(binding))
        q = self.dialect.quote
        n = len(model.keys)
        names, sources = staged_columns(model, q)
        target, source = ", ".join(names), ", ".join(sources)
        if model.delta:
            self.con.execute(
                f"INSERT INTO {model.ident} ({target}) SELECT {source} FROM {staging} ORDER BY {STORE_ORDER}"
            )
            return
        if model.reduce is not None:  # the endpoint reduces: one statement (drivers/sql/reduce.py)
            self._reduce(model, binding, staging, names, sources)
            return
        kc = ", ".join(sources[:n])
        if binding in self._dupes:  # a key stored twice: its last Store wins
            latest = f"(SELECT DISTINCT ON ({kc}) * FROM {staging} ORDER BY {kc}, {STORE_ORDER} DESC) s"
        else:
            latest = f"{staging} s"
        match = " AND ".join(f"t.{name} = s.{src}" for name, src in zip(names[:n], sources))
        if binding in self._deletes:
            self.con.execute(f"DELETE FROM {model.ident} t USING {latest} WHERE s.{IS_DELETE} AND {match}")
        upsert = f"INSERT INTO {model.ident} ({target}) SELECT {source} FROM {latest} WHERE NOT s.{IS_DELETE}"
        updates = self._updates.get(binding, 0)
        if updates and binding not in self._dupes:
            # Keys that Load found are updated in place and the others inserted, as the Store
            # flags say: an UPDATE joined to the staging table is cheaper than an upsert that
            # first tries to insert every row.  The fence keeps other tidemark writers out of
            # this range; if a row was removed behind our back all the same (fewer rows
            # updated than staged), the upsert below writes every staged row again.
            assign = ", ".join(f"{c} = s.{src}" for c, src in zip(names[n:], sources[n:]))
            cur = self.con.execute(
                f"UPDATE {model.ident} t SET {assign} FROM {latest} WHERE s.{WAS_LOADED} AND NOT s.{IS_DELETE} AND {match}"
            )
            if cur.rowcount == updates:
                upsert += f" AND NOT s.{WAS_LOADED}"
        self.con.execute(f"{upsert} {self.dialect.upsert(names[:n], names[n:])}")

    def _copy(
        self, staging: str, create: Optional[str], stale: bool, copy_sql: str, write_into: Callable[[Any], None]
    ) -> None:
        """One transaction that makes (or empties) the staging table ``staging`` and COPYs into it."""
        con = self.con

        def body() -> None:
            if create:
                con.execute(create)
            elif stale:
                con.execute(f"TRUNCATE {staging}")
            with con.cursor() as cur, cur.copy(copy_sql) as copy:
                write_into(copy)

        self.transaction(body)

    def _store_texts(self, model: TableModel, msg: Store) -> None:
        """Stage a binding PostgreSQL reduces: the keys and each document's JSON text (the
        value columns are read from it by the commit's statement)."""
        name = stage_name(msg.binding)
        staging, create = self.temp(
            name,
            [f"{STORE_ORDER} bigint", f"{IS_DELETE} boolean", f"{WAS_LOADED} boolean"]
            + [f"{staged_column(j)} {sql_type(c.kind)}" for j, c in enumerate(model.columns)]
            + [f"{STAGED_DOCUMENT} jsonb"],
        )
        self.staged_once(model, msg)
        texts = msg.texts or tuple(json_dumps(doc) for doc in msg.docs)
        seq = self._seq
        self._seq = seq + len(msg.keys)
        n = len(model.keys)
        copy_sql = f"COPY {staging} ({', '.join([STORE_ORDER, IS_DELETE, WAS_LOADED] + [staged_column(j) for j in range(n)] + [STAGED_DOCUMENT])}) FROM STDIN"
        con, stale = self.con, msg.binding in self._stale

        def rows(copy) -> None:
            write = copy.write_row
            for i, (key, text) in enumerate(zip(msg.keys, texts)):
                write((seq + i, False, False, *key, text))

        def staged() -> None:
            try:
                self._copy(staging, create, stale, copy_sql, rows)
            except psycopg.DataError:
                self._name_nul(model, msg.keys, [jsontext.loads(t) for t in texts])
                raise

        self.driver.run(staged, f"store {model.display}", con)
        self._created.add(name)
        self._stale.discard(msg.binding)
        self._staged.add(msg.binding)

    def _store_typed(self, model: TableModel, msg: Store) -> None:
        """Stage a lean binding's combined documents given as typed values (``Store.rows``):
        the Arrow table written as CSV by Arrow (no Python per row) into a staging table of
        the view's column types, which the commit's statement reads as they are."""
        if msg.binding in self._staged and msg.binding not in self._typed:
            raise DriverError(
                f"{model.display}: typed rows and JSON texts staged in one transaction: nothing was committed"
            )
        self.staged_once(model, msg)
        staging, create = self.temp(
            typed_stage_name(msg.binding),
            [f"{staged_column(j)} {sql_type(c.kind)}" for j, c in enumerate(model.columns)],
        )
        payload = csv_of(msg.rows, [c.name for c in model.columns])
        con, stale = self.con, msg.binding in self._stale_typed

        def staged() -> None:
            def body() -> None:
                if create:
                    con.execute(create)
                elif stale:
                    con.execute(f"TRUNCATE {staging}")
                with con.cursor() as cur, cur.copy(f"COPY {staging} FROM STDIN (FORMAT csv)") as copy:
                    copy.write(payload)

            try:
                self.transaction(body)
            except psycopg.DataError:
                self._name_nul(model, msg.keys)
                self._name_nul_typed(model, msg)
                raise

        self.driver.run(staged, f"store {model.display}", con)
        self._created.add(typed_stage_name(msg.binding))
        self._stale_typed.discard(msg.binding)
        self._staged.add(msg.binding)
        self._typed.add(msg.binding)

    def _name_nul_typed(self, model: TableModel, msg: Store) -> None:
        """After PostgreSQL refused typed rows: the first property holding U+0000, by key."""
        import pyarrow as pa
        import pyarrow.compute as pc

        for c in model.values:
            col = msg.rows.column(c.name)
            if not pa.types.is_string(col.type) and not pa.types.is_large_string(col.type):
                continue
            hits = pc.fill_null(pc.match_substring(col, "\x00"), False)
            if pc.any(hits).as_py():
                i = pc.index(hits, True).as_py()
                raise DriverError(
                    f"PostgreSQL at {self.driver.settings.where}: {model.display}: the document of key "
                    f"{list(msg.keys[i])!r} (at /{c.name}) holds U+0000 (NUL), which PostgreSQL cannot store in text "
                    "or jsonb. Remove or replace it upstream; nothing of this shard's transaction was committed."
                )

    def _reduce(self, model: TableModel, binding: int, staging: str, names: list[str], sources: list[str]) -> None:
        """Reduce the staged combined documents into the stored ones, in this transaction; a
        sum beyond 64 bits (or not finite) is refused naming the key and the property."""
        if binding in self._typed:  # typed values: the staging table's columns as they are
            staging = self.dialect.temp(typed_stage_name(binding))
            typed = [staged_column(j) for j in range(len(model.columns))] + ["NULL::jsonb"]
            sql = reduce_statement(REDUCE, model.ident, model, model.reduce, staging, names, typed)
        else:
            sql = reduce_statement(
                REDUCE, model.ident, model, model.reduce, staging, names, reduce_sources(REDUCE, model)
            )
        try:
            with self.con.transaction():  # a savepoint: the error below is named from the same rows
                self.con.execute(sql)
        except psycopg.errors.NumericValueOutOfRange as exc:
            raise self._overflow(model, staging, exc, binding in self._typed) from None

    def _overflow(self, model: TableModel, staging: str, exc: Exception, typed: bool = False) -> DriverError:
        q = self.dialect.quote
        n = len(model.keys)
        match = " AND ".join(f"t.{q(c.name)} = s.{staged_column(j)}" for j, c in enumerate(model.keys))
        keys = ", ".join(f"s.{staged_column(j)}" for j in range(n))
        for col in model.values:
            f = next((f for f in model.reduce.fields if f.name == col.name), None)
            if f is None or f.strategy != "sum":
                continue
            old = (
                f"t.{q(col.name)}::numeric" if model.lean else f"(t.{q(DOCUMENT_COLUMN)} -> {literal(f.name)})::numeric"
            )
            bound = "9223372036854775807" if col.kind == INTEGER else "1.7976931348623157e308"
            j = [c.name for c in model.columns].index(col.name)
            new = f"s.{staged_column(j)}::numeric" if typed else f"(s.{STAGED_DOCUMENT} -> {literal(f.name)})::numeric"
            row = self.con.execute(
                f"SELECT {keys}, {old}, {new} FROM {staging} s JOIN {model.ident} t ON {match} "
                f"WHERE abs({old} + {new}) > {bound} LIMIT 1"
            ).fetchone()
            if row is not None:
                what = "is beyond a 64-bit integer" if col.kind == INTEGER else "is not a finite number"
                return DriverError(
                    f"{model.display}: key {list(row[:n])!r}: /{f.name}: 'sum' overflowed: the result {what} (left "
                    f"{row[n]}, right {row[n + 1]}). Nothing of this shard's transaction was committed; the batch "
                    "fails as it would reducing in Python."
                )
        text = redact(exc, self.driver.settings.secrets).strip().splitlines()[0]
        return DriverError(
            f"{model.display}: reducing this batch in PostgreSQL failed: {text}. Nothing of this "
            "shard's transaction was committed."
        )
