"""Adopting a table's rows (tidemark.runtime.adoption): rows as documents, and what is refused."""

from __future__ import annotations

import datetime as dt
import decimal
import uuid

import pytest

from tidemark.collection.collection import Collection
from tidemark.errors import DocumentError, RecoveryError, SpecError
from tidemark.runtime import adoption as ad
from tidemark.spec import parse_spec

SCHEMA = {
    "type": "object",
    "required": ["customer"],
    "reduce": {"strategy": "merge"},
    "properties": {
        "customer": {"type": "string"},
        "amount": {"type": "number", "reduce": {"strategy": "sum"}},
        "orders": {"type": "integer", "reduce": {"strategy": "sum"}},
        "vip": {"type": "boolean"},
        "tags": {"type": "array", "items": {"type": "string"}, "reduce": {"strategy": "append"}},
        "seen": {"type": "string", "format": "date-time"},
        "firstOrder": {"type": "string"},
    },
}


def collection() -> Collection:
    spec = parse_spec(
        {"collections": {"c": {"key": ["/customer"], "schema": SCHEMA}}, "materializations": {}, "checkpoint": "chk"},
        file=None,
        base_dir=".",
    )
    return Collection(spec.collections["c"])


def test_a_row_becomes_a_document_with_json_values_by_the_schema():
    row = {
        "customer": "a",
        "amount": decimal.Decimal("12.50"),
        "orders": decimal.Decimal("3"),
        "vip": 1,
        "tags": '["x", "y"]',
        "seen": dt.datetime(2026, 1, 2, 3, 4, 5),
        "firstorder": "2026-01-01",
        "city": None,
    }
    doc = ad.row_document(row, SCHEMA)
    assert doc == {
        "customer": "a",
        "amount": 12.5,
        "orders": 3,
        "vip": True,
        "tags": ["x", "y"],
        "seen": "2026-01-02T03:04:05Z",
        "firstOrder": "2026-01-01",
    }  # NULL: absent; case folded
    assert isinstance(doc["orders"], int)


def test_a_flow_document_column_is_the_document_as_it_is():
    row = {"customer": "a", "amount": 1, "flow_document": '{"customer":"a","amount":2.5,"tags":["t"]}'}
    assert ad.row_document(row, SCHEMA) == {"customer": "a", "amount": 2.5, "tags": ["t"]}


def test_other_values_keep_their_text():
    u = uuid.uuid4()
    assert ad.json_value(u) == str(u)
    assert (
        ad.json_value(dt.datetime(2026, 1, 2, tzinfo=dt.timezone(dt.timedelta(hours=2)))) == "2026-01-02T00:00:00+02:00"
    )
    assert ad.json_value(b"\x00\x01") == "AAE="
    assert ad.json_value(decimal.Decimal("2.25"), {"type": "number"}) == 2.25


def test_rows_are_checked_against_the_schema_and_the_key_and_the_first_bad_ones_named():
    c = collection()
    assert ad.read_documents([{"customer": "a", "orders": 1}], c, "customers", "v2") == ['{"customer":"a","orders":1}']
    with pytest.raises(DocumentError) as err:
        ad.read_documents(
            [
                {"customer": "a", "orders": 1},
                {"customer": "b", "orders": "many"},
                {"customer": "a", "orders": 2},
                {"orders": 4},
            ],
            c,
            "customers",
            "v2",
        )
    text = str(err.value)
    assert text.startswith("adopt v2 from 'customers': 3 row(s) do not fit collection 'c'; nothing was written")
    assert 'row 2 (key ["b"])' in text and "orders" in text
    assert 'rows 1 and 3 both hold key ["a"]' in text and "GROUP BY" in text
    assert "row 4:" in text and "customer" in text


def test_a_table_without_rows_is_refused():
    with pytest.raises(SpecError, match="holds no rows"):
        ad.read_documents([], collection(), "customers", "v2")


def test_since_is_rfc3339_or_epoch_seconds():
    assert ad.parse_since(None) is None
    assert ad.parse_since("1700000000.5") == 1700000000.5
    assert ad.parse_since("2026-11-27T08:00:00Z") == ad.parse_since("2026-11-27T10:00:00+02:00")
    assert ad.parse_since("2026-11-27T08:00:00") == ad.parse_since("2026-11-27T08:00:00Z")
    with pytest.raises(SpecError, match="RFC 3339"):
        ad.parse_since("yesterday")


def test_an_unfinished_adopt_is_refused_with_the_command_that_finishes_it(tmp_path):
    loc = str(tmp_path / "v")
    ad.refuse_unfinished("v", loc)  # none: nothing to say
    record = ad.new_record("v", 1700000000.0)
    record.bindings.append(ad.AdoptedBinding(0, "customers_v2", "customers", 2, ad.write_rows(loc, 0, ["{}", "{}"])))
    ad.write_record(loc, record)
    with pytest.raises(RecoveryError) as err:
        ad.refuse_unfinished("v", loc)
    assert "its adopt (customers_v2 from 'customers' (2 rows); input up to 2023-11-14T22:13:20Z) did not finish" in str(
        err.value
    )
    assert "`tidemark adopt SPEC -m v --from 'customers'`" in str(err.value)
    record.done = True
    ad.write_record(loc, record)
    ad.refuse_unfinished("v", loc)
    assert ad.read_record(loc) == record


def test_columns_named_otherwise_are_listed_with_the_query_that_renames_them():
    with pytest.raises(DocumentError) as err:
        ad.read_documents([{"cust_id": "a", "total": 3.5}], collection(), "spend", "v2")
    first = str(err.value).splitlines()[0]
    assert "Columns that match no property of the schema: cust_id, total" in first
    assert "properties no column gives: customer, amount" in first
    assert '--from "SELECT *, cust_id AS customer, total AS amount FROM spend"' in first
