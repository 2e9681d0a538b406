"""A MySQL shard session: the skeleton's session with bulk Load and Store.

Store sends each chunk to a temp staging table per binding in one bulk statement —
``LOAD DATA LOCAL INFILE … REPLACE`` (default) or multi-row ``INSERT … ON DUPLICATE KEY
UPDATE`` (``bulk: insert``); either way a key stored twice keeps its last Store.  Load
sends the keys to a temp table the same way and joins it with the view (read-committed:
only after this session's Acknowledged).  The commit (the skeleton's steps 1-5) deletes
with a multi-table ``DELETE … JOIN`` and upserts with ``INSERT … SELECT … ON DUPLICATE
KEY UPDATE`` (delta updates: appends in Store order).

``LOAD DATA LOCAL`` turns bad values into warnings (the server cannot stop the file
half-way), so every bulk statement checks ``SHOW WARNINGS`` and refuses the chunk, naming
the key, before anything is committed.
"""

from __future__ import annotations

import datetime as dt
import os
import re
import tempfile
from typing import Any, Callable, Optional, Sequence

import pymysql

from tidemark.drivers.mysql.dialect import KEY_CHARS, MySqlDialect
from tidemark.drivers.mysql.reduce import overflow_query
from tidemark.drivers.sql import (
    BOOLEAN,
    DOCUMENT_COLUMN,
    JSON,
    TEXT,
    TIMESTAMP,
    SqlTransactor,
    TableModel,
    coerce,
    dumps,
)
from tidemark.drivers.sql.model import IS_DELETE, STAGED_DOCUMENT, STORE_ORDER, staged_column
from tidemark.drivers.sql.reduce import reduce_sources, reduce_statement
from tidemark.drivers.sql.transactor import stage_name, staged_columns
from tidemark.errors import DriverError
from tidemark.protocol.messages import Store

_ROW = re.compile(r"\brow (\d+)")
_STAGED_COLUMN = re.compile(r"column [`']?" + staged_column(0)[:-1] + r"(\d+)[`']?")  # staged_column(j)
# the server cannot hold a value: out of range, too long, incorrect value or date-time, truncated
DATA_CODES = {1264, 1406, 1292, 1366, 1265, 1367, 1048, 4025, 3140}
_ESCAPES = str.maketrans({"\\": "\\\\", "\t": "\\t", "\n": "\\n", "\x00": "\\0"})


def to_utc(value: Any) -> Any:
    """An RFC 3339 date-time string as a naive UTC ``datetime`` (MySQL's ``datetime`` has no zone;
    a leap second is held as ``:59``, as the Python fold orders it)."""
    if not isinstance(value, str):
        return value
    if value[17:19] == "60":
        value = value[:17] + "59" + value[19:]
    t = dt.datetime.fromisoformat(value.replace("z", "Z"))
    if t.tzinfo is not None:
        t = t.astimezone(dt.timezone.utc).replace(tzinfo=None)
    return t


def param(kind: str) -> Callable[[Any], Any]:
    """A JSON value as a statement parameter for a column of ``kind``."""
    if kind == TIMESTAMP:
        return lambda v: None if v is None else to_utc(v)
    if kind == BOOLEAN:
        return lambda v: None if v is None else (int(v) if isinstance(v, bool) else coerce(kind, v))
    if kind == TEXT:
        return lambda v: v if v.__class__ is str else coerce(kind, v)
    return lambda v: coerce(kind, v)


def field(v: Any) -> str:
    """A parameter value in ``LOAD DATA``'s default text format (``\\N`` is NULL)."""
    if v is None:
        return "\\N"
    if v.__class__ is str:
        return v.translate(_ESCAPES)
    if v is True or v is False:
        return "1" if v else "0"
    if isinstance(v, float):
        return repr(v)
    if isinstance(v, dt.datetime):
        return v.isoformat(sep=" ")
    return str(v)


