"""Reduction strategies: the documented examples (docs/reductions.md) and error cases."""

from __future__ import annotations

import pytest

from tests.support.paths import REPO, SUPPORT
from tidemark.collection.collection import Collection
from tidemark.errors import ReductionError
from tidemark.spec import CollectionSpec


def coll(schema, key=("/id",)) -> Collection:
    schema = {"type": "object", "properties": {"id": {"type": "string"}}, **schema}
    return Collection(CollectionSpec("t", tuple(key), schema))


def prop(spec, **root) -> Collection:
    """A collection whose root merges and whose property ``v`` has ``spec``."""
    return coll({"reduce": {"strategy": "merge"}, "properties": {"id": {"type": "string"}, "v": spec}, **root})


def run(c: Collection, *values):
    return c.combine({"id": "k", "v": v} for v in values)["v"]


def test_last_write_wins_is_the_default():
    c = coll({})
    assert c.combine([{"id": "k", "a": 1}, {"id": "k", "b": 2}]) == {"id": "k", "b": 2}
    c = prop({})
    assert run(c, 1, "two", {"three": 3}) == {"three": 3}


def test_first_write_wins():
    assert run(prop({"reduce": {"strategy": "firstWriteWins"}}), 1, 2, 3) == 1


def test_absent_on_one_side_takes_the_other():
    c = prop({"reduce": {"strategy": "sum"}})
    assert c.combine([{"id": "k", "v": 1}, {"id": "k"}, {"id": "k", "v": 2}]) == {"id": "k", "v": 3}


def test_sum():
    c = prop({"type": "number", "reduce": {"strategy": "sum"}})
    assert run(c, 1, 2, 3) == 6 and isinstance(run(c, 1, 2), int)
    assert run(c, 1.5, 2) == 3.5


def test_sum_overflow_and_wrong_type():
    c = prop({"type": "integer", "reduce": {"strategy": "sum"}})
    with pytest.raises(ReductionError, match=r"/v: 'sum' overflowed.*64-bit"):
        run(c, 2**63 - 1, 1)
    assert run(c, 2**63 - 2, 1) == 2**63 - 1
    with pytest.raises(ReductionError, match=r"/v: 'sum' overflowed.*not a finite"):
        run(prop({"reduce": {"strategy": "sum"}}), 1.5e308, 1.5e308)
    with pytest.raises(ReductionError, match=r"/v: 'sum' expects numbers"):
        run(prop({"reduce": {"strategy": "sum"}}), 1, "x")


def test_minimize_and_maximize():
    assert run(prop({"reduce": {"strategy": "minimize"}}), 3, 1, 2) == 1
    assert run(prop({"reduce": {"strategy": "maximize"}}), 3, 1, 5, 2) == 5
    assert run(prop({"reduce": {"strategy": "maximize"}}), "a", "b") == "b"


def test_minimize_with_key_deep_merges_ties():
    spec = {
        "reduce": {"strategy": "minimize", "key": ["/t"]},
        "properties": {"n": {"reduce": {"strategy": "sum"}}},
    }
    c = prop(spec)
    assert run(c, {"t": 5, "n": 1}, {"t": 3, "n": 1}, {"t": 3, "n": 2, "x": 1}) == {"t": 3, "n": 3, "x": 1}
    assert run(c, {"t": 3, "n": 1}, {"t": 4, "n": 9}) == {"t": 3, "n": 1}


def test_ties_without_key_take_the_right_side():
    c = prop({"reduce": {"strategy": "maximize"}})
    out = run(c, 1, 1.0)
    assert out == 1 and isinstance(out, float)


def test_append():
    c = prop({"type": ["array", "null"], "reduce": {"strategy": "append"}})
    assert run(c, [1], [2, 3], []) == [1, 2, 3]
    assert run(c, None, [1]) is None
    with pytest.raises(ReductionError, match=r"/v: 'append' expects arrays"):
        run(c, [1], None)


def test_merge_objects_deep():
    spec = {"reduce": {"strategy": "merge"}, "properties": {"n": {"reduce": {"strategy": "sum"}}}}
    assert run(prop(spec), {"a": 1, "n": 1}, {"b": 2, "n": 2}) == {"a": 1, "b": 2, "n": 3}


def test_merge_arrays_by_index():
    spec = {"reduce": {"strategy": "merge"}, "items": {"reduce": {"strategy": "sum"}}}
    assert run(prop(spec), [1, 2, 3], [10, 20]) == [11, 22, 3]


