"""An object of declared members, each reduced by a strategy of its own (``FieldPlan.kind ==
"object"``: lastWriteWins, firstWriteWins, sum, maximize, minimize), reduced in the endpoint
(PostgreSQL, SQLite, MariaDB), lean (the object is a JSON column) and full (a member of
``flow_document``): member by member, as the Python fold merges it -- a member absent on one
side takes the other's value, present on both its strategy's result; a member the schema does
not declare is last written, whole (an object or a ``null`` too); a member's ``sum`` past its
type fails the batch naming the key and ``/object/member``, with nothing committed."""

from __future__ import annotations

import pytest

from tests.support.driver_protocol import MAT, apply, cp
from tests.support.endpoint_reduce import (
    Endpoint,
    canonical,
    commit,
    fold_batches,
    reduced_binding,
    reduced_in_endpoint,
)
from tests.support.mysql_support import mysql_db, mysql_url  # fixtures of the mysql endpoint
from tidemark.collection.sql_plan import binding_reduction
from tidemark.drivers.sqlite.reduce import ENDPOINT_REDUCE
from tidemark.errors import DriverError

ADDRESS = {
    "type": "object",
    "reduce": {"strategy": "merge"},
    "properties": {
        "city": {"type": "string"},
        "floor": {"type": "integer", "reduce": {"strategy": "firstWriteWins"}},
        "visits": {"type": "integer", "reduce": {"strategy": "sum"}},
        "paid": {"type": "number", "reduce": {"strategy": "sum"}},
        "top": {"type": "number", "reduce": {"strategy": "maximize"}},
        "low": {"type": "string", "reduce": {"strategy": "minimize"}},
        "lift": {"type": "boolean", "reduce": {"strategy": "maximize"}},
        "since": {"type": "string", "reduce": {"strategy": "firstWriteWins"}},
        # what a real event's nested object holds: an exact decimal summed and maximized, a date-time
        "cents": {"type": "number", "multipleOf": 0.01, "reduce": {"strategy": "sum"}},
        "fee": {"type": "number", "multipleOf": 0.01, "reduce": {"strategy": "maximize"}},
        "moved_at": {"type": "string", "format": "date-time"},
    },
}
SCHEMA = {
    "type": "object",
    "reduce": {"strategy": "merge"},
    "required": ["k"],
    "properties": {
        "k": {"type": "string"},
        "address": ADDRESS,
        "n": {"type": "integer", "reduce": {"strategy": "sum"}},
    },
}
FULL_ADDRESS = {"city": "x", "floor": 1, "visits": 1, "paid": 0.1, "top": 1, "low": "b", "lift": False, "since": "p"}
#: each batch's combined document per key: what each key's documents go through
BATCHES = [
    {
        "a": {
            "k": "a",
            "address": {**FULL_ADDRESS, "cents": 0.1, "fee": 1.25, "moved_at": "2024-05-01T10:00:00+05:30"},
        },  # every member on both sides
        "b": {"k": "b", "n": 1},  # the object absent, then present
        "c": {"k": "c", "address": {"visits": 5, "top": 2.5}},  # present, then absent
        "d": {"k": "d", "n": 1},  # absent on both sides: stays absent
        "e": {"k": "e", "address": {}},  # the empty object on both sides
        "f": {"k": "f", "address": {"visits": 1, "low": "m"}},  # members absent on one side
        "g": {"k": "g", "address": {"other": {"q": 1}, "more": 1}},  # undeclared members: last written, whole
    },
    {
        "a": {
            "k": "a",
            "address": {
                "city": "y",
                "floor": 2,
                "visits": 2,
                "paid": 0.2,
                "top": 0.5,
                "low": "a",
                "lift": True,
                "since": "q",
                "cents": 0.2,
                "fee": 0.5,
                "moved_at": "2024-05-01T04:30:00.000001Z",
            },
        },
        "b": {"k": "b", "address": {"visits": 3, "lift": False, "cents": 7}},
        "c": {"k": "c", "n": 2},
        "d": {"k": "d", "n": 2},
        "e": {"k": "e", "address": {}},
        "f": {"k": "f", "address": {"paid": 1, "top": -1, "low": "z", "floor": 7, "lift": True}},
        "g": {"k": "g", "address": {"other": {"r": None}, "more": None, "visits": -3}},
    },
    {
        "b": {"k": "b", "address": {"visits": 4, "paid": 2.5, "since": "later", "cents": 0.07, "fee": 3}},
        "e": {"k": "e", "address": {"top": 1e300}},  # the empty object merged with members
        "f": {"k": "f", "address": {"visits": 10, "top": 3, "low": "a", "floor": 8}},
    },
]
EXPECTED = {
    "a": {
        "k": "a",
        "address": {
            "city": "y",
            "floor": 1,
            "visits": 3,
            "paid": 0.1 + 0.2,
            "top": 1,
            "low": "a",
            "lift": True,
            "since": "p",
            "cents": 0.3,
            "fee": 1.25,
            "moved_at": "2024-05-01T04:30:00.000001Z",
        },
    },
    "b": {
        "k": "b",
        "n": 1,
        "address": {"visits": 7, "lift": False, "paid": 2.5, "since": "later", "cents": 7.07, "fee": 3},
    },
    "c": {"k": "c", "address": {"visits": 5, "top": 2.5}, "n": 2},
    "d": {"k": "d", "n": 3},
    "e": {"k": "e", "address": {"top": 1e300}},
    "f": {"k": "f", "address": {"visits": 11, "low": "a", "paid": 1, "top": 3, "floor": 7, "lift": True}},
    "g": {"k": "g", "address": {"other": {"r": None}, "more": None, "visits": -3}},
}


