"""The lean row of the lake endpoints (Delta, Iceberg): a new view's row is its document --
a column per top-level property, ``flow_document`` only what no column holds exactly --
read back as the whole document by Load and dump, and by a reader that knows only the
table (its columns and its ``tidemark.leanColumns`` property); an older full table keeps
its form; a lean table refuses ``document: full`` and a JSON/text type change; a new and a
dropped property on a lean view; any document round-trips through the row (generated)."""

from __future__ import annotations

import json
import math
from types import SimpleNamespace

import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.support.driver_protocol import MAT, cp, load_all
from tests.support.endpoint_reduce import canonical
from tests.support.helpers import lake_documents
from tests.support.lake_support import Lake, apply, commit
from tidemark.collection.collection import Collection
from tidemark.drivers.common.columns import BOOLEAN, DOCUMENT_COLUMN, INTEGER, JSON, NUMBER, TEXT, column
from tidemark.drivers.lake.lean import documents_of, holds, lean_values
from tidemark.errors import IncompatibleSchema
from tidemark.protocol.messages import Acknowledge, Apply, Open, Range, StartCommit, Store, Validate
from tidemark.runtime.merge_patch import apply_update
from tidemark.spec import CollectionSpec

pytest.importorskip("deltalake")
pytest.importorskip("pyiceberg")

SCHEMA = {
    "type": "object",
    "required": ["customer"],
    "properties": {
        "customer": {"type": "string"},
        "amount": {"type": "integer"},
        "score": {"type": "number"},
        "vip": {"type": "boolean"},
        "cents": {"type": "number", "multipleOf": 0.01},
        "tags": {"type": "array", "items": {"type": "string"}},
        "address": {"type": "object"},
        "either": {"type": ["string", "integer"]},
    },
}
DOCS = [
    {"customer": "a", "amount": 1, "score": 2.5, "vip": True, "cents": 10.25, "tags": ["x"], "address": {"c": "Oslo"}},
    {"customer": "b", "amount": 2, "score": 3, "either": 7, "extra": {"deep": [1, None]}},  # an undeclared member
    {"customer": "c", "amount": None, "score": 1.0, "either": "seven", "tags": [], "vip": False},  # a null member
    {"customer": "d", "amount": 2**70, "score": 0.1, "cents": 0.3},  # an integer beyond 64 bits
]


@pytest.fixture(params=["delta", "iceberg"])
def lake(request, tmp_path):
    e = Lake(request.param, tmp_path)
    yield e
    e.driver.close()


def bind(schema=SCHEMA, **resource):
    coll = Collection(CollectionSpec("orders", ("/customer",), schema))
    return coll.binding_spec(SimpleNamespace(resource={"table": "customers", **resource}, delta_updates=False))


def by_key(docs) -> dict:
    return {(d["customer"],): d for d in docs}


def test_a_new_lake_view_is_lean_and_every_path_reads_its_documents(lake):
    b = bind()
    apply(lake.driver, b)
    _, state = commit(lake.driver, b, DOCS, 1, None)
    rows, props = lake.rows(b)
    rest = dict(zip(rows.column("customer").to_pylist(), rows.column(DOCUMENT_COLUMN).to_pylist()))
    assert rest["a"] is None  # every member in a column of its own
    assert json.loads(rest["b"]) == {"extra": {"deep": [1, None]}}
    assert json.loads(rest["c"]) == {"amount": None}
    assert json.loads(rest["d"]) == {"amount": 2**70}
    assert json.loads(props["tidemark.leanColumns"])["address"] == JSON
    want = {k: canonical(d) for k, d in by_key(DOCS).items()}
    assert {k: canonical(d) for k, d in lake.driver.dump(MAT, b).items()} == want
    assert {(k,): canonical(d) for k, d in lake_documents(rows, "customer", props).items()} == want
    # Load rebuilds the stored documents; a second batch over them round-trips
    newer = [dict(d, amount=5) for d in DOCS[:2]]
    loaded, state = commit(lake.driver, b, newer, 2, state)
    assert {k: canonical(d) for k, d in loaded.items()} == {k: want[k] for k in [("a",), ("b",)]}
    assert canonical(lake.driver.dump(MAT, b)[("a",)]) == canonical(newer[0])
    assert any("lean rows" in line for line in lake.driver.row_forms((b,)))