def test_merge_arrays_by_key():
    spec = {
        "reduce": {"strategy": "merge", "key": ["/id"]},
        "items": {"reduce": {"strategy": "merge"}, "properties": {"n": {"reduce": {"strategy": "sum"}}}},
    }
    got = run(prop(spec), [{"id": 1, "n": 1}, {"id": 3, "n": 1}], [{"id": 2, "n": 1}, {"id": 3, "n": 5}])
    assert got == [{"id": 1, "n": 1}, {"id": 2, "n": 1}, {"id": 3, "n": 6}]


def test_merge_wrong_type():
    with pytest.raises(ReductionError, match=r"/v: 'merge' expects objects or arrays"):
        run(prop({"reduce": {"strategy": "merge"}}), {"a": 1}, 5)


def test_set_array_form_follows_flow_fixture():
    defs = {
        "entry": {
            "type": "array",
            "items": [{"type": "integer"}, {"type": "integer", "reduce": {"strategy": "sum"}}],
            "reduce": {"strategy": "merge"},
        }
    }
    schema = {"properties": {"add": {"items": {"$ref": "#/$defs/entry"}}}, "reduce": {"strategy": "set", "key": ["/0"]}}
    c = prop(schema, **{"$defs": defs})
    steps = [
        ({"add": [[55, 1]]}, {"add": [[55, 1]]}),
        ({"add": [[99, 1]]}, {"add": [[55, 1], [99, 1]]}),
        ({"remove": [[99]], "add": [[22, 1], [55, 1]]}, {"remove": [[99]], "add": [[22, 1], [55, 2]]}),
        ({"remove": [[55]], "add": [[22, 3], [55, 1]]}, {"remove": [[55], [99]], "add": [[22, 4], [55, 1]]}),
    ]
    acc = None
    for rhs, expect in steps:
        acc = rhs if acc is None else run(c, acc, rhs)
        assert acc == expect


def test_set_object_form_and_intersect():
    schema = {
        "properties": {"add": {"additionalProperties": {"type": "integer", "reduce": {"strategy": "sum"}}}},
        "reduce": {"strategy": "set"},
    }
    c = prop(schema)
    acc = {"add": {"22": 6}}
    acc = run(c, acc, {"intersect": {"22": 0, "33": 0}})
    assert acc == {"intersect": {"22": 0, "33": 0}, "add": {"22": 6}}
    acc = run(c, acc, {"add": {"22": 2, "33": 1}})
    assert acc == {"intersect": {"22": 0, "33": 0}, "add": {"22": 8, "33": 1}}
    acc = run(c, acc, {"intersect": {"33": 0, "44": 0}, "add": {"22": 1, "33": 1}})
    assert acc == {"intersect": {"33": 0}, "add": {"22": 1, "33": 2}}
    acc = run(c, acc, {"remove": {"33": 0}, "add": {"22": 1, "33": 1}})
    assert acc == {"intersect": {}, "add": {"22": 2, "33": 1}}


def test_set_wrong_type():
    c = prop({"reduce": {"strategy": "set"}})
    with pytest.raises(ReductionError, match=r"'set'"):
        run(c, {"add": [1]}, {"add": {"a": 1}})
    with pytest.raises(ReductionError, match=r"'set'"):
        run(c, {"add": [1]}, {"intersect": [1], "remove": [2]})


def test_conditionals_allof_and_ref_pick_the_strategy_per_document():
    schema = {
        "$defs": {"summed": {"reduce": {"strategy": "sum"}}},
        "reduce": {"strategy": "merge"},
        "properties": {"id": {"type": "string"}, "kind": {"type": "string"}, "v": {"$ref": "#/$defs/summed"}},
        "if": {"properties": {"kind": {"const": "reset"}}, "required": ["kind"]},
        "then": {"properties": {"v": {"reduce": {"strategy": "lastWriteWins"}}}},
        "allOf": [{"properties": {"w": {"reduce": {"strategy": "maximize"}}}}],
    }
    c = coll(schema)
    docs = [
        {"id": "k", "v": 1, "w": 3},
        {"id": "k", "v": 2, "w": 1},
        {"id": "k", "kind": "reset", "v": 10},
        {"id": "k", "v": 1, "kind": "x"},
    ]
    assert c.combine(docs) == {"id": "k", "v": 11, "w": 3, "kind": "x"}


DELETE_SCHEMA = {
    "reduce": {"strategy": "merge"},
    "properties": {
        "id": {"type": "string"},
        "n": {"type": "integer", "reduce": {"strategy": "sum"}},
        "_meta": {"type": "object", "properties": {"op": {"type": "string"}}},
    },
    "if": {"properties": {"_meta": {"properties": {"op": {"const": "d"}}}}, "required": ["_meta"]},
    "then": {"reduce": {"delete": True}},
}


