"""PostgreSQL's row writer: COPY into a session's temp tables.

Store rows go by ``COPY … FROM STDIN`` with psycopg formatting each row in C; a value it cannot
write as the column wants it (``3.0`` in an integer column, say) rolls that transaction back
and the chunk goes again as COPY text built value by value.  Load keys go as COPY text; typed
values (``StoreRows``) as CSV written by Arrow (no Python per row).  A value PostgreSQL
refuses is named by its key and field, and a U+0000 by the key and where it is (PostgreSQL's
own message names a line of the COPY).
"""

from __future__ import annotations

from typing import Any, Callable, Sequence

import psycopg

from tidemark.drivers.common.columns import TIMESTAMP
from tidemark.drivers.common.datetimes import readable_text
from tidemark.drivers.postgres.copytext import COPY_CONTEXT, copy_converter, encode_at, json_dumps, nul_path
from tidemark.drivers.postgres.dialect import sql_type
from tidemark.drivers.sql import JSON, TableModel, redact
from tidemark.drivers.sql.writer import DOC, FLAG, ORDER, Chunk, KeyChunk, RowWriter, Session
from tidemark.errors import DriverError
from tidemark.protocol.messages import REMAINDER


def csv_of(rows, names: list[str]) -> bytes:
    """The columns ``names`` of an Arrow table as CSV (strings quoted, NULL empty), as
    ``COPY … (FORMAT csv)`` reads them: written by Arrow, no Python per row."""
    import io

    import pyarrow.csv as pacsv

    buf = io.BytesIO()
    pacsv.write_csv(rows.select(names), buf, pacsv.WriteOptions(include_header=False))
    return buf.getvalue()


def leap_seconds_read(model: TableModel, rows):
    """Typed rows whose date-times PostgreSQL reads: a leap second with a fraction (which it
    refuses) as the canonical text of its instant (the next minute's first second: the
    remainder keeps the text).  A vectorized search; Python only for the leap seconds."""
    import pyarrow as pa
    import pyarrow.compute as pc

    for c in model.values:
        if c.kind != TIMESTAMP or c.name not in rows.column_names:
            continue
        col = rows.column(c.name)
        if not pa.types.is_string(col.type) and not pa.types.is_large_string(col.type):
            continue  # none (all null)
        leap = pc.fill_null(pc.match_substring(col, ":60"), False)
        if not pc.any(leap).as_py():
            continue
        read = [readable_text(v) for v in col.to_pylist()]
        rows = rows.set_column(rows.column_names.index(c.name), c.name, pc.if_else(leap, pa.array(read), col))
    return rows


def _text_field(kind: str) -> Callable[[Any], str]:
    """One value of ``kind`` in COPY's text format (``\\N`` is NULL)."""
    if kind == ORDER:
        return str
    if kind == FLAG:
        return lambda x: "t" if x else "f"
    if kind == DOC:
        return lambda text: "\\N" if text is None else text.replace("\\", "\\\\")
    conv = copy_converter(kind)
    return lambda v: "\\N" if v is None else conv(v)


