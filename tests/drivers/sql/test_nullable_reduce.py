"""A nullable property (``type: [T, "null"]``, by ``lastWriteWins`` / ``firstWriteWins``)
reduced in the endpoint (PostgreSQL, SQLite, MariaDB), lean and full: ``null`` is a value
like any other, kept apart from an absent property, as the Python fold keeps it; its column
is NULL for both, a lean row's remainder keeps the ``null`` (and nothing of the property
beside a value), a full row's document holds it."""

from __future__ import annotations

import dataclasses
import json

import pytest

from tests.support.driver_protocol import MAT, apply, cp
from tests.support.endpoint_reduce import (
    Endpoint,
    canonical,
    commit,
    commit_through_loads,
    fold_batches,
    reduced_binding,
    reduced_in_endpoint,
    rows,
)
from tests.support.mysql_support import mysql_db, mysql_url  # fixtures of the mysql endpoint
from tidemark.drivers.sql import lean
from tidemark.protocol.messages import Acknowledge, Flush, Load, Open, Range, StartCommit, Store

SCHEMA = {
    "type": "object",
    "reduce": {"strategy": "merge"},
    "required": ["k"],
    "properties": {
        "k": {"type": "string"},
        "note": {"type": ["string", "null"]},
        "first": {"type": ["integer", "null"], "reduce": {"strategy": "firstWriteWins"}},
        "at": {"type": ["string", "null"], "format": "date-time"},
        "ok": {"type": ["null", "boolean"], "reduce": {"strategy": "firstWriteWins"}},
        "n": {"type": "integer", "reduce": {"strategy": "sum"}},
    },
}
#: each batch's combined document per key: what each key's documents go through
BATCHES = [
    {
        "a": {"k": "a", "note": "x"},  # value -> null -> absent: null
        "b": {"k": "b", "note": None},  # null -> value: the value, no null left beside it
        "c": {"k": "c", "note": None},  # null -> absent: null
        "d": {"k": "d", "n": 1},  # absent -> null: null
        "e": {"k": "e", "first": None, "at": None},  # firstWriteWins of a first null: null
        "f": {"k": "f", "first": 3, "ok": True},  # firstWriteWins of a value, then a null: the value
    },
    {
        "a": {"k": "a", "note": None},
        "b": {"k": "b", "note": "y"},
        "c": {"k": "c", "n": 1},
        "d": {"k": "d", "note": None},
        "e": {"k": "e", "first": 7, "at": "2024-05-01T12:00:00+02:00", "ok": False},
        "f": {"k": "f", "first": None, "ok": None, "at": None},
    },
    {
        "a": {"k": "a", "n": 2},
        "e": {"k": "e", "at": "2024-05-01T10:00:00Z"},  # a date-time's kept text gives way to a value
        "f": {"k": "f", "at": "2024-05-01T10:00:00.500+00:00"},  # a null gives way to a kept text
    },
]
EXPECTED = {
    "a": {"k": "a", "note": None, "n": 2},
    "b": {"k": "b", "note": "y"},
    "c": {"k": "c", "note": None, "n": 1},
    "d": {"k": "d", "n": 1, "note": None},
    "e": {"k": "e", "first": None, "at": "2024-05-01T10:00:00Z", "ok": False},
    "f": {"k": "f", "first": 3, "ok": True, "at": "2024-05-01T10:00:00.500+00:00"},
}


@pytest.fixture(params=[pytest.param("postgres", marks=[pytest.mark.postgres]), "sqlite", "mysql"])
def endpoint(request, tmp_path):
    e = Endpoint(request.param, request, tmp_path)
    yield e
    e.driver.close()


def fold(coll, batches=None) -> dict:
    return fold_batches(coll, BATCHES if batches is None else batches)


def by_key(endpoint, table: str) -> dict:
    """Each row of ``table`` as ``{column: value}`` by key, ``flow_document`` parsed."""
    names, got = rows(endpoint, table)
    out = {}
    for r in got:
        row = dict(zip(names, r))
        doc = row["flow_document"]
        row["flow_document"] = json.loads(doc) if isinstance(doc, (str, bytes)) else doc
        out[row["k"]] = row
    return out


def test_the_python_fold_keeps_null_apart_from_absent():
    """The reference the endpoints are held to (the expectations below)."""
    from tidemark.collection.collection import Collection
    from tidemark.spec import CollectionSpec

    assert fold(Collection(CollectionSpec("orders", ("/k",), SCHEMA))) == EXPECTED


