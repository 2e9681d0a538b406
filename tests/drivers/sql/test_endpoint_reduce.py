"""Reduce in the endpoint (PostgreSQL, SQLite, MariaDB): the document and the columns one
statement writes equal what the Python fold gives, for generated schemas and documents, in
the lean and the full form (nullable properties: ``null``, a value or absent; objects of
declared members, each reduced by its own strategy); refusals name the key and the rule.

The answer is computed as the Load path computes it — each batch's documents combined per
key, then reduced into the key's stored document — with :meth:`Collection.reduce`, and
compared after canonical JSON (numbers by the decimal their shortest text denotes, booleans
apart from numbers, object members in any order: jsonb prints 5.8e16 as 58000000000000000).
"""

from __future__ import annotations

import dataclasses
import json
from types import SimpleNamespace

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.support.driver_protocol import MAT, apply, cp
from tests.support.endpoint_reduce import Endpoint, canonical, commit, reduced_binding
from tests.support.mysql_support import mysql_db, mysql_url
from tidemark.collection.collection import Collection
from tidemark.collection.decimals import exact_sum
from tidemark.drivers.mysql.bulk import to_utc
from tidemark.errors import DriverError, ReductionError
from tidemark.protocol.messages import Acknowledge, Flush, Open, Range, StartCommit, Store, StoreTexts
from tidemark.runtime.reduce_path import reduce_paths
from tidemark.spec import CollectionSpec

ENDPOINTS = ["postgres", "sqlite", "mysql"]

TEXT = st.text(st.characters(blacklist_categories=("Cs",), blacklist_characters="\x00"), max_size=4)
SMALL_INT = st.integers(-(2**40), 2**40)
FLOAT = st.floats(-1e12, 1e12, allow_nan=False)
ANY_FLOAT = st.floats(allow_nan=False, allow_infinity=False)  # extreme exponents: exact texts and parses
SCALAR = st.one_of(st.none(), st.booleans(), SMALL_INT, ANY_FLOAT, TEXT)
DATE_TIME = st.sampled_from(["2024-05-01T12:00:00Z", "2024-05-01T12:00:00+02:00", "2023-01-31T23:59:59.5Z"])
#: date-times compared as instants: equal instants written differently, lowercase t/z, a leap
#: second, fractions of several lengths, an offset that crosses the day, a small year
INSTANT = st.sampled_from(
    [
        "2024-05-01T10:00:00Z",
        "2024-05-01t12:00:00+02:00",
        "2024-05-01T10:00:00.000z",
        "2024-04-30T23:30:00-10:30",
        "2016-12-31T23:59:60Z",
        "2016-12-31T23:59:60.5Z",
        "2016-12-31T23:59:59.999999999Z",
        "2017-01-01T00:00:00.5+00:00",
        "2017-01-01T00:00:00.50Z",
        "2017-01-01T00:00:00.123456Z",
        "0001-01-01T00:00:00Z",
    ]
)

