"""The lean row (PostgreSQL, SQLite): a new view's row is its document -- a column per
top-level property, ``flow_document`` only what no column holds -- read back as the whole
document on every path (dump, Load), equal to the Python fold; an older full table keeps
its form; a lean table refuses a binding that cannot be lean; a new property and a
widening on a lean view."""

from __future__ import annotations

import copy
import dataclasses
import json
import sqlite3
from types import SimpleNamespace

import psycopg
import pytest

from tests.support.driver_protocol import MAT, apply, cp
from tests.support.endpoint_reduce import (
    Endpoint,
    canonical,
    commit,
    commit_through_loads,
    events_schema,
    reduced_binding,
    rows,
    typed_rows,
)
from tests.support.mysql_support import mysql_db, mysql_url  # fixtures of the mysql endpoint
from tidemark.collection.collection import Collection
from tidemark.errors import IncompatibleSchema
from tidemark.protocol.messages import Acknowledge, Flush, Load, Open, Range, StartCommit, Store, StoreRows
from tidemark.runtime.reduce_path import reduce_paths
from tidemark.spec import CollectionSpec

SCHEMA = {
    "type": "object",
    "reduce": {"strategy": "merge"},
    "required": ["k", "n"],
    "properties": {
        "k": {"type": "string"},
        "n": {"type": "integer", "reduce": {"strategy": "sum"}},
        "top": {"type": "number", "reduce": {"strategy": "maximize"}},
        "city": {"type": "string"},
        "yes": {"type": "boolean", "reduce": {"strategy": "firstWriteWins"}},
        "tags": {"type": "array", "items": {"type": "string"}, "reduce": {"strategy": "append"}},
        "counts": {"type": "object", "additionalProperties": {"type": "integer"}, "reduce": {"strategy": "merge"}},
        "labels": {"type": "array", "items": {"type": "string"}, "reduce": {"strategy": "union"}},
    },
}
BATCHES = [
    [
        {"k": "a", "n": 1, "top": 2.5, "city": "Oslo", "tags": ["x"], "extra": {"deep": [1, None]}, "labels": ["x"]},
        {"k": "b", "n": 2, "yes": False, "counts": {"p": 1}, "labels": ["p", "q", "p"]},
        {"k": "a", "n": 3, "top": 1, "tags": ["y"], "counts": {"q": 2}},
    ],
    [
        {"k": "a", "n": 10, "city": "Lima", "yes": True, "extra": "now a string", "more": None},
        {"k": "b", "n": 5, "top": 7, "counts": {"p": 4, "r": 1}, "tags": [], "labels": ["r", "q", "é"]},
        {"k": "c", "n": 0},
    ],
]


@pytest.fixture(params=[pytest.param("postgres", marks=[pytest.mark.postgres]), "sqlite", "mysql"])
def endpoint(request, tmp_path):
    e = Endpoint(request.param, request, tmp_path)
    yield e
    e.driver.close()


@pytest.fixture(params=[pytest.param("postgres", marks=[pytest.mark.postgres]), "sqlite", "mysql"])
def typed_endpoint(request, tmp_path):
    """An endpoint that stages typed values (``StoreRows``)."""
    e = Endpoint(request.param, request, tmp_path)
    yield e
    e.driver.close()


def fold(coll, batches) -> dict:
    """The view as the Load path computes it: each batch combined per key, then reduced into the stored one."""
    view: dict = {}
    for docs in batches:
        combined: dict = {}
        for d in docs:
            combined[d["k"]] = coll.reduce(combined[d["k"]], d) if d["k"] in combined else copy.deepcopy(d)
        for k, d in combined.items():
            view[k] = coll.reduce(view[k], d) if k in view else d
    return view


def combined_of(coll, docs) -> dict:
    out: dict = {}
    for d in docs:
        out[d["k"]] = coll.reduce(out[d["k"]], d) if d["k"] in out else copy.deepcopy(d)
    return out


def same(view: dict, expected: dict) -> bool:
    return {k[0]: canonical(v) for k, v in view.items()} == {k: canonical(v) for k, v in expected.items()}