class CopyWriter(RowWriter):
    """Rows into temp tables by COPY (see the module docstring)."""

    dumps = staticmethod(json_dumps)

    def stage(self, s: Session, chunk: Chunk) -> None:
        model, keys, rows, kinds = chunk.model, chunk.keys, chunk.rows, chunk.kinds
        prepare, what = chunk.prepare, chunk.what
        copy_sql = f"COPY {chunk.table} ({', '.join(chunk.names)}) FROM STDIN"
        json_at = [j for j, k in enumerate(kinds) if k == JSON]

        def careful() -> str:
            """COPY text built value by value (e.g. ``3.0`` in an integer column becomes ``3``)."""
            fields = [_text_field(k) for k in kinds]
            lines = ["\t".join([f(v) for f, v in zip(fields, r)]) for r in rows]
            lines.append("")
            return "\n".join(lines)

        def fast(copy) -> None:
            write = copy.write_row
            if json_at:
                for r in rows:
                    write(encode_at(r, json_at))
            else:
                for r in rows:
                    write(r)

        def staged() -> None:
            try:
                self._copy(s, prepare, copy_sql, fast)
            except (psycopg.DataError, psycopg.ProgrammingError):
                # a value psycopg cannot write as the column wants it: nothing was staged
                # (the transaction rolled back); stage the careful text instead
                try:
                    self._copy(s, prepare, copy_sql, lambda copy: copy.write(careful()))
                except psycopg.DataError as exc:
                    self.name_nul(s, model, keys, chunk.docs())
                    self.name_refused(s, model, keys, exc)
                    raise

        s.driver.run(staged, what, s.con)

    def _copy(self, s: Session, prepare: Sequence[str], copy_sql: str, write_into: Callable[[Any], None]) -> None:
        """One transaction that makes (or empties) the temp table and COPYs into it."""
        con = s.con

        def body() -> None:
            for statement in prepare:
                con.execute(statement)
            with con.cursor() as cur, cur.copy(copy_sql) as copy:
                write_into(copy)

        s.transaction(body)

    def stage_typed(
        self, s: Session, table: str, prepare: Sequence[str], model: TableModel, rows: Any, keys, what: str
    ) -> None:
        names = [c.name for c in model.columns]
        rows = leap_seconds_read(model, rows)
        if REMAINDER not in rows.column_names:  # none: the staged remainder is NULL
            import pyarrow as pa

            rows = rows.append_column(REMAINDER, pa.nulls(rows.num_rows, pa.string()))
        payload = csv_of(rows, names + [REMAINDER])

        def staged() -> None:
            try:
                self._copy(s, prepare, f"COPY {table} FROM STDIN (FORMAT csv)", lambda copy: copy.write(payload))
            except psycopg.DataError:
                self.name_nul(s, model, keys)
                self.name_nul_typed(s, model, rows, keys)
                raise

        s.driver.run(staged, what, s.con)

    def load(self, s: Session, chunk: KeyChunk) -> list:
        model, keys = chunk.model, chunk.keys
        kinds = [c.kind for c in model.keys]
        if len(kinds) == 1:
            conv = copy_converter(kinds[0])
            payload = "".join([f"{i}\t{conv(key[0])}\n" for i, key in enumerate(keys)])
        else:
            convs = [copy_converter(k) for k in kinds]
            payload = "".join(
                [f"{i}\t" + "\t".join([c(v) for c, v in zip(convs, key)]) + "\n" for i, key in enumerate(keys)]
            )
        con = s.con

        def body() -> list:
            for statement in chunk.prepare:
                con.execute(statement)
            with con.cursor() as cur:
                with cur.copy(f"COPY {chunk.table} ({', '.join(chunk.names)}) FROM STDIN") as copy:
                    copy.write(payload)
                cur.execute(chunk.select)
                return cur.fetchall()

        def checked() -> list:
            try:
                return s.transaction(body)
            except psycopg.DataError:
                self.name_nul(s, model, keys)
                raise

        return s.driver.run(checked, chunk.what, con)

    # ------------------------------------------------------------ naming
    def name_nul(self, s: Session, model: TableModel, keys: Sequence[tuple], docs: Sequence[Any] = ()) -> None:
        """After PostgreSQL refused a chunk: if a key (or, given ``docs``, a document) in it
        holds U+0000, raise an error that names it."""
        for i, key in enumerate(keys):
            at = nul_path(list(key))
            what = f"key {list(key)!r}"
            if at is None and i < len(docs):
                at = nul_path(docs[i])
                what = f"document of key {list(key)!r} (at {at})"
            if at is not None:
                raise DriverError(
                    f"PostgreSQL at {s.driver.settings.where}: {model.display}: the {what} holds U+0000 (NUL), "
                    "which PostgreSQL cannot store in text or jsonb. Remove or replace it upstream; nothing of "
                    "this shard's transaction was committed."
                )

    def name_refused(self, s: Session, model: TableModel, keys: Sequence[tuple], exc: psycopg.DataError) -> None:
        """After PostgreSQL refused a value of the careful COPY text (one line per row, the
        view's columns ``col0…``): raise an error that names the key and the field."""
        found = COPY_CONTEXT.search(exc.diag.context or "")
        if found is None:
            return
        row, col = int(found.group(1)) - 1, int(found.group(2))
        if not (0 <= row < len(keys) and 0 <= col < len(model.columns)):
            return
        text = redact(exc, s.driver.settings.secrets).strip().splitlines()[0]
        raise DriverError(
            f"PostgreSQL at {s.driver.settings.where}: {model.display}: the document of key {list(keys[row])!r}: "
            f"field {model.columns[col].name!r} ({sql_type(model.columns[col].kind)}) was refused: {text}. "
            "Nothing of this shard's transaction was committed."
        )

    def name_nul_typed(self, s: Session, model: TableModel, rows: Any, keys: Sequence[tuple]) -> None:
        """After PostgreSQL refused typed rows: the first property holding U+0000, by key."""
        import pyarrow as pa
        import pyarrow.compute as pc

        # a value's NUL; in JSON text (an object's or array's, the remainder's) written as \u0000
        searched = [(c.name, rows.column(c.name), "\x00") for c in model.values]
        searched += [(c.name, rows.column(c.name), "\\u0000") for c in model.values if c.kind == JSON]
        if REMAINDER in rows.column_names:
            searched.append(("", rows.column(REMAINDER), "\\u0000"))
        for name, col, nul in searched:
            if not pa.types.is_string(col.type) and not pa.types.is_large_string(col.type):
                continue
            hits = pc.fill_null(pc.match_substring(col, nul), False)
            if pc.any(hits).as_py():
                i = pc.index(hits, True).as_py()
                where = f"/{name}" if name else "a property the schema does not declare"
                raise DriverError(
                    f"PostgreSQL at {s.driver.settings.where}: {model.display}: the document of key "
                    f"{list(keys[i])!r} (at {where}) holds U+0000 (NUL), which PostgreSQL cannot store in text "
                    "or jsonb. Remove or replace it upstream; nothing of this shard's transaction was committed."
                )


def backend_pid(con) -> int:
    """The server process this statement ran in (``pg_backend_pid()``; libpq's own
    ``backend_pid`` is a pooler's, where there is one)."""
    return con.execute("SELECT pg_backend_pid()").fetchone()[0]