def test_deletion_replaces_and_a_later_document_starts_afresh():
    c = coll(DELETE_SCHEMA)
    a, b = {"id": "k", "n": 1}, {"id": "k", "n": 2}
    d = {"id": "k", "_meta": {"op": "d"}}
    assert c.is_deletion(c.combine([a, b, d]))
    fresh = c.combine([a, d, b])
    assert not c.is_deletion(fresh)
    assert {k: v for k, v in fresh.items() if k != "_meta"} == {"id": "k", "n": 2}
    # A reset document replaces whatever it is reduced into (e.g. the endpoint's document).
    assert c.reduce({"id": "k", "n": 100}, fresh)["n"] == 2
    assert c.reduce(fresh, {"id": "k", "n": 3})["n"] == 5
    # and the marker keeps the reduction associative
    assert c.reduce(c.reduce(a, d), b) == c.reduce(a, c.reduce(d, b))


# ----------------------------------------------------------------------------- more documented examples


def test_maximize_with_key_deep_merges_ties_and_keeps_the_larger():
    spec = {
        "reduce": {"strategy": "maximize", "key": ["/version"]},
        "properties": {"hits": {"reduce": {"strategy": "sum"}}},
    }
    c = prop(spec)
    assert run(c, {"version": 1, "hits": 5}, {"version": 2, "hits": 1}) == {"version": 2, "hits": 1}
    assert run(c, {"version": 2, "hits": 1, "a": 1}, {"version": 2, "hits": 3, "b": 2}) == {
        "version": 2,
        "hits": 4,
        "a": 1,
        "b": 2,
    }
    assert run(c, {"version": 3, "hits": 1}, {"version": 2, "hits": 3}) == {"version": 3, "hits": 1}


def test_minimize_tie_without_key_takes_the_right_side():
    out = run(prop({"reduce": {"strategy": "minimize"}}), 2.0, 2)
    assert out == 2 and isinstance(out, int)


def test_minimize_and_maximize_order_across_types():
    # null < booleans < numbers < strings < arrays < objects
    c = prop({"reduce": {"strategy": "maximize"}})
    assert run(c, {"a": 1}, [9], "z", 5, True, None) == {"a": 1}
    c = prop({"reduce": {"strategy": "minimize"}})
    assert run(c, {"a": 1}, [9], "z", 5, True, None) is None


def test_keyed_minimize_of_non_objects_is_an_error_at_the_location():
    c = prop({"reduce": {"strategy": "minimize", "key": ["/t"]}})
    with pytest.raises(ReductionError, match=r"^/v: 'minimize' expects objects or arrays"):
        run(c, 1, 2)


def test_set_add_remove_intersect_simple_array_form():
    c = prop({"reduce": {"strategy": "set"}})
    assert run(c, {"add": [1, 3]}, {"add": [2, 3]}) == {"add": [1, 2, 3]}
    assert run(c, {"add": [1, 2, 3]}, {"remove": [2]}) == {"add": [1, 3], "remove": [2]}
    assert run(c, {"add": [1, 2, 3]}, {"intersect": [2, 3, 4]}) == {"add": [2, 3], "intersect": [2, 3, 4]}
    # a later add after a remove adds back
    assert run(c, {"add": [1], "remove": [2]}, {"add": [2]}) == {"add": [1, 2], "remove": [2]}


def test_set_object_form_merges_values_of_equal_members():
    c = prop(
        {
            "reduce": {"strategy": "set"},
            "properties": {"add": {"additionalProperties": {"reduce": {"strategy": "sum"}}}},
        }
    )
    assert run(c, {"add": {"a": 1, "b": 1}}, {"add": {"b": 2, "c": 3}}) == {"add": {"a": 1, "b": 3, "c": 3}}
    assert run(c, {"add": {"a": 1, "b": 1}}, {"remove": {"a": None}}) == {"add": {"b": 1}, "remove": {"a": None}}


def test_set_rejects_other_properties_and_non_objects():
    c = prop({"reduce": {"strategy": "set"}})
    with pytest.raises(ReductionError, match=r"^/v/other: 'set' expects only 'add', 'intersect' and 'remove'"):
        run(c, {"add": [1]}, {"other": [1]})
    with pytest.raises(ReductionError, match=r"^/v: 'set' expects an object having only .* \(got \[1\]\)$"):
        run(c, {"add": [1]}, [1])


