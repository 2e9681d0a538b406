"""A property ordered by another one that some documents lack (``FieldPlan.kept_order``:
``status`` last written by ``/event_time``, where some events have no ``status`` or no
``event_time``), reduced in the endpoint's statement (PostgreSQL, SQLite), lean and full, from
JSON texts, typed rows and documents: the view equals the Python fold's, ``{"_tidemark":
{"order": {…}}}`` included, over generated events (seeded).  MariaDB Loads such a binding."""

from __future__ import annotations

import random

import pytest

from tests.support.endpoint_reduce import Endpoint, fold_batches, reduced_in_endpoint
from tidemark.collection.collection import Collection
from tidemark.collection.formats import instant
from tidemark.collection.reduce import TIDEMARK
from tidemark.spec import CollectionSpec

#: the event stream's shape: date-times by instant (``status``, ``shipped`` last written by
#: ``event_time``, maximized; ``origin`` first written by ``first_seen``, minimized)
TIMES = {
    "type": "object",
    "reduce": {"strategy": "merge"},
    "required": ["k"],
    "properties": {
        "k": {"type": "string"},
        "event_time": {"type": "string", "format": "date-time", "reduce": {"strategy": "maximize"}},
        "first_seen": {"type": "string", "format": "date-time", "reduce": {"strategy": "minimize"}},
        "status": {"type": "string", "reduce": {"strategy": "lastWriteWins", "order": "/event_time"}},
        "shipped": {
            "type": "string",
            "format": "date-time",
            "reduce": {"strategy": "lastWriteWins", "order": "/event_time"},
        },
        "origin": {"type": "string", "reduce": {"strategy": "firstWriteWins", "order": "/first_seen"}},
        "n": {"type": "integer", "reduce": {"strategy": "sum"}},
    },
}
#: one property so ordered (the usual case: PostgreSQL writes its member at once)
SINGLE = {
    **TIMES,
    "properties": {k: v for k, v in TIMES["properties"].items() if k in ("k", "event_time", "status", "n")},
}
#: order values that are not date-times: an integer, a string (by code point), a boolean
PLAIN = {
    "type": "object",
    "reduce": {"strategy": "merge"},
    "required": ["k"],
    "properties": {
        "k": {"type": "string"},
        "seq": {"type": "integer", "reduce": {"strategy": "maximize"}},
        "state": {"type": "integer", "reduce": {"strategy": "lastWriteWins", "order": "/seq"}},
        "tag": {"type": "string", "reduce": {"strategy": "minimize"}},
        "owner": {"type": "string", "reduce": {"strategy": "firstWriteWins", "order": "/tag"}},
        "done": {"type": "boolean", "reduce": {"strategy": "maximize"}},
        "label": {"type": "string", "reduce": {"strategy": "lastWriteWins", "order": "/done"}},
    },
}

#: instants a few seconds apart, and less than two seconds apart, each written several ways
SPELLINGS = [
    ["2024-05-01T10:00:00Z", "2024-05-01T12:00:00+02:00", "2024-05-01T10:00:00.000Z", "2024-05-01T05:30:00-04:30"],
    ["2024-05-01T10:00:00.5Z", "2024-05-01T15:30:00.500+05:30", "2024-05-01T10:00:00.500000Z"],
    ["2024-05-01T10:00:01Z", "2024-05-01T06:00:01-04:00"],
    ["2024-05-01T10:00:05.123456Z", "2024-05-01T10:00:05.1234560+00:00"],
    ["2024-05-01T10:00:09Z", "2024-05-01T19:00:09+09:00"],
    ["2024-05-01T10:01:00Z"],
]


def time_event(rng: random.Random, k: str) -> dict:
    doc: dict = {"k": k}
    if rng.random() < 0.8:
        doc["event_time"] = rng.choice(rng.choice(SPELLINGS))
    if rng.random() < 0.5:
        doc["first_seen"] = rng.choice(rng.choice(SPELLINGS))
    if rng.random() < 0.6:
        doc["status"] = rng.choice(["new", "paid", "shipped", "Paid", "é"])
    if rng.random() < 0.3:
        doc["shipped"] = rng.choice(rng.choice(SPELLINGS))
    if rng.random() < 0.5:
        doc["origin"] = rng.choice(["web", "app", "shop"])
    if rng.random() < 0.3:
        doc["n"] = rng.randint(1, 3)
    if rng.random() < 0.03:  # a member of _tidemark the view keeps beside its order values
        doc[TIDEMARK] = {"note": rng.randint(0, 9)}
    return doc


def plain_event(rng: random.Random, k: str) -> dict:
    doc: dict = {"k": k}
    if rng.random() < 0.7:
        doc["seq"] = rng.randint(0, 6)
    if rng.random() < 0.6:
        doc["state"] = rng.randint(0, 99)
    if rng.random() < 0.6:
        doc["tag"] = rng.choice(["a", "B", "b", "ä", "a0"])
    if rng.random() < 0.6:
        doc["owner"] = rng.choice(["x", "y", "z"])
    if rng.random() < 0.6:
        doc["done"] = rng.random() < 0.5
    if rng.random() < 0.6:
        doc["label"] = rng.choice(["p", "q", "r"])
    return doc


