"""Which reduce changes count as a strategy change on a live view (no Spark)."""

from __future__ import annotations

import copy

import pytest

from tidemark.errors import SpecError
from tidemark.runtime.spec_changes import changes_since, check_reductions, reductions_of

BASE = {
    "type": "object",
    "reduce": {"strategy": "merge"},
    "properties": {
        "id": {"type": "string"},
        "n": {"type": "integer", "reduce": {"strategy": "sum"}},
        "city": {"type": "string"},
        "at": {"type": "string"},
    },
}


def _changed(mutate):
    new = copy.deepcopy(BASE)
    mutate(new)
    return changes_since([reductions_of("c", BASE)], [reductions_of("c", new)])


@pytest.mark.parametrize(
    "mutate, want",
    [
        (
            lambda s: s["properties"]["n"].update(reduce={"strategy": "maximize"}),
            ["collections.c.schema.properties.n.reduce: sum -> maximize"],
        ),
        (
            lambda s: s["properties"].pop("n"),
            ["collections.c.schema.properties.n.reduce: sum -> lastWriteWins (no annotation) (location removed)"],
        ),
        (
            lambda s: s.update(reduce={"strategy": "lastWriteWins", "order": "/at"}),
            ["collections.c.schema.reduce: merge -> lastWriteWins (order /at)"],
        ),
    ],
)
def test_a_changed_or_removed_strategy_is_a_change(mutate, want):
    assert _changed(mutate) == want


@pytest.mark.parametrize(
    "mutate",
    [
        lambda s: s["properties"].update(total={"type": "integer", "reduce": {"strategy": "sum"}}),  # a new location
        lambda s: s["properties"]["city"].update(reduce={"strategy": "lastWriteWins"}),  # the default, spelled out
        lambda s: s["properties"]["city"].update(description="where"),  # not a reduce
    ],
)
def test_new_locations_and_the_default_spelled_out_are_not(mutate):
    assert _changed(mutate) == []


def test_the_refusal_says_what_changed_and_the_way_forward():
    new = copy.deepcopy(BASE)
    new["properties"]["n"]["reduce"] = {"strategy": "maximize"}
    with pytest.raises(SpecError) as exc:
        check_reductions("view", 4, [reductions_of("c", BASE)], [reductions_of("c", new)], "spec.yaml")
    text = str(exc.value)
    assert text.startswith(
        "spec.yaml: materialization 'view': a reduce strategy changed on a live view: "
        "collections.c.schema.properties.n.reduce: sum -> maximize. "
    )
    assert "up to batch 4" in text and "tidemark reset SPEC -m view" in text