def test_document_full_and_an_older_full_table_keep_their_form(lake):
    b = bind(document="full")
    apply(lake.driver, b)
    commit(lake.driver, b, DOCS, 1, None)
    rows, props = lake.rows(b)
    assert None not in rows.column(DOCUMENT_COLUMN).to_pylist()
    assert "tidemark.leanColumns" not in props
    plain = bind()  # the option dropped: the table keeps its form
    apply(lake.driver, plain)
    assert "address" not in lake.rows(plain)[0].column_names  # no JSON column added to a full table
    _, _ = commit(lake.make(), plain, [dict(DOCS[0], amount=9)], 2, None)
    assert json.loads(lake.rows(plain)[0].column(DOCUMENT_COLUMN).to_pylist()[0])["customer"]
    [line] = lake.driver.row_forms((plain,))
    assert "full documents" in line and "keeps its form" in line
    assert canonical(lake.driver.dump(MAT, plain)[("a",)]) == canonical(dict(DOCS[0], amount=9))


def test_a_lean_lake_table_refuses_document_full_and_a_json_text_change(lake):
    b = bind()
    apply(lake.driver, b)
    commit(lake.driver, b, DOCS, 1, None)
    before = lake.rows(b)
    with pytest.raises(IncompatibleSchema, match="document: full"):
        apply(lake.driver, bind(document="full"))
    changed = json.loads(json.dumps(SCHEMA))
    changed["properties"]["amount"] = {"type": "object"}  # integer column -> JSON: a type change
    changed["properties"]["address"] = {"type": "string"}  # JSON column -> text
    with pytest.raises(IncompatibleSchema, match="address"):
        apply(lake.driver, bind(changed))
    assert lake.rows(b)[0].equals(before[0]) and lake.rows(b)[1] == before[1]  # nothing changed


def test_a_new_and_a_dropped_property_on_a_lean_lake_view(lake):
    b = bind()
    apply(lake.driver, b)
    first = [dict(DOCS[0], note={"n": 1})]  # "note" is not declared: the remainder holds it
    _, state = commit(lake.driver, b, first, 1, None)
    grown = json.loads(json.dumps(SCHEMA))
    grown["properties"]["note"] = {"type": "object"}
    del grown["properties"]["address"]  # no longer declared: still read back from its column
    g = bind(grown)
    assert "add column note" in apply(lake.driver, g)
    lake.driver = lake.make()
    assert canonical(lake.driver.dump(MAT, g)[("a",)]) == canonical(first[0])
    second = [{"customer": "z", "note": {"n": 2}, "address": {"c": "Lima"}}]
    loaded, state = commit(lake.driver, g, [dict(first[0], amount=3)] + second, 2, state)
    assert canonical(loaded[("a",)]) == canonical(first[0])
    rows, props = lake.rows(g)
    rest = dict(zip(rows.column("customer").to_pylist(), rows.column(DOCUMENT_COLUMN).to_pylist()))
    assert rest["z"] is None  # the new property in its new column, the dropped one in its old
    assert "address" in json.loads(props["tidemark.leanColumns"])
    want = {("a",): dict(first[0], amount=3), ("z",): second[0]}
    assert {k: canonical(d) for k, d in lake.driver.dump(MAT, g).items()} == {k: canonical(d) for k, d in want.items()}


# ---------------------------------------------------------------- the rule, generated

KINDS = [TEXT, INTEGER, NUMBER, BOOLEAN, JSON, "decimal:2"]
scalars = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-(2**80), max_value=2**80),
    st.floats(allow_nan=False, allow_infinity=False),
    st.decimals(places=2, min_value=-(10**6), max_value=10**6).map(float),
    st.text(max_size=5),
)
values = st.recursive(
    scalars,
    lambda inner: st.one_of(st.lists(inner, max_size=3), st.dictionaries(st.text(max_size=3), inner)),
    max_leaves=8,
)


def test_holds_says_which_values_a_column_gives_back():
    assert holds(INTEGER, 2**63 - 1) and not holds(INTEGER, 2**63) and not holds(INTEGER, True)
    assert not holds(INTEGER, 3.0) and holds(NUMBER, 3) and not holds(NUMBER, 2**53 + 1)
    assert holds("decimal:2", 10.25) and not holds("decimal:2", 10.255) and holds("decimal:2", 7)
    assert not holds(TEXT, 1) and not holds(JSON, None) and holds(JSON, {"a": None})
    assert not holds(NUMBER, math.inf)


@settings(max_examples=150, deadline=None)
@given(st.lists(st.dictionaries(st.sampled_from(["t", "i", "n", "b", "j", "d", "x"]), values), max_size=6))
def test_any_document_round_trips_through_a_lean_row(docs):
    held = list(zip(["t", "i", "n", "b", "j", "d"], KINDS))
    held_values, rests = lean_values(docs, held)
    arrays = [column(kind, vs) for (_, kind), vs in zip(held, held_values)]
    arrays.append(pa.array(rests, pa.string()))
    table = pa.table(arrays, names=[n for n, _ in held] + [DOCUMENT_COLUMN])
    assert [canonical(d) for d in documents_of(table, held, True)] == [canonical(d) for d in docs]
