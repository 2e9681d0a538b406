"""Unknown schema keywords are refused when the spec loads (issue #37): a typo such as
``redcue`` would otherwise leave its location ``lastWriteWins`` without a word."""

from __future__ import annotations

import copy

import pytest
import yaml

from tidemark.collection.keywords import JSON_SCHEMA_KEYWORDS, unknown_keywords
from tidemark.errors import SpecError
from tidemark.spec import load_spec, parse_spec

SCHEMA = {
    "type": "object",
    "required": ["customer"],
    "reduce": {"strategy": "merge"},
    "properties": {
        "customer": {"type": "string"},
        "total": {"type": "number", "reduce": {"strategy": "sum"}},
    },
}


def spec_of(schema: dict) -> dict:
    return {"collections": {"orders": {"key": ["/customer"], "schema": schema}}}


def refused(schema: dict) -> SpecError:
    with pytest.raises(SpecError) as exc:
        parse_spec(spec_of(schema), file="spec.yaml")
    return exc.value


def with_(mutate) -> dict:
    schema = copy.deepcopy(SCHEMA)
    mutate(schema)
    return schema


def test_typo_of_reduce_is_refused_naming_location_and_suggestion():
    def typo(s):
        s["properties"]["total"] = {"type": "number", "redcue": {"strategy": "sum"}}

    err = refused(with_(typo))
    assert err.path == "collections.orders.schema.properties.total.redcue"
    text = str(err)
    assert text.startswith("spec.yaml:collections.orders.schema.properties.total.redcue: ")
    assert "unknown keyword `redcue`" in text
    assert "at /properties/total " in text
    assert "did you mean `reduce`?" in text
    assert "keywords of your own must start with `x-`" in text


def test_typo_at_the_root_names_the_root():
    err = refused(with_(lambda s: s.update(requried=["customer"])))
    assert err.path == "collections.orders.schema.requried"
    assert "at / " in str(err) and "did you mean `required`?" in str(err)


def test_no_suggestion_when_nothing_is_close():
    err = refused(with_(lambda s: s["properties"]["total"].update(zzzqqq=1)))
    assert "did you mean" not in str(err)
    assert "at /properties/total" in str(err)


@pytest.mark.parametrize(
    "mutate, path, pointer",
    [
        # under items, then anyOf
        (
            lambda s: s["properties"].update(
                lines={
                    "type": "array",
                    "items": {
                        "anyOf": [
                            {"type": "object", "properties": {"n": {"type": "integer", "redcue": {"strategy": "sum"}}}}
                        ]
                    },
                }
            ),
            "collections.orders.schema.properties.lines.items.anyOf[0].properties.n.redcue",
            "/properties/lines/items/anyOf/0/properties/n",
        ),
        (
            lambda s: s["properties"].update(
                pair={"type": "array", "prefixItems": [{"type": "string"}, {"tpye": "string"}]}
            ),
            "collections.orders.schema.properties.pair.prefixItems[1].tpye",
            "/properties/pair/prefixItems/1",
        ),
        (
            lambda s: s.update({"$defs": {"money": {"type": "number", "reduse": {"strategy": "sum"}}}}),
            "collections.orders.schema.$defs.money.reduse",
            "/$defs/money",
        ),
        (
            lambda s: s.update(
                {"if": {"properties": {"customer": {"const": "x"}}}, "then": {"properties": {"total": {"maximun": 3}}}}
            ),
            "collections.orders.schema.then.properties.total.maximun",
            "/then/properties/total",
        ),
        (
            lambda s: s.update(patternProperties={"^n_": {"type": "integer", "minimun": 0}}),
            "collections.orders.schema.patternProperties.^n_.minimun",
            "/patternProperties/^n_",
        ),
        (
            lambda s: s.update(additionalProperties={"type": "string", "maxLenght": 3}),
            "collections.orders.schema.additionalProperties.maxLenght",
            "/additionalProperties",
        ),
        (
            lambda s: s.update({"not": {"required": ["a"], "propertys": {}}}),
            "collections.orders.schema.not.propertys",
            "/not",
        ),
        (
            lambda s: s.update(dependentSchemas={"customer": {"requires": ["total"]}}),
            "collections.orders.schema.dependentSchemas.customer.requires",
            "/dependentSchemas/customer",
        ),
        (
            lambda s: s["properties"].update(tags={"type": "array", "contains": {"type": "string", "formta": "uuid"}}),
            "collections.orders.schema.properties.tags.contains.formta",
            "/properties/tags/contains",
        ),
        # a property name with "/" and "~" is escaped in the pointer
        (
            lambda s: s["properties"].update({"a/b~c": {"type": "string", "descripton": "x"}}),
            "collections.orders.schema.properties.a/b~c.descripton",
            "/properties/a~1b~0c",
        ),
    ],
)
def test_nested_typos_are_refused(mutate, path, pointer):
    err = refused(with_(mutate))
    assert err.path == path, str(err)
    assert f"at {pointer} " in str(err), str(err)


def test_unknown_field_in_reduce_is_refused_with_suggestion():
    err = refused(with_(lambda s: s["properties"]["total"].update(reduce={"stratgy": "sum"})))
    assert err.path == "collections.orders.schema.properties.total.reduce.stratgy"
    text = str(err)
    assert "unknown field 'stratgy' (allowed: strategy, key, order, delete)" in text
    assert "at /properties/total" in text and "did you mean `strategy`?" in text