#: name -> (schema, values): every shape and strategy with a SQL form
POOL = {
    "n": ({"type": "integer", "reduce": {"strategy": "sum"}}, SMALL_INT),
    "x": ({"type": "number", "reduce": {"strategy": "sum"}}, FLOAT),
    "lo": ({"type": "number", "reduce": {"strategy": "minimize"}}, st.one_of(ANY_FLOAT, SMALL_INT)),
    "hi": ({"type": "string", "reduce": {"strategy": "maximize"}}, TEXT),
    "top": ({"type": "integer", "reduce": {"strategy": "maximize"}}, SMALL_INT),
    "yes": ({"type": "boolean", "reduce": {"strategy": "minimize"}}, st.booleans()),
    "first": ({"type": "string", "reduce": {"strategy": "firstWriteWins"}}, TEXT),
    "first_n": ({"type": "integer", "reduce": {"strategy": "firstWriteWins"}}, SMALL_INT),
    "last": ({"type": "boolean"}, st.booleans()),
    "seen": ({"type": "string", "format": "date-time"}, DATE_TIME),
    "since": ({"type": "string", "format": "date-time", "reduce": {"strategy": "firstWriteWins"}}, DATE_TIME),
    "until": ({"type": "string", "format": "date-time", "reduce": {"strategy": "maximize"}}, INSTANT),
    "opened": ({"type": "string", "format": "date-time", "reduce": {"strategy": "minimize"}}, INSTANT),
    "tags": (
        {"type": "array", "items": {"type": "string"}, "reduce": {"strategy": "append"}},
        st.lists(TEXT, max_size=3),
    ),
    "uniq": (
        {"type": "array", "items": {"type": "string"}, "reduce": {"strategy": "union"}},
        st.lists(st.sampled_from(["a", "b", "ключ", 'q"'] + ["c"]), max_size=4),
    ),
    "ids": (
        {"type": "array", "items": {"type": "integer"}, "reduce": {"strategy": "union"}},
        st.lists(st.integers(-2, 3), max_size=4),
    ),
    "counts": (
        {"type": "object", "additionalProperties": {"type": "integer"}, "reduce": {"strategy": "merge"}},
        st.dictionaries(TEXT, SMALL_INT, max_size=3),
    ),
    "blob": ({"type": "object", "reduce": {"strategy": "firstWriteWins"}}, st.dictionaries(TEXT, SCALAR, max_size=3)),
    "raw": ({"type": "array"}, st.lists(SCALAR, max_size=3)),
    "cents": (
        {"type": "number", "multipleOf": 0.01, "reduce": {"strategy": "sum"}},
        st.one_of(st.integers(-(10**9), 10**9).map(lambda i: i / 100), st.integers(-1000, 1000)),
    ),
    # nullable properties: null is a value like any other, apart from absent
    "note": ({"type": ["string", "null"]}, st.one_of(st.none(), TEXT)),
    "maybe_n": (
        {"type": ["integer", "null"], "reduce": {"strategy": "firstWriteWins"}},
        st.one_of(st.none(), SMALL_INT),
    ),
    "maybe_x": ({"type": ["null", "number"], "reduce": {"strategy": "lastWriteWins"}}, st.one_of(st.none(), FLOAT)),
    "maybe_yes": (
        {"type": ["boolean", "null"], "reduce": {"strategy": "firstWriteWins"}},
        st.one_of(st.none(), st.booleans()),
    ),
    "maybe_top": (  # null the least value: kept only where no document held a value
        {"type": ["integer", "null"], "reduce": {"strategy": "maximize"}},
        st.one_of(st.none(), SMALL_INT),
    ),
    "maybe_lo": (  # ... kept wherever a document held it
        {"type": ["null", "string"], "reduce": {"strategy": "minimize"}},
        st.one_of(st.none(), TEXT),
    ),
    "maybe_peak": ({"type": ["number", "null"], "reduce": {"strategy": "maximize"}}, st.one_of(st.none(), FLOAT)),
    "seen_at": ({"type": ["string", "null"], "format": "date-time"}, st.one_of(st.none(), INSTANT)),
    "maybe_until": (  # by instant, null the least value
        {"type": ["string", "null"], "format": "date-time", "reduce": {"strategy": "maximize"}},
        st.one_of(st.none(), INSTANT),
    ),
    "maybe_since": (
        {"type": ["null", "string"], "format": "date-time", "reduce": {"strategy": "minimize"}},
        st.one_of(st.none(), INSTANT),
    ),
    "first_at": (
        {"type": ["string", "null"], "format": "date-time", "reduce": {"strategy": "firstWriteWins"}},
        st.one_of(st.none(), INSTANT),
    ),
    # arrays of scalars picked whole, nullable arrays and objects picked whole (a CDC stream's shapes)
    "words": ({"type": "array", "items": {"type": "string"}}, st.lists(TEXT, max_size=3)),
    "maybe_ids": (
        {"type": ["array", "null"], "items": {"type": "integer"}, "reduce": {"strategy": "firstWriteWins"}},
        st.one_of(st.none(), st.lists(SMALL_INT, max_size=3)),
    ),
    "context": (
        {"type": ["object", "null"]},
        st.one_of(st.none(), st.dictionaries(st.sampled_from(["ip", "n"]), st.one_of(TEXT, SMALL_INT), max_size=2)),
    ),
    "maybe_list": ({"type": ["null", "array"]}, st.one_of(st.none(), st.lists(st.one_of(TEXT, SMALL_INT), max_size=2))),
    "addr": (  # (a map) and members the schema does not declare: an object replaced whole, a null kept
        {
            "type": "object",
            "reduce": {"strategy": "merge"},
            "properties": {"city": {"type": "string"}, "zip": {"type": "string"}},
        },
        st.fixed_dictionaries(
            {},
            optional={
                "city": TEXT,
                "zip": TEXT,
                "geo": st.one_of(st.none(), st.dictionaries(st.sampled_from(["lat", "lon"]), SMALL_INT, max_size=2)),
            },
        ),
    ),
    # an object of declared members of several types, each last written
    "place": (
        {
            "type": "object",
            "reduce": {"strategy": "merge"},
            "properties": {"city": {"type": "string"}, "floor": {"type": "integer"}, "lift": {"type": "boolean"}},
        },
        st.fixed_dictionaries({}, optional={"city": TEXT, "floor": SMALL_INT, "lift": st.booleans()}),
    ),
    # an object of declared members of several types, each reduced by a strategy of its own,
    # and a member the schema does not declare (last written, whole: an object or null too)
    "tally": (
        {
            "type": "object",
            "reduce": {"strategy": "merge"},
            "properties": {
                "hits": {"type": "integer", "reduce": {"strategy": "sum"}},
                "spent": {"type": "number", "reduce": {"strategy": "sum"}},
                "peak": {"type": "number", "reduce": {"strategy": "maximize"}},
                "best": {"type": "integer", "reduce": {"strategy": "maximize"}},
                "least": {"type": "string", "reduce": {"strategy": "minimize"}},
                "ok": {"type": "boolean", "reduce": {"strategy": "minimize"}},
                "origin": {"type": "string", "reduce": {"strategy": "firstWriteWins"}},
                "since": {"type": "integer", "reduce": {"strategy": "firstWriteWins"}},
                "said": {"type": "string"},
            },
        },
        st.fixed_dictionaries(
            {},
            optional={
                "hits": SMALL_INT,
                "spent": FLOAT,
                "peak": st.one_of(ANY_FLOAT, SMALL_INT),
                "best": SMALL_INT,
                "least": TEXT,
                "ok": st.booleans(),
                "origin": TEXT,
                "since": SMALL_INT,
                "said": TEXT,
                "more": st.one_of(SCALAR, st.dictionaries(TEXT, SCALAR, max_size=2)),
            },
        ),
    ),
    # members carried as written, last written: nullable, an object and arrays picked whole
    "who": (
        {
            "type": "object",
            "reduce": {"strategy": "merge"},
            "properties": {
                "email": {"type": ["string", "null"]},
                "geo": {"type": "object"},
                "tags": {"type": "array", "items": {"type": "string"}},
                "n": {"type": "integer", "reduce": {"strategy": "sum"}},
                "home": {"type": "object", "properties": {"city": {"type": "string"}}},
            },
        },
        st.fixed_dictionaries(
            {},
            optional={
                "email": st.one_of(st.none(), TEXT),
                "geo": st.dictionaries(st.sampled_from(["lat", "lon"]), st.one_of(st.none(), SMALL_INT), max_size=2),
                "tags": st.lists(TEXT, max_size=2),
                "n": SMALL_INT,
                "home": st.fixed_dictionaries({}, optional={"city": TEXT, "zip": st.one_of(st.none(), TEXT)}),
            },
        ),
    ),
    # a real event's nested payment: exact decimals summed and maximized, date-times last written,
    # maximized and minimized
    "pay": (
        {
            "type": "object",
            "reduce": {"strategy": "merge"},
            "properties": {
                "amount": {"type": "number", "multipleOf": 0.01, "reduce": {"strategy": "sum"}},
                "fee": {"type": "number", "multipleOf": 0.01, "reduce": {"strategy": "maximize"}},
                "low": {"type": "number", "multipleOf": 0.001, "reduce": {"strategy": "minimize"}},
                "at": {"type": "string", "format": "date-time"},
                "settled": {"type": "string", "format": "date-time", "reduce": {"strategy": "maximize"}},
                "opened": {"type": "string", "format": "date-time", "reduce": {"strategy": "minimize"}},
            },
        },
        st.fixed_dictionaries(
            {},
            optional={
                "amount": st.one_of(st.integers(-(10**9), 10**9).map(lambda i: i / 100), st.integers(-1000, 1000)),
                "fee": st.one_of(st.integers(-999, 999).map(lambda i: i / 100), st.integers(-9, 9)),
                "low": st.integers(-9999, 9999).map(lambda i: i / 1000),
                "at": DATE_TIME,
                "settled": INSTANT,  # by instant, as written
                "opened": INSTANT,
            },
        ),
    ),
}
KEYS = ["a", "b", "c", "d"]
#: event-time orders: (order property, its schema and values, the ordered property, its schema
#: and values); both required (what the spec asks of a property's order); few order values, so ties
ORDERED = [
    (
        "at",
        ({"type": "integer", "reduce": {"strategy": "maximize"}}, st.integers(0, 3)),
        "state",
        ({"type": "string", "reduce": {"strategy": "lastWriteWins", "order": "/at"}}, TEXT),
    ),
    (
        "ver",
        ({"type": "string", "reduce": {"strategy": "minimize"}}, st.sampled_from(["a", "B", "é", "b", "ab"])),
        "origin",
        ({"type": "integer", "reduce": {"strategy": "firstWriteWins", "order": "/ver"}}, SMALL_INT),
    ),
    (
        "when",
        ({"type": "string", "format": "date-time", "reduce": {"strategy": "maximize"}}, INSTANT),
        "mood",
        ({"type": "string", "reduce": {"strategy": "lastWriteWins", "order": "/when"}}, TEXT),
    ),
]