def test_a_new_view_is_lean_and_its_rows_are_the_documents(endpoint):
    driver = endpoint.driver
    coll, b = reduced_binding(driver, SCHEMA, "lean")
    apply(driver, b)
    for i, docs in enumerate(BATCHES):
        commit(driver, coll, b, combined_of(coll, docs), i, texts=i % 2 == 0)
    expected = fold(coll, BATCHES)
    assert same(driver.dump(MAT, b), expected)
    names, got = rows(endpoint, "lean")
    assert names == ["k", "n", "top", "city", "yes", "tags", "counts", "labels", "flow_document"]
    by_key = {r[0]: dict(zip(names, r)) for r in got}

    def js(v):
        return json.loads(v) if isinstance(v, str) else v

    # every property is in its column; flow_document holds only what no column holds
    assert by_key["a"]["n"] == 14 and by_key["a"]["city"] == "Lima" and js(by_key["a"]["tags"]) == ["x", "y"]
    assert js(by_key["a"]["flow_document"]) == {"extra": "now a string", "more": None}
    assert js(by_key["b"]["counts"]) == {"p": 4, "r": 1} and by_key["b"]["flow_document"] is None
    assert js(by_key["b"]["labels"]) == ["p", "q", "r", "é"]  # union: each once, in first-seen order
    assert by_key["c"]["top"] is None and by_key["c"]["tags"] is None and by_key["c"]["flow_document"] is None
    schema = "main" if endpoint.name == "sqlite" else endpoint.schema
    assert driver.row_forms([b]) == [
        f"table {schema}.lean: lean rows (a column per property; flow_document holds only what no column holds)"
    ]


def test_the_load_path_reads_and_writes_lean_rows(endpoint):
    """A lean view whose binding Loads (``endpoint_reduce: false``): Load rebuilds each
    document from its row, Store writes its properties into their columns."""
    driver = endpoint.driver
    coll, reduced = reduced_binding(driver, SCHEMA, "loads")
    b = dataclasses.replace(reduced, endpoint_reduce=False)
    apply(driver, b)
    view: dict = {}

    def rebuilt_from_rows(loaded: dict, stored: dict) -> None:
        assert same({(k,): d for k, d in loaded.items()}, stored)

    for i, docs in enumerate(BATCHES):
        commit_through_loads(driver, coll, b, combined_of(coll, docs), i, view, rebuilt_from_rows)
    assert same(driver.dump(MAT, b), fold(coll, BATCHES))
    names, got = rows(endpoint, "loads")
    assert "tags" in names and all(r[names.index("flow_document")] is None for r in got if r[0] != "a")


def test_document_full_keeps_the_whole_document_and_an_older_full_table_keeps_its_form(endpoint):
    driver = endpoint.driver
    coll, b = reduced_binding(driver, SCHEMA, "whole")
    full = dataclasses.replace(b, resource={"table": "whole", "document": "full"})
    apply(driver, full)
    commit(driver, coll, full, combined_of(coll, BATCHES[0]), 0)
    # the same binding without the option: the table keeps its form (a view made before the lean form)
    commit(driver, coll, b, combined_of(coll, BATCHES[1]), 1)
    assert same(driver.dump(MAT, b), fold(coll, BATCHES))
    names, got = rows(endpoint, "whole")
    assert "tags" not in names  # the full form: arrays and objects only in flow_document
    docs = {r[0]: r[-1] for r in got}
    assert all(d is not None for d in docs.values())
    assert "full documents in flow_document (the table was made so" in driver.row_forms([b])[0]


def loading_binding(driver, schema, table):
    """The collection of ``schema`` and its binding to ``table`` as the runtime sets it (here one the endpoint does not reduce)."""
    coll = Collection(CollectionSpec("orders", ("/k",), schema))
    spec = coll.binding_spec(SimpleNamespace(resource={"table": table}, delta_updates=False))
    (b,), [line] = reduce_paths([spec], [coll], driver.capabilities())
    assert not b.endpoint_reduce and "/note" in line, line
    return coll, b


def with_note(schema: dict) -> dict:
    out = copy.deepcopy(schema)
    out["properties"]["note"] = {"type": ["string", "integer"]}  # a union of types: no one column holds it
    return out


NOTES = [[dict(d, note=i if i % 2 else f"n{i}") for i, d in enumerate(batch)] for batch in BATCHES]


