"""The largest key stored per range and binding (tidemark.runtime.maxkey)."""

from __future__ import annotations

from tidemark.protocol.messages import BindingSpec, Field, Range
from tidemark.runtime.maxkey import MaxKey, at_open, order, to_record


def binding(table="t", delta=False):
    return BindingSpec({"table": table}, "c", ("/k",), (Field("k", "/k", "string", is_key=True, nullable=False),),
                       delta_updates=delta)


def test_order_is_by_type_then_value():
    keys = [("b",), ("a",), (10,), (9,), (2.5,), (True,), (False,), (None,), (9, "z"), (9, "a")]
    ranked = sorted(keys, key=order)
    assert ranked == [(None,), (False,), (True,), (2.5,), (9,), (9, "a"), (9, "z"), (10,), ("a",), ("b",)]
    assert order((1,)) == order((1.0,))
    assert order(([1],)) is None and order(({"a": 1},)) is None


def test_a_key_above_the_recorded_maximum_is_absent():
    m = MaxKey([5])
    assert [m.absent((k,)) for k in (3, 5, 7, 6, 12)] == [False, False, True, True, True]
    assert m.skipped == 3 and m.record() == [12]
    untouched = MaxKey([5])
    assert not untouched.absent((1,)) and untouched.record() == [5]


def test_nothing_stored_makes_every_key_absent():
    m = MaxKey([])
    assert all(m.absent((k,)) for k in ("x", "a", "q"))
    assert m.record() == ["x"]
    assert MaxKey([]).record() == []


def test_a_key_without_a_place_in_the_order_makes_the_binding_unknown():
    m = MaxKey([])
    assert m.absent(("a",))
    assert not m.absent(([1, 2],))
    assert not m.absent(("z",))  # unknown from then on: Load every key
    assert m.record() is None


def test_what_a_shard_knows_at_open():
    t, d = binding("t"), binding("d", delta=True)
    full, low = Range(), Range(0, 0x7FFFFFFF)
    rec = {"batch_id": 1, "max_keys": to_record((t, d), full, (MaxKey(["m"]), None))}
    assert rec["max_keys"] == {"range": [0, 0xFFFFFFFF], "bindings": {"t": ["m"]}}

    # no checkpoint: nothing stored only where this run's Apply created the resource
    [m, x] = at_open((t, d), full, None, frozenset({"t", "d"}))
    assert m.record() == [] and x is None
    assert at_open((t,), full, None, frozenset()) == [None]
    # the same range, or a split half of it: the recorded maximum
    for rng in (full, low):
        [m] = at_open((t,), rng, rec, frozenset())
        assert m.prior == ["m"] and m.absent(("n",)) and not m.absent(("a",))
    # a merge: the record covers only part of the range
    half = {"batch_id": 1, "max_keys": {"range": [0, 0x7FFFFFFF], "bindings": {"t": ["m"]}}}
    assert at_open((t,), full, half, frozenset({"t"})) == [None]
    # recorded unknown stays unknown; a checkpoint from before max keys knows nothing
    assert at_open((t,), full, {"batch_id": 1, "max_keys": {"range": [0, 0xFFFFFFFF], "bindings": {"t": None}}},
                   frozenset({"t"})) == [None]
    assert at_open((t,), full, {"batch_id": 1}, frozenset({"t"})) == [None]
    # a binding the committed checkpoint never saw: new only if this run created its resource
    u = binding("u")
    assert at_open((t, u), full, rec, frozenset({"u"}))[1].record() == []
    assert at_open((t, u), full, rec, frozenset())[1] is None
