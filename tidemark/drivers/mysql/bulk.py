"""MySQL's row writer: each chunk into a session's temp table in one bulk statement --
``LOAD DATA LOCAL INFILE … [REPLACE]`` (default) or a multi-row ``INSERT … ON DUPLICATE KEY
UPDATE`` (``bulk: insert``).

``LOAD DATA LOCAL`` turns bad values into warnings (the server cannot stop the file
half-way), so every bulk statement checks ``SHOW WARNINGS`` and refuses the chunk, naming
the key and the field, before anything is committed; strict mode (set at connect) refuses a
bad ``INSERT`` value with an error, named the same way.  Keys longer than a key column
holds, and date-times that are not RFC 3339, are refused before anything is sent.
"""

from __future__ import annotations

import datetime as dt
import os
import re
import tempfile
from typing import Any, Callable, Optional, Sequence

import pymysql

from tidemark.drivers.mysql.dialect import KEY_CHARS
from tidemark.drivers.sql import BOOLEAN, JSON, TEXT, TIMESTAMP, TableModel, coerce
from tidemark.drivers.sql.model import STAGED_DOCUMENT, staged_column
from tidemark.drivers.sql.writer import DOC, FLAG, ORDER, Chunk, KeyChunk, RowWriter, Session
from tidemark.errors import DriverError
from tidemark.protocol.messages import REMAINDER

_ROW = re.compile(r"\brow (\d+)")
_STAGED_COLUMN = re.compile(r"column [`']?" + staged_column(0)[:-1] + r"(\d+)[`']?")  # staged_column(j)
# the server cannot hold a value: out of range, too long, incorrect value or date-time, truncated
DATA_CODES = {1264, 1406, 1292, 1366, 1265, 1367, 1048, 4025, 3140}
_ESCAPES = str.maketrans({"\\": "\\\\", "\t": "\\t", "\n": "\\n", "\x00": "\\0"})


def to_utc(value: Any) -> Any:
    """An RFC 3339 date-time string (or a ``datetime`` with a zone) as a naive UTC ``datetime``
    (MySQL's ``datetime`` has no zone; a leap second is held as ``:59``, as the Python fold
    orders it)."""
    if isinstance(value, dt.datetime) and value.tzinfo is not None:
        return value.astimezone(dt.timezone.utc).replace(tzinfo=None)
    if not isinstance(value, str):
        return value
    if value[17:19] == "60":
        value = value[:17] + "59" + value[19:]
    moment = dt.datetime.fromisoformat(value.replace("z", "Z"))
    if moment.tzinfo is not None:
        moment = moment.astimezone(dt.timezone.utc).replace(tzinfo=None)
    return moment


def param(kind: str) -> Callable[[Any], Any]:
    """A JSON value as a statement parameter for a column of ``kind``."""
    if kind == TIMESTAMP:
        return lambda v: None if v is None else to_utc(v)
    if kind == BOOLEAN:
        return lambda v: None if v is None else (int(v) if isinstance(v, bool) else coerce(kind, v))
    if kind == TEXT:
        return lambda v: v if v.__class__ is str else coerce(kind, v)
    return lambda v: coerce(kind, v)


def typed_param(kind: str) -> Callable[[Any], Any]:
    """A typed value (Arrow's, as Python) as a statement parameter for a column of ``kind``."""
    if kind in (TIMESTAMP, BOOLEAN):
        return param(kind)
    return lambda v: v  # (already of the column's type)


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