def test_a_property_that_does_not_compile_is_kept_whole_in_a_lean_rows_remainder(endpoint):
    """A property outside the compiled set has no column: the lean row keeps it in
    ``flow_document``, the other properties in their columns, and the binding Loads (the whole
    table took the full form before)."""
    driver = endpoint.driver
    coll, b = loading_binding(driver, with_note(SCHEMA), "noted")
    apply(driver, b)
    [form] = driver.row_forms([b])
    assert "lean rows" in form and "in flow_document only (/note: they do not compile)" in form, form
    view: dict = {}
    for i, batch in enumerate(NOTES):
        commit_through_loads(driver, coll, b, combined_of(coll, batch), i, view, lambda loaded, stored: None)
    assert same(driver.dump(MAT, b), fold(coll, NOTES))
    names, got = rows(endpoint, "noted")
    assert "note" not in names and "city" in names and "tags" in names
    rests = [json.loads(r[-1]) if isinstance(r[-1], (str, bytes)) else r[-1] for r in got]
    assert all("note" in rest and "city" not in rest for rest in rests)


def test_a_lean_table_keeps_its_columns_when_a_property_stops_compiling(endpoint):
    """A property added outside the compiled set joins the remainder (the binding Loads from
    then on); a property that has a column and stops compiling is refused by Apply and Open,
    naming it: the rows hold it in the column."""
    driver = endpoint.driver
    coll, b = reduced_binding(driver, SCHEMA, "strict")
    apply(driver, b)
    commit(driver, coll, b, combined_of(coll, BATCHES[0]), 0)
    coll_later, later = loading_binding(driver, with_note(SCHEMA), "strict")
    fresh = type(driver)(driver.config)
    try:
        apply(fresh, later)
        view = fold(coll, BATCHES[:1])
        commit_through_loads(fresh, coll_later, later, combined_of(coll_later, NOTES[1]), 1, view, lambda *_: None)
        assert same(fresh.dump(MAT, later), fold(coll_later, [BATCHES[0], NOTES[1]]))
    finally:
        fresh.close()
    worse = with_note(SCHEMA)
    worse["properties"]["city"] = {"type": ["string", "integer"]}
    _, changed = loading_binding(driver, worse, "strict")
    for call in (lambda d: apply(d, changed), lambda d: d.open(Open(MAT, "v1", Range(), bindings=(changed,)))):
        fresh = type(driver)(driver.config)
        try:
            with pytest.raises(IncompatibleSchema, match=r"holds lean rows, with a column for /city, which"):
                call(fresh)
        finally:
            fresh.close()
    assert same(driver.dump(MAT, b), fold(coll_later, [BATCHES[0], NOTES[1]]))  # nothing was changed


@pytest.mark.postgres
def test_a_new_property_and_a_widening_on_a_lean_view(postgres_url, pg_schema, request, tmp_path):
    """A property added to the schema becomes a column (older rows NULL there); ``integer``
    widened to ``number`` converts the column in place; every document stays the fold's."""
    endpoint = Endpoint("postgres", request, tmp_path)
    driver = endpoint.driver
    try:
        coll, b = reduced_binding(driver, SCHEMA, "grows")
        apply(driver, b)
        commit(driver, coll, b, combined_of(coll, BATCHES[0]), 0)
        schema = copy.deepcopy(SCHEMA)
        schema["properties"]["n"]["type"] = "number"
        schema["properties"]["score"] = {"type": "integer", "reduce": {"strategy": "sum"}}
        wider = type(driver)(driver.config)
        coll2, b2 = reduced_binding(wider, schema, "grows")
        applied = apply(wider, b2)
        assert "add column score" in applied.action_description
        assert "change column n of" in applied.action_description
        later = [dict(d, score=2, n=d["n"] + 0.5) for d in BATCHES[1]]
        commit(wider, coll2, b2, combined_of(coll2, later), 1)
        assert same(wider.dump(MAT, b2), fold(coll2, [BATCHES[0], later]))
        names, _ = rows(endpoint, "grows")
        assert names[-1] == "score"
        wider.close()
    finally:
        driver.close()


