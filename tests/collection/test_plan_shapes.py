"""Which schema shapes compile (Spark's combine, the fast fold, the endpoints' SQL), and the
words for the ones that do not: objects merged by their properties, exact decimals."""

from __future__ import annotations

import pytest

from tidemark.collection.collection import Collection
from tidemark.collection.plan import explain_collection
from tidemark.collection.sql_plan import EXACT_SUM, binding_reduction
from tidemark.spec import CollectionSpec

ADDRESS = {
    "type": "object",
    "reduce": {"strategy": "merge"},
    "properties": {"city": {"type": "string"}, "zip": {"type": "string"}},
}
AMOUNT = {"type": "number", "multipleOf": 0.01, "reduce": {"strategy": "sum"}}


def plan_of(**props):
    schema = {"type": "object", "reduce": {"strategy": "merge"}, "properties": {"k": {"type": "string"}, **props}}
    return explain_collection(Collection(CollectionSpec("c", ("/k",), schema)))


def test_an_object_merged_by_plain_properties_of_one_type_is_a_map_and_a_power_of_ten_is_an_exact_decimal():
    plan, why = plan_of(address=ADDRESS, amount=AMOUNT)
    assert why == [] and plan is not None
    fields = {f.name: f for f in plan.fields}
    assert (fields["address"].kind, fields["address"].type, fields["address"].strategy) == ("map", "string", "merge")
    assert (fields["amount"].kind, fields["amount"].scale) == ("scalar", 2)
    schema = {
        "type": "object",
        "reduce": {"strategy": "merge"},
        "properties": {"k": {"type": "string"}, "amount": AMOUNT},
    }
    assert binding_reduction(schema, ("/k",), frozenset({"sum", "merge", "lastWriteWins"}))[1] == (
        "/amount: the endpoint does not sum exact decimals (multipleOf) itself"
    )
    assert binding_reduction(schema, ("/k",), frozenset({"sum", "merge", "lastWriteWins", EXACT_SUM}))[0] is not None


@pytest.mark.parametrize(
    "sub,members",
    [
        (
            {**ADDRESS, "properties": {"city": {"type": "string"}, "n": {"type": "integer"}}},
            [("address/city", "string", "lastWriteWins"), ("address/n", "integer", "lastWriteWins")],
        ),
        (
            {**ADDRESS, "properties": {"n": {"type": "integer", "reduce": {"strategy": "sum"}}}},
            [("address/n", "integer", "sum")],
        ),
        (
            {**ADDRESS, "additionalProperties": False},
            [("address/city", "string", "lastWriteWins"), ("address/zip", "string", "lastWriteWins")],
        ),
        (  # a required member: proved present by the JVM scan
            {**ADDRESS, "required": ["city"]},
            [("address/city", "string", "lastWriteWins"), ("address/zip", "string", "lastWriteWins")],
        ),
        (  # members of formats (a map's values would assert nothing): an object
            {
                **ADDRESS,
                "properties": {
                    "at": {"type": "string", "format": "date-time"},
                    "d": {"type": "string", "format": "date"},
                    "seen": {"type": "string", "format": "date-time", "reduce": {"strategy": "maximize"}},
                },
            },
            [
                ("address/at", "string", "lastWriteWins"),
                ("address/d", "string", "lastWriteWins"),
                ("address/seen", "string", "maximize"),  # by its instant
            ],
        ),
        (  # members carried as written (nullable, an object, arrays) beside a typed one
            {
                **ADDRESS,
                "properties": {
                    "n": {"type": "integer"},
                    "e": {"type": ["null", "string"], "title": "e"},
                    "g": {"type": "object"},
                    "t": {"type": "array", "items": {"type": "integer"}},
                    "a": {"type": "array"},
                    "o": {"type": "object", "properties": {"x": {"type": "string", "format": "date-time"}}},
                },
            },
            [("address/n", "integer", "lastWriteWins")],
        ),
        (  # an exact decimal member, summed; annotations
            {**ADDRESS, "properties": {"paid": {**AMOUNT, "title": "paid", "examples": [1.5]}}},
            [("address/paid", "number", "sum")],
        ),
    ],
)
def test_an_object_whose_merge_is_more_than_a_map_compiles_member_by_member(sub, members):
    plan, why = plan_of(address=sub)
    assert why == [] and plan is not None
    address = plan.fields[1]
    assert (address.kind, address.strategy) == ("object", "merge")
    assert [(m.name, m.type, m.strategy) for m in address.members] == members
    assert [m.scale for m in address.members] == [2 if "multipleOf" in m.schema else None for m in address.members]


