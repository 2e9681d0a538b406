"""A ``reduce`` that can never apply is refused, with its location and why (a ``sum`` under a
``lastWriteWins`` root would keep the later amount and pass every check)."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest
import yaml

import tidemark
from tidemark.errors import SpecError
from tidemark.spec import parse_spec

ORDERED_ROOT = {
    "type": "object",
    "required": ["id", "ts"],
    "reduce": {"strategy": "lastWriteWins", "order": "/ts"},
    "properties": {
        "id": {"type": "string"},
        "ts": {"type": "string", "format": "date-time"},
        "amount": {"type": "number", "reduce": {"strategy": "sum"}},
    },
}


def _spec(schema):
    return {
        "collections": {"c": {"key": ["/id"], "schema": schema}},
        "materializations": {
            "m": {"endpoint": {"memory": {}}, "bindings": [{"source": "c", "resource": {"table": "t"}}]}
        },
    }


def _with(root_reduce, **props):
    schema = {"type": "object", "required": ["id"], "properties": {"id": {"type": "string"}, **props}}
    if root_reduce is not None:
        schema["reduce"] = root_reduce
    return schema


@pytest.mark.parametrize(
    "schema, where, why",
    [
        (ORDERED_ROOT, "schema.properties.amount.reduce", "/ above it is reduced with 'lastWriteWins' (order /ts)"),
        (
            _with(None, n={"type": "integer", "reduce": {"strategy": "sum"}}),
            "schema.properties.n.reduce",
            "/ above it has no reduce annotation, so it is 'lastWriteWins'",
        ),
        (
            _with(
                {"strategy": "merge"},
                a={"type": "object", "properties": {"n": {"type": "integer", "reduce": {"strategy": "maximize"}}}},
            ),
            "schema.properties.a.properties.n.reduce",
            "/a above it has no reduce annotation",
        ),
        (
            _with(
                {"strategy": "merge"},
                a={
                    "type": "array",
                    "reduce": {"strategy": "append"},
                    "items": {"type": "object", "reduce": {"strategy": "merge"}},
                },
            ),
            "schema.properties.a.items.reduce",
            "/a above it is reduced with 'append'",
        ),
        (
            _with(
                {"strategy": "merge"},
                a={
                    "type": "object",
                    "reduce": {"strategy": "maximize"},
                    "properties": {"n": {"type": "integer", "reduce": {"strategy": "sum"}}},
                },
            ),
            "schema.properties.a.properties.n.reduce",
            "/a above it is reduced with 'maximize'",
        ),
        (  # an allOf member's annotation is the location's too
            {"allOf": [ORDERED_ROOT]},
            "schema.allOf[0].properties.amount.reduce",
            "'lastWriteWins' (order /ts)",
        ),
    ],
)
def test_a_reduce_that_can_never_apply_is_refused(schema, where, why):
    with pytest.raises(SpecError) as exc:
        parse_spec(_spec(schema), file=None, base_dir=".")
    text = str(exc.value)
    assert f"collections.c.{where}: this reduce can never apply" in text
    assert why in text
    assert "reduce: {strategy: merge}" in text


@pytest.mark.parametrize(
    "schema",
    [
        _with({"strategy": "merge"}, n={"type": "integer", "reduce": {"strategy": "sum"}}),
        _with(
            {"strategy": "merge"},
            a={
                "type": "object",
                "reduce": {"strategy": "maximize", "key": ["/v"]},  # ties deep-merge
                "properties": {"v": {"type": "integer"}, "n": {"type": "integer", "reduce": {"strategy": "sum"}}},
            },
        ),
        _with(
            {"strategy": "merge"},
            s={
                "type": "object",
                "reduce": {"strategy": "set"},
                "properties": {"add": {"type": "object", "additionalProperties": {"reduce": {"strategy": "sum"}}}},
            },
        ),
        # a conditional strategy: the documents decide
        {
            "type": "object",
            "required": ["id"],
            "anyOf": [{"required": ["x"], "reduce": {"strategy": "merge"}}, {"reduce": {"strategy": "lastWriteWins"}}],
            "properties": {"id": {"type": "string"}, "n": {"type": "integer", "reduce": {"strategy": "sum"}}},
        },
        # the whole document replaced by its latest version, nothing below annotated
        {k: v for k, v in ORDERED_ROOT.items() if k != "properties"} | {"properties": {"id": {"type": "string"}}},
    ],
)
def test_reductions_that_apply_are_accepted(schema):
    parse_spec(_spec(schema), file=None, base_dir=".")


def test_refused_by_the_cli_and_the_python_api_before_anything_runs(tmp_path):
    spec = {
        "collections": {"orders": {"key": ["/id"], "schema": ORDERED_ROOT, "source": {"path": "data"}}},
        "materializations": {
            "v": {
                "endpoint": {"sqlite": {"path": "v.db"}},
                "bindings": [{"source": "orders", "resource": {"table": "t"}}],
            },
        },
    }
    (tmp_path / "data").mkdir()
    (tmp_path / "spec.yaml").write_text(yaml.safe_dump(spec))
    for command in ("check", "run"):
        done = subprocess.run(
            [sys.executable, "-m", "tidemark", command, str(tmp_path / "spec.yaml")],
            capture_output=True,
            text=True,
            timeout=120,
            env={**os.environ, "COLUMNS": "400"},
        )
        assert done.returncode != 0
        first = done.stderr.strip().splitlines()[0]
        assert "schema.properties.amount.reduce: this reduce can never apply" in first, done.stderr
        assert "Traceback" not in done.stderr
    assert not (tmp_path / "v.db").exists() and not (tmp_path / ".tidemark").exists()
    with pytest.raises(SpecError, match="properties.amount.reduce: this reduce can never apply"):
        tidemark.materialize(
            None,
            collection={"key": ["/id"], "schema": ORDERED_ROOT},
            endpoint={"sqlite": {"path": str(tmp_path / "w.db")}},
            checkpoint=str(tmp_path / "ck"),
        )
    assert not (tmp_path / "w.db").exists() and not (tmp_path / "ck").exists()
