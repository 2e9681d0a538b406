"""Spec loading and the errors it reports (file + path in the spec)."""

from __future__ import annotations

import copy
import json
import os

import pytest
import yaml

from tidemark.errors import SpecError
from tidemark.spec import load_spec, parse_spec

BASE = {
    "collections": {
        "orders": {
            "key": ["/customer"],
            "schema": {
                "type": "object",
                "required": ["customer"],
                "reduce": {"strategy": "merge"},
                "properties": {
                    "customer": {"type": "string"},
                    "total": {"type": "number", "reduce": {"strategy": "sum"}},
                },
            },
            "source": {"format": "json", "path": "data/orders"},
        }
    },
    "materializations": {
        "customer_view": {
            "endpoint": {"sqlite": {"path": "views.db"}},
            "shards": 2,
            "bindings": [{"source": "orders", "resource": {"table": "customers"}, "delta_updates": False}],
        }
    },
    "checkpoint": ".tidemark/checkpoints",
}


def write(tmp_path, obj, name="spec.yaml"):
    path = tmp_path / name
    path.write_text(yaml.safe_dump(obj) if name.endswith(".yaml") else json.dumps(obj))
    return str(path)


def spec_with(mutate):
    obj = copy.deepcopy(BASE)
    mutate(obj)
    return obj


def test_load_yaml_and_json(tmp_path):
    for name in ("spec.yaml", "spec.json"):
        spec = load_spec(write(tmp_path, BASE, name))
        coll = spec.collections["orders"]
        assert coll.key == ("/customer",)
        assert coll.source.path == os.path.join(str(tmp_path), "data", "orders")
        mat = spec.materializations["customer_view"]
        assert mat.shards == 2 and mat.on_invalid == "fail" and mat.max_document_bytes == 16 * 2**20
        assert mat.driver_name == "sqlite"
        assert mat.driver_config == {"path": os.path.join(str(tmp_path), "views.db")}
        assert mat.bindings[0].resource == {"table": "customers"}
        assert spec.file.endswith(name) and spec.base_dir == str(tmp_path)


def test_version_is_stable_and_tracks_schema():
    a = parse_spec(BASE)
    b = parse_spec(copy.deepcopy(BASE))
    m = "customer_view"
    assert a.materializations[m].version(a) == b.materializations[m].version(b)
    c = parse_spec(
        spec_with(lambda o: o["collections"]["orders"]["schema"]["properties"]["total"].update(type="integer"))
    )
    assert c.materializations[m].version(c) != a.materializations[m].version(a)


def test_unknown_collection_names_file_and_path(tmp_path):
    path = write(
        tmp_path, spec_with(lambda o: o["materializations"]["customer_view"]["bindings"][0].update(source="ordrs"))
    )
    with pytest.raises(SpecError) as exc:
        load_spec(path)
    assert (
        str(exc.value)
        == f"{path}:materializations.customer_view.bindings[0].source: unknown collection 'ordrs' (known: orders)"
    )
    assert exc.value.file == path and exc.value.path == "materializations.customer_view.bindings[0].source"


