"""The wire form: every message survives encode → decode unchanged (hypothesis), and bad
lines are refused with a WireError that says why."""

from __future__ import annotations

import json

import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tidemark.protocol import wire
from tidemark.protocol.messages import (
    KEY_SPACE_MAX,
    Acknowledge,
    Acknowledged,
    Applied,
    Apply,
    BindingSpec,
    Field,
    Flush,
    Flushed,
    Load,
    Loaded,
    Open,
    Opened,
    Quarantine,
    Range,
    Spec,
    SpecResponse,
    StartCommit,
    StartedCommit,
    StateUpdate,
    Store,
    StoreRows,
    StoreTexts,
    Validate,
    Validated,
    ValidatedBinding,
)

# ------------------------------------------------------------------- strategies

text = st.text(max_size=12)
scalars = st.one_of(st.none(), st.booleans(), st.integers(), st.floats(allow_nan=False, allow_infinity=False), text)
json_values = st.recursive(
    scalars, lambda inner: st.lists(inner, max_size=4) | st.dictionaries(text, inner, max_size=4), max_leaves=12
)
json_objects = st.dictionaries(text, json_values, max_size=4)
key = st.lists(st.one_of(text, st.integers(), st.booleans()), min_size=1, max_size=3).map(tuple)
keys = st.lists(key, max_size=5).map(tuple)
docs = st.lists(json_values, max_size=5).map(tuple)
small = st.integers(min_value=0, max_value=8)


@st.composite
def ranges(draw):
    a = draw(st.integers(0, KEY_SPACE_MAX))
    b = draw(st.integers(0, KEY_SPACE_MAX))
    return Range(min(a, b), max(a, b))


updates = st.none() | st.builds(StateUpdate, json_values, st.booleans())
fields = st.builds(
    Field,
    text,
    text,
    st.sampled_from(["string", "integer", "number", "boolean", "object", "json"]),
    st.booleans(),
    st.booleans(),
    st.none() | text,
)
binding_specs = st.builds(
    BindingSpec,
    json_objects,
    text,
    st.lists(text, max_size=3).map(tuple),
    st.lists(fields, max_size=4).map(tuple),
    json_objects,
    st.booleans(),
)
bindings = st.lists(binding_specs, max_size=3).map(tuple)
validated_bindings = st.builds(
    ValidatedBinding, st.lists(text, max_size=3).map(tuple), st.booleans(), st.dictionaries(text, text, max_size=3)
)


@st.composite
def loaded(draw):
    ks = draw(keys)
    return Loaded(draw(small), ks, tuple(draw(json_values) for _ in ks))


@st.composite
def stores(draw):
    ks = draw(keys)
    n = len(ks)
    return Store(
        draw(small),
        ks,
        tuple(tuple(draw(st.lists(json_values, max_size=3))) for _ in range(n)),
        tuple(draw(json_values) for _ in range(n)),
        tuple(draw(st.booleans()) for _ in range(n)),
        tuple(draw(st.booleans()) for _ in range(n)),
    )


checkpoint_rows = st.fixed_dictionaries(
    {
        "key_begin": st.integers(0, KEY_SPACE_MAX),
        "key_end": st.integers(0, KEY_SPACE_MAX),
        "fence": st.integers(0, 2**40),
        "runtime_checkpoint": st.none() | json_objects,
    }
)

STRATEGIES: dict[type, st.SearchStrategy] = {
    Spec: st.just(Spec()),
    SpecResponse: st.builds(SpecResponse, json_objects, json_objects, text),
    Validate: st.builds(Validate, text, json_objects, bindings),
    Validated: st.builds(Validated, st.lists(validated_bindings, max_size=3).map(tuple)),
    Apply: st.builds(
        Apply,
        text,
        json_objects,
        bindings,
        text,
        st.booleans(),
        st.none() | text,
        st.lists(json_objects, max_size=2).map(tuple),
    ),
    Applied: st.builds(Applied, text),
    Open: st.builds(Open, text, text, ranges(), json_values, json_objects, bindings),
    Opened: st.builds(Opened, st.none() | json_objects),
    Acknowledge: st.builds(Acknowledge, json_values),
    Acknowledged: st.builds(Acknowledged, updates),
    Load: st.builds(Load, small, keys),
    Loaded: loaded(),
    Flush: st.just(Flush()),
    Flushed: st.builds(Flushed, updates),
    Store: stores(),
    StartCommit: st.builds(StartCommit, json_objects),
    Quarantine: st.builds(Quarantine, st.lists(json_objects, max_size=3).map(tuple)),
    StartedCommit: st.builds(StartedCommit, updates),
    wire.Describe: st.just(wire.Describe()),
    wire.Described: st.builds(wire.Described, json_objects),
    wire.Dump: st.builds(wire.Dump, text, binding_specs),
    wire.Dumped: st.builds(wire.Dumped, st.lists(json_values, max_size=4).map(tuple), st.booleans()),
    wire.ListCheckpoints: st.builds(wire.ListCheckpoints, text),
    wire.CheckpointsListed: st.builds(wire.CheckpointsListed, st.lists(checkpoint_rows, max_size=3).map(tuple)),
    wire.ListIdentities: st.builds(wire.ListIdentities, text, bindings),
    wire.IdentitiesListed: st.builds(wire.IdentitiesListed, st.lists(st.none() | json_objects, max_size=3).map(tuple)),
    wire.CoordinatorAcknowledge: st.builds(wire.CoordinatorAcknowledge, text, json_values, json_objects, bindings),
    wire.CoordinatorAcknowledged: st.just(wire.CoordinatorAcknowledged()),
    wire.Error: st.builds(wire.Error, text, text),
}
any_message = st.one_of(*STRATEGIES.values())


