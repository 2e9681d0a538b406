"""jsonschema-rs decides validity only where it agrees with jsonschema.

The Validator trusts ``jsonschema-rs`` when it calls a document valid (``jsonschema``
decides everything else, and writes every message).  These properties generate schemas
from the keywords it is trusted with, and documents, and require both libraries to give
the same answer: in both directions, so a difference shows even where the Validator would
hide it.
"""

from __future__ import annotations

import jsonschema
import jsonschema_rs
import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from tests.support.format_cases import CASES as FORMAT_CASES
from tidemark.collection.validate import (
    Validator,
    fast_validation_applies,
    fast_validator,
    slow_validator,
    slow_validator_class,
)

TYPES = ["null", "boolean", "integer", "number", "string", "array", "object"]
KEYS = st.sampled_from(["a", "b", "é", "1"])
NUMBERS = st.one_of(st.integers(-5, 5), st.sampled_from([0.5, -1.5, 2.0, 1e300, -0.0]))

# Strings that have, or nearly have, an asserted format.
FORMATTED = st.sampled_from(sorted({v for cases in FORMAT_CASES.values() for v, _ in cases}))
FORMATS = st.sampled_from(["date-time", "date", "time", "uuid", "email", "ipv4", "ipv6", "hostname", "x-unknown"])

json_values = st.recursive(
    st.one_of(
        st.none(),
        st.booleans(),
        st.integers(-5, 5),
        st.integers(-(2**70), 2**70),
        st.floats(allow_nan=False, allow_infinity=False),
        st.sampled_from([0.0, -0.0, 1.0, 2.0, 0.5]),
        st.text(max_size=4),
        FORMATTED,
    ),
    lambda children: st.lists(children, max_size=4) | st.dictionaries(KEYS, children, max_size=4),
    max_leaves=10,
)

leaf_schemas = st.one_of(
    st.fixed_dictionaries(
        {"type": st.sampled_from(TYPES) | st.lists(st.sampled_from(TYPES), min_size=1, max_size=3, unique=True)}
    ),
    st.fixed_dictionaries({"enum": st.lists(json_values, min_size=1, max_size=3)}),
    st.fixed_dictionaries({"const": json_values}),
    st.fixed_dictionaries(
        {}, optional={"minimum": NUMBERS, "maximum": NUMBERS, "exclusiveMinimum": NUMBERS, "exclusiveMaximum": NUMBERS}
    ),
    st.fixed_dictionaries(
        {}, optional={"minLength": st.integers(0, 4), "maxLength": st.integers(0, 4), "format": FORMATS}
    ),
    st.fixed_dictionaries({"format": FORMATS}),
    st.booleans(),
)


def _composite(children):
    return st.one_of(
        st.fixed_dictionaries(
            {},
            optional={
                "type": st.just("object"),
                "properties": st.dictionaries(KEYS, children, max_size=3),
                "required": st.lists(KEYS, max_size=2, unique=True),
                "additionalProperties": children,
                "minProperties": st.integers(0, 3),
                "maxProperties": st.integers(0, 3),
                "propertyNames": st.fixed_dictionaries({"maxLength": st.integers(0, 1)}),
                "dependentRequired": st.dictionaries(KEYS, st.lists(KEYS, max_size=2, unique=True), max_size=2),
                "unevaluatedProperties": st.booleans(),
            },
        ),
        st.fixed_dictionaries(
            {},
            optional={
                "type": st.just("array"),
                "items": children,
                "prefixItems": st.lists(children, max_size=2),
                "minItems": st.integers(0, 3),
                "maxItems": st.integers(0, 3),
                "uniqueItems": st.booleans(),
                "contains": children,
                "minContains": st.integers(0, 2),
                "unevaluatedItems": st.booleans(),
            },
        ),
        st.fixed_dictionaries({"allOf": st.lists(children, min_size=1, max_size=3)}),
        st.fixed_dictionaries({"anyOf": st.lists(children, min_size=1, max_size=3)}),
        st.fixed_dictionaries({"oneOf": st.lists(children, min_size=1, max_size=3)}),
        st.fixed_dictionaries({"not": children}),
        st.fixed_dictionaries({"if": children}, optional={"then": children, "else": children}),
    )


schemas = st.recursive(leaf_schemas, _composite, max_leaves=8)


@st.composite
def rooted(draw):
    """A root schema, sometimes reaching a definition through ``$ref``, with ``reduce`` annotations."""
    body = draw(schemas)
    if draw(st.booleans()):
        return {
            "$defs": {"d": body},
            "type": "object",
            "reduce": {"strategy": "merge"},
            "properties": {"a": {"$ref": "#/$defs/d"}, "b": draw(schemas)},
        }
    return body if not isinstance(body, dict) else {**body, "reduce": {"strategy": "lastWriteWins"}}