@pytest.fixture(params=[pytest.param("postgres", marks=[pytest.mark.postgres]), "sqlite", "mysql"])
def endpoint(request, tmp_path):
    e = Endpoint(request.param, request, tmp_path)
    yield e
    e.driver.close()


def test_the_python_fold_merges_the_object_member_by_member():
    """The reference the endpoints are held to (the expectations below)."""
    from tidemark.collection.collection import Collection
    from tidemark.spec import CollectionSpec

    assert fold_batches(Collection(CollectionSpec("orders", ("/k",), SCHEMA)), BATCHES) == EXPECTED


def test_the_endpoint_reduces_an_object_whose_members_have_strategies_of_their_own():
    plan, why = binding_reduction(SCHEMA, ("/k",), ENDPOINT_REDUCE)
    assert plan is not None, why
    [address] = [f for f in plan.fields if f.name == "address"]
    assert address.kind == "object" and {m.member: m.strategy for m in address.members}["visits"] == "sum"


def test_a_member_name_the_statement_cannot_write_is_refused():
    quoted = {
        **ADDRESS,
        "properties": {**ADDRESS["properties"], 'a"b': {"type": "integer", "reduce": {"strategy": "sum"}}},
    }
    plan, why = binding_reduction(
        {**SCHEMA, "properties": {**SCHEMA["properties"], "address": quoted}}, ("/k",), ENDPOINT_REDUCE
    )
    assert plan is None and why == "/address: a member's name holding a quote, a backslash or a control character"
    # a member last written is not named by the statement: any name
    quoted["properties"] = {**ADDRESS["properties"], 'a"b': {"type": "integer"}}
    assert binding_reduction(
        {**SCHEMA, "properties": {**SCHEMA["properties"], "address": quoted}}, ("/k",), ENDPOINT_REDUCE
    )[0]