def test_unknown_strategy_is_refused_with_suggestion():
    err = refused(with_(lambda s: s["properties"]["total"].update(reduce={"strategy": "summ"})))
    assert err.path == "collections.orders.schema.properties.total.reduce.strategy"
    assert "unknown reduction strategy 'summ'" in str(err) and "did you mean `sum`?" in str(err)


def test_annotations_and_extensions_are_accepted():
    schema = with_(
        lambda s: s.update(
            {
                "$schema": "https://json-schema.org/draft/2020-12/schema",
                "$id": "https://example.com/orders",
                "$comment": "orders by customer",
                "title": "Orders",
                "description": "one row per customer",
                "examples": [{"customer": "a", "redcue": 1, "x": {"tpye": 2}}],  # data, not schemas
                "default": {"redcue": {"strategy": "sum"}},
                "x-owner": {"team": "billing", "redcue": True},  # an extension's value is the user's
                "$defs": {"redcue": {"type": "string", "deprecated": True, "readOnly": True, "writeOnly": False}},
                "definitions": {"old": {"type": "string"}},
            }
        )
    )
    schema["properties"]["total"].update(
        {
            "x-unit": "EUR",
            "title": "Total",
            "examples": [1.5],
            "default": 0,
            "const": 1.5,
            "enum": [1.5],
            "$comment": "c",
        }
    )
    schema["properties"]["total"].pop("const")
    schema["properties"]["note"] = {
        "type": "string",
        "format": "uri",
        "contentMediaType": "text/plain",
        "contentEncoding": "base64",
        "x-pii": True,
    }
    parse_spec(spec_of(schema))
    assert list(unknown_keywords(schema)) == []


def test_property_named_like_a_typo_is_accepted():
    schema = with_(
        lambda s: s["properties"].update(
            redcue={"type": "number", "reduce": {"strategy": "sum"}}, tpye={"type": "string"}
        )
    )
    schema["required"] = ["customer", "redcue"]
    schema["dependentRequired"] = {"redcue": ["tpye"]}
    schema["dependentSchemas"] = {"redcue": {"required": ["tpye"]}}
    schema["patternProperties"] = {"^redcue_": {"type": "integer"}}
    parse_spec(spec_of(schema))


def test_every_draft_2020_12_keyword_is_known():
    from jsonschema_specifications import REGISTRY

    for uri in ("https://json-schema.org/draft/2020-12/schema", "http://json-schema.org/draft-07/schema#"):
        meta = REGISTRY.contents(uri)
        assert set(meta.get("properties") or {}) <= JSON_SCHEMA_KEYWORDS, uri
    for uri in REGISTRY:
        if "2020-12/meta/" in uri:
            assert set(REGISTRY.contents(uri).get("properties") or {}) <= JSON_SCHEMA_KEYWORDS, uri


def test_load_spec_names_the_file(tmp_path):
    """The loader `tidemark check` and `tidemark run` share names file, place and pointer."""
    schema = copy.deepcopy(SCHEMA)
    schema["properties"]["total"] = {"type": "number", "redcue": {"strategy": "sum"}}
    obj = {
        "collections": {"orders": {"key": ["/customer"], "schema": schema}},
        "materializations": {
            "v": {
                "endpoint": {"sqlite": {"path": "views.db"}},
                "bindings": [{"source": "orders", "resource": {"table": "t"}}],
            }
        },
    }
    path = tmp_path / "orders.yaml"
    path.write_text(yaml.safe_dump(obj))
    with pytest.raises(SpecError) as exc:
        load_spec(str(path))
    assert exc.value.file == str(path)
    assert str(exc.value).startswith(
        f"{path}:collections.orders.schema.properties.total.redcue: unknown keyword `redcue`"
    )
    assert "at /properties/total" in str(exc.value) and "did you mean `reduce`?" in str(exc.value)


def test_draft_07_forms_are_walked():
    schema = {
        "items": [{"tpye": "string"}],
        "dependencies": {"a": ["b"], "c": {"requried": []}},
        "contentSchema": {"tilte": "x"},
        "definitions": {"d": {"minimun": 1}},
    }
    found = {(b.pointer, b.keyword, b.suggestion) for b in unknown_keywords(schema)}
    assert found == {
        ("/items/0", "tpye", "type"),
        ("/dependencies/c", "requried", "required"),
        ("/contentSchema", "tilte", "title"),
        ("/definitions/d", "minimun", "minimum"),
    }


def test_x_keywords_of_your_own_keep_the_native_spark_plan():
    """``x-`` keywords are the user's own annotations: a schema with them compiles to the same
    plan as without them (the fast path), where any other unknown keyword would not compile."""
    from tidemark.collection.collection import Collection
    from tidemark.collection.plan import compile_collection
    from tidemark.spec import CollectionSpec

    plain = {
        "type": "object",
        "required": ["id"],
        "reduce": {"strategy": "merge"},
        "properties": {"id": {"type": "string"}, "n": {"type": "integer", "reduce": {"strategy": "sum"}}},
    }
    tagged = copy.deepcopy(plain)
    tagged["x-owner"] = "team-a"
    tagged["properties"]["n"]["x-unit"] = "items"
    compile_ = lambda schema: compile_collection(Collection(CollectionSpec("c", ("/id",), schema)))
    shape = lambda plan: [(f.name, f.kind, f.type, f.strategy) for f in plan.fields]
    assert compile_(plain) is not None and compile_(tagged) is not None
    assert shape(compile_(tagged)) == shape(compile_(plain))