def test_typed_rows_are_staged_as_they_are_and_reduce_as_the_texts(typed_endpoint):
    """``StoreRows`` (typed values, as the typed combine sends them) and the JSON texts give
    the same view, batch after batch, mixed across transactions; a sum past 64 bits is named."""
    driver = typed_endpoint.driver
    try:
        schema = copy.deepcopy(SCHEMA)
        coll, b = reduced_binding(driver, schema, "typed")
        apply(driver, b)
        assert driver.typed_rows([b]) == [True]
        batches = [[{k: v for k, v in d.items() if k not in ("extra", "more")} for d in docs] for docs in BATCHES]
        batches.append([{"k": "a", "n": 1, "city": 'say "hi", then\nleave', "tags": ["", "q"]}, {"k": "d", "n": 7}])
        for i, docs in enumerate(batches):
            combined = combined_of(coll, docs)
            if i % 2 == 1:
                commit(driver, coll, b, combined, i)
                continue
            t, _ = driver.open(Open(MAT, "v1", Range(), bindings=(b,)))
            try:
                t.acknowledge(Acknowledge())
                t.flush(Flush())
                keys = sorted(combined)
                n = len(keys)
                rows_ = typed_rows(t.models[0], combined, keys)
                for j in range(0, n, 2):  # two rows per Store: several Stores of one binding
                    part = keys[j : j + 2]
                    t.store(StoreRows(0, tuple((k,) for k in part), rows_.slice(j, len(part))))
                t.start_commit(StartCommit(cp(i)))
            finally:
                t.close()
        assert same(driver.dump(MAT, b), fold(coll, batches))
        # a sum past 64 bits: the key and the property named, nothing committed
        t, _ = driver.open(Open(MAT, "v1", Range(), bindings=(b,)))
        try:
            t.acknowledge(Acknowledge())
            big = {"a": {"k": "a", "n": 2**63 - 1}}
            t.store(StoreRows(0, (("a",),), typed_rows(t.models[0], big, ["a"])))
            with pytest.raises(Exception, match=r"key \['a'\]: /n: 'sum' overflowed"):
                t.start_commit(StartCommit(cp(len(batches))))
        finally:
            t.close()
        assert same(driver.dump(MAT, b), fold(coll, batches))
    finally:
        driver.close()


@pytest.mark.postgres
def test_a_zombie_sessions_typed_rows_are_fenced_off_after_a_newer_open(postgres_url, pg_schema, request, tmp_path):
    """An older session stages typed rows; a newer session opens the range and commits; the
    older one's statement never runs (FencedOff), and the view holds the newer batch only."""
    from tidemark.errors import FencedOff

    endpoint = Endpoint("postgres", request, tmp_path)
    driver = endpoint.driver
    try:
        coll, b = reduced_binding(driver, SCHEMA, "zombie")
        apply(driver, b)
        combined = combined_of(coll, [{"k": "a", "n": 5}, {"k": "z", "n": 1}])
        old, _ = driver.open(Open(MAT, "v1", Range(), bindings=(b,)))
        old.acknowledge(Acknowledge())
        old.flush(Flush())
        keys = sorted(combined)
        old.store(StoreRows(0, tuple((k,) for k in keys), typed_rows(old.models[0], combined, keys)))
        commit(driver, coll, b, {"a": {"k": "a", "n": 1}}, 0)  # a retried task: a newer session commits
        with pytest.raises(FencedOff):
            old.start_commit(StartCommit(cp(0)))
        old.close()
        assert same(driver.dump(MAT, b), {"a": {"k": "a", "n": 1}})
    finally:
        driver.close()


@pytest.mark.postgres
def test_a_nul_in_typed_rows_is_named_by_key_and_property(postgres_url, pg_schema, request, tmp_path):
    from tidemark.errors import DriverError

    endpoint = Endpoint("postgres", request, tmp_path)
    driver = endpoint.driver
    try:
        coll, b = reduced_binding(driver, SCHEMA, "nul")
        apply(driver, b)
        combined = {"a": {"k": "a", "n": 1, "city": "ok"}, "b": {"k": "b", "n": 2, "city": "x\x00y"}}
        t, _ = driver.open(Open(MAT, "v1", Range(), bindings=(b,)))
        try:
            t.acknowledge(Acknowledge())
            with pytest.raises(DriverError, match=r"key \['b'\] \(at /city\) holds U\+0000"):
                t.store(StoreRows(0, (("a",), ("b",)), typed_rows(t.models[0], combined, ["a", "b"])))
        finally:
            t.close()
        assert driver.dump(MAT, b) == {}
    finally:
        driver.close()


