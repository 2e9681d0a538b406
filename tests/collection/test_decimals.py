"""Exact decimals: ``type: number`` with ``multipleOf: 0.01`` (tidemark.collection.decimals)."""

from __future__ import annotations

import random
from decimal import Decimal

import pytest

from tidemark.collection.collection import Collection
from tidemark.collection.decimals import decimal_scale, scale_of
from tidemark.collection.validate import Validator
from tidemark.drivers.common.columns import arrow_type, field_kind
from tidemark.errors import ReductionError
from tidemark.protocol.wire import _field_in, _field_out
from tidemark.spec import parse_spec

SCHEMA = {
    "type": "object",
    "reduce": {"strategy": "merge"},
    "required": ["k"],
    "properties": {
        "k": {"type": "string"},
        "total": {"type": "number", "multipleOf": 0.01, "reduce": {"strategy": "sum"}},
        "rate": {"type": "number", "multipleOf": 0.0001, "reduce": {"strategy": "maximize"}},
        "plain": {"type": "number", "reduce": {"strategy": "sum"}},
    },
}


def collection() -> Collection:
    spec = parse_spec(
        {"collections": {"c": {"key": ["/k"], "schema": SCHEMA}}, "materializations": {}, "checkpoint": "chk"},
        file=None,
        base_dir=".",
    )
    return Collection(spec.collections["c"])


def test_a_power_of_ten_multiple_of_a_number_declares_its_places():
    assert [scale_of(m) for m in (0.01, 0.001, 1e-2, 0.1, 1e-9)] == [2, 3, 2, 1, 9]
    assert [scale_of(m) for m in (0.5, 0.05, 0.25, 1, 10, True, "0.01", 1e-10, 0)] == [None] * 9
    assert decimal_scale({"type": "number", "multipleOf": 0.01}) == 2
    assert decimal_scale({"type": "integer", "multipleOf": 0.01}) is None


def test_multiple_of_is_checked_on_the_decimal_text_not_by_dividing_doubles():
    v = Validator({"type": "number", "multipleOf": 0.01})
    assert all(v.is_valid(x) for x in (0.07, 19.99, 6375.39, 0.3, 12, 1e-2))  # jsonschema alone refused 0.07, 19.99
    assert v.violations(0.015) == ["/: 0.015 is not a multiple of 0.01"]
    assert not Validator({"type": "integer", "multipleOf": 3}).is_valid(10)


def test_a_sum_of_cents_is_exact_where_doubles_drift():
    c = collection()
    draw = random.Random(5)
    doc, exact, drift = {"k": "a"}, Decimal(0), 0.0
    for _ in range(2000):
        cents = draw.randrange(1, 1_000_00) / 100
        doc = c.reduce(doc, {"k": "a", "total": cents, "plain": cents})
        exact += Decimal(repr(cents))
        drift += cents
    assert repr(doc["total"]) == str(exact)  # the exact decimal sum, as its JSON text says
    assert repr(doc["plain"]) != str(exact) and repr(drift) == repr(doc["plain"])  # a plain number: doubles


def test_a_sum_beyond_fifteen_digits_is_refused_not_rounded():
    with pytest.raises(
        ReductionError,
        match=r"^/total: 'sum' of exact decimals \(multipleOf 0.01\) would need more "
        r"than the 15 significant digits kept exact \(left 9999999999999.99, ",
    ):
        collection().reduce({"k": "a", "total": 9_999_999_999_999.99}, {"k": "a", "total": 0.01})


def test_the_field_carries_its_places_to_every_endpoint_over_the_wire():
    fields = {f.name: f for f in collection().fields()}
    assert (fields["total"].scale, fields["rate"].scale, fields["plain"].scale) == (2, 4, None)
    assert _field_in(_field_out(fields["total"])) == fields["total"]
    assert _field_in(_field_out(fields["plain"])) == fields["plain"]
    assert field_kind(fields["total"]) == "decimal:2" and field_kind(fields["plain"]) == "number"


def test_every_table_endpoint_stores_decimal_columns():
    from tidemark.drivers.delta.tables import delta_type
    from tidemark.drivers.mysql.dialect import MySqlDialect
    from tidemark.drivers.postgres.dialect import sql_type as pg_type
    from tidemark.drivers.sqlite.driver import sql_type as sqlite_type

    assert pg_type("decimal:2") == "numeric(38,2)"
    assert MySqlDialect().sql_type("decimal:4") == "decimal(38,4)"
    assert sqlite_type("decimal:2") == "NUMERIC(38,2)"
    assert str(arrow_type("decimal:2")) == "decimal128(38, 2)"
    assert delta_type("decimal:2") == "decimal(38,2)"