@pytest.mark.parametrize("document", ["lean", "full"])
def test_null_is_kept_apart_from_absent_in_the_endpoint(endpoint, document):
    driver = endpoint.driver
    coll, b = reduced_binding(driver, SCHEMA, "nulls", document)
    apply(driver, b)
    assert [" lean rows " in line for line in driver.row_forms([b])] == [document == "lean"]
    # a null is staged in the remainder of typed rows (a lean table), else in the document's text
    typed = document == "lean"
    assert driver.typed_rows([b]) == [typed]
    for i, batch in enumerate(BATCHES):
        commit(driver, coll, b, batch, i, texts=i % 2 == 0, typed=typed and i % 3 != 2)
    view = {k[0]: v for k, v in driver.dump(MAT, b).items()}
    assert {k: canonical(v) for k, v in view.items()} == {k: canonical(v) for k, v in EXPECTED.items()}
    assert "note" in view["a"] and view["a"]["note"] is None and "note" not in view["e"]
    got = by_key(endpoint, "nulls")
    for k in "acd":  # null: the column is NULL
        assert got[k]["note"] is None
    assert got["b"]["note"] == "y" and got["e"]["first"] is None and got["f"]["first"] == 3
    assert got["e"]["ok"] in (False, 0) and got["f"]["ok"] in (True, 1)
    if document == "full":  # the whole document, its null included
        assert got["a"]["flow_document"] == {"k": "a", "note": None, "n": 2}
        assert got["e"]["flow_document"]["first"] is None
        return
    # lean: the remainder holds each null, nothing of a property beside its value
    assert got["a"]["flow_document"] == {"note": None}
    assert got["b"]["flow_document"] is None  # no stale null beside "y"
    assert got["c"]["flow_document"] == {"note": None} and got["d"]["flow_document"] == {"note": None}
    assert got["e"]["flow_document"] == {"first": None}  # at: a value (canonical), no null or older text
    assert got["f"]["flow_document"] == {"at": "2024-05-01T10:00:00.500+00:00"}  # the kept text, no null


def test_a_lean_view_of_nullable_properties_on_the_load_path(endpoint):
    """A lean view whose binding Loads (``endpoint_reduce: false``): Store writes the null
    into the remainder (:func:`lean.remainder`), Load gives it back; then the endpoint reduces
    the same rows on."""
    driver = endpoint.driver
    coll, reduced = reduced_binding(driver, SCHEMA, "loads")
    b = dataclasses.replace(reduced, endpoint_reduce=False)
    apply(driver, b)
    view: dict = {}

    def null_and_absent_as_stored(loaded: dict, stored: dict) -> None:
        assert loaded == stored

    for i, batch in enumerate(BATCHES[:2]):
        commit_through_loads(driver, coll, b, batch, i, view, null_and_absent_as_stored)
    got = by_key(endpoint, "loads")
    assert got["a"]["note"] is None and got["a"]["flow_document"] == {"note": None}
    assert got["b"]["note"] == "y" and got["b"]["flow_document"] is None
    commit(driver, coll, reduced, BATCHES[2], 2)  # the endpoint reduces on from these rows
    assert {k[0]: canonical(v) for k, v in driver.dump(MAT, reduced).items()} == {
        k: canonical(v) for k, v in EXPECTED.items()
    }


def test_the_remainder_keeps_a_nullable_propertys_null():
    names = frozenset({"k", "note", "at", "n"})
    nullable = frozenset({"note", "at"})
    doc = {"k": "a", "note": None, "at": None, "n": 1, "other": None}
    assert lean.remainder(doc, names, frozenset({"at"}), nullable) == {"note": None, "at": None, "other": None}
    assert lean.remainder({"k": "a", "note": "x"}, names, frozenset(), nullable) is None
    kept = {"k": "a", "at": "2024-05-01T12:00:00+02:00", "note": None}  # a date-time's text, kept as written
    assert lean.remainder(kept, names, frozenset({"at"}), nullable) == {"at": "2024-05-01T12:00:00+02:00", "note": None}


def test_check_says_the_endpoint_reduces_a_binding_of_nullable_properties(endpoint):
    from types import SimpleNamespace

    from tidemark.collection.collection import Collection
    from tidemark.runtime.reduce_path import reduce_paths
    from tidemark.spec import CollectionSpec

    coll = Collection(CollectionSpec("orders", ("/k",), SCHEMA))
    spec = coll.binding_spec(SimpleNamespace(resource={"table": "nulls"}, delta_updates=False))
    (b,), [line] = reduce_paths([spec], [coll], endpoint.driver.capabilities())
    assert b.endpoint_reduce and line == "binding nulls: reduced by the endpoint in its commit (no Load)"