class BulkWriter(RowWriter):
    """Rows into temp tables by ``LOAD DATA LOCAL`` or multi-row ``INSERT`` (see the module docstring)."""

    def convert(self, kind: str) -> Callable[[Any], Any]:
        if kind == ORDER:
            return int
        if kind == FLAG:
            return lambda x: 1 if x else 0
        if kind == DOC:
            return lambda x: x
        return param(kind)

    def stage(self, s: Session, chunk: Chunk) -> None:
        model, keys, rows = chunk.model, chunk.keys, chunk.rows
        self.check_keys(model, keys)
        convs = [self.convert(k) for k in chunk.kinds]
        converted = self.converted(model, lambda: [tuple([c(v) for c, v in zip(convs, r)]) for r in rows], keys, rows)
        columns = [c.name for c in model.columns]

        def body() -> None:
            for statement in chunk.prepare:
                s.execute(statement)
            self.bulk(
                s, chunk.table, chunk.names, converted, lambda i: list(keys[i]), chunk.what, chunk.key_names, columns
            )

        s.in_transaction(body, chunk.what, write=False)

    def stage_typed(
        self, s: Session, table: str, prepare: Sequence[str], model: TableModel, rows: Any, keys, what: str
    ) -> None:
        """An Arrow table's columns (the view's columns, by name) into the typed staging
        ``table``, by the same bulk statement as the documents' (values converted by kind)."""
        self.check_keys(model, keys)
        columns = [c.name for c in model.columns]
        convs = [typed_param(c.kind) for c in model.columns]
        values = [rows.column(n).to_pylist() for n in columns]
        names = [staged_column(j) for j in range(len(columns))]
        if REMAINDER in rows.column_names:  # each row's remainder: its JSON text as it is
            convs.append(lambda v: v)
            values.append(rows.column(REMAINDER).to_pylist())
            names.append(STAGED_DOCUMENT)
        converted = self.converted(model, lambda: [tuple([c(v) for c, v in zip(convs, r)]) for r in zip(*values)], keys)

        def body() -> None:
            for statement in prepare:
                s.execute(statement)
            self.bulk(s, table, names, converted, lambda i: list(keys[i]), what, (), columns)

        s.in_transaction(body, what, write=False)

    def load(self, s: Session, chunk: KeyChunk) -> list:
        model, keys = chunk.model, chunk.keys
        self.check_keys(model, keys)
        convs = [param(c.kind) for c in model.keys]
        rows = self.converted(
            model, lambda: [(i, *[f(v) for f, v in zip(convs, key)]) for i, key in enumerate(keys)], keys
        )

        def body() -> list:
            for statement in chunk.prepare:
                s.execute(statement)
            self.bulk(
                s, chunk.table, chunk.names, rows, lambda i: list(keys[i]), chunk.what, (), [c.name for c in model.keys]
            )
            return list(s.execute(chunk.select).fetchall())

        return s.in_transaction(body, chunk.what, write=False)

    # ----------------------------------------------------------------- bulk
    def bulk(
        self,
        s: Session,
        table: str,
        names: Sequence[str],
        rows: list[tuple],
        keys: Callable[[int], Any],
        what: str,
        key_names: Sequence[str] = (),
        fields: Sequence[str] = (),
    ) -> None:
        """Write ``rows`` into the temp ``table`` in one statement; with ``key_names``, a row
        whose key is already there replaces it.  A value the column cannot hold (an error,
        or a warning) refuses the chunk, naming the field (``fields``: the view's column of
        each staging column ``col<j>``) and, from one statement, the key (``keys(row index)``)."""
        try:
            if self.infile(s):
                fd, path = tempfile.mkstemp(prefix="tidemark-mysql-", suffix=".tsv")
                try:
                    with os.fdopen(fd, "wb") as f:
                        f.write("".join(["\t".join([field(v) for v in r]) + "\n" for r in rows]).encode("utf-8"))
                    replace = "REPLACE " if key_names else ""
                    s.execute(
                        f"LOAD DATA LOCAL INFILE %s {replace}INTO TABLE {table} CHARACTER SET utf8mb4 ({', '.join(names)})",
                        (path,),
                    )
                finally:
                    os.unlink(path)
                # LOCAL turns refused values into warnings: count them (PyMySQL keeps the OK packet's count)
                result = getattr(s.con, "_result", None)
                if getattr(result, "warning_count", 1):
                    self.refuse_warnings(s, what, keys)
            else:  # strict mode (set at connect) refuses a bad value with an error
                s.executemany(self.insert(s, table, names, key_names), rows)
        except pymysql.Error as exc:
            code, message = (exc.args + (None, ""))[:2]
            if code not in DATA_CODES:
                raise
            raise self.refused(s, what, str(message), f"{code}", keys if self.infile(s) else None, fields) from None

    @staticmethod
    def infile(s: Session) -> bool:
        return s.driver.settings.bulk == "infile"

    def refused(
        self, s: Session, what: str, message: str, code: str, keys: Optional[Callable[[int], Any]], fields
    ) -> DriverError:
        m = _ROW.search(message)
        at = f" key {keys(int(m.group(1)) - 1)!r}" if keys and m else ""
        c = _STAGED_COLUMN.search(message)
        if c and int(c.group(1)) < len(fields):
            at += f" field {fields[int(c.group(1))]!r}"
        return DriverError(
            f"MySQL at {s.driver.settings.where}: {what}:{at or ' a value'}: the column cannot hold the value "
            f"({code}: {message}). Nothing of this chunk was written; fix the document or the column's type"
        )

    def refuse_warnings(self, s: Session, what: str, keys: Callable[[int], Any]) -> None:
        warnings = s.execute("SHOW WARNINGS").fetchall()
        if warnings:
            level, code, message = warnings[0][:3]
            raise self.refused(s, what, str(message), f"{level} {code}; {len(warnings)} warning(s)", keys, ())

    @staticmethod
    def check_keys(model: TableModel, keys: Sequence[tuple]) -> None:
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

    @staticmethod
    def converted(
        model: TableModel, make: Callable[[], list[tuple]], keys: Sequence[tuple], rows: Sequence[tuple] = ()
    ) -> list[tuple]:
        """``make()``; a date-time that is not RFC 3339 is refused, naming its key and field
        (``rows``: the staged rows, ``store order, flags…, the view's columns…, document``;
        none: the keys are the values)."""
        try:
            return make()
        except ValueError:
            for i, key in enumerate(keys):
                values = rows[i][3:-1] if rows else key
                for c, v in zip(model.columns if rows else model.keys, values):
                    if c.kind == TIMESTAMP and v is not None:
                        try:
                            to_utc(v)
                        except (ValueError, TypeError):
                            raise DriverError(
                                f"MySQL: {model.display}: key {list(key)!r} field {c.name!r}: {v!r} is "
                                "not an RFC 3339 date-time. Nothing of this chunk was written"
                            ) from None
            raise