@pytest.mark.parametrize("document", ["lean", "full"])
def test_the_object_is_reduced_member_by_member_in_the_endpoint(endpoint, document):
    driver = endpoint.driver
    coll, b = reduced_binding(driver, SCHEMA, "objects", document)
    apply(driver, b)
    assert [" lean rows " in line for line in driver.row_forms([b])] == [document == "lean"]
    for i, batch in enumerate(BATCHES):
        commit(driver, coll, b, batch, i, texts=i % 2 == 0)  # texts, or documents and values
    view = {k[0]: v for k, v in driver.dump(MAT, b).items()}
    assert {k: canonical(v) for k, v in view.items()} == {k: canonical(v) for k, v in EXPECTED.items()}
    assert "address" not in view["d"] and view["g"]["address"]["more"] is None


@pytest.mark.parametrize("document", ["lean", "full"])
@pytest.mark.parametrize(
    "member,left,right,what",
    [
        ("visits", 2**62, 2**62, "is beyond a 64-bit integer"),
        ("paid", 1.5e308, 1.5e308, "is not a finite number"),
        ("cents", 6e12, 6e12, "would need more than the 15 significant digits an exact decimal of 2 places keeps"),
    ],
)
def test_a_member_sum_beyond_its_type_names_the_key_and_member_and_commits_nothing(
    endpoint, document, member, left, right, what
):
    driver = endpoint.driver
    coll, b = reduced_binding(driver, SCHEMA, "overflows", document)
    apply(driver, b)
    first = {"a": {"k": "a", "address": {member: left}}, "b": {"k": "b", "address": {member: 1}, "n": 1}}
    commit(driver, coll, b, first, 0)
    with pytest.raises(DriverError) as err:
        commit(driver, coll, b, {"a": {"k": "a", "address": {member: right}}, "b": {"k": "b", "n": 1}}, 1)
    assert f"key ['a']: /address/{member}: 'sum' overflowed: the result {what}" in str(err.value)
    view = driver.dump(MAT, b)
    assert {k[0]: canonical(v) for k, v in view.items()} == {k: canonical(v) for k, v in first.items()}
    [row] = driver.checkpoints(MAT)
    assert row.runtime_checkpoint == cp(0)


@pytest.mark.postgres
def test_typed_rows_reduce_the_object_as_the_texts(postgres_url, pg_schema, request, tmp_path):
    """PostgreSQL stages a lean binding's typed values (``StoreRows``): the object is its
    column's JSON there; a member's sum past its type is named from the staged column."""
    endpoint = Endpoint("postgres", request, tmp_path)
    driver = endpoint.driver
    try:
        coll, b = reduced_binding(driver, SCHEMA, "typed")
        apply(driver, b)
        assert driver.typed_rows([b]) == [True]
        for i, batch in enumerate(BATCHES):
            if i % 2 == 0:
                commit(driver, None, b, batch, i, typed=True)
            else:
                commit(driver, coll, b, batch, i)
        view = driver.dump(MAT, b)
        assert {k[0]: canonical(v) for k, v in view.items()} == {k: canonical(v) for k, v in EXPECTED.items()}
        with pytest.raises(DriverError, match=r"key \['f'\]: /address/visits: 'sum' overflowed"):
            commit(driver, None, b, {"f": {"k": "f", "address": {"visits": 2**63 - 1}}}, len(BATCHES), typed=True)
        assert driver.dump(MAT, b) == view
    finally:
        driver.close()


def test_check_says_the_endpoint_reduces_a_binding_of_an_object_of_members(endpoint):
    from types import SimpleNamespace

    from tidemark.collection.collection import Collection
    from tidemark.runtime.reduce_path import reduce_paths
    from tidemark.spec import CollectionSpec

    coll = Collection(CollectionSpec("orders", ("/k",), SCHEMA))
    spec = coll.binding_spec(SimpleNamespace(resource={"table": "objects"}, delta_updates=False))
    (b,), [line] = reduce_paths([spec], [coll], endpoint.driver.capabilities())
    assert b.endpoint_reduce and line == "binding objects: reduced by the endpoint in its commit (no Load)"


