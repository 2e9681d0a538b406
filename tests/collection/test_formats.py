"""Asserted formats (tidemark.collection.formats): each format's grammar, date-time instants,
and the rule in every validation path (Validator, both validator packages, conditions)."""

from __future__ import annotations

import pytest

from tests.support.format_cases import CASES, DATE_TIMES_IN_ORDER
from tidemark.collection import formats
from tidemark.collection.collection import Collection
from tidemark.collection.order import compare_date_time
from tidemark.collection.validate import Validator, fast_validator, slow_validator
from tidemark.spec import CollectionSpec


def _flat(groups):
    return [v for g in groups for v in (g if isinstance(g, list) else [g])]


@pytest.mark.parametrize("fmt, value, valid", [(f, v, ok) for f, cases in CASES.items() for v, ok in cases])
def test_each_format(fmt, value, valid):
    assert formats.ASSERTED[fmt](value) is valid
    schema = {"type": "object", "properties": {"v": {"format": fmt}}}
    violations = Validator(schema).violations({"v": value})
    assert violations == ([] if valid else [f"/v: {value!r} is not a {fmt!r}"])
    # both packages, each on its own, give the same answer (the Validator trusts jsonschema-rs's "valid")
    assert slow_validator(schema).is_valid({"v": value}) is valid
    assert fast_validator(schema).is_valid({"v": value}) is valid


@pytest.mark.parametrize("fmt", sorted(formats.ASSERTED))
def test_formats_apply_to_strings_only(fmt):
    v = Validator({"format": fmt})
    for value in (1, 1.5, None, True, [], {}):
        assert v.violations(value) == []


def test_other_formats_stay_annotations():
    schema = {"properties": {"h": {"format": "hostname"}, "u": {"format": "uri"}, "x": {"format": "x-custom"}}}
    doc = {"h": "-not a host-", "u": "::", "x": "anything"}
    assert Validator(schema).violations(doc) == []
    assert slow_validator(schema).is_valid(doc) and fast_validator(schema).is_valid(doc)


def test_date_times_order_by_instant():
    flat = _flat(DATE_TIMES_IN_ORDER)
    for i, a in enumerate(DATE_TIMES_IN_ORDER):
        for j, b in enumerate(DATE_TIMES_IN_ORDER):
            for x in a if isinstance(a, list) else [a]:
                for y in b if isinstance(b, list) else [b]:
                    assert compare_date_time(x, y) == (i > j) - (i < j), (x, y)
                    assert (formats.instant(x) == formats.instant(y)) is (i == j)
    assert all(formats.instant(v) is not None for v in flat)


def test_the_date_time_order_is_total():
    """Date-times by instant, before every other string; other values as in compare()."""
    values = [
        None,
        True,
        3,
        "2024-05-01T10:00:00Z",
        "2024-05-01T09:30:00-05:00",
        "2024-05-01T09:45:00Z x",
        "yesterday",
        "",
        [1],
        {"a": 1},
    ]
    ordered = [
        None,
        True,
        3,
        "2024-05-01T10:00:00Z",
        "2024-05-01T09:30:00-05:00",
        "",
        "2024-05-01T09:45:00Z x",
        "yesterday",
        [1],
        {"a": 1},
    ]
    import functools

    assert sorted(values, key=functools.cmp_to_key(compare_date_time)) == ordered
    for a in values:
        for b in values:
            for c in values:
                if compare_date_time(a, b) <= 0 and compare_date_time(b, c) <= 0:
                    assert compare_date_time(a, c) <= 0


SCHEMA = {
    "type": "object",
    "reduce": {"strategy": "merge"},
    "properties": {
        "id": {"type": "string"},
        "last": {"type": "string", "format": "date-time", "reduce": {"strategy": "maximize"}},
        "first": {"type": "string", "format": "date-time", "reduce": {"strategy": "minimize"}},
        "text": {"type": "string", "reduce": {"strategy": "maximize"}},
    },
}