@pytest.mark.parametrize(
    "mutate, path, message",
    [
        (lambda o: o.update(extra=1), "extra", "unknown field 'extra'"),
        (lambda o: o["collections"]["orders"].update(color="red"), "collections.orders.color", "unknown field 'color'"),
        (
            lambda o: o["collections"]["orders"].update(key=["/nope"]),
            "collections.orders.key[0]",
            "key /nope is not a property",
        ),
        (
            lambda o: o["collections"]["orders"].update(key=["/total"]),
            "collections.orders.key[0]",
            "keys must be one of string, integer, boolean",
        ),
        (lambda o: o["collections"]["orders"].update(key=[]), "collections.orders.key", "non-empty list"),
        (
            lambda o: o["materializations"]["customer_view"].update(shards=0),
            "materializations.customer_view.shards",
            "integer >= 1",
        ),
        (
            lambda o: o["materializations"]["customer_view"].update(on_invalid="ignore"),
            "materializations.customer_view.on_invalid",
            "must be one of fail, quarantine",
        ),
        (
            lambda o: o["materializations"]["customer_view"]["bindings"].append(
                {"source": "orders", "resource": {"table": "customers"}}
            ),
            "materializations.customer_view.bindings[1].resource",
            "duplicate resource",
        ),
        (
            lambda o: o["materializations"]["customer_view"].update(endpoint={"sqlit": {}}),
            "materializations.customer_view.endpoint.sqlit",
            "unknown endpoint driver 'sqlit'",
        ),
        (
            lambda o: o["collections"]["orders"]["schema"]["properties"]["total"].update(reduce={"strategy": "summ"}),
            "collections.orders.schema.properties.total.reduce.strategy",
            "unknown reduction strategy 'summ'",
        ),
        (
            lambda o: o["collections"]["orders"]["schema"]["properties"]["customer"].update(reduce={"strategy": "sum"}),
            "collections.orders.schema.properties.customer.reduce.strategy",
            "strategy 'sum' expects numbers",
        ),
        (
            lambda o: o["collections"]["orders"]["schema"]["properties"]["total"].update(
                reduce={"strategy": "sum", "key": ["/a"]}
            ),
            "collections.orders.schema.properties.total.reduce.key",
            "takes no key",
        ),
        (
            lambda o: o["collections"]["orders"]["schema"]["properties"]["total"].update(type="numbr"),
            "collections.orders.schema.properties.total.type",
            "not a valid JSON Schema",
        ),
        (
            lambda o: o["collections"]["orders"]["schema"].update({"$ref": "#/$defs/missing"}),
            "collections.orders.schema.$ref",
            "does not resolve",
        ),
        (
            lambda o: o["collections"]["orders"]["schema"]["properties"]["total"].update(reduce="sum"),
            "collections.orders.schema.properties.total.reduce",
            "must be a mapping like {strategy: merge}, got a string",
        ),
        (
            lambda o: o["collections"]["orders"]["schema"]["properties"]["total"].update(
                reduce={"strategy": "sum", "how": 1}
            ),
            "collections.orders.schema.properties.total.reduce.how",
            "unknown field 'how' (allowed: strategy, key, order, delete)",
        ),
        (
            lambda o: o["collections"]["orders"]["schema"]["properties"]["total"].update(reduce={}),
            "collections.orders.schema.properties.total.reduce",
            "needs a strategy (or delete: true)",
        ),
        (
            lambda o: o["collections"]["orders"]["schema"]["properties"]["total"].update(reduce={"key": ["/a"]}),
            "collections.orders.schema.properties.total.reduce",
            "'key' needs a strategy",
        ),
        (
            lambda o: o["collections"]["orders"]["schema"]["properties"]["total"].update(reduce={"delete": "yes"}),
            "collections.orders.schema.properties.total.reduce.delete",
            "must be true or false",
        ),
        (
            lambda o: o["collections"]["orders"]["schema"]["properties"]["total"].update(
                type="object", reduce={"strategy": "merge", "key": "/id"}
            ),
            "collections.orders.schema.properties.total.reduce.key",
            "must be a list of JSON pointers",
        ),
        (
            lambda o: o["collections"]["orders"]["schema"]["properties"]["total"].update(reduce={"strategy": "append"}),
            "collections.orders.schema.properties.total.reduce.strategy",
            "strategy 'append' expects arrays, but the location has type number",
        ),
        (
            lambda o: o["collections"]["orders"]["schema"]["properties"]["total"].update(reduce={"strategy": "merge"}),
            "collections.orders.schema.properties.total.reduce.strategy",
            "strategy 'merge' expects objects or arrays",
        ),
        (
            lambda o: o["collections"]["orders"]["schema"]["properties"]["total"].update(
                type="array", reduce={"strategy": "set"}
            ),
            "collections.orders.schema.properties.total.reduce.strategy",
            "strategy 'set' expects objects",
        ),
        (
            lambda o: o["collections"]["orders"]["schema"].update(
                {"then": {"properties": {"x": {"reduce": {"strategy": "nope"}}}}}
            ),
            "collections.orders.schema.then.properties.x.reduce.strategy",
            "unknown reduction strategy 'nope'",
        ),
        (
            lambda o: o["collections"]["orders"]["schema"]["properties"]["customer"].update(type=["string", "null"]),
            "collections.orders.key[0]",
            "key /customer has type string/null",
        ),
        (
            lambda o: o["collections"]["orders"].update(key=["customer"]),
            "collections.orders.key[0]",
            "must be a JSON pointer to a property",
        ),
        (
            lambda o: o["collections"]["orders"].update(schema=[1]),
            "collections.orders.schema",
            "must be a JSON Schema object, got a list",
        ),
    ],
)
def test_spec_errors(mutate, path, message):
    with pytest.raises(SpecError) as exc:
        parse_spec(spec_with(mutate), file="spec.yaml")
    assert exc.value.path == path, str(exc.value)
    assert message in str(exc.value)
    assert str(exc.value).startswith(f"spec.yaml:{path}: ")


