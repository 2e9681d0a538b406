"""Reduced endpoints for the SQL drivers' tests: an endpoint's reduce binding, a commit
through it, and rows made canonical for comparing."""

from __future__ import annotations

import json
import sqlite3
from decimal import Decimal
from fractions import Fraction
from types import SimpleNamespace

import psycopg

from tests.support.driver_protocol import MAT, apply, cp
from tests.support.mysql_support import mysql_db, mysql_url
from tests.support.mysql_support import sql as mysql_sql
from tidemark.collection.collection import Collection
from tidemark.drivers.mysql import MySqlDriver
from tidemark.drivers.postgres import PostgresDriver
from tidemark.drivers.sqlite import SQLiteDriver
from tidemark.protocol.messages import Acknowledge, Flush, Load, Open, Range, StartCommit, Store, StoreTexts
from tidemark.runtime.reduce_path import reduce_paths
from tidemark.spec import CollectionSpec


class Number:
    """A JSON number as the views are compared: equal when the decimals their texts denote are
    (jsonb prints 5.8e16 as 58000000000000000), or, where one side is a double, when they are
    the same double (PostgreSQL prints -6.816446365496746e16, a double exactly halfway between
    two 16-digit decimals, with 17 digits: -68164463654967456).  Two integers compare exactly."""

    def __init__(self, v):
        self.v = v
        self.decimal = Fraction(repr(v)) if isinstance(v, float) else Fraction(v)

    def __eq__(self, other):
        if not isinstance(other, Number):
            return NotImplemented
        if self.decimal == other.decimal:
            return True
        if isinstance(self.v, float) or isinstance(other.v, float):
            return float(self.v) == float(other.v)
        return False

    def __hash__(self):
        return hash(float(self.v))

    def __repr__(self):
        return repr(self.v)


def canonical(v):
    if isinstance(v, bool) or v is None or isinstance(v, str):
        return v
    if isinstance(v, (int, float)):
        return Number(v)
    if isinstance(v, Decimal):  # an exact decimal column
        return Number(int(v) if v == v.to_integral_value() else float(v))
    if isinstance(v, list):
        return [canonical(x) for x in v]
    if isinstance(v, dict):
        return {k: canonical(x) for k, x in v.items()}
    return v  # a column's datetime


class Endpoint:
    """One endpoint under test: its driver, and its table's value columns read back."""

    def __init__(self, name: str, request, tmp_path):
        self.name = name
        if name == "postgres":
            self.url = request.getfixturevalue("postgres_url")
            self.schema = request.getfixturevalue("pg_schema")
            self.driver = PostgresDriver({"url": self.url, "schema": self.schema})
        elif name == "mysql":
            self.url = request.getfixturevalue("mysql_url")
            self.schema = request.getfixturevalue("mysql_db")
            self.driver = MySqlDriver({"url": self.url, "schema": self.schema})
        else:
            self.path = str(tmp_path / "views.db")
            self.driver = SQLiteDriver({"path": self.path})

    def columns(self, table: str, names: list[str], types: dict) -> dict:
        cols = ", ".join(f'"{n}"' for n in names)
        if self.name == "postgres":
            with psycopg.connect(self.url, autocommit=True) as con:
                rows = con.execute(f'SELECT k, {cols} FROM "{self.schema}"."{table}"').fetchall()
        elif self.name == "mysql":
            cols = ", ".join(f"`{n}`" for n in names)
            rows = mysql_sql(self.url, f"SELECT k, {cols} FROM `{self.schema}`.`{table}`")
            rows = [
                (r[0], *[bool(v) if types[n] == "boolean" and v is not None else v for n, v in zip(names, r[1:])])
                for r in rows
            ]
        else:
            con = sqlite3.connect(self.path)
            rows = con.execute(f'SELECT k, {cols} FROM "{table}"').fetchall()
            con.close()
            # booleans are 0/1 in SQLite
            rows = [
                (r[0], *[bool(v) if types[n] == "boolean" and v is not None else v for n, v in zip(names, r[1:])])
                for r in rows
            ]
        return {r[0]: [canonical(v) for v in r[1:]] for r in rows}


def reduced_binding(driver, schema, table, document=None, reduced: bool = True):
    """The collection of ``schema`` and its binding to ``table``, which ``driver`` reduces
    (``document``: the resource's form, ``"full"`` or ``"lean"``; None: the default; not
    ``reduced``: which it Loads and the Python fold reduces)."""
    coll = Collection(CollectionSpec("orders", ("/k",), schema))
    resource = {"table": table} if document is None else {"table": table, "document": document}
    spec = coll.binding_spec(SimpleNamespace(resource=resource, delta_updates=False))
    (b,), [line] = reduce_paths([spec], [coll], driver.capabilities())
    assert b.endpoint_reduce == reduced, line
    return coll, b


def events_schema(key: str, **more: dict) -> dict:
    """An event's schema, keyed by ``key``: ``at`` (a date-time, maximized), ``first`` (minimized),
    ``status`` last written by ``at``, and the properties ``more``."""
    return {
        "type": "object",
        "reduce": {"strategy": "merge"},
        "required": [key, "at", "status"],
        "properties": {
            key: {"type": "string"},
            "at": {"type": "string", "format": "date-time", "reduce": {"strategy": "maximize"}},
            "first": {"type": "string", "format": "date-time", "reduce": {"strategy": "minimize"}},
            "status": {"type": "string", "reduce": {"strategy": "lastWriteWins", "order": "/at"}},
            **more,
        },
    }


