"""Event-time order (``reduce: {strategy: ..., order: /pointer}``) in the Python reducer and
the spec: the result does not depend on the order documents arrive in, ties fall back to
the source order, and misuse is refused with the location named."""

from __future__ import annotations

import copy
import itertools

import pytest

from tidemark.collection.collection import Collection
from tidemark.collection.plan import compile_collection
from tidemark.collection.sql_plan import sql_reduction
from tidemark.errors import SpecError
from tidemark.spec import CollectionSpec, parse_spec

ROOT = {
    "type": "object",
    "required": ["id"],
    "reduce": {"strategy": "lastWriteWins", "order": "/updated_at"},
    "properties": {
        "id": {"type": "string"},
        "updated_at": {"type": "string", "format": "date-time"},
        "status": {"type": "string"},
    },
}
EVENTS = [  # (updated_at, status); by instant: 3 < 1 < 0 == 4 < 2; 5 has none
    {"id": "a", "updated_at": "2024-05-01T10:00:00Z", "status": "paid"},
    {"id": "a", "updated_at": "2024-05-01T11:00:00+02:00", "status": "new"},  # 09:00Z
    {"id": "a", "updated_at": "2024-05-01T09:30:00-05:00", "status": "shipped"},  # 14:30Z: the latest
    {"id": "a", "updated_at": "2024-05-01T08:00:00Z", "status": "draft"},
    {"id": "a", "updated_at": "2024-05-01T10:00:00.000Z", "status": "paid again"},  # ties with 0
    {"id": "a", "status": "unknown time"},
]


def coll(schema, key=("/id",)):
    return Collection(CollectionSpec("t", key, schema))


def test_last_write_wins_by_event_time_whatever_the_arrival_order():
    c = coll(ROOT)
    results = {str(c.combine(p)) for p in itertools.permutations(EVENTS[:4] + EVENTS[5:])}
    assert results == {str(EVENTS[2])}


def test_first_write_wins_by_event_time_and_a_missing_order_value_orders_first():
    schema = copy.deepcopy(ROOT)
    schema["reduce"]["strategy"] = "firstWriteWins"
    c = coll(schema)
    assert {str(c.combine(p)) for p in itertools.permutations(EVENTS[:4])} == {str(EVENTS[3])}
    # a document without /updated_at orders before every one with it: under firstWriteWins it wins
    assert c.combine([EVENTS[0], EVENTS[5], EVENTS[3]]) == EVENTS[5]


def test_ties_fall_back_to_the_source_order():
    c = coll(ROOT)
    # 0 and 4 name the same instant: the later in source order wins under lastWriteWins ...
    assert c.combine([EVENTS[0], EVENTS[4]]) == EVENTS[4]
    assert c.combine([EVENTS[4], EVENTS[0]]) == EVENTS[0]
    first = copy.deepcopy(ROOT)
    first["reduce"]["strategy"] = "firstWriteWins"
    # ... and the earlier under firstWriteWins
    assert coll(first).combine([EVENTS[4], EVENTS[0]]) == EVENTS[4]


def test_order_on_a_nested_object_and_on_a_keyed_maximize():
    nested = {
        "type": "object",
        "reduce": {"strategy": "merge"},
        "properties": {
            "id": {"type": "string"},
            "n": {"type": "integer", "reduce": {"strategy": "sum"}},
            "address": {"type": "object", "reduce": {"strategy": "lastWriteWins", "order": "/at"}},
        },
    }
    c = coll(nested)
    docs = [
        {"id": "a", "n": 1, "address": {"at": 5, "city": "Lyon"}},
        {"id": "a", "n": 2, "address": {"at": 3, "city": "Nice"}},
    ]
    assert c.combine(docs) == {"id": "a", "n": 3, "address": {"at": 5, "city": "Lyon"}}
    assert compile_collection(c) is None  # nested order: the Python fold (Spark's fallback path)
    # keyed maximize: the order is the key's last part, so equal keys keep the later event
    best = {"type": "object", "reduce": {"strategy": "maximize", "key": ["/score"], "order": "/at"}}
    c = coll({"type": "object", "properties": {"id": {"type": "string"}}, **best})
    docs = [
        {"id": "a", "score": 7, "at": 2, "by": "x"},
        {"id": "a", "score": 7, "at": 1, "by": "y"},
        {"id": "a", "score": 3, "at": 9, "by": "z"},
    ]
    assert {str(c.combine(p)) for p in itertools.permutations(docs)} == {str(docs[0])}


