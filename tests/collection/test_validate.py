"""Document parsing and schema validation messages."""

from __future__ import annotations

import pytest

from tidemark.collection.collection import Collection
from tidemark.errors import DocumentError
from tidemark.spec import CollectionSpec

SCHEMA = {
    "type": "object",
    "required": ["id", "total"],
    "properties": {
        "id": {"type": "string"},
        "total": {"type": "number", "minimum": 0, "maximum": 100},
        "status": {"enum": ["open", "closed"]},
        "name": {"type": "string", "minLength": 2, "maxLength": 4},
        "address": {"type": "object", "required": ["city"], "properties": {"city": {"type": "string"}}},
        "tags": {"type": "array", "items": {"type": "string"}, "maxItems": 2},
    },
}


@pytest.fixture
def coll():
    return Collection(CollectionSpec("t", ("/id",), SCHEMA), max_document_bytes=200)


def test_valid(coll):
    assert coll.validate({"id": "a", "total": 1}) == []


@pytest.mark.parametrize(
    "doc, violation",
    [
        ({"id": "a", "total": "x"}, "/total: 'x' is not of type 'number'"),
        ({"id": "a"}, "/: 'total' is a required property"),
        ({"id": "a", "total": 1, "status": "gone"}, "/status: 'gone' is not one of ['open', 'closed']"),
        ({"id": "a", "total": -1}, "/total: -1 is less than the minimum of 0"),
        ({"id": "a", "total": 101}, "/total: 101 is greater than the maximum of 100"),
        ({"id": "a", "total": 1, "name": "x"}, "/name: 'x' is too short"),
        ({"id": "a", "total": 1, "name": "xxxxx"}, "/name: 'xxxxx' is too long"),
        ({"id": "a", "total": 1, "address": {}}, "/address: 'city' is a required property"),
        ({"id": "a", "total": 1, "address": {"city": 5}}, "/address/city: 5 is not of type 'string'"),
        ({"id": "a", "total": 1, "tags": ["a", 1]}, "/tags/1: 1 is not of type 'string'"),
        ({"id": "a", "total": 1, "tags": ["a", "b", "c"]}, "/tags: ['a', 'b', 'c'] is too long"),
    ],
)
def test_violations(coll, doc, violation):
    assert violation in coll.validate(doc)


@pytest.mark.parametrize(
    "line, message",
    [
        ('{"id": "a", ', "unparseable JSON"),
        ('{"id": "a", "total": NaN}', "NaN is not valid JSON"),
        ('{"id": "a", "total": Infinity}', "Infinity is not valid JSON"),
        ('{"id": "a", "total": -Infinity}', "-Infinity is not valid JSON"),
        ('{"id": "a", "total": 1e400}', "not finite"),
        ('{"id": "' + "x" * 300 + '"}', "more than the maximum of 200 bytes"),
    ],
)
def test_parse_errors(coll, line, message):
    with pytest.raises(DocumentError) as exc:
        coll.parse(line, "data/a.json:3")
    assert message in str(exc.value)
    assert str(exc.value).startswith("data/a.json:3: ")
    assert exc.value.location == "data/a.json:3"


def test_missing_key(coll):
    with pytest.raises(DocumentError, match=r"data/a.json:1: document has no key component at /id"):
        coll.extract_key({"total": 1}, "data/a.json:1")


def test_check_document_names_key_and_rule(coll):
    from tidemark.spark.combined import check_document

    assert check_document(coll, '{"id": "a", "total": 1}')[:2] == (None, '["a"]')
    reason, kj, _ = check_document(coll, '{"id": "a", "total": "x", "status": "gone"}')
    assert kj == '["a"]'
    assert reason == "document violates its schema: /status: 'gone' is not one of ['open', 'closed'] (and 1 more)"
    reason, kj, _ = check_document(coll, '{"total": 1}')
    assert kj is None and reason == "document violates its schema: /: 'id' is a required property"
    reason, kj, _ = check_document(coll, '{"id": "a", "total": 1} {"id": "b"}')
    assert kj is None and reason.startswith("unparseable JSON: Extra data")


def test_document_error_message_shape():
    err = DocumentError(
        "document violates its schema: /total: 'x' is not of type 'number'", location="data/orders/a.json:3", key=("c",)
    )
    assert (
        str(err) == "data/orders/a.json:3 key ('c',): document violates its schema: /total: 'x' is not of type 'number'"
    )


def test_lone_surrogate_escapes_are_not_unicode():
    from tidemark.collection.validate import parse_document

    assert parse_document('{"s": "\\ud83d\\ude00"}') == {"s": "\U0001f600"}
    with pytest.raises(DocumentError, match=r"^f:3: unparseable JSON: a lone surrogate \\ud800 is not valid Unicode"):
        parse_document('{"s": "\\ud800"}', "f:3")
    with pytest.raises(DocumentError, match="lone surrogate"):
        parse_document('{"\\udfff": 1}', "f:3")


def test_a_byte_order_mark_is_named():
    from tidemark.collection.validate import parse_document

    with pytest.raises(
        DocumentError, match=r"^f:2: unparseable JSON: the line starts with a byte order mark \(U\+FEFF\)"
    ):
        parse_document('\ufeff{"a": 1}', "f:2")
    with pytest.raises(DocumentError, match="Expecting value at column 1"):  # other bad lines: as before
        parse_document("nope", "f:2")
    assert parse_document('{"s": "\ufeff"}') == {"s": "\ufeff"}  # inside a string it is just a character