class MySqlTransactor(SqlTransactor):
    """One shard session on its own connection (see the module docstring)."""

    dialect: MySqlDialect

    def __init__(self, *args: Any, **kwargs: Any):
        super().__init__(*args, **kwargs)
        self._stale: set[int] = set()  # staging tables still holding committed rows (emptied on reuse)
        self._deletes: set[int] = set()  # bindings with deletes staged

    @property
    def infile(self) -> bool:
        return self.driver.settings.bulk == "infile"

    # ----------------------------------------------------------------- bulk
    def bulk(
        self,
        table: str,
        names: Sequence[str],
        rows: list[tuple],
        keys: Callable[[int], Any],
        what: str,
        upsert_keys: int = 0,
        fields: Sequence[str] = (),
    ) -> None:
        """Write ``rows`` into the temp ``table`` in one statement; with ``upsert_keys``, a
        row whose first ``upsert_keys`` columns are already there replaces it.  A value the
        column cannot hold (an error, or a warning) refuses the chunk, naming the field
        (``fields``: the names of the staging columns ``c0``, ``c1``…) and, from one
        statement, the key (``keys(row index)``)."""
        try:
            self._bulk(table, names, rows, keys, what, upsert_keys)
        except pymysql.Error as exc:
            code, message = (exc.args + (None, ""))[:2]
            if code not in DATA_CODES:
                raise
            raise self.refused(what, str(message), f"{code}", keys if self.infile else None, fields) from None

    def refused(
        self, what: str, message: str, code: str, keys: Optional[Callable[[int], Any]], fields: Sequence[str]
    ) -> DriverError:
        m = _ROW.search(message)
        at = f" key {keys(int(m.group(1)) - 1)!r}" if keys and m else ""
        c = _STAGED_COLUMN.search(message)
        if c and int(c.group(1)) < len(fields):
            at += f" field {fields[int(c.group(1))]!r}"
        return DriverError(
            f"MySQL at {self.driver.settings.where}: {what}:{at or ' a value'}: the column cannot hold the value "
            f"({code}: {message}). Nothing of this chunk was written; fix the document or the column's type"
        )

    def _bulk(
        self,
        table: str,
        names: Sequence[str],
        rows: list[tuple],
        keys: Callable[[int], Any],
        what: str,
        upsert_keys: int = 0,
    ) -> None:
        if self.infile:
            fd, path = tempfile.mkstemp(prefix="tidemark-mysql-", suffix=".tsv")
            try:
                with os.fdopen(fd, "wb") as f:
                    f.write("".join(["\t".join([field(v) for v in r]) + "\n" for r in rows]).encode("utf-8"))
                replace = "REPLACE " if upsert_keys else ""
                self.execute(
                    f"LOAD DATA LOCAL INFILE %s {replace}INTO TABLE {table} CHARACTER SET utf8mb4 ({', '.join(names)})",
                    (path,),
                )
            finally:
                os.unlink(path)
            # LOCAL turns refused values into warnings: count them (PyMySQL keeps the OK packet's count)
            result = getattr(self.con, "_result", None)
            if getattr(result, "warning_count", 1):
                self.refuse_warnings(what, keys)
        else:  # strict mode (set at connect) refuses a bad value with an error
            dialect = self.dialect
            sql = f"INSERT INTO {table} ({', '.join(names)}) VALUES ({dialect.params(len(names))})"
            if upsert_keys:
                sql += " " + dialect.upsert(names[:upsert_keys], names[upsert_keys:])
            self.executemany(sql, rows)

    def refuse_warnings(self, what: str, keys: Callable[[int], Any]) -> None:
        warnings = self.execute("SHOW WARNINGS").fetchall()
        if warnings:
            level, code, message = warnings[0][:3]
            raise self.refused(what, str(message), f"{level} {code}; {len(warnings)} warning(s)", keys, ())

    def check_keys(self, model: TableModel, keys: Sequence[tuple]) -> None:
        """String keys longer than a key column holds: refused, naming the key."""
        text = [j for j, c in enumerate(model.keys) if c.kind in (TEXT, JSON)]
        for key in keys:
            for j in text:
                v = key[j]
                if isinstance(v, str) and len(v) > KEY_CHARS:
                    raise DriverError(
                        f"MySQL: {model.display}: key {list(key)!r} has a {model.keys[j].name!r} of {len(v)} characters; "
                        f"a key column holds {KEY_CHARS} in MySQL. Shorten the key (or hash it into a key of its own)"
                    )

    def converted(
        self,
        model: TableModel,
        rows: Callable[[], list[tuple]],
        keys: Sequence[tuple],
        values: Optional[Sequence[tuple]] = None,
    ) -> list[tuple]:
        """``rows()``; a date-time that is not RFC 3339 is refused, naming its key and field."""
        try:
            return rows()
        except ValueError:
            columns = model.columns if values is not None else model.keys
            for i, key in enumerate(keys):
                for c, v in zip(columns, (*key, *(values[i] if values is not None else ()))):
                    if c.kind == TIMESTAMP and v is not None:
                        try:
                            to_utc(v)
                        except (ValueError, TypeError):
                            raise DriverError(
                                f"MySQL: {model.display}: key {list(key)!r} field {c.name!r}: {v!r} is "
                                "not an RFC 3339 date-time. Nothing of this chunk was written"
                            ) from None
            raise

    # ----------------------------------------------------------------- Load
    def lookup(self, binding: int, model: TableModel, keys: Sequence[tuple]) -> list[tuple[int, str]]:
        dialect = self.dialect
        self.check_keys(model, keys)
        name = f"tidemark_load_{binding}"
        lt, create = self.temp(
            name,
            ["i bigint NOT NULL PRIMARY KEY"]
            + [f"{staged_column(j)} {dialect.ddl_type(c)}" for j, c in enumerate(model.keys)],
        )
        on = " AND ".join(f"t.{dialect.quote(c.name)} = l.{staged_column(j)}" for j, c in enumerate(model.keys))
        convs = [param(c.kind) for c in model.keys]
        rows = self.converted(
            model, lambda: [(i, *[f(v) for f, v in zip(convs, key)]) for i, key in enumerate(keys)], keys
        )
        names = ["i"] + [staged_column(j) for j in range(len(convs))]

        def body() -> list:
            if create:
                self.execute(create)
            else:
                self.execute(f"DELETE FROM {lt}")
            self.bulk(
                lt, names, rows, lambda i: list(keys[i]), f"load {model.display}", fields=[c.name for c in model.keys]
            )
            stored = self.lean_select(model, "t") if model.lean else f"t.{dialect.quote(DOCUMENT_COLUMN)}"
            return self.execute(
                f"SELECT l.i, {stored} FROM {lt} l JOIN {dialect.ident(model)} t ON {on} ORDER BY l.i"
            ).fetchall()

        found = self.in_transaction(body, f"load {model.display}", write=False)
        self._created.add(name)
        return self.lean_rows(model, list(found)) if model.lean else list(found)

    # ---------------------------------------------------------------- Store
    def store(self, msg: Store) -> None:
        if not msg.keys:
            return
        model = self.models[msg.binding]
        self.check_keys(model, msg.keys)
        if model.reduce is not None:
            self._store_texts(model, msg)
            return
        n = len(model.keys)
        name = stage_name(msg.binding)
        staging, create = self._staging(model, msg.binding)
        stale = msg.binding in self._stale
        seq = self._seq
        self._seq = seq + len(msg.keys)
        kc = [param(c.kind) for c in model.keys]
        vc = [param(c.kind) for c in model.values]
        # the value columns, and what flow_document holds: the document, or a lean row's remainder
        values, texts = self.row_parts(model, msg)

        def make() -> list[tuple]:
            return [
                (
                    seq + i,
                    1 if x else 0,
                    *[f(v) for f, v in zip(kc, key)],
                    *[f(v) for f, v in zip(vc, vals)],
                    text,
                )
                for i, (key, vals, text, x) in enumerate(zip(msg.keys, values, texts, msg.deletes))
            ]

        rows = self.converted(model, make, msg.keys, values)
        names = [STORE_ORDER, IS_DELETE] + [staged_column(j) for j in range(len(model.columns))] + [STAGED_DOCUMENT]
        if any(msg.deletes):
            self._deletes.add(msg.binding)

        def body() -> None:
            if create:
                self.execute(create)
            elif stale:
                self.execute(f"DELETE FROM {staging}")
            self.bulk(
                staging,
                names,
                rows,
                lambda i: list(msg.keys[i]),
                f"store {model.display}",
                0 if model.delta else 2 + n,
                [c.name for c in model.columns],
            )

        if not model.delta:  # the upsert's key columns come first
            names = names[2 : 2 + n] + names[:2] + names[2 + n :]
            rows = [r[2 : 2 + n] + r[:2] + r[2 + n :] for r in rows]
        self.in_transaction(body, f"store {model.display}", write=False)
        self._created.add(name)
        self._stale.discard(msg.binding)
        self._staged.add(msg.binding)

    def _staging(self, model: TableModel, binding: int) -> tuple[str, Optional[str]]:
        dialect = self.dialect
        columns = (
            [f"{STORE_ORDER} bigint NOT NULL", f"{IS_DELETE} boolean NOT NULL"]
            + [f"{staged_column(j)} {dialect.ddl_type(c)}" for j, c in enumerate(model.columns)]
            + [f"{STAGED_DOCUMENT} longtext"]
        )
        if not model.delta:
            columns.append(f"PRIMARY KEY ({', '.join(staged_column(j) for j in range(len(model.keys)))})")
        return self.temp(stage_name(binding), columns)

    def _store_texts(self, model: TableModel, msg: Store) -> None:
        """Stage a binding MariaDB reduces: the keys and each combined document's JSON text
        (the commit's statement reads the value columns from it; ``drivers/mysql/reduce.py``)."""
        self.staged_once(model, msg)
        staging, create = self._staging(model, msg.binding)
        stale = msg.binding in self._stale
        seq = self._seq
        self._seq = seq + len(msg.keys)
        kc = [param(c.kind) for c in model.keys]
        texts = self.driver.staged_texts(msg.texts) if msg.texts else [dumps(doc) for doc in msg.docs]
        rows = self.converted(
            model,
            lambda: [
                (seq + i, 0, *[f(v) for f, v in zip(kc, key)], t) for i, (key, t) in enumerate(zip(msg.keys, texts))
            ],
            msg.keys,
        )
        names = [STORE_ORDER, IS_DELETE] + [staged_column(j) for j in range(len(model.keys))] + [STAGED_DOCUMENT]

        def body() -> None:
            if create:
                self.execute(create)
            elif stale:
                self.execute(f"DELETE FROM {staging}")
            self.bulk(
                staging,
                names,
                rows,
                lambda i: list(msg.keys[i]),
                f"store {model.display}",
                0,
                [c.name for c in model.keys],
            )

        self.in_transaction(body, f"store {model.display}", write=False)
        self._created.add(stage_name(msg.binding))
        self._stale.discard(msg.binding)
        self._staged.add(msg.binding)

    def _reduce(self, model: TableModel, staging: str, names: list[str]) -> None:
        """The reducing statement; a sum past its type is refused naming the key and property."""
        forms = self.driver.reduce_sql(model)
        sql = reduce_statement(
            forms, forms.table, model, model.reduce, staging, names, reduce_sources(forms, model, "s")
        )
        try:
            self.execute(sql)
        except pymysql.Error as exc:
            if not exc.args or exc.args[0] != 1690:  # out of range
                raise
            for col in model.values:
                f = next((f for f in model.reduce.fields if f.name == col.name), None)
                if f is None or f.strategy != "sum":
                    continue
                row = self.execute(overflow_query(forms, model, staging, f, col)).fetchone()
                if row is not None:
                    n = len(model.keys)
                    what = "is beyond a 64-bit integer" if f.type == "integer" else "is not a finite number"
                    raise DriverError(
                        f"{model.display}: key {list(row[:n])!r}: /{f.name}: 'sum' overflowed: the result {what} "
                        f"(left {row[n]}, right {row[n + 1]}). Nothing of this shard's transaction was committed; "
                        "the batch fails as it would reducing in Python."
                    ) from None
            raise

    # --------------------------------------------------------------- commit
    def apply_staged(self, binding: int) -> None:
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
        if model.reduce is not None:  # MariaDB reduces: one statement (drivers/mysql/reduce.py)
            self._reduce(model, staging, names)
            return
        if binding in self._deletes:
            match = " AND ".join(f"t.{c} = s.{src}" for c, src in zip(names[:n], sources))
            self.execute(f"DELETE t FROM {table} t JOIN {staging} s ON {match} WHERE s.{IS_DELETE} = 1")
        self.execute(
            f"INSERT INTO {table} ({target}) SELECT {source} FROM {staging} WHERE {IS_DELETE} = 0 "
            + dialect.upsert(names[:n], names[n:])
        )

    def committed(self) -> None:
        # emptied lazily by the next Store of this session: most sessions end here
        self._stale |= self._staged
        self._deletes.clear()