# ------------------------------------------------------------------------ tests


def test_there_is_a_strategy_for_every_wire_message():
    wire_classes = {cls for _, cls, _ in wire._SPECS}
    assert set(STRATEGIES) == wire_classes
    assert len(wire_classes) == len(wire.MESSAGE_NAMES)


@pytest.mark.parametrize("cls", list(STRATEGIES), ids=lambda c: c.__name__)
@settings(max_examples=40, deadline=None)
@given(data=st.data())
def test_every_message_round_trips(cls, data):
    msg = data.draw(STRATEGIES[cls])
    line = wire.encode(msg)
    assert "\n" not in line and line.isascii()
    back = wire.decode(line)
    assert type(back) is cls
    assert back == msg
    assert wire.decode(line.encode("ascii")) == msg  # bytes work too
    assert wire.encode(back) == line  # and the encoding is stable


@settings(max_examples=100, deadline=None)
@given(msg=any_message)
def test_wire_object_has_one_field_named_after_the_message(msg):
    obj = json.loads(wire.encode(msg))
    assert isinstance(obj, dict) and len(obj) == 1
    ((name, body),) = obj.items()
    assert name in wire.MESSAGE_NAMES and isinstance(body, dict)
    assert set(body) == set(type(msg).__dataclass_fields__)
    assert wire.from_json(obj) == msg


def test_the_documented_examples_decode():
    assert wire.decode('{"opened": {"runtime_checkpoint": null}}') == Opened(None)
    assert wire.decode('{"flush": {}}') == Flush()
    assert wire.decode('{"flush": null}') == Flush()
    assert wire.decode('{"load": {"binding": 0, "keys": [["a"], ["b"]]}}') == Load(0, (("a",), ("b",)))
    assert wire.decode('{"started_commit": {"state": {"updated": {"x": 1}, "merge_patch": true}}}') == StartedCommit(
        StateUpdate({"x": 1}, True)
    )
    assert wire.decode('{"error": {"type": "FencedOff", "message": "stale"}}') == wire.Error("FencedOff", "stale")
    # Fields with defaults may be left out.
    assert wire.decode('{"acknowledged": {}}') == Acknowledged(None)


def test_non_ascii_is_escaped():
    line = wire.encode(Load(0, (("ключ🙂",),)))
    assert line.isascii() and "\\u043a" in line
    assert wire.decode(line).keys == (("ключ🙂",),)


@pytest.mark.parametrize(
    "line,why",
    [
        ("not json", "not a JSON line"),
        ("[1, 2]", "exactly one field"),
        ('{"flush": {}, "flushed": {}}', "exactly one field"),
        ("{}", "exactly one field"),
        ('{"launch": {}}', "unknown wire message 'launch'"),
        ('{"flush": 3}', "flush: the message body must be an object"),
        (
            '{"open": {"materialization": "m", "version": "v", "range": {"key_begin": 9, "key_end": 1}}}',
            "open: invalid key range",
        ),
        ('{"load": {"binding": 0}}', "load:"),
        ('{"load": {"binding": 0, "keys": 5}}', "load:"),
        (
            '{"open": {"materialization": "m", "version": "v", "range": {"key_begin": 1}}}',
            "open: missing field 'key_end'",
        ),
        ('{"acknowledged": {"state": [1]}}', "acknowledged:"),
    ],
)
def test_bad_lines_are_refused(line, why):
    with pytest.raises(wire.WireError, match=why):
        wire.decode(line)


def test_non_finite_numbers_have_no_wire_form():
    with pytest.raises(ValueError):
        wire.encode(Opened({"x": float("nan")}))


def test_objects_without_a_wire_form_are_refused():
    with pytest.raises(wire.WireError, match="Range has no wire form"):
        wire.encode(Range())


def test_a_store_of_texts_keeps_its_wire_line():
    """A StoreTexts is the ``store`` line a Store with texts has always been, and decodes back
    to a StoreTexts; a Store of documents (also as older runtimes wrote it) decodes to a Store;
    a StoreRows has no wire form."""
    line = (
        r'{"store":{"binding":1,"keys":[["a"],["b",1]],"values":[],"docs":[],"exists":[false,false],'
        r'"deletes":[false,false],"texts":["{\"k\":\"a\"}","{\"k\":\"b\",\"n\":1}"],"rows":null}}'
    )
    texts = StoreTexts(1, (("a",), ("b", 1)), ('{"k":"a"}', '{"k":"b","n":1}'))
    assert wire.encode(texts) == line
    back = wire.decode(line)
    assert type(back) is StoreTexts and back == texts
    documents = Store(0, (("a",),), ((3,),), ({"k": "a", "n": 3},), (True,), (False,))
    assert wire.decode(wire.encode(documents)) == documents
    older = (
        r'{"store":{"binding":0,"keys":[["a"]],"values":[[3]],"docs":[{"k":"a","n":3}],"exists":[true],'
        r'"deletes":[false],"texts":[],"rows":null}}'
    )
    assert wire.decode(older) == documents
    with pytest.raises(wire.WireError, match="StoreRows has no wire form"):
        wire.encode(StoreRows(0, (("a",),), pa.table({"n": [1]})))