@pytest.mark.parametrize(
    "sub,words",
    [
        ({**ADDRESS, "minProperties": 1}, "an object with minProperties"),
        ({**ADDRESS, "required": ["town"]}, "required names undeclared properties"),
        ({**ADDRESS, "properties": {"at": {"type": "string", "format": "ipv6"}}}, "'at' is not a plain scalar"),
        ({**ADDRESS, "properties": {"x": {"type": "number", "multipleOf": 0.25}}}, "'x' is not a plain scalar"),
        ({**ADDRESS, "properties": {"x": {"type": "integer", "minimum": 0}}}, "'x' is not a plain scalar"),
        (  # a nested object merged (last written, it is carried, picked whole)
            {  # a merge nested three levels deep (two compile)
                **ADDRESS,
                "properties": {
                    "in": {
                        **ADDRESS,
                        "properties": {
                            "deep": {
                                **ADDRESS,
                                "properties": {"er": {**ADDRESS, "properties": {"x": {"type": "string"}}}},
                            }
                        },
                    }
                },
            },
            "'in' is not a plain scalar",
        ),
        (  # a nested object whose members are not plain scalars
            {**ADDRESS, "properties": {"in": {"type": "object", "properties": {"x": {"type": "array"}}}}},
            "'in' is not a plain scalar",
        ),
        (  # carried as written: last written only
            {**ADDRESS, "properties": {"in": {"type": ["string", "null"], "reduce": {"strategy": "firstWriteWins"}}}},
            "'in' is not a plain scalar",
        ),
        ({**ADDRESS, "properties": {"n": {"type": "string", "reduce": {"strategy": "append"}}}}, "'n' is not a plain"),
        ({**ADDRESS, "properties": {"a/b": {"type": "string"}}}, "a name holding '/'"),
    ],
)
def test_an_object_that_does_not_compile_names_why(sub, words):
    plan, why = plan_of(address=sub)
    assert plan is None and len(why) == 1 and why[0].startswith("/address: ") and words in why[0]


def test_the_endpoint_reduces_an_object_whose_members_have_strategies_it_reduces_and_names_the_others():
    schema = {
        "type": "object",
        "reduce": {"strategy": "merge"},
        "properties": {
            "k": {"type": "string"},
            "address": {**ADDRESS, "properties": {"city": {"type": "string"}, "n": {"type": "integer"}}},
        },
    }
    strategies = frozenset({"sum", "merge", "lastWriteWins"})
    assert binding_reduction(schema, ("/k",), strategies)[0] is not None
    schema["properties"]["address"]["properties"]["n"]["reduce"] = {"strategy": "sum"}
    assert binding_reduction(schema, ("/k",), strategies)[0] is not None  # each member by its own strategy
    schema["properties"]["address"]["properties"]["n"]["reduce"] = {"strategy": "maximize"}
    assert binding_reduction(schema, ("/k",), strategies) == (
        None,
        "/address/n: the endpoint does not reduce 'maximize'",
    )


def test_a_multiple_that_is_not_a_power_of_ten_names_why():
    plan, why = plan_of(amount={"type": "number", "multipleOf": 0.25})
    assert plan is None and why == [
        "/amount: a number with multipleOf 0.25 (compiled: a power of ten, 0.01 and the like)"
    ]


@pytest.mark.parametrize(
    "sub,kind",
    [
        ({"type": "object", "properties": {"city": {"type": "string"}, "n": {"type": "integer"}}}, "object"),
        ({**ADDRESS, "reduce": {"strategy": "firstWriteWins"}, "required": ["zip"]}, "object"),
        (
            {"type": "array", "items": {"type": "object", "properties": {"sku": {"type": "string"}}}},
            "array",
        ),
    ],
)
def test_an_object_or_an_array_of_objects_picked_whole_compiles_with_its_members(sub, kind):
    """No ``reduce`` (lastWriteWins) or firstWriteWins: the value is picked whole, carried as
    its JSON text; its members are what the JVM scan proves."""
    plan, why = plan_of(address=sub)
    assert why == [] and plan is not None
    address = plan.fields[1]
    assert (address.kind, address.type) == ("raw", kind) and address.members


def test_a_member_sum_of_exact_decimals_is_reduced_by_an_endpoint_that_sums_them_exactly():
    schema = {
        "type": "object",
        "reduce": {"strategy": "merge"},
        "properties": {"k": {"type": "string"}, "pay": {**ADDRESS, "properties": {"paid": AMOUNT}}},
    }
    assert binding_reduction(schema, ("/k",), frozenset({"sum", "merge", "lastWriteWins"}))[1] == (
        "/pay/paid: the endpoint does not sum exact decimals (multipleOf) itself"
    )
    assert binding_reduction(schema, ("/k",), frozenset({"sum", "merge", "lastWriteWins", EXACT_SUM}))[0] is not None


def test_an_array_of_objects_with_nested_values_names_why():
    plan, why = plan_of(items={"type": "array", "items": {"type": "object", "properties": {"tags": {"type": "array"}}}})
    assert plan is None and why[0].startswith("/items: an array of objects whose property 'tags' is not a plain scalar")
