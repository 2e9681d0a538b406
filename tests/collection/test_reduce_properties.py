"""Property tests: every strategy is associative on generated documents."""

from __future__ import annotations

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tidemark.collection.collection import Collection
from tidemark.spec import CollectionSpec

SETTINGS = settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])

scalars = st.one_of(
    st.none(), st.booleans(), st.integers(-1000, 1000), st.text(max_size=3), st.integers(-40, 40).map(lambda i: i / 4)
)
exact_numbers = st.one_of(st.integers(-(10**6), 10**6), st.integers(-400, 400).map(lambda i: i / 4))
sorted_ints = st.lists(st.integers(0, 9), max_size=5, unique=True).map(sorted)


def coll(v_schema, **root):
    schema = {
        "type": "object",
        "reduce": {"strategy": "merge"},
        "properties": {"id": {"type": "string"}, "v": v_schema},
        **root,
    }
    return Collection(CollectionSpec("t", ("/id",), schema))


def doc(v):
    return {"id": "k"} if v is None else {"id": "k", "v": v}


def opt(values):
    """A property that is sometimes absent."""
    return st.one_of(st.none(), values) if True else values


def check(c: Collection, a, b, d):
    left = c.reduce(c.reduce(a, b), d)
    right = c.reduce(a, c.reduce(b, d))
    assert left == right


CASES = {
    "lastWriteWins": (coll({}), st.one_of(scalars, st.lists(scalars, max_size=2))),
    "firstWriteWins": (coll({"reduce": {"strategy": "firstWriteWins"}}), scalars),
    "sum": (coll({"reduce": {"strategy": "sum"}}), exact_numbers),
    "minimize": (
        coll({"reduce": {"strategy": "minimize"}}),
        st.one_of(scalars, st.lists(st.integers(0, 3), max_size=3)),
    ),
    "maximize": (
        coll({"reduce": {"strategy": "maximize"}}),
        st.one_of(scalars, st.dictionaries(st.sampled_from("ab"), st.integers(0, 2))),
    ),
    "maximize_key": (
        coll({"reduce": {"strategy": "maximize", "key": ["/t"]}, "properties": {"n": {"reduce": {"strategy": "sum"}}}}),
        st.fixed_dictionaries({"t": st.integers(0, 3)}, optional={"n": st.integers(-5, 5), "x": scalars}),
    ),
    "minimize_key": (
        coll({"reduce": {"strategy": "minimize", "key": ["/t"]}, "properties": {"n": {"reduce": {"strategy": "sum"}}}}),
        st.fixed_dictionaries({"t": st.integers(0, 3)}, optional={"n": st.integers(-5, 5), "x": scalars}),
    ),
    # event-time order (reduce.order): the later (earlier) value at /t wins, ties by source order
    "lastWriteWins_order": (
        coll({"reduce": {"strategy": "lastWriteWins", "order": "/t"}}),
        st.fixed_dictionaries({}, optional={"t": st.one_of(st.integers(0, 3), st.none()), "x": scalars}),
    ),
    "firstWriteWins_order": (
        coll(
            {
                "reduce": {"strategy": "firstWriteWins", "order": "/t"},
                "properties": {"t": {"type": "string", "format": "date-time"}},
            }
        ),
        st.fixed_dictionaries(
            {},
            optional={
                "t": st.sampled_from(
                    ["2024-05-01T10:00:00Z", "2024-05-01T09:30:00-05:00", "2024-05-01T14:30:00.0Z", "later"]
                ),
                "x": scalars,
            },
        ),
    ),
    "maximize_key_order": (
        coll(
            {
                "reduce": {"strategy": "maximize", "key": ["/k"], "order": "/t"},
                "properties": {"n": {"reduce": {"strategy": "sum"}}},
            }
        ),
        st.fixed_dictionaries({"k": st.integers(0, 2)}, optional={"t": st.integers(0, 2), "n": st.integers(-5, 5)}),
    ),
    "append": (coll({"reduce": {"strategy": "append"}}), st.lists(scalars, max_size=3)),
    "union": (coll({"reduce": {"strategy": "union"}}), st.lists(scalars, max_size=3)),
    "merge_object": (
        coll(
            {
                "reduce": {"strategy": "merge"},
                "properties": {
                    "n": {"reduce": {"strategy": "sum"}},
                    "m": {"reduce": {"strategy": "merge"}},
                    "a": {"reduce": {"strategy": "append"}},
                },
            }
        ),
        st.fixed_dictionaries(
            {},
            optional={
                "n": st.integers(-9, 9),
                "x": scalars,
                "m": st.dictionaries(st.sampled_from("pq"), scalars, max_size=2),
                "a": st.lists(st.integers(0, 3), max_size=2),
            },
        ),
    ),
    "merge_array_index": (
        coll({"reduce": {"strategy": "merge"}, "items": {"reduce": {"strategy": "sum"}}}),
        st.lists(st.integers(-9, 9), max_size=4),
    ),
    "merge_array_key": (
        coll(
            {
                "reduce": {"strategy": "merge", "key": ["/id"]},
                "items": {"reduce": {"strategy": "merge"}, "properties": {"n": {"reduce": {"strategy": "sum"}}}},
            }
        ),
        sorted_ints.flatmap(
            lambda ids: st.tuples(*[st.integers(-3, 3) for _ in ids]).map(
                lambda ns, ids=ids: [{"id": i, "n": n} for i, n in zip(ids, ns)]
            )
        ),
    ),
    "set_array": (
        coll({"reduce": {"strategy": "set", "key": [""]}}),
        st.one_of(
            st.fixed_dictionaries({"add": sorted_ints}),
            st.fixed_dictionaries({"remove": sorted_ints}, optional={"add": sorted_ints}),
            st.fixed_dictionaries({"intersect": sorted_ints}, optional={"add": sorted_ints}),
        ),
    ),
    "set_object": (
        coll(
            {
                "reduce": {"strategy": "set"},
                "properties": {"add": {"additionalProperties": {"reduce": {"strategy": "sum"}}}},
            }
        ),
        st.one_of(
            st.fixed_dictionaries({"add": st.dictionaries(st.sampled_from("abcd"), st.integers(0, 5))}),
            st.fixed_dictionaries(
                {"remove": st.dictionaries(st.sampled_from("abcd"), st.just(0))},
                optional={"add": st.dictionaries(st.sampled_from("abcd"), st.integers(0, 5))},
            ),
            st.fixed_dictionaries(
                {"intersect": st.dictionaries(st.sampled_from("abcd"), st.just(0))},
                optional={"add": st.dictionaries(st.sampled_from("abcd"), st.integers(0, 5))},
            ),
        ),
    ),
}