def test_a_root_order_by_a_top_level_scalar_compiles():
    plan = compile_collection(coll(ROOT))
    assert plan is not None and plan.root_strategy == "lastWriteWins" and plan.order == "updated_at"
    deep = copy.deepcopy(ROOT)
    deep["reduce"]["order"] = "/meta/at"
    assert compile_collection(coll(deep)) is None


def _spec(reduce_, where="root"):
    schema = copy.deepcopy(ROOT)
    if where == "root":
        schema["reduce"] = reduce_
    else:
        schema["reduce"] = {"strategy": "merge"}
        schema["properties"]["status"]["reduce"] = reduce_
    return {
        "collections": {"c": {"key": ["/id"], "schema": schema}},
        "materializations": {"m": {"endpoint": {"memory": {}}, "bindings": [{"source": "c"}]}},
    }


@pytest.mark.parametrize(
    "reduce_, where, message",
    [
        (
            {"strategy": "sum", "order": "/updated_at"},
            "root",
            "strategy 'sum' takes no order (those that do: lastWriteWins",
        ),
        (
            {"strategy": "maximize", "order": "/updated_at"},
            "root",
            "order on 'maximize' breaks ties of its key: give key",
        ),
        ({"strategy": "lastWriteWins", "order": "updated_at"}, "root", "must be a JSON pointer inside the value"),
        (  # on a property: the order property must be kept as the latest event's
            {"strategy": "lastWriteWins", "order": "/updated_at"},
            "status",
            "the view keeps one /updated_at per key, which must be the latest event's",
        ),
    ],
)
def test_misuse_of_order_is_refused(reduce_, where, message):
    with pytest.raises(SpecError, match="reduce.order") as exc:
        parse_spec(_spec(reduce_, where), file=None, base_dir=".")
    assert message in str(exc.value)


# ----------------------------------------------------------------------------- on a property
# "Last status by event time" beside sums on flat documents: the status of the document with
# the greatest /ts, the amounts summed (the first-week trial could not say it).

FLAT = {
    "type": "object",
    "required": ["id", "ts", "status"],
    "reduce": {"strategy": "merge"},
    "properties": {
        "id": {"type": "string"},
        "ts": {"type": "string", "format": "date-time", "reduce": {"strategy": "maximize"}},
        "status": {"type": "string", "reduce": {"strategy": "lastWriteWins", "order": "/ts"}},
        "first_status": {"type": "string", "reduce": {"strategy": "lastWriteWins"}},
        "amount": {"type": "number", "reduce": {"strategy": "sum"}},
    },
}
STRATEGIES_IN_SQL = frozenset(("sum", "maximize", "minimize", "lastWriteWins", "firstWriteWins", "merge"))
FLAT_EVENTS = [
    {"id": "a", "ts": "2024-05-01T10:00:00Z", "status": "paid", "amount": 1},
    {"id": "a", "ts": "2024-05-01T11:00:00+02:00", "status": "new", "amount": 2},  # 09:00Z
    {"id": "a", "ts": "2024-05-01T09:30:00-05:00", "status": "shipped", "amount": 4},  # 14:30Z: the latest
    {"id": "a", "ts": "2024-05-01T08:00:00Z", "status": "draft", "amount": 8},
]


def flat_spec(schema):
    return {
        "collections": {"c": {"key": ["/id"], "schema": schema}},
        "materializations": {"m": {"endpoint": {"memory": {}}, "bindings": [{"source": "c", "resource": {"t": 1}}]}},
    }


def test_a_property_ordered_by_event_time_beside_sums_whatever_the_arrival_order():
    spec = parse_spec(flat_spec(FLAT), file=None, base_dir=".")
    c = Collection(spec.collections["c"])
    # Spark's compiled combine takes it, and an endpoint reduces it in SQL (no Loads): the
    # status is picked by the instants of /ts, /ts itself too (kept as written)
    plan = compile_collection(c)
    assert [(f.order, f.picked_by) for f in plan.fields] == [("", ""), ("", "ts"), ("ts", "ts"), ("", ""), ("", "")]
    assert sql_reduction(c, STRATEGIES_IN_SQL) == (plan, "")
    results = set()
    for p in itertools.permutations(FLAT_EVENTS):
        doc = c.combine(p)
        results.add((doc["status"], doc["ts"], doc["amount"]))
        # batch by batch, as a view is built: the stored document reduced with each new one
        stored = p[0]
        for d in p[1:]:
            stored = c.reduce(stored, d)
        assert (stored["status"], stored["amount"]) == ("shipped", 15)
    assert results == {("shipped", "2024-05-01T09:30:00-05:00", 15)}