@st.composite
def cases(draw, every: bool = False):
    """(schema, batches of documents, full form?): some of :data:`POOL` (``every``: all of it,
    and every event-time order) with some required, in batches."""
    names = (  # every: all but the exact decimals (SQLite's rows are then lean: its longest statement)
        [n for n in sorted(POOL) if "multipleOf" not in str(POOL[n][0])]
        if every
        else draw(st.lists(st.sampled_from(sorted(POOL)), min_size=1, max_size=len(POOL), unique=True))
    )
    root = draw(st.sampled_from(["merge", "merge", "merge", "lastWriteWins", "firstWriteWins"]))
    required = draw(st.lists(st.sampled_from(names), unique=True))  # present in every document
    schema = {
        "type": "object",
        "reduce": {"strategy": root},
        "required": ["k", *required],
        "properties": {"k": {"type": "string"}, **{n: POOL[n][0] for n in names}},
    }
    pool = dict(POOL)
    orders = range(len(ORDERED)) if every else draw(st.lists(st.sampled_from(range(len(ORDERED))), unique=True))
    for i in orders:
        by, by_pair, name, pair = ORDERED[i]
        pool.update({by: by_pair, name: pair})
        schema["properties"].update({by: by_pair[0], name: pair[0]})
        schema["required"] += [by, name]
        required += [by, name]
    values = {n: pool[n][1] for n in names if n not in required}
    values["other"] = SCALAR  # a property the schema does not declare: last write wins
    doc = st.fixed_dictionaries({"k": st.sampled_from(KEYS), **{n: pool[n][1] for n in required}}, optional=values)
    batches = draw(st.lists(st.lists(doc, min_size=1, max_size=5), min_size=1, max_size=3))
    full = draw(st.sampled_from([False, False, True]))  # resource document: full (else a new view's default)
    return schema, batches, full


