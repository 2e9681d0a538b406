"""Collection: fields, values, binding specs, pickling."""

from __future__ import annotations

import pickle

from tidemark.collection.collection import Collection, collection_from_spec
from tidemark.protocol.messages import Field
from tidemark.spec import BindingConfig, CollectionSpec, parse_spec

SCHEMA = {
    "type": "object",
    "required": ["tenant", "id", "total"],
    "reduce": {"strategy": "merge"},
    "$defs": {"money": {"type": "number"}},
    "properties": {
        "tenant": {"type": "string"},
        "id": {"type": "integer"},
        "total": {"$ref": "#/$defs/money", "reduce": {"strategy": "sum"}},
        "seen": {"type": "string", "format": "date-time"},
        "note": {"type": ["string", "null"]},
        "items": {"type": "array"},
        "meta": {"type": "object"},
        "either": {"type": ["string", "integer"]},
    },
}


def coll():
    return Collection(CollectionSpec("orders", ("/tenant", "/id"), SCHEMA))


def test_fields_key_first_then_scalars():
    assert coll().fields() == (
        Field("tenant", "/tenant", "string", is_key=True, nullable=False),
        Field("id", "/id", "integer", is_key=True, nullable=False),
        Field("total", "/total", "number", is_key=False, nullable=False),
        Field("seen", "/seen", "string", is_key=False, nullable=True, format="date-time"),
        Field("note", "/note", "string", is_key=False, nullable=True),
    )


def test_values_and_key():
    c = coll()
    doc = {"tenant": "t", "id": 3, "total": 1.5, "note": None, "items": [1]}
    assert c.extract_key(doc) == ("t", 3)
    assert c.values(doc) == (1.5, None, None)


def test_binding_spec():
    b = coll().binding_spec(BindingConfig("orders", {"table": "orders"}, True))
    assert b.collection == "orders" and b.key == ("/tenant", "/id") and b.delta_updates
    assert [f.name for f in b.key_fields] == ["tenant", "id"]
    assert b.schema is SCHEMA


def test_pickles():
    c = pickle.loads(pickle.dumps(coll()))
    assert c.combine([{"tenant": "t", "id": 1, "total": 1}, {"tenant": "t", "id": 1, "total": 2}])["total"] == 3
    assert c.validate({"tenant": "t", "id": 1, "total": "x"}) == ["/total: 'x' is not of type 'number'"]


def test_collection_from_spec_uses_materialization_limits():
    spec = parse_spec(
        {
            "collections": {"orders": {"key": ["/tenant", "/id"], "schema": SCHEMA}},
            "materializations": {
                "v": {
                    "endpoint": {"memory": {}},
                    "max_document_bytes": 1000,
                    "bindings": [{"source": "orders", "resource": {"table": "t"}}],
                }
            },
        }
    )
    c = collection_from_spec(spec, "orders")
    assert isinstance(c, Collection) and c.max_document_bytes == 1000 and c.key == ("/tenant", "/id")