@pytest.mark.parametrize(
    "change, message",
    [
        (lambda s: s["properties"]["ts"].pop("reduce"), "must be the latest event's for 'status''s to be"),
        (lambda s: s["properties"].update(_tidemark={"type": "object"}), "the schema declares /_tidemark"),
        (lambda s: s["properties"]["status"]["reduce"].update(order="/nope"), "names a top-level property"),
        (
            lambda s: s["properties"]["status"]["reduce"].update(strategy="firstWriteWins"),
            "declare `ts: {..., reduce: {strategy: minimize}}`",
        ),
    ],
)
def test_a_property_order_that_could_not_be_exact_is_refused(change, message):
    schema = copy.deepcopy(FLAT)
    change(schema)
    with pytest.raises(SpecError, match="properties.status.reduce.order") as exc:
        parse_spec(flat_spec(schema), file=None, base_dir=".")
    assert message in str(exc.value)


OPTIONAL = copy.deepcopy(FLAT)
OPTIONAL["required"] = ["id"]  # documents without /status, and without /ts


def optional_events(seed: int, n: int) -> list[dict]:
    """Events of one key: /ts in several spellings (some equal instants), /status in some."""
    import random

    rng = random.Random(seed)
    out = []
    for i in range(n):
        d: dict = {"id": "a", "amount": 1}
        if rng.random() < 0.85:
            hour = rng.randrange(6)
            d["ts"] = rng.choice([f"2024-05-01T1{hour}:00:00Z", f"2024-05-01T1{hour}:00:00.000+00:00"])
        if rng.random() < 0.5:
            d["status"] = f"s{i}"
        out.append(d)
    return out


def expected_status(docs: list[dict], first: bool):
    """The oracle: of the documents holding /status, the one with the greatest /ts instant
    (least, ``first``; a document without /ts orders first), ties to the later (earlier) in
    source order."""
    from tidemark.collection.formats import instant

    held = [(i, d) for i, d in enumerate(docs) if "status" in d]
    if not held:
        return None

    def rank(item):
        i, d = item
        t = instant(d["ts"]) if "ts" in d else None
        return (t is not None, t or 0, i)

    return (min if first else max)(held, key=rank)[1]["status"]


@pytest.mark.parametrize("first", [False, True])
@pytest.mark.parametrize("seed", range(40))
def test_a_property_some_documents_lack_is_the_latest_holders_in_any_batching(seed, first):
    """``status`` ordered by ``/ts`` where documents may lack either: the value of the latest
    document holding it (by the instant of its own /ts), however the documents are split into
    batches and reduced; the reduced document keeps that document's /ts in /_tidemark/order
    where it is not the document's own."""
    import random

    schema = copy.deepcopy(OPTIONAL)
    if first:
        schema["properties"]["status"]["reduce"]["strategy"] = "firstWriteWins"
        schema["properties"]["ts"]["reduce"]["strategy"] = "minimize"
    spec = parse_spec(flat_spec(schema), file=None, base_dir=".")
    c = Collection(spec.collections["c"])
    docs = optional_events(seed, 7)
    want = expected_status(docs, first)
    rng = random.Random(seed)
    for _ in range(6):  # batches of any sizes: each combined, then reduced into the stored one
        cuts = sorted(rng.sample(range(1, len(docs)), rng.randrange(len(docs))))
        stored = None
        for lo, hi in zip([0, *cuts], [*cuts, len(docs)]):
            combined = c.combine(docs[lo:hi])
            stored = combined if stored is None else c.reduce(stored, combined)
        assert stored.get("status") == want, (docs, cuts, stored)
        assert stored["amount"] == len(docs)
        kept = stored.get("_tidemark", {}).get("order", {})
        if want is None:
            assert "status" not in kept