@pytest.mark.parametrize("document", ["lean", "full"])
def test_a_member_named_beyond_ascii_is_one_member_however_its_name_is_escaped(endpoint, document):
    """The runtime's texts escape every non-ASCII name (``"gr\\u00f6\\u00dfe"``); the statement
    finds the member by its name as written (``unescaped_names``), stored and staged alike."""
    schema = {
        **SCHEMA,
        "properties": {
            "k": {"type": "string"},
            "maß": {
                "type": "object",
                "reduce": {"strategy": "merge"},
                "properties": {
                    "größe": {"type": "integer", "reduce": {"strategy": "sum"}},
                    "ü": {"type": "string", "reduce": {"strategy": "minimize"}},
                },
            },
        },
    }
    driver = endpoint.driver
    coll, b = reduced_binding(driver, schema, "names", document)
    apply(driver, b)
    for i, v in enumerate((1, 2, 4)):
        commit(driver, coll, b, {"a": {"k": "a", "maß": {"größe": v, "ü": "zyx"[i], "é": i}}}, i, texts=i != 1)
    assert driver.dump(MAT, b) == {("a",): {"k": "a", "maß": {"größe": 7, "ü": "x", "é": 2}}}


ARRAY_MEMBERS = {
    "type": "object",
    "reduce": {"strategy": "merge"},
    "required": ["k"],
    "properties": {
        "k": {"type": "string"},
        "customer": {
            "type": "object",
            "reduce": {"strategy": "merge"},
            "properties": {
                "name": {"type": "string"},
                "visits": {"type": "integer", "reduce": {"strategy": "sum"}},
                "tags": {"type": "array", "items": {"type": "string"}, "reduce": {"strategy": "union"}},
                "scores": {"type": "array", "items": {"type": "number"}, "reduce": {"strategy": "union"}},
                "codes": {"type": "array", "items": {"type": "integer"}, "reduce": {"strategy": "union"}},
                "flags": {"type": "array", "items": {"type": "boolean"}, "reduce": {"strategy": "union"}},
                "seen": {"type": "array", "items": {"type": "integer"}, "reduce": {"strategy": "append"}},
                "notes": {"type": "array", "items": {"type": "string"}, "reduce": {"strategy": "append"}},
            },
        },
    },
}


def _array_member_batches(seed: int) -> list[dict]:
    """Batches of combined documents whose ``customer`` holds some of its array members (empty
    arrays, repeats within one array, values already stored, 1 beside 1.0, strings beyond
    ASCII and with quotes), each key in some batches only."""
    import random

    rng = random.Random(seed)
    pools = {
        "tags": ["a", "b", "é", 'q"t', "a b"],
        "scores": [1, 1.0, 2.5, -0.5, 1e300],
        "codes": [0, 1, 2**62, -7],
        "flags": [True, False],
        "seen": [1, 2, 3],
        "notes": ["x", "ÿ", "\\n"],
    }
    batches = []
    for _ in range(4):
        batch = {}
        for key in "abcdefgh":
            if rng.random() < 0.3:
                continue
            doc: dict = {"k": key}
            if rng.random() < 0.85:
                customer: dict = {}
                for member, pool in pools.items():
                    if rng.random() < 0.6:
                        customer[member] = [rng.choice(pool) for _ in range(rng.randint(0, 3))]
                if rng.random() < 0.5:
                    customer["visits"] = rng.randint(0, 5)
                if rng.random() < 0.3:
                    customer["name"] = rng.choice(["n1", "n2"])
                doc["customer"] = customer
            batch[key] = doc
        batches.append(batch)
    return batches


def test_an_objects_array_members_compile_for_the_endpoints():
    plan, why = binding_reduction(ARRAY_MEMBERS, ("/k",), ENDPOINT_REDUCE)
    assert plan is not None, why
    [customer] = [f for f in plan.fields if f.name == "customer"]
    assert {m.member: (m.kind, m.strategy) for m in customer.members}["tags"] == ("append", "union")