def test_invalid_yaml_names_line(tmp_path):
    path = tmp_path / "spec.yaml"
    path.write_text("collections:\n  orders: [unclosed\n")
    with pytest.raises(SpecError, match=r"spec.yaml: invalid YAML at line \d+"):
        load_spec(str(path))


def test_constructible_in_python():
    from tidemark.spec import BindingConfig, CollectionSpec, MaterializationSpec, SourceSpec, TidemarkSpec

    coll = CollectionSpec(
        "c", ("/id",), {"type": "object", "properties": {"id": {"type": "string"}}}, SourceSpec(path="/data")
    )
    mat = MaterializationSpec("m", {"memory": {}}, bindings=(BindingConfig("c", {"table": "t"}),))
    spec = TidemarkSpec({"c": coll}, {"m": mat}, "chk", None, ".")
    assert mat.driver_name == "memory" and len(mat.version(spec)) == 16


def _orders_spec(tmp_path, source: dict) -> str:
    spec = {
        "collections": {
            "orders": {
                "key": ["/id"],
                "schema": {"type": "object", "properties": {"id": {"type": "string"}}, "required": ["id"]},
                "source": source,
            }
        },
        "materializations": {
            "v": {
                "endpoint": {"sqlite": {"path": "v.db"}},
                "bindings": [{"source": "orders", "resource": {"table": "t"}}],
            }
        },
    }
    path = tmp_path / "spec.yaml"
    path.write_text(yaml.safe_dump(spec))
    return str(path)


def test_a_misspelt_source_format_is_refused_at_load_with_the_closest_one(tmp_path):
    with pytest.raises(SpecError) as err:
        load_spec(_orders_spec(tmp_path, {"format": "jsn", "path": "data"}))
    assert "spec.yaml:collections.orders.source.format" in str(err.value) and "did you mean 'json'?" in str(err.value)


def test_check_and_run_refuse_a_missing_source_folder_before_spark_with_one_function(tmp_path):
    """``tidemark check`` (and ``tidemark run``, which calls it before Spark starts) refuse a
    source folder that does not exist, naming the file and place; nothing is created."""
    from tidemark.ops import check_spec

    spec = _orders_spec(tmp_path, {"format": "json", "path": "data"})
    for to_run in (False, True):
        with pytest.raises(SpecError) as err:
            check_spec(spec, to_run=to_run)
        assert "spec.yaml:collections.orders.source.path" in str(err.value) and "does not exist" in str(err.value)
    assert not (tmp_path / "v.db").exists() and not (tmp_path / ".tidemark").exists()
    (tmp_path / "data").mkdir()
    assert any("endpoint sqlite ok" in line for line in check_spec(spec))