def batches_of(schema: dict, event, seed: int, keys: int = 12, batches: int = 5) -> tuple[list[dict], dict]:
    """``batches`` batches of events over ``keys`` keys, each batch's events combined per key by
    the Python fold (what the runtime stages), and the fold of every event in order (the answer)."""
    coll = Collection(CollectionSpec("orders", ("/k",), schema))
    rng = random.Random(seed)
    combined: list[dict] = []
    answer: dict = {}
    for _ in range(batches):
        batch: dict = {}
        for _ in range(rng.randint(keys, keys * 3)):
            k = f"k{rng.randrange(keys)}"
            doc = event(rng, k)
            batch[k] = coll.reduce(batch[k], doc) if k in batch else doc
            answer[k] = coll.reduce(answer[k], doc) if k in answer else doc
        combined.append(batch)
    return combined, answer


def by_instant(view: dict) -> dict:
    """``view`` with its kept date-times as the instants they name."""

    def kept(doc: dict) -> dict:
        if TIDEMARK not in doc:
            return doc
        values = doc[TIDEMARK]["order"]
        return {**doc, TIDEMARK: {k: instant(v) if isinstance(v, str) and "T" in v else v for k, v in values.items()}}

    return {k: kept(doc) for k, doc in view.items()}


@pytest.fixture(params=[pytest.param("postgres", marks=[pytest.mark.postgres]), "sqlite"])
def endpoint(request, tmp_path):
    e = Endpoint(request.param, request, tmp_path)
    yield e
    e.driver.close()


@pytest.mark.parametrize("seed", range(4))
@pytest.mark.parametrize("document", ["lean", "full"])
@pytest.mark.parametrize("shape", ["times", "single", "plain"])
def test_a_property_ordered_by_another_that_some_documents_lack_reduces_in_the_endpoint(
    endpoint, shape, document, seed
):
    schema, event = {"times": (TIMES, time_event), "single": (SINGLE, time_event), "plain": (PLAIN, plain_event)}[shape]
    coll = Collection(CollectionSpec("orders", ("/k",), schema))
    batches, answer = batches_of(schema, event, seed)
    # the fold of the combined batches is the fold of every event (a kept order value is an
    # instant: which of its spellings is kept may go with the batches)
    assert by_instant(fold_batches(coll, batches)) == by_instant(answer)
    # the endpoint's view equals the fold's (asserted there)
    view, _ = reduced_in_endpoint(endpoint, schema, shape, document, batches, every_other_typed=True)
    assert sum(TIDEMARK in doc for doc in view.values()) >= 2  # order values kept: the test reaches them


def test_the_endpoint_keeps_the_order_value_a_status_came_from(endpoint):
    """The documented case (docs/reductions.md, "A property some documents lack"): an event
    without a ``status`` moves ``event_time`` on; the row keeps the time its ``status`` came
    from, and a later ``status`` with an earlier time than that one does not win."""
    schema = TIMES
    batches = [
        {"a": {"k": "a", "event_time": "2024-05-01T10:00:00Z", "status": "paid"}},
        {"a": {"k": "a", "event_time": "2024-05-01T11:00:00+01:00"}},  # the same instant: nothing kept
        {"a": {"k": "a", "event_time": "2024-05-01T12:00:00Z"}},
        {"a": {"k": "a", "event_time": "2024-05-01T09:00:00Z", "status": "new"}},  # earlier than paid's
        {"a": {"k": "a", "event_time": "2024-05-01T10:30:00Z", "status": "shipped"}},  # later than paid's
        {"a": {"k": "a", "status": "lost"}},  # no time: orders first
    ]
    view, got = reduced_in_endpoint(endpoint, schema, "documented", "lean", batches, every_other_typed=True)
    assert got["a"] == {
        "k": "a",
        "event_time": "2024-05-01T12:00:00Z",
        "status": "shipped",
        TIDEMARK: {"order": {"status": "2024-05-01T10:30:00Z"}},
    }


def test_mariadb_loads_such_a_binding_and_says_why():
    from types import SimpleNamespace

    from tidemark.drivers.base import Capabilities, CommitPattern
    from tidemark.drivers.mysql.reduce import ENDPOINT_REDUCE
    from tidemark.runtime.reduce_path import reduce_paths

    coll = Collection(CollectionSpec("orders", ("/k",), TIMES))
    spec = coll.binding_spec(SimpleNamespace(resource={"table": "t"}, delta_updates=False))
    caps = Capabilities(CommitPattern.STORE_AUTHORITATIVE, endpoint_reduce=ENDPOINT_REDUCE)
    (b,), [line] = reduce_paths([spec], [coll], caps)
    assert not b.endpoint_reduce
    assert "/status: ordered by /event_time, which some documents lack" in line, line
    assert "/origin: ordered by /first_seen, which some documents lack" in line, line