@pytest.mark.parametrize("seed", [1, 2])
@pytest.mark.parametrize("document", ["lean", "full"])
def test_an_objects_array_members_are_appended_and_unioned_in_the_endpoint(endpoint, document, seed):
    """Arrays of scalars among an object's members, appended or unioned (each value once, the
    first seen first, as the fold compares values: 1 and 1.0 one number, a boolean not one) by
    the endpoint's statement, against the Python fold; JSON texts, documents and typed rows."""
    batches = _array_member_batches(seed)
    view, got = reduced_in_endpoint(endpoint, ARRAY_MEMBERS, f"arrays{seed}", document, batches, every_other_typed=True)
    assert any(len(v.get("customer", {}).get("tags", [])) > 1 for v in view.values())


GEO = {
    "type": "object",
    "reduce": {"strategy": "merge"},
    "properties": {
        "lat": {"type": "number", "reduce": {"strategy": "maximize"}},
        "lon": {"type": "number"},
        "hits": {"type": "integer", "reduce": {"strategy": "sum"}},
        "first": {"type": "string", "reduce": {"strategy": "firstWriteWins"}},
        "zones": {"type": "array", "items": {"type": "string"}, "reduce": {"strategy": "union"}},
        "seen_at": {"type": "string", "format": "date-time", "reduce": {"strategy": "maximize"}},
    },
}
NESTED = {
    "type": "object",
    "reduce": {"strategy": "merge"},
    "required": ["k"],
    "properties": {
        "k": {"type": "string"},
        "address": {
            "type": "object",
            "reduce": {"strategy": "merge"},
            "properties": {
                "city": {"type": "string"},
                "visits": {"type": "integer", "reduce": {"strategy": "sum"}},
                "geo": GEO,
            },
        },
    },
}


def _nested_batches(seed: int) -> list[dict]:
    """Batches of combined documents whose ``address`` holds some of its members and a ``geo``
    of some of its own (an empty one too), each key in some batches only."""
    import random

    rng = random.Random(seed)
    pools = {
        "lat": [1.5, -3, 2.25],
        "lon": [0.5, 7],
        "hits": [1, 2, 40],
        "first": ["p", "q"],
        "zones": [["a"], ["b", "a"], [], ["é", "é"]],
        "seen_at": ["2024-05-01T10:00:00+05:30", "2024-05-01T04:30:00.000001Z", "2024-05-01T04:30:00Z"],
    }
    batches = []
    for _ in range(4):
        batch = {}
        for key in "abcdefgh":
            if rng.random() < 0.3:
                continue
            doc: dict = {"k": key}
            if rng.random() < 0.85:
                address: dict = {}
                if rng.random() < 0.5:
                    address["city"] = rng.choice(["Oslo", "Lima"])
                if rng.random() < 0.5:
                    address["visits"] = rng.randint(0, 3)
                if rng.random() < 0.75:
                    address["geo"] = {m: rng.choice(pool) for m, pool in pools.items() if rng.random() < 0.5}
                doc["address"] = address
            batch[key] = doc
        batches.append(batch)
    return batches


def test_a_merged_object_inside_a_merged_object_compiles_for_the_endpoints():
    plan, why = binding_reduction(NESTED, ("/k",), ENDPOINT_REDUCE)
    assert plan is not None, why
    [address] = [f for f in plan.fields if f.name == "address"]
    [geo] = [m for m in address.members if m.member == "geo"]
    assert geo.kind == "object" and {m.member: m.strategy for m in geo.members}["hits"] == "sum"
    deep = GEO
    for _ in range(2):  # two levels below address compile, three do not
        deep = {**GEO, "properties": {**GEO["properties"], "inner": deep}}
    schema = {**NESTED, "properties": {**NESTED["properties"], "address": {**NESTED["properties"]["address"]}}}
    schema["properties"]["address"]["properties"] = {"geo": deep}
    plan, why = binding_reduction(schema, ("/k",), ENDPOINT_REDUCE)
    assert plan is None and why.startswith("/address: its property 'geo' is not a plain scalar"), why
    schema["properties"]["address"]["properties"] = {"geo": deep["properties"]["inner"]}
    assert binding_reduction(schema, ("/k",), ENDPOINT_REDUCE)[0] is not None


