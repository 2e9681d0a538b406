"""Which schema shapes compile (Spark's combine, the fast fold, the endpoints' SQL), and the
words for the ones that do not: objects merged by their properties, exact decimals."""

from __future__ import annotations

import pytest

from tidemark.collection.collection import Collection
from tidemark.collection.plan import EXACT_SUM, binding_reduction, explain_collection
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
    "sub,words",
    [
        (
            {**ADDRESS, "properties": {"city": {"type": "string"}, "n": {"type": "integer"}}},
            "several types (integer, string)",
        ),
        (
            {**ADDRESS, "properties": {"n": {"type": "integer", "reduce": {"strategy": "sum"}}}},
            "'n' is not a plain scalar",
        ),
        ({**ADDRESS, "additionalProperties": False}, "its additionalProperties is False"),
        ({**ADDRESS, "required": ["city"]}, "an object with required"),
        ({**ADDRESS, "properties": {"at": {"type": "string", "format": "date-time"}}}, "'at' is not a plain scalar"),
    ],
)
def test_an_object_whose_merge_is_more_than_a_map_names_why(sub, words):
    plan, why = plan_of(address=sub)
    assert plan is None and len(why) == 1 and why[0].startswith("/address: ") and words in why[0]


def test_a_multiple_that_is_not_a_power_of_ten_names_why():
    plan, why = plan_of(amount={"type": "number", "multipleOf": 0.25})
    assert plan is None and why == [
        "/amount: a number with multipleOf 0.25 (compiled: a power of ten, 0.01 and the like)"
    ]
