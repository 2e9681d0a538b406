"""Which bindings the endpoint reduces itself, and what ``tidemark check`` says of each."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from tidemark.collection.collection import Collection
from tidemark.collection.sql_plan import EXACT_SUM
from tidemark.drivers.base import Capabilities, CommitPattern
from tidemark.errors import SpecError
from tidemark.options import RuntimeOptions
from tidemark.runtime.reduce_path import reduce_paths
from tidemark.spec import CollectionSpec

PG = Capabilities(
    CommitPattern.STORE_AUTHORITATIVE,
    endpoint_reduce=frozenset(
        ("sum", "maximize", "minimize", "lastWriteWins", "firstWriteWins", "append", "merge", EXACT_SUM)
    ),
)
BASE = {
    "type": "object",
    "reduce": {"strategy": "merge"},
    "required": ["id"],
    "properties": {"id": {"type": "string"}, "n": {"type": "integer", "reduce": {"strategy": "sum"}}},
}


def path(schema, caps=PG, enabled=True, delta=False):
    coll = Collection(CollectionSpec("orders", ("/id",), schema))
    b = coll.binding_spec(SimpleNamespace(resource={"table": "v"}, delta_updates=delta))
    (out,), [line] = reduce_paths([b], [coll], caps, enabled)
    return out.endpoint_reduce, line


def with_props(**props):
    return {**BASE, "properties": {**BASE["properties"], **props}}


def test_a_schema_of_sql_strategies_is_reduced_by_the_endpoint():
    assert path(BASE) == (True, "binding v: reduced by the endpoint in its commit (no Load)")
    assert path({**BASE, "reduce": {"strategy": "firstWriteWins"}})[0]
    # a date-time's maximize compares instants in the statement too, and picks the text
    assert path(with_props(at={"type": "string", "format": "date-time", "reduce": {"strategy": "maximize"}}))[0]


@pytest.mark.parametrize(
    "schema,why",
    [
        ({**BASE, "reduce": {"strategy": "lastWriteWins", "order": "/n"}}, "its root orders by /n"),
        (
            with_props(s={"type": "object", "reduce": {"strategy": "set"}}),
            "/s: set of a raw object has no compiled form",
        ),
        ({**BASE, "reduce": {"strategy": "merge", "delete": {"const": True}}}, "it declares deletions"),
        (
            with_props(n={"type": ["integer", "null"], "reduce": {"strategy": "sum"}}),
            "/n: a nullable property reduced by sum (the endpoint reduces one last or first written",
        ),
    ],
)
def test_other_schemas_load_and_say_why(schema, why):
    ok, line = path(schema)
    assert not ok and line.startswith("binding v: Load + reduce in Python (") and why in line


def test_every_property_that_keeps_a_binding_off_the_endpoint_is_named_with_the_fix():
    """An event stream as users write it: each property the compiled path does not take yet
    is named in the one line, with what compiles instead (not one generic reason)."""
    ok, line = path(
        with_props(
            at={"type": "string", "format": "date-time", "reduce": {"strategy": "maximize"}},
            status={"type": "string", "reduce": {"strategy": "lastWriteWins", "order": "/at"}},
            amount={"type": "number", "multipleOf": 0.25, "reduce": {"strategy": "sum"}},
            cents={"type": "number", "multipleOf": 0.01, "reduce": {"strategy": "sum"}},
            note={"type": ["string", "null"]},
            address={
                "type": "object",
                "reduce": {"strategy": "merge"},
                "properties": {"city": {"type": "string"}, "floor": {"type": "integer"}},
            },
            shipping={"type": "object", "reduce": {"strategy": "merge"}, "properties": {"city": {"type": "string"}}},
        )
    )
    assert not ok
    for part in (
        "/amount: a number with multipleOf 0.25 (compiled: a power of ten",
        "/status: ordered by /at, which some documents lack (the view keeps the order value of each 'status'",
    ):
        assert part in line, line
    for compiled in ("/at:", "/n:", "/cents:", "/shipping:", "/note:", "/address:"):  # what compiles is not named
        assert compiled not in line


def test_the_endpoint_the_option_and_delta_updates_decide_too():
    assert path(BASE, caps=Capabilities(CommitPattern.STORE_AUTHORITATIVE)) == (
        False,
        "binding v: Load + reduce in Python (the endpoint does not reduce in place)",
    )
    assert path(BASE, enabled=False) == (False, "binding v: Load + reduce in Python (options.endpoint_reduce is false)")
    assert (
        path(BASE, caps=Capabilities(CommitPattern.STORE_AUTHORITATIVE, endpoint_reduce=frozenset({"sum"})))[1]
        == "binding v: Load + reduce in Python (the endpoint does not reduce the root's 'merge')"
    )
    assert path(BASE, delta=True)[1].startswith("binding v: delta updates")


def test_the_option_is_a_boolean_in_the_spec_and_0_or_1_in_the_environment():
    assert RuntimeOptions.from_mapping({"endpoint_reduce": False}).endpoint_reduce is False
    with pytest.raises(SpecError, match="true or false"):
        RuntimeOptions.from_mapping({"endpoint_reduce": "no"})
    assert RuntimeOptions().with_env({"TIDEMARK_ENDPOINT_REDUCE": "0"}).endpoint_reduce is False
    with pytest.raises(SpecError, match="TIDEMARK_ENDPOINT_REDUCE"):
        RuntimeOptions().with_env({"TIDEMARK_ENDPOINT_REDUCE": "yes"})