@pytest.mark.parametrize("seed", [3, 4])
@pytest.mark.parametrize("document", ["lean", "full"])
def test_a_merged_object_inside_a_merged_object_is_reduced_member_by_member_in_the_endpoint(endpoint, document, seed):
    """``address.geo`` merged within ``address``: each of its members by its own strategy (a sum,
    a maximum, a date-time by its instant, a first value, a union), by the endpoint's statement,
    against the Python fold; JSON texts, documents and typed rows."""
    batches = _nested_batches(seed)
    view, got = reduced_in_endpoint(endpoint, NESTED, f"nested{seed}", document, batches, every_other_typed=True)
    held = [k for b in batches for k, d in b.items() if "hits" in d.get("address", {}).get("geo", {})]
    assert len(held) > len(set(held)) and set(view) == set(got)  # some key's hits summed


DEEPER = {**NESTED, "properties": {**NESTED["properties"], "address": {**NESTED["properties"]["address"]}}}
DEEPER["properties"]["address"]["properties"] = {
    **NESTED["properties"]["address"]["properties"],
    "geo": {**GEO, "properties": {**GEO["properties"], "cell": GEO}},
}


def _deeper_batches(seed: int) -> list[dict]:
    """:func:`_nested_batches` with ``geo``'s members repeated in ``geo.cell``."""
    batches = _nested_batches(seed)
    for batch in batches:
        for doc in batch.values():
            geo = doc.get("address", {}).get("geo")
            if geo is not None and len(geo) > 1:
                geo["cell"] = dict(geo)
    return batches


@pytest.mark.parametrize("document", ["lean", "full"])
def test_merged_objects_two_levels_deep_are_reduced_member_by_member_in_the_endpoint(endpoint, document):
    """``address.geo.cell``: each level merged member by member, by the endpoint's statement,
    against the Python fold; a sum two levels down past its type named by its path."""
    batches = _deeper_batches(8)
    view, got = reduced_in_endpoint(endpoint, DEEPER, "deeper", document, batches, every_other_typed=True)
    assert any("hits" in v.get("address", {}).get("geo", {}).get("cell", {}) for v in view.values())
    driver = endpoint.driver
    coll, b = reduced_binding(driver, DEEPER, "deeper_overflow", document)
    apply(driver, b)
    deep = {"k": "a", "address": {"geo": {"cell": {"hits": 2**62}}}}
    commit(driver, coll, b, {"a": deep}, 0)
    with pytest.raises(DriverError, match=r"key \['a'\]: /address/geo/cell/hits: 'sum' overflowed"):
        commit(driver, coll, b, {"a": deep}, 1)


@pytest.mark.parametrize("document", ["lean", "full"])
def test_a_nested_members_sum_beyond_its_type_names_the_key_and_its_path(endpoint, document):
    driver = endpoint.driver
    coll, b = reduced_binding(driver, NESTED, "nested_overflow", document)
    apply(driver, b)
    first = {"a": {"k": "a", "address": {"geo": {"hits": 2**62}}}, "b": {"k": "b", "address": {"visits": 1}}}
    commit(driver, coll, b, first, 0)
    with pytest.raises(DriverError) as err:
        commit(driver, coll, b, {"a": {"k": "a", "address": {"geo": {"hits": 2**62}}}, "b": first["b"]}, 1)
    assert "key ['a']: /address/geo/hits: 'sum' overflowed: the result is beyond a 64-bit integer" in str(err.value)
    assert {k[0]: v for k, v in driver.dump(MAT, b).items()} == first