@pytest.fixture(params=[pytest.param(e, marks=[pytest.mark.postgres] if e == "postgres" else []) for e in ENDPOINTS])
def endpoint(request, tmp_path):
    e = Endpoint(request.param, request, tmp_path)
    yield e
    e.driver.close()


@pytest.fixture
def driver(endpoint):
    return endpoint.driver


counter = iter(range(10**6))


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(case=cases())
def test_the_statement_reduces_as_the_python_fold(endpoint, case):
    check_statement(endpoint, case)


@settings(max_examples=6, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(case=cases(every=True))
def test_a_view_of_every_shape_at_once_reduces_in_one_statement(endpoint, case):
    """Every shape and strategy in one schema (but exact decimals: in SQLite the lean form):
    one statement still reduces it (SQLite's parser once overflowed its stack on the lean
    remainder's member patches, nested one per member)."""
    check_statement(endpoint, case)


def check_statement(endpoint, case) -> None:
    """The view of ``case``'s batches, committed through the endpoint's reducing statement,
    equals the Python fold's, and so do its columns."""
    driver = endpoint.driver
    schema, batches, full = case
    number = next(counter)
    table = f"v{number}"
    coll, b = reduced_binding(driver, schema, table, "full" if full else None)
    apply(driver, b)
    # a new view is lean where the row can hold each document: no exact decimal in SQLite (a
    # REAL); a date-time is its instant's column, the remainder keeping other spellings
    lean = not full and (endpoint.name != "sqlite" or not any("multipleOf" in p for p in schema["properties"].values()))
    assert [" lean rows " in line for line in driver.row_forms([b])] == [lean]
    expected: dict = {}
    # the typed combine's rows: with their remainders, or where there is none (no undeclared property)
    undeclared = any(set(d) - set(schema["properties"]) for docs in batches for d in docs)
    typed = driver.typed_rows([b]) == [True] and (driver.typed_remainder() or not undeclared)
    for batch, docs in enumerate(batches):
        combined: dict = {}
        for d in docs:
            combined[d["k"]] = coll.reduce(combined[d["k"]], d) if d["k"] in combined else d
        # texts, or docs + values; typed rows in every other batch (the first, or the second)
        commit(driver, coll, b, combined, batch, texts=batch % 2 == 0, typed=typed and batch % 2 == number % 2)
        for k, d in combined.items():
            expected[k] = coll.reduce(expected[k], d) if k in expected else d
    view = driver.dump(MAT, b)
    assert {k[0]: canonical(v) for k, v in view.items()} == {k: canonical(v) for k, v in expected.items()}
    # the columns hold the reduced values too
    mysql = endpoint.name == "mysql"  # date-time columns hold naive UTC datetimes there: compared too
    names = [f.name for f in b.value_fields if mysql or f.format != "date-time"]
    if names:
        types = {f.name: f.type for f in b.value_fields}
        times = {f.name for f in b.value_fields if f.format == "date-time"}

        def column(n, v):
            return to_utc(v) if n in times and v is not None else canonical(v)

        assert endpoint.columns(table, names, types) == {
            k: [column(n, d.get(n)) for n in names] for k, d in expected.items()
        }


SUMS = {
    "type": "object",
    "reduce": {"strategy": "merge"},
    "required": ["k"],
    "properties": {
        "k": {"type": "string"},
        "n": {"type": "integer", "reduce": {"strategy": "sum"}},
        "x": {"type": "number", "reduce": {"strategy": "sum"}},
    },
}


@pytest.mark.parametrize(
    "field,left,right,what",
    [
        ("n", 2**62, 2**62, "is beyond a 64-bit integer"),
        ("x", 1.5e308, 1.5e308, "is not a finite number"),
    ],
)
def test_a_sum_beyond_its_type_names_the_key_and_commits_nothing(driver, field, left, right, what):
    coll, b = reduced_binding(driver, SUMS, "sums")
    apply(driver, b)
    commit(driver, coll, b, {"a": {"k": "a", field: left}, "b": {"k": "b", field: 1}}, 0)
    with pytest.raises(DriverError) as err:
        commit(driver, coll, b, {"a": {"k": "a", field: right}, "b": {"k": "b", field: 1}}, 1)
    assert f"key ['a']: /{field}: 'sum' overflowed: the result {what}" in str(err.value)
    view = driver.dump(MAT, b)  # jsonb prints 1.5e308 in full: compare exact values
    assert {k: canonical(v) for k, v in view.items()} == {
        ("a",): canonical({"k": "a", field: left}),
        ("b",): canonical({"k": "b", field: 1}),
    }
    [row] = driver.checkpoints(MAT)
    assert row.runtime_checkpoint == cp(0)


CENTS = {
    "type": "object",
    "reduce": {"strategy": "merge"},
    "required": ["k"],
    "properties": {"k": {"type": "string"}, "c": {"type": "number", "multipleOf": 0.01, "reduce": {"strategy": "sum"}}},
}


@pytest.mark.parametrize("left,right", [(9e12, 9e12 + 0.25), (9 * 10**12, 9 * 10**12)])
def test_a_sum_of_exact_decimals_past_15_digits_is_refused_as_the_python_fold_refuses_it(endpoint, left, right):
    """Every SQL endpoint sums exact decimals itself (rounded to the places, refused past 15
    significant digits, whole numbers or not)."""
    driver = endpoint.driver
    coll = Collection(CollectionSpec("orders", ("/k",), CENTS))
    spec = coll.binding_spec(SimpleNamespace(resource={"table": "cents"}, delta_updates=False))
    (b,), _ = reduce_paths([spec], [coll], driver.capabilities())
    assert b.endpoint_reduce
    apply(driver, b)
    commit(driver, coll, b, {"a": {"k": "a", "c": 0.1}, "b": {"k": "b", "c": 0.07}}, 0)
    commit(driver, coll, b, {"a": {"k": "a", "c": 0.2}, "b": {"k": "b", "c": left}}, 1)
    with pytest.raises(DriverError) as err:
        commit(driver, coll, b, {"a": {"k": "a", "c": 1}, "b": {"k": "b", "c": right}}, 2)
    assert "key ['b']: /c: 'sum' overflowed: the result would need more than the 15 significant digits" in str(
        err.value
    )
    with pytest.raises(ReductionError, match="15 significant digits"):
        coll.reduce({"k": "b", "c": exact_sum(0.07, left, 2)}, {"k": "b", "c": right})
    view = {k: canonical(v) for k, v in driver.dump(MAT, b).items()}
    assert view == {
        ("a",): canonical({"k": "a", "c": 0.3}),
        ("b",): canonical({"k": "b", "c": exact_sum(0.07, left, 2)}),
    }


def test_a_key_staged_twice_in_one_transaction_is_refused_and_nothing_commits(driver):
    """The runtime combines each key once per batch: a key stored twice (in one Store, or in
    two Stores of one transaction) would be reduced into the view twice, so it is refused."""
    coll, b = reduced_binding(driver, SUMS, "sums")
    apply(driver, b)
    commit(driver, coll, b, {"a": {"k": "a", "n": 1}}, 0)
    for stores in ([("a", "a")], [("a",), ("b", "a")]):
        t, _ = driver.open(Open(MAT, "v1", Range(), bindings=(b,)))
        try:
            t.acknowledge(Acknowledge())
            t.flush(Flush())
            with pytest.raises(DriverError, match=r"sums.*a key was stored twice in one transaction"):
                for keys in stores:
                    texts = tuple(json.dumps({"k": k, "n": 5}) for k in keys)
                    t.store(StoreTexts(0, tuple((k,) for k in keys), texts))
        finally:
            t.close()
    assert driver.dump(MAT, b) == {("a",): {"k": "a", "n": 1}}
    [row] = driver.checkpoints(MAT)
    assert row.runtime_checkpoint == cp(0)


def test_a_zombie_statement_after_a_newer_open_is_fenced_off(driver):
    """The reduce statement runs in the commit's transaction, after the fence check: a session
    whose range was opened again commits nothing."""
    from tidemark.errors import FencedOff

    coll, b = reduced_binding(driver, SUMS, "sums")
    apply(driver, b)
    commit(driver, coll, b, {"a": {"k": "a", "n": 1}}, 0)
    old, _ = driver.open(Open(MAT, "v1", Range(), bindings=(b,)))
    old.acknowledge(Acknowledge())
    old.flush(Flush())
    old.store(Store(0, (("a",),), ((5, None),), ({"k": "a", "n": 5},), (False,), (False,)))
    commit(driver, coll, b, {"a": {"k": "a", "n": 10}}, 1)  # a newer session of the range
    with pytest.raises(FencedOff):
        old.start_commit(StartCommit(cp(1)))
    old.close()
    assert driver.dump(MAT, b) == {("a",): {"k": "a", "n": 11}}


def test_the_load_path_and_the_endpoint_path_write_one_view(driver):
    """A view written on one path goes on on the other (options.endpoint_reduce switched)."""
    coll, b = reduced_binding(driver, SUMS, "sums")
    apply(driver, b)
    commit(driver, coll, b, {"a": {"k": "a", "n": 1, "x": 0.1}}, 0)
    plain = dataclasses.replace(b, endpoint_reduce=False)
    t, _ = driver.open(Open(MAT, "v1", Range(), bindings=(plain,)))
    t.acknowledge(Acknowledge())
    [loaded] = t.load(__import__("tidemark.protocol.messages", fromlist=["Load"]).Load(0, (("a",),)))
    t.flush(Flush())
    doc = coll.reduce(loaded.docs[0], {"k": "a", "n": 2, "x": 0.2})
    t.store(Store(0, (("a",),), (coll.values(doc),), (doc,), (True,), (False,)))
    t.start_commit(StartCommit(cp(1)))
    t.close()
    commit(driver, coll, b, {"a": {"k": "a", "n": 4, "x": 0.4}}, 2)
    assert driver.dump(MAT, b) == {("a",): {"k": "a", "n": 7, "x": 0.1 + 0.2 + 0.4}}


MAPS = {
    "type": "object",
    "reduce": {"strategy": "merge"},
    "required": ["k"],
    "properties": {
        "k": {"type": "string"},
        "größe": {"type": "integer", "reduce": {"strategy": "sum"}},
        "counts": {"type": "object", "additionalProperties": {"type": "integer"}, "reduce": {"strategy": "merge"}},
    },
}


def test_names_written_with_and_without_escapes_are_one_member(driver):
    """One name, escaped by one writer (``"gr\\u00f6\\u00dfe"``) and not by the next: one member
    (SQLite 3.40 compares names by their text; the staged text is written again)."""
    coll, b = reduced_binding(driver, MAPS, "maps")
    apply(driver, b)
    doc = {"k": "a", "größe": 1, "counts": {"é": 1, "\x7f": 1}, "other": {"ü": 1}}
    commit(driver, coll, b, {"a": doc}, 0)  # json.dumps: every non-ASCII name escaped
    t, _ = driver.open(Open(MAT, "v1", Range(), bindings=(b,)))
    t.acknowledge(Acknowledge())
    t.flush(Flush())
    raw = json.dumps(doc, ensure_ascii=False)
    t.store(StoreTexts(0, (("a",),), (raw,)))
    t.start_commit(StartCommit(cp(1)))
    t.close()
    commit(driver, coll, b, {"a": doc}, 2)
    assert driver.dump(MAT, b) == {("a",): {"k": "a", "größe": 3, "counts": {"é": 1, "\x7f": 1}, "other": {"ü": 1}}}
