"""A source's ``select:``: Spark SQL over its documents in the spec -- a count from ``1 AS n``,
a field derived from others -- checked by ``tidemark check`` without reading a file, with
errors that name the expression."""

from __future__ import annotations

import json
import sqlite3

import pytest
import yaml

from tests.support.helpers import sqlite_view, write_input
from tidemark.errors import DocumentError, SpecError

pytestmark = pytest.mark.spark

SCHEMA = {
    "type": "object",
    "required": ["customer"],
    "reduce": {"strategy": "merge"},
    "properties": {
        "customer": {"type": "string"},
        "amount": {"type": "integer", "reduce": {"strategy": "sum"}},
        "n": {"type": "integer", "reduce": {"strategy": "sum"}},
        "big": {"type": "integer", "reduce": {"strategy": "sum"}},
        "city": {"type": "string"},
        "tags": {"type": "array", "items": {"type": "string"}, "reduce": {"strategy": "append"}},
    },
}


def write_spec(tmp_path, select) -> str:
    path = tmp_path / "spec.yaml"
    path.write_text(
        yaml.safe_dump(
            {
                "collections": {
                    "orders": {
                        "key": ["/customer"],
                        "schema": SCHEMA,
                        "source": {"path": "data", "select": select, "options": {"maxFilesPerTrigger": 1}},
                    }
                },
                "materializations": {
                    "v": {
                        "endpoint": {"sqlite": {"path": "v.db"}},
                        "bindings": [{"source": "orders", "resource": {"table": "customers"}}],
                    }
                },
            }
        )
    )
    return str(path)


SELECT = ["*", "1 AS n", "CAST(amount > 50 AS INT) AS big"]  # n and big: the later of a name wins


def test_derived_fields_are_reduced_like_any_other(spark, tmp_path):
    from tidemark.spark.runner import run_spec

    data = tmp_path / "data"
    data.mkdir()
    docs = [
        [{"customer": "a", "amount": 10, "city": "Oslo", "tags": ["x"]}, {"customer": "b", "amount": 70}],
        [{"customer": "a", "amount": 90, "tags": ["y"]}, {"customer": "a", "amount": 5, "n": 100}],
    ]
    for i, batch in enumerate(docs):
        write_input(data, i, [json.dumps(d) for d in batch])
    run_spec(write_spec(tmp_path, SELECT), spark=spark)
    view = sqlite_view(tmp_path / "v.db")
    assert view == {
        "a": {"customer": "a", "amount": 105, "city": "Oslo", "tags": ["x", "y"], "n": 3, "big": 1},
        "b": {"customer": "b", "amount": 70, "n": 1, "big": 1},
    }


def test_check_names_the_expression_spark_refuses_without_reading_a_file(spark, tmp_path):
    from tidemark.ops import check_spec

    (tmp_path / "data").mkdir()
    with pytest.raises(SpecError) as exc:
        check_spec(write_spec(tmp_path, ["*", "nosuch + 1 AS n"]))
    text = str(exc.value)
    assert "collections.orders.source.select[1]" in text and "'nosuch + 1 AS n'" in text
    assert "`nosuch` cannot be resolved" in text
    with pytest.raises(SpecError, match=r"select\[0\].*'1 \+'.*Syntax error"):
        check_spec(write_spec(tmp_path, ["1 +"]))
    assert "ok" in "\n".join(check_spec(write_spec(tmp_path, ["*", "1 AS n"])))


def test_a_line_that_is_not_json_is_named_as_without_select(spark, tmp_path):
    from tidemark.spark.runner import run_spec

    data = tmp_path / "data"
    data.mkdir()
    write_input(data, 0, [json.dumps({"customer": "a", "amount": 1}), "{not json"])
    with pytest.raises(DocumentError, match=r"orders-0000.json:2.*unparseable JSON"):
        run_spec(write_spec(tmp_path, ["*", "1 AS n"]), spark=spark)