def test_a_lean_view_whose_object_did_not_compile_reduces_it_in_the_statement_once_it_does(endpoint):
    """What an upgrade from the release before does to a view of :data:`NESTED`: its lean table
    kept ``address`` in ``flow_document`` only (Loads and the Python fold, as that release did
    for a merged object inside a merged object; here a deeper member makes it not compile).
    Applied with a schema that compiles, the table gets its column and the statement reduces the
    stored objects it finds in the document (no Loads), exactly as the fold."""
    from tests.support.endpoint_reduce import commit_through_loads

    inner = {**GEO, "properties": {"x": {"type": "string"}}}
    deeper = {**GEO, "properties": {**GEO["properties"], "inner": {**GEO, "properties": {"deepest": inner}}}}
    before = {**NESTED, "properties": {**NESTED["properties"], "address": {**NESTED["properties"]["address"]}}}
    before["properties"]["address"]["properties"] = {**before["properties"]["address"]["properties"], "geo": deeper}
    driver = endpoint.driver
    coll, b = reduced_binding(driver, before, "upgraded", "lean", reduced=False)
    apply(driver, b)
    assert "these properties in flow_document only (/address: they do not compile)" in driver.row_forms([b])[0]
    batches = _nested_batches(7)
    view: dict = {}
    for i, batch in enumerate(batches[:2]):
        commit_through_loads(driver, coll, b, batch, i, view, lambda loaded, stored: None)
    coll, b = reduced_binding(driver, NESTED, "upgraded", "lean")
    apply(driver, b)
    [form] = driver.row_forms([b])
    assert form.endswith(": lean rows (a column per property; flow_document holds only what no column holds)"), form
    for i, batch in enumerate(batches[2:], start=2):
        commit(driver, coll, b, batch, i, texts=i % 2 == 0)
    got = {k[0]: v for k, v in driver.dump(MAT, b).items()}
    want = fold_batches(coll, batches)
    assert {k: canonical(v) for k, v in got.items()} == {k: canonical(v) for k, v in want.items()}


LINES = {
    "type": "object",
    "reduce": {"strategy": "merge"},
    "required": ["k"],
    "properties": {
        "k": {"type": "string"},
        "lines": {
            "type": "array",
            "reduce": {"strategy": "append"},
            "items": {"type": "object", "properties": {"sku": {"type": "string"}, "qty": {"type": "integer"}}},
        },
        "log": {"type": "array", "reduce": {"strategy": "append"}},
        "n": {"type": "integer", "reduce": {"strategy": "sum"}},
    },
}


def _line_batches(seed: int) -> list[dict]:
    """Batches of combined documents appending order lines (objects, some with a member the
    schema does not declare) and log entries of any JSON values, each key in some batches only."""
    import random

    rng = random.Random(seed)
    lines = [{"sku": "a", "qty": 1}, {"sku": "é", "qty": 2, "note": {"gift": True}}, {"qty": 3}, {}]
    log = [1, "x", None, [1, {"y": None}], {"z": 1.5}, 'q"t']
    batches = []
    for _ in range(4):
        batch = {}
        for key in "abcdef":
            if rng.random() < 0.3:
                continue
            doc: dict = {"k": key, "n": 1}
            if rng.random() < 0.7:
                doc["lines"] = [rng.choice(lines) for _ in range(rng.randint(0, 2))]
            if rng.random() < 0.6:
                doc["log"] = [rng.choice(log) for _ in range(rng.randint(0, 3))]
            batch[key] = doc
        batches.append(batch)
    return batches


@pytest.mark.parametrize("document", ["lean", "full"])
def test_arrays_of_objects_and_of_any_values_are_appended_in_the_endpoint(endpoint, document):
    """``append`` of an array of objects (order lines) and of an array without ``items``: the
    endpoint's statement concatenates the stored and the staged arrays (no Loads), as the fold."""
    plan, why = binding_reduction(LINES, ("/k",), ENDPOINT_REDUCE)
    assert plan is not None, why
    batches = _line_batches(5)
    view, got = reduced_in_endpoint(endpoint, LINES, "lines", document, batches, every_other_typed=True)
    assert any(len(v.get("lines", [])) > 2 for v in view.values())