def test_every_error_the_check_finds_is_reported_each_with_its_place():
    """Two typos (one message each, the first one first), in a collection and a
    materialization, plus errors beside them in the same parts; a binding of a collection
    that has errors is not reported as an unknown collection."""

    def typos(o):
        o["collections"]["orders"]["sourcee"] = o["collections"]["orders"].pop("source")
        o["collections"]["orders"]["key"] = ["/nosuch"]
        view = o["materializations"]["customer_view"]
        view["shards"] = 0
        view["on_invalid"] = "ignore"
        view["bindings"].append({"source": "orders", "resource": {"table": "customers"}})

    with pytest.raises(SpecError) as exc:
        parse_spec(spec_with(typos), file="spec.yaml")
    lines = str(exc.value).splitlines()
    assert lines[0].startswith("spec.yaml:collections.orders.sourcee: unknown field 'sourcee'"), lines
    assert exc.value.path == "collections.orders.sourcee"  # the first error's place
    places = [ln.split(": ", 1)[0] for ln in lines[:-1]]
    assert places == [
        "spec.yaml:collections.orders.sourcee",
        "spec.yaml:materializations.customer_view.shards",
        "spec.yaml:materializations.customer_view.on_invalid",
        "spec.yaml:materializations.customer_view.bindings[1].resource",
    ], lines
    assert lines[-1] == "(4 errors in the spec)"
    assert "unknown collection" not in str(exc.value)


def test_errors_within_a_collection_are_all_reported():
    def two(o):
        o["collections"]["orders"]["key"] = ["/nosuch"]
        o["collections"]["orders"]["source"]["format"] = ""

    with pytest.raises(SpecError) as exc:
        parse_spec(spec_with(two), file="spec.yaml")
    places = [ln.split(": ", 1)[0] for ln in str(exc.value).splitlines()[:-1]]
    assert places == ["spec.yaml:collections.orders.key[0]", "spec.yaml:collections.orders.source.format"], str(
        exc.value
    )


def test_two_typos_in_the_schemas_reductions_are_both_reported():
    def typos(o):
        props = o["collections"]["orders"]["schema"]["properties"]
        props["total"]["reduce"]["strategy"] = "sume"
        props["last"] = {"type": "string", "reduce": {"strategy": "lastWriteWin"}}

    with pytest.raises(SpecError) as exc:
        parse_spec(spec_with(typos), file="spec.yaml")
    lines = str(exc.value).splitlines()
    assert lines[0].startswith("spec.yaml:collections.orders.schema.properties.total.reduce.strategy: unknown"), lines
    assert "did you mean `sum`" in lines[0]
    assert lines[1].startswith("spec.yaml:collections.orders.schema.properties.last.reduce.strategy: unknown"), lines
    assert "did you mean `lastWriteWins`" in lines[1] and lines[2] == "(2 errors in the spec)"


def test_an_order_by_a_property_the_select_derives_and_some_documents_lack_is_taken():
    """The order property need not be in every document (docs/reductions.md, "A property some
    documents lack"), derived by the select: or not."""
    obj = {
        "collections": {
            "events": {
                "key": ["/id"],
                "schema": {
                    "type": "object",
                    "required": ["id"],
                    "reduce": {"strategy": "merge"},
                    "properties": {
                        "id": {"type": "string"},
                        "ts": {"type": "integer", "reduce": {"strategy": "maximize"}},
                        "status": {"type": "string", "reduce": {"strategy": "lastWriteWins", "order": "/ts"}},
                    },
                },
                "source": {"path": "data", "select": ["*", "coalesce(ts, 0) AS ts"]},
            }
        },
        "materializations": {
            "v": {
                "endpoint": {"sqlite": {"path": "v.db"}},
                "bindings": [{"source": "events", "resource": {"table": "e"}}],
            }
        },
    }
    spec = parse_spec(obj)
    assert spec.collections["events"].schema["properties"]["status"]["reduce"]["order"] == "/ts"