EXTREMES = {
    "type": "object",
    "reduce": {"strategy": "merge"},
    "required": ["k"],
    "properties": {
        "k": {"type": "string"},
        "top": {"type": ["integer", "null"], "reduce": {"strategy": "maximize"}},
        "low": {"type": ["null", "string"], "reduce": {"strategy": "minimize"}},
    },
}
#: null is the least value: maximize keeps it only where no document held a value, minimize
#: wherever one held it (the Python fold's order of JSON values)
EXTREME_BATCHES = [
    {
        "a": {"k": "a", "top": None, "low": "m"},
        "b": {"k": "b", "top": 5},
        "c": {"k": "c"},
        "d": {"k": "d", "low": None},
    },
    {"a": {"k": "a", "top": 3}, "b": {"k": "b", "top": None, "low": None}, "c": {"k": "c", "top": None}},
    {"a": {"k": "a", "top": None, "low": "b"}, "b": {"k": "b", "low": "a"}, "d": {"k": "d", "low": "z"}},
]
EXTREME_VIEW = {
    "a": {"k": "a", "top": 3, "low": "b"},
    "b": {"k": "b", "top": 5, "low": None},
    "c": {"k": "c", "top": None},
    "d": {"k": "d", "low": None},
}


@pytest.mark.parametrize("document", ["lean", "full"])
def test_null_is_the_least_value_of_a_nullable_property_maximized_or_minimized(endpoint, document):
    view, got = reduced_in_endpoint(endpoint, EXTREMES, "extremes", document, EXTREME_BATCHES)
    assert view == EXTREME_VIEW
    assert "low" in got["b"] and got["b"]["low"] is None and "low" not in got["c"]
    table = by_key(endpoint, "extremes")
    assert [table[k]["top"] for k in "abcd"] == [3, 5, None, None]
    assert [table[k]["low"] for k in "abcd"] == ["b", None, None, None]
    if document == "lean":  # the remainder holds the nulls only
        assert [table[k]["flow_document"] for k in "abcd"] == [None, {"low": None}, {"top": None}, {"low": None}]


TIMES = {
    "type": "object",
    "reduce": {"strategy": "merge"},
    "required": ["k"],
    "properties": {
        "k": {"type": "string"},
        "last": {"type": ["string", "null"], "format": "date-time", "reduce": {"strategy": "maximize"}},
        "since": {"type": ["null", "string"], "format": "date-time", "reduce": {"strategy": "minimize"}},
    },
}
#: by instant (offsets applied, less than two seconds apart too, equal instants going to the
#: later document), null the least value
TIME_BATCHES = [
    {
        "a": {"k": "a", "last": None, "since": "2024-05-01T12:00:00+02:00"},
        "b": {"k": "b", "last": "2024-05-01T10:00:00.9Z"},
        "c": {"k": "c", "since": None},
        "d": {"k": "d", "last": "2016-12-31T23:59:60Z", "since": "2024-05-01T10:00:00Z"},
    },
    {
        "a": {"k": "a", "last": "2024-05-01T12:00:00.5+02:00", "since": "2024-05-01T10:00:00.000Z"},
        "b": {"k": "b", "last": "2024-05-01T12:00:01+02:00", "since": None},
        "c": {"k": "c", "last": None},
        "d": {"k": "d", "last": "2017-01-01T00:00:00Z", "since": "2024-05-01T09:59:59.5Z"},
    },
    {
        "a": {"k": "a", "last": None, "since": "2024-05-01T05:30:00-04:30"},
        "b": {"k": "b", "last": "2024-05-01T10:00:01.000Z", "since": "2024-05-01T10:00:00Z"},
        "c": {"k": "c", "last": "2024-05-01T10:00:00Z"},
        "d": {"k": "d", "last": "2016-12-31T23:59:59.999999Z"},
    },
]
TIME_VIEW = {
    "a": {"k": "a", "last": "2024-05-01T12:00:00.5+02:00", "since": "2024-05-01T05:30:00-04:30"},
    "b": {"k": "b", "last": "2024-05-01T10:00:01.000Z", "since": None},
    "c": {"k": "c", "since": None, "last": "2024-05-01T10:00:00Z"},
    "d": {"k": "d", "last": "2017-01-01T00:00:00Z", "since": "2024-05-01T09:59:59.5Z"},
}


@pytest.mark.parametrize("document", ["lean", "full"])
def test_a_nullable_date_time_maximized_or_minimized_is_reduced_by_its_instant(endpoint, document):
    """No Load: the statement keeps one side's instant, its text as written (the remainder's,
    in a lean row) and its ``null``."""
    view, got = reduced_in_endpoint(endpoint, TIMES, "times", document, TIME_BATCHES, every_other_typed=True)
    assert view == TIME_VIEW
    assert got["b"]["since"] is None and "since" in got["c"]
    if document == "lean":  # the remainder: the kept texts and the nulls, nothing else
        table = by_key(endpoint, "times")
        assert [table[k]["flow_document"] for k in "abcd"] == [
            {"last": "2024-05-01T12:00:00.5+02:00", "since": "2024-05-01T05:30:00-04:30"},
            {"last": "2024-05-01T10:00:01.000Z", "since": None},
            {"since": None},
            None,
        ]