def _make(name):
    c, values = CASES[name]
    docs = opt(values).map(doc)

    @SETTINGS
    @given(docs, docs, docs)
    def test(a, b, d):
        check(c, a, b, d)

    test.__name__ = f"test_{name}_is_associative"
    return test


for _name in CASES:
    globals()[f"test_{_name}_is_associative"] = _make(_name)


DELETE_COLL = Collection(
    CollectionSpec(
        "t",
        ("/id",),
        {
            "type": "object",
            "reduce": {"strategy": "merge"},
            "properties": {
                "id": {"type": "string"},
                "n": {"type": "integer", "reduce": {"strategy": "sum"}},
                "a": {"type": "array", "reduce": {"strategy": "append"}},
                "_meta": {"type": "object", "properties": {"op": {"type": "string"}}},
            },
            "if": {"properties": {"_meta": {"properties": {"op": {"const": "d"}}}}, "required": ["_meta"]},
            "then": {"reduce": {"delete": True}},
        },
    )
)

delete_docs = st.one_of(
    st.fixed_dictionaries({"id": st.just("k"), "n": st.integers(-5, 5), "a": st.lists(st.integers(0, 3), max_size=2)}),
    st.just({"id": "k", "_meta": {"op": "d"}}),
)


@SETTINGS
@given(st.lists(delete_docs, min_size=3, max_size=7), st.data())
def test_deletions_are_associative_and_start_afresh(docs, data):
    c = DELETE_COLL
    # any split point gives the same result as the left fold
    whole = c.combine(docs)
    i = data.draw(st.integers(1, len(docs) - 1))
    assert c.reduce(c.combine(docs[:i]), c.combine(docs[i:])) == whole
    # semantics: everything after the last deletion, or the deletion itself
    last = max((j for j, d in enumerate(docs) if d.get("_meta")), default=None)
    if last == len(docs) - 1:
        assert c.is_deletion(whole)
    elif last is not None:
        tail = docs[last + 1 :]
        expect = {"id": "k", "n": sum(d["n"] for d in tail), "a": [x for d in tail for x in d["a"]]}
        assert {k: v for k, v in whole.items() if k != "_meta"} == expect
        assert not c.is_deletion(whole)
