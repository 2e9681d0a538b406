"""The specialised reducer of compiled schemas gives exactly the generic reducer's results."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tidemark.collection.collection import Collection
from tidemark.collection.fast import fast_reducer
from tidemark.collection.reduce import Reducer
from tidemark.errors import ReductionError
from tidemark.spec import CollectionSpec

SCHEMA = {
    "type": "object",
    "reduce": {"strategy": "merge"},
    "required": ["k"],
    "properties": {
        "k": {"type": "string"},
        "n": {"type": "integer", "reduce": {"strategy": "sum"}},
        "x": {"type": "number", "reduce": {"strategy": "sum"}},
        "lo": {"type": "number", "reduce": {"strategy": "minimize"}},
        "hi": {"type": "string", "reduce": {"strategy": "maximize"}},
        "first": {"type": "string", "reduce": {"strategy": "firstWriteWins"}},
        "last": {"type": "boolean"},
        "tags": {"type": "array", "items": {"type": "string"}, "reduce": {"strategy": "append"}},
        "blob": {"type": "object"},
    },
}

scalars = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-(2**63), 2**63 - 1),
    st.floats(allow_nan=False, allow_infinity=False),
    st.text(max_size=3),
)
values = {
    "k": st.text(max_size=3),
    "n": st.one_of(st.integers(-(2**63), 2**63 - 1), scalars),
    "x": st.one_of(st.floats(allow_nan=False, allow_infinity=False), st.integers(-100, 100)),
    "lo": st.one_of(st.floats(allow_nan=False, allow_infinity=False), st.integers(), st.booleans()),
    "hi": st.one_of(st.text(max_size=3), st.integers()),
    "first": st.text(max_size=3),
    "last": st.booleans(),
    "tags": st.one_of(st.lists(st.text(max_size=2), max_size=3), st.none()),
    "blob": st.dictionaries(st.text(max_size=2), scalars, max_size=2),
    "other": scalars,
}
docs = st.fixed_dictionaries({}, optional=values)


def outcome(fn, a, b):
    try:
        return ("ok", fn(a, b))
    except ReductionError as exc:
        return ("error", str(exc))


@pytest.fixture(scope="module")
def reducers():
    coll = Collection(CollectionSpec("t", ("/k",), SCHEMA))
    generic = Reducer(coll.index)
    fast = fast_reducer(coll, generic)
    assert fast is not None
    return fast, generic.reduce


@settings(max_examples=400, deadline=None)
@given(a=docs, b=docs)
def test_fast_equals_generic(reducers, a, b):
    fast, generic = reducers
    got, want = outcome(fast, a, b), outcome(generic, a, b)
    assert got == want
    if got[0] == "ok":
        assert list(got[1]) == list(want[1])  # the same key order, so the same JSON text


def test_non_objects_go_to_the_generic_reducer(reducers):
    fast, generic = reducers
    for a, b in (([1], {"k": "a"}), (None, {"k": "a"}), ({"k": "a"}, 5)):
        assert outcome(fast, a, b) == outcome(generic, a, b)


def test_uncompiled_schemas_have_no_fast_reducer():
    coll = Collection(CollectionSpec("t", ("/k",), {**SCHEMA, "if": {"required": ["x"]}, "then": {}}))
    assert fast_reducer(coll, Reducer(coll.index)) is None