EVENTS = events_schema("k")


@pytest.mark.postgres
def test_a_lean_date_time_is_its_instant_and_the_remainder_keeps_only_other_spellings(
    postgres_url, pg_schema, request, tmp_path
):
    """PostgreSQL: a date-time is a timestamptz column; where the document spells it as its
    instant gives it back (UTC, Z, no trailing zeros) nothing else is kept, otherwise the
    remainder keeps the text; reduced as instants, every document is the fold's."""
    endpoint = Endpoint("postgres", request, tmp_path)
    driver = endpoint.driver
    batches = [
        [
            {"k": "a", "at": "2024-05-01T12:00:00Z", "first": "2024-05-01T12:00:00Z", "status": "new"},
            {"k": "b", "at": "2024-05-01T17:30:00.500+05:30", "first": "2024-05-01T17:30:00.500+05:30", "status": "x"},
        ],
        [
            {"k": "a", "at": "2024-05-01T13:00:00.25Z", "first": "2024-05-01T08:00:00-04:00", "status": "paid"},
            {"k": "b", "at": "2024-05-01T12:00:01Z", "first": "2024-05-01T12:00:01Z", "status": "y"},
        ],
    ]
    try:
        coll, b = reduced_binding(driver, EVENTS, "events")
        apply(driver, b)
        assert "lean rows" in driver.row_forms([b])[0]
        for i, docs in enumerate(batches):
            commit(driver, coll, b, combined_of(coll, docs), i, texts=True)
        assert same(driver.dump(MAT, b), fold(coll, batches))
        names, got = rows(endpoint, "events")
        by_key = {r[0]: dict(zip(names, r)) for r in got}
        # a: at 13:00:00.25Z (its instant's text), first 08:00-04:00 (another spelling: kept)
        assert by_key["a"]["at"].isoformat() == "2024-05-01T13:00:00.250000+00:00"
        assert by_key["a"]["flow_document"] == {"first": "2024-05-01T08:00:00-04:00"}
        # b: at 12:00:01Z beats 12:00:00.5Z; first keeps the +05:30 text
        assert by_key["b"]["status"] == "y" and by_key["b"]["flow_document"] == {
            "first": "2024-05-01T17:30:00.500+05:30"
        }
    finally:
        driver.close()


@pytest.mark.postgres
def test_a_leap_second_with_a_fraction_is_read_on_every_path(postgres_url, pg_schema, request, tmp_path):
    """PostgreSQL refuses ``23:59:60.5`` as a timestamptz: the column holds the instant ``micros``
    gives it (the next minute's first half second) and the remainder its text, through the
    texts, typed rows, documents with their values and the Load path; the view is the fold's."""
    endpoint = Endpoint("postgres", request, tmp_path)
    driver = endpoint.driver
    leap = "2016-12-31T23:59:60.5Z"
    batches = [
        [{"k": "a", "at": leap, "first": leap, "status": "leap"}],
        [
            {"k": "a", "at": "2016-12-31T23:59:59.9Z", "first": "2016-12-31T23:59:59.9Z", "status": "before"},
            {"k": "b", "at": leap, "status": "x"},
        ],
        [{"k": "b", "at": "2017-01-01T00:00:00.2Z", "first": leap, "status": "after"}],
    ]
    try:
        coll, b = reduced_binding(driver, EVENTS, "leaps")
        apply(driver, b)
        for i, docs in enumerate(batches):  # texts, typed rows, documents with their values
            commit(driver, coll, b, combined_of(coll, docs), i, texts=i == 0, typed=i == 1)
        expected = fold(coll, batches)
        assert same(driver.dump(MAT, b), expected)
        assert expected["a"]["at"] == leap and expected["a"]["status"] == "leap"  # a leap second follows :59.9
        names, got = rows(endpoint, "leaps")
        by_key = {r[0]: dict(zip(names, r)) for r in got}
        assert by_key["a"]["at"].isoformat() == "2017-01-01T00:00:00.500000+00:00"
        assert by_key["a"]["flow_document"] == {"at": leap}
        # the Load path writes the same row
        _, loads = reduced_binding(driver, EVENTS, "leaps_loaded")
        loads = dataclasses.replace(loads, endpoint_reduce=False)
        apply(driver, loads)
        view: dict = {}
        for i, docs in enumerate(batches):
            commit_through_loads(driver, coll, loads, combined_of(coll, docs), i, view, lambda loaded, stored: None)
        assert same(driver.dump(MAT, loads), expected)
        names, got = rows(endpoint, "leaps_loaded")
        assert {r[0]: dict(zip(names, r)) for r in got}["a"]["at"].isoformat() == "2017-01-01T00:00:00.500000+00:00"
    finally:
        driver.close()