def typed_rows(model, combined: dict, keys: list):
    """The combined documents as ``StoreRows`` (what the typed combine collects): a column per
    property (a date-time as its text, objects and arrays as JSON text) and each row's
    remainder (:data:`REMAINDER`: what no column holds, :func:`tidemark.drivers.sql.lean.remainder`)."""
    import pyarrow as pa

    from tidemark.drivers.sql.lean import date_time_columns, remainder
    from tidemark.drivers.sql.model import JSON
    from tidemark.protocol.messages import REMAINDER

    cols = {}
    for c in model.columns:
        vals = [combined[k].get(c.name) for k in keys]
        cols[c.name] = pa.array([None if v is None else json.dumps(v) for v in vals] if c.kind == JSON else vals)
    names, times = frozenset(c.name for c in model.columns), date_time_columns(model)
    rests = [remainder(combined[k], names, times, model.nullable) for k in keys]
    cols[REMAINDER] = pa.array([None if r is None else json.dumps(r) for r in rests], pa.string())
    return pa.table(cols)


def commit(driver, coll, b, combined: dict, batch: int, texts: bool = True, typed: bool = False):
    """One transaction of the combined documents: as JSON texts (``texts``), as typed rows
    (``typed``), or as documents with their values."""
    t, _ = driver.open(Open(MAT, "v1", Range(), bindings=(b,)))
    try:
        t.acknowledge(Acknowledge())
        t.flush(Flush())
        keys = sorted(combined)
        docs = [combined[k] for k in keys]
        n = len(docs)
        if typed:
            from tidemark.protocol.messages import StoreRows

            t.store(StoreRows(0, tuple((k,) for k in keys), typed_rows(t.models[0], combined, keys)))
        elif texts:  # as the runtime sends them: the JSON text only
            t.store(StoreTexts(0, tuple((k,) for k in keys), tuple(json.dumps(d) for d in docs)))
        else:
            t.store(
                Store(
                    0,
                    tuple((k,) for k in keys),
                    tuple(coll.values(d) for d in docs),
                    tuple(docs),
                    (False,) * n,
                    (False,) * n,
                )
            )
        t.start_commit(StartCommit(cp(batch)))
    finally:
        t.close()


def rows(endpoint, table: str) -> tuple[list[str], list[tuple]]:
    """The table's column names and rows, as the database holds them."""
    if endpoint.name == "postgres":
        with psycopg.connect(endpoint.url, autocommit=True) as con:
            cur = con.execute(f'SELECT * FROM "{endpoint.schema}"."{table}" ORDER BY 1')
            return [d[0] for d in cur.description], cur.fetchall()
    if endpoint.name == "mysql":
        from tests.support.mysql_support import connect

        con = connect(endpoint.url)
        try:
            with con.cursor() as cur:
                cur.execute(f"SELECT * FROM `{endpoint.schema}`.`{table}` ORDER BY 1")
                return [d[0] for d in cur.description], list(cur.fetchall())
        finally:
            con.close()
    con = sqlite3.connect(endpoint.path)
    try:
        cur = con.execute(f'SELECT * FROM "{table}" ORDER BY 1')
        return [d[0] for d in cur.description], cur.fetchall()
    finally:
        con.close()


def commit_through_loads(driver, coll, b, combined: dict, batch: int, view: dict, loaded_as_stored) -> None:
    """One transaction of a binding that Loads: Load every key of ``combined`` (``{key: its
    combined document}``), check what came back (``loaded_as_stored(loaded, stored)``:
    ``stored``, the documents ``view`` holds for those keys), reduce each with its stored
    document as the runtime does, Store and commit; ``view`` then holds the new documents."""
    keys = sorted(combined)
    t, _ = driver.open(Open(MAT, "v1", Range(), bindings=(b,)))
    try:
        t.acknowledge(Acknowledge())
        loaded = [*t.load(Load(0, tuple((k,) for k in keys))), *t.flush(Flush())[0]]
        stored = {m.keys[j][0]: m.docs[j] for m in loaded for j in range(len(m.keys))}
        loaded_as_stored(stored, {k: view[k] for k in keys if k in view})
        docs = [coll.reduce(stored[k], combined[k]) if k in stored else combined[k] for k in keys]
        n = len(keys)
        t.store(
            Store(
                0,
                tuple((k,) for k in keys),
                tuple(coll.values(d) for d in docs),
                tuple(docs),
                tuple(k in stored for k in keys),
                (False,) * n,
            )
        )
        t.start_commit(StartCommit(cp(batch)))
    finally:
        t.close()
    view.update(zip(keys, docs))


def fold_batches(coll, batches) -> dict:
    """The Python fold's view of ``batches`` (each batch's combined document per key)."""
    view: dict = {}
    for batch in batches:
        for k, doc in batch.items():
            view[k] = coll.reduce(view[k], doc) if k in view else doc
    return view


def reduced_in_endpoint(endpoint, schema, table: str, document: str, batches, every_other_typed: bool = False):
    """``batches`` committed through the endpoint's statement (no Load), JSON texts and documents
    alternating (``every_other_typed``: typed rows in every other batch of a lean view), the
    view dumped: (the Python fold's view, the endpoint's), asserted equal."""
    view = fold_batches(Collection(CollectionSpec("orders", ("/k",), schema)), batches)
    driver = endpoint.driver
    coll, b = reduced_binding(driver, schema, table, document)
    assert b.endpoint_reduce  # no Load
    apply(driver, b)
    typed = every_other_typed and document == "lean"
    assert not every_other_typed or driver.typed_rows([b]) == [typed]
    for i, batch in enumerate(batches):
        commit(driver, coll, b, batch, i, texts=i % 2 == 0, typed=typed and i % 2 == 1)
    got = {k[0]: v for k, v in driver.dump(MAT, b).items()}
    assert {k: canonical(v) for k, v in got.items()} == {k: canonical(v) for k, v in view.items()}
    return view, got