@st.composite
def cases(draw):
    schema = draw(rooted())
    docs = draw(
        st.lists(
            json_values | st.fixed_dictionaries({}, optional={"a": json_values, "b": json_values}),
            min_size=1,
            max_size=6,
        )
    )
    return schema, docs


@settings(max_examples=400, deadline=None, derandomize=True, suppress_health_check=[HealthCheck.too_slow])
@given(cases())
def test_jsonschema_rs_agrees_with_jsonschema(case):
    schema, docs = case
    assert fast_validation_applies(schema)
    try:
        fast = fast_validator(schema)
    except Exception:  # a schema it refuses: the Validator uses jsonschema alone
        assume(False)
    slow = slow_validator(schema)
    validator = Validator(schema)
    for doc in docs:
        expected = slow.is_valid(doc)
        try:
            got = fast.is_valid(doc)
        except Exception:  # a value it cannot take: the Validator asks jsonschema
            got = expected
        assert got == expected, (schema, doc)
        assert (validator.violations(doc) == []) == expected


@pytest.mark.parametrize(
    "schema, applies",
    [
        ({"type": "object", "properties": {"a": {"type": "string"}}}, True),
        ({"type": "string", "pattern": "^a"}, False),
        ({"properties": {"a": {"patternProperties": {"^x": True}}}}, False),
        ({"type": "number", "multipleOf": 0.01}, False),
        ({"allOf": [{"$ref": "#/$defs/x"}], "$defs": {"x": True}}, True),
        ({"$ref": "https://example.com/s.json"}, False),
        ({"$ref": "other.json#/x"}, False),
        ({"$schema": "https://json-schema.org/draft/2020-12/schema", "type": "object"}, True),
        # draft 7 reads `dependencies`; tidemark (draft 2020-12) ignores it, and so must the fast path
        ({"$schema": "http://json-schema.org/draft-07/schema#", "dependencies": {"a": ["b"]}}, False),
    ],
)
def test_keywords_that_keep_jsonschema_alone(schema, applies):
    assert fast_validation_applies(schema) is applies
    assert bool(Validator(schema).fast) is applies


def test_messages_stay_jsonschemas():
    v = Validator({"type": "object", "properties": {"total": {"type": "number"}}})
    assert v.violations({"total": 1.5}) == []
    assert v.violations({"total": "x"}) == ["/total: 'x' is not of type 'number'"]


def test_validator_pickles_without_the_compiled_parts():
    import pickle

    v = Validator({"type": "integer"})
    assert v.is_valid(3) and v.fast
    w = pickle.loads(pickle.dumps(v))
    assert w._fast is None and w.is_valid(4) and not w.is_valid("x")


def test_conditions_in_reductions_use_jsonschema_rs_where_they_stand_alone():
    """The condition of a deletion is evaluated for every document reduced: a condition
    without references takes jsonschema-rs, one with a reference takes jsonschema; both
    answer alike."""
    from tidemark.collection.schema import SchemaIndex

    cond = {"required": ["_meta"], "properties": {"_meta": {"properties": {"op": {"const": "d"}}}}}
    referring = {"properties": {"n": {"$ref": "#/$defs/small"}}}
    root = {
        "$defs": {"small": {"maximum": 3}},
        "type": "object",
        "if": cond,
        "then": {"reduce": {"delete": True}},
        "anyOf": [referring, True],
    }
    index = SchemaIndex(root)
    for doc, deleted, small in [
        ({"_meta": {"op": "d"}, "n": 1}, True, True),
        ({"_meta": {"op": "u"}, "n": 9}, False, False),
        ({"n": 2**70}, False, False),
        ({}, False, True),
    ]:
        assert index.is_valid(cond, doc) is deleted
        assert index.is_valid(referring, doc) is small
    assert isinstance(index._validators[id(cond)], jsonschema_rs.Draft202012Validator)
    assert isinstance(index._validators[id(referring)], slow_validator_class())


@settings(max_examples=200, deadline=None, derandomize=True, suppress_health_check=[HealthCheck.too_slow])
@given(schemas, st.lists(json_values, min_size=1, max_size=4))
def test_condition_answers_agree(schema, docs):
    from tidemark.collection.schema import SchemaIndex

    index = SchemaIndex({"type": "object"})
    slow = index._slow_validator(schema)
    assert slow.format_checker is not None  # conditions assert formats, as validation does
    for doc in docs:
        assert index.is_valid(schema, doc) is slow.is_valid(doc)