BIG = {
    "type": "object",
    "reduce": {"strategy": "merge"},
    "required": ["k"],
    "properties": {"k": {"type": "string"}, "n": {"type": "integer"}, "x": {"type": "number"}},
}


def test_a_number_its_column_cannot_hold_stays_in_the_remainder(endpoint):
    """An integer beyond 64 bits (beyond 2^53 in a ``number`` column) in a lean view whose
    binding Loads: its column NULL, the remainder keeping the number, read back as it was (it
    failed the batch before: SQLite's driver raised OverflowError)."""
    driver = endpoint.driver
    coll, reduced = reduced_binding(driver, BIG, "big")
    b = dataclasses.replace(reduced, endpoint_reduce=False)
    apply(driver, b)
    docs = {"a": {"k": "a", "n": 2**64, "x": 2**60 + 1}, "b": {"k": "b", "n": -(2**63), "x": 0.5}}
    commit_through_loads(driver, coll, b, docs, 0, {}, lambda loaded, stored: None)
    assert same(driver.dump(MAT, b), docs)
    names, got = rows(endpoint, "big")
    row = {r[0]: dict(zip(names, r)) for r in got}["a"]
    assert row["n"] is None and row["x"] is None
    rest = row["flow_document"]
    assert (json.loads(rest) if isinstance(rest, (str, bytes)) else rest) == {"n": 2**64, "x": 2**60 + 1}
    later = {"a": {"k": "a", "n": 7, "x": 1.5}}  # a later value in the column: the remainder has none left
    commit_through_loads(driver, coll, b, later, 1, {}, lambda loaded, stored: None)
    assert same(driver.dump(MAT, b), {**docs, **later})


@pytest.mark.parametrize("texts", [True, False])
def test_a_number_a_reduced_lean_views_column_cannot_hold_is_refused_by_key(endpoint, texts):
    """The endpoint reduces a lean view in its columns: a number beyond them fails the batch
    naming the key and the property, nothing committed (SQLite read it as a double, rounded)."""
    from tidemark.errors import DriverError

    driver = endpoint.driver
    coll, b = reduced_binding(driver, BIG, "big_reduced")
    assert b.endpoint_reduce
    apply(driver, b)
    commit(driver, coll, b, {"b": {"k": "b", "n": 2**63 - 1, "x": 2**53}}, 0, texts=texts)  # held exactly
    for doc, name in (({"k": "a", "n": 2**64}, "n"), ({"k": "a", "x": 2**53 + 1}, "x")):
        with pytest.raises(DriverError, match=rf"key \['a'\]: /{name}: {doc[name]} is beyond what the view's"):
            commit(driver, coll, b, {"a": doc}, 1, texts=texts)
    assert same(driver.dump(MAT, b), {"b": {"k": "b", "n": 2**63 - 1, "x": 2**53}})


def test_a_full_views_document_keeps_a_number_its_column_rounds(endpoint):
    """A full view's ``number`` column holds an integer beyond 2^53 as its nearest double; the
    dump reads the document's number, not the column's rounding (it gave 1.152921504606847e+18)."""
    driver = endpoint.driver
    coll, b = reduced_binding(driver, BIG, "big_full", document="full")
    apply(driver, b)
    docs = {"a": {"k": "a", "n": 2**63 - 1, "x": 2**60 + 1}}
    commit(driver, coll, b, docs, 0)
    assert same(driver.dump(MAT, b), docs)
    later = {"a": {"k": "a", "x": 2**60 + 3}}
    commit(driver, coll, b, later, 1)
    assert same(driver.dump(MAT, b), {"a": {"k": "a", "n": 2**63 - 1, "x": 2**60 + 3}})
