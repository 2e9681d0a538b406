"""``jsontext.loads`` gives the standard library's answer (and error) for every text."""

from __future__ import annotations

import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tidemark.jsontext import loads

EDGES = [
    "123456789012345678901234567890",  # beyond 64 bits: orjson would read a float
    "-9223372036854775809",
    "18446744073709551616",
    '{"n": 12345678901234567890123, "m": 1}',
    "[1e400]",  # beyond a double: orjson refuses
    "NaN",
    "[Infinity, -Infinity]",
    '"\\ud800"',  # a lone surrogate: orjson refuses
    '{"a": 1, "a": 2}',
    '{"s": "\\u00e9\\n\\t", "f": -0.0, "i": -0, "e": 1E5}',
    " [true, false, null] ",
]


@pytest.mark.parametrize("text", EDGES)
def test_edges_read_as_the_standard_library_does(text):
    got, want = loads(text), json.loads(text)
    assert repr(got) == repr(want)
    assert repr(loads(text.encode())) == repr(want)


@pytest.mark.parametrize("text", ["{bad", "[1,]", "", '{"a" 1}', "[1] 2"])
def test_errors_are_the_standard_librarys(text):
    with pytest.raises(json.JSONDecodeError) as got:
        loads(text)
    with pytest.raises(json.JSONDecodeError) as want:
        json.loads(text)
    assert str(got.value) == str(want.value)


json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=True) | st.text(),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=4), inner, max_size=4),
    max_leaves=12,
)


@settings(max_examples=300, deadline=None)
@given(json_values)
def test_any_python_json_text(value):
    for text in (json.dumps(value), json.dumps(value, ensure_ascii=False)):  # raw non-ASCII, surrogates too
        assert repr(loads(text)) == repr(json.loads(text))