def test_errors_name_the_nested_location():
    spec = {
        "reduce": {"strategy": "merge"},
        "properties": {
            "lines": {
                "reduce": {"strategy": "merge"},
                "items": {"reduce": {"strategy": "merge"}, "properties": {"n": {"reduce": {"strategy": "sum"}}}},
            },
            "a/b": {"reduce": {"strategy": "append"}},
        },
    }
    c = prop(spec)
    with pytest.raises(ReductionError) as exc:
        run(c, {"lines": [{"n": 1}, {"n": 2**63 - 1}]}, {"lines": [{"n": 1}, {"n": 1}]})
    assert (
        str(exc.value)
        == "/v/lines/1/n: 'sum' overflowed: the result is beyond a 64-bit integer (left 9223372036854775807, right 1)"
    )
    with pytest.raises(ReductionError, match=r"^/v/a~1b: 'append' expects arrays \(left \[1\], right \"x\"\)$"):
        run(c, {"a/b": [1]}, {"a/b": "x"})
    with pytest.raises(ReductionError, match=r"^/: 'sum' expects numbers"):
        Collection(CollectionSpec("t", ("/id",), {"reduce": {"strategy": "sum"}})).reduce({"id": "k"}, {"id": "k"})


def test_unknown_strategy_at_runtime_names_the_location():
    # specs reject unknown strategies up front; a hand-built Collection still fails clearly
    with pytest.raises(ReductionError, match=r"^/v: 'sometimes' is not a known reduction strategy"):
        run(prop({"reduce": {"strategy": "sometimes"}}), 1, 2)


def test_strategy_is_read_from_the_right_hand_document_oneof():
    # firstWriteWins for inserts, lastWriteWins for updates: the right-hand side decides
    spec = {
        "oneOf": [
            {"properties": {"action": {"const": "insert"}}, "reduce": {"strategy": "firstWriteWins"}},
            {"properties": {"action": {"const": "update"}}, "reduce": {"strategy": "lastWriteWins"}},
        ]
    }
    c = prop(spec)
    first = {"action": "insert", "x": 1}
    assert run(c, first, {"action": "insert", "x": 2}) == first
    assert run(c, first, {"action": "update", "x": 3}) == {"action": "update", "x": 3}


def test_conditional_delete_and_documented_example():
    c = coll(DELETE_SCHEMA)
    docs = [{"id": "k", "n": 1}, {"id": "k", "n": 2}, {"id": "k", "_meta": {"op": "d"}}]
    out = c.combine(docs)
    assert out == {"id": "k", "_meta": {"op": "d"}} and c.is_deletion(out)
    out = c.combine(docs + [{"id": "k", "n": 5}])
    assert out == {"id": "k", "n": 5, "_meta": {"reset": True}} and not c.is_deletion(out)


def _docs_examples():
    import json
    import os
    import re

    import yaml

    path = os.path.join(REPO, "docs", "reductions.md")
    with open(path, encoding="utf-8") as f:
        text = f.read()
    blocks = re.compile(r"```(\w+)\n(.*?)```", re.S)
    out = []
    parts = re.split(r"\n<!-- example( \(not associative\))? -->\n", text)
    for i in range(1, len(parts) - 1, 2):
        (ls, schema), (li, inputs), (lr, result) = [m.groups() for m in blocks.finditer(parts[i + 1])][:3]
        assert (ls, li, lr) == ("yaml", "json", "json"), f"example {i}"
        out.append(
            pytest.param(
                yaml.safe_load(schema),
                [json.loads(line) for line in inputs.splitlines() if line.strip()],
                json.loads(result),
                parts[i] is None,
                id=f"example{i // 2}",
            )
        )
    assert len(out) >= 14
    return out


@pytest.mark.parametrize("schema, inputs, result, associative", _docs_examples())
def test_docs_examples(schema, inputs, result, associative):
    """Every example in docs/reductions.md: the inputs, folded in order, give the result."""
    from tidemark.spec import parse_spec

    # the schema is also a valid spec (the same checks load_spec runs)
    parse_spec({"collections": {"c": {"key": ["/id"], "schema": schema}}})
    c = Collection(CollectionSpec("c", ("/id",), schema))
    for d in inputs:
        assert c.validate(d) == []
    assert c.combine(inputs) == result
    # and any split point gives the same (associativity on the documented inputs)
    for i in range(1, len(inputs) if associative else 1):
        assert c.reduce(c.combine(inputs[:i]), c.combine(inputs[i:])) == result