@pytest.mark.parametrize("fast", [True, False], ids=["fast-reducer", "generic-reducer"])
def test_maximize_minimize_compare_instants_and_keep_the_text(fast):
    coll = Collection(CollectionSpec("t", ("/id",), SCHEMA))
    reduce = coll.reduce if fast else coll.reducer.reduce
    a = {"id": "x", "last": "2024-05-01T10:00:00Z", "first": "2024-05-01T10:00:00Z", "text": "2024-05-01T10:00:00Z"}
    b = {
        "id": "x",
        "last": "2024-05-01T09:30:00-05:00",
        "first": "2024-05-01T11:00:00+02:00",
        "text": "2024-05-01T09:30:00-05:00",
    }
    assert reduce(a, b) == {
        "id": "x",
        "last": "2024-05-01T09:30:00-05:00",
        "first": "2024-05-01T11:00:00+02:00",
        # without the format, strings compare by code point
        "text": "2024-05-01T10:00:00Z",
    }
    assert reduce(b, a) == {
        "id": "x",
        "last": "2024-05-01T09:30:00-05:00",
        "first": "2024-05-01T11:00:00+02:00",
        "text": "2024-05-01T10:00:00Z",
    }
    # equal instants: the right side's text, as for any tie
    c = {"id": "x", "last": "2024-05-01T14:30:00.000Z", "first": "2024-05-01T09:00:00+00:00"}
    assert reduce(reduce(a, b), c) == {
        "id": "x",
        "last": "2024-05-01T14:30:00.000Z",
        "first": "2024-05-01T09:00:00+00:00",
        "text": "2024-05-01T10:00:00Z",
    }
    # a stored value from before formats were asserted orders after every date-time
    old = {"id": "x", "last": "yesterday", "first": "yesterday"}
    assert reduce(old, a) == {
        "id": "x",
        "last": "yesterday",
        "first": "2024-05-01T10:00:00Z",
        "text": "2024-05-01T10:00:00Z",
    }


def test_fast_and_generic_reducers_agree_on_date_times():
    import itertools

    coll = Collection(CollectionSpec("t", ("/id",), SCHEMA))
    values = _flat(DATE_TIMES_IN_ORDER) + ["yesterday", 5, None]
    for x, y in itertools.product(values, repeat=2):
        a, b = {"id": "k", "last": x, "first": x}, {"id": "k", "last": y, "first": y}
        assert coll.reduce(a, b) == coll.reducer.reduce(a, b), (x, y)


def test_the_rhs_location_decides_through_conditionals():
    """A date-time location reached through allOf / $ref compares instants too."""
    schema = {
        "$defs": {"ts": {"type": "string", "format": "date-time"}},
        "type": "object",
        "reduce": {"strategy": "merge"},
        "properties": {
            "id": {"type": "string"},
            "t": {"allOf": [{"$ref": "#/$defs/ts"}], "reduce": {"strategy": "maximize"}},
        },
    }
    coll = Collection(CollectionSpec("t", ("/id",), schema))
    out = coll.combine(
        [
            {"id": "a", "t": "2024-05-01T10:00:00Z"},
            {"id": "a", "t": "2024-05-01T09:30:00-05:00"},
            {"id": "a", "t": "2024-05-01T10:30:00Z"},
        ]
    )
    assert out == {"id": "a", "t": "2024-05-01T09:30:00-05:00"}


def test_conditions_assert_formats_too():
    """A condition (if / anyOf / oneOf) that chooses a strategy reads formats as validation does."""
    from tidemark.collection.schema import SchemaIndex

    cond = {"properties": {"v": {"format": "date-time"}}}
    index = SchemaIndex({"type": "object", "if": cond})
    assert index.is_valid(cond, {"v": "2024-05-01T10:00:00Z"}) is True
    assert index.is_valid(cond, {"v": "yesterday"}) is False
    referring = {"$ref": "#/$defs/d"}
    index = SchemaIndex({"$defs": {"d": cond}, "anyOf": [referring]})
    assert index.is_valid(referring, {"v": "yesterday"}) is False  # jsonschema, for a reference


def test_keyed_maximize_compares_date_time_keys_as_instants():
    schema = {
        "type": "object",
        "reduce": {"strategy": "merge"},
        "properties": {
            "id": {"type": "string"},
            "latest": {
                "type": "object",
                "reduce": {"strategy": "maximize", "key": ["/at"]},
                "properties": {
                    "at": {"type": "string", "format": "date-time"},
                    "n": {"type": "integer", "reduce": {"strategy": "sum"}},
                },
            },
        },
    }
    coll = Collection(CollectionSpec("t", ("/id",), schema))
    out = coll.combine(
        [
            {"id": "a", "latest": {"at": "2024-05-01T10:00:00Z", "v": "ten", "n": 1}},
            {"id": "a", "latest": {"at": "2024-05-01T09:30:00-05:00", "v": "14:30", "n": 2}},
            {"id": "a", "latest": {"at": "2024-05-01T14:30:00.0Z", "n": 3}},  # a tie: merged
            {"id": "a", "latest": {"at": "2024-05-01T11:00:00Z", "v": "eleven", "n": 4}},
        ]
    )
    assert out == {"id": "a", "latest": {"at": "2024-05-01T14:30:00.0Z", "v": "14:30", "n": 5}}
