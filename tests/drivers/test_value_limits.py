"""What an endpoint cannot hold, as data (``ValueLimits``), and where it is refused: the
runtime's check of each Store's keys, a driver's check of a document's size, over the wire;
the kit's comparison of values (numbers as the decimals their texts spell)."""

from __future__ import annotations

import pytest

from tidemark import jsontext
from tidemark.drivers.command.driver import capabilities_from_wire
from tidemark.drivers.common.columns import INTEGER, NUMBER, TEXT, held
from tidemark.drivers.limits import ValueLimits, store_check
from tidemark.errors import EndpointRefused
from tidemark.protocol.messages import BindingSpec, Field, Store
from tidemark.testing.kit.edges import canonical, first_difference, key_of

BINDING = BindingSpec({"table": "orders"}, "c", ("/k", "/j"), (Field("k", "/k", "string", is_key=True),))


def store(*keys: tuple) -> Store:
    n = len(keys)
    return Store(0, keys, ((),) * n, ({},) * n, (False,) * n, (False,) * n)


def test_a_key_beyond_the_declared_bytes_is_refused_naming_it_and_the_limit():
    check = store_check(ValueLimits(max_key_bytes=10), [BINDING])
    assert check is not None
    check(store(("abcde", 1), ("\u00e9" * 5, 2)))  # 5 and 10 bytes: held
    with pytest.raises(EndpointRefused) as err:
        check(store(("ok", 1), ("\u00e9" * 5 + "x", 3)))  # 11 bytes
    text = str(err.value)
    assert '["éééééx", 3]' in text and "keys of at most 10 bytes" in text and "binding 0 (orders)" in text


def test_a_composite_key_counts_its_texts_together_and_characters_each():
    limits = ValueLimits(max_key_bytes=8, max_key_characters=4)
    assert limits.holds_key(("abcd", "efgh", 10**30))  # integers are not texts
    assert not limits.holds_key(("abcd", "efghi"))  # 9 bytes together
    assert not limits.holds_key(("abcde",))  # 5 characters


def test_no_declared_limit_means_no_check():
    assert store_check(ValueLimits(), [BINDING]) is None
    assert ValueLimits().describe() == "no limits"


def test_a_document_beyond_its_size_is_refused_naming_the_key():
    limits = ValueLimits(max_document_bytes=100)
    limits.check_document(100, ("k",), "kafka: topic 'orders'")
    with pytest.raises(EndpointRefused, match=r"kafka: topic 'orders': the document of key \[\"k\"\] is 101 bytes"):
        limits.check_document(101, ("k",), "kafka: topic 'orders'")


def test_an_external_driver_declares_its_limits_over_the_wire():
    caps = capabilities_from_wire("x", {"commit_pattern": "store-authoritative", "limits": {"max_key_bytes": 255}})
    assert caps.limits == ValueLimits(max_key_bytes=255)


def test_a_column_that_cannot_hold_a_value_exactly_is_null_and_the_document_keeps_it():
    kinds = [INTEGER, NUMBER, TEXT, INTEGER]
    assert held(kinds, (2**63, 2**53 + 1, "x", 2**63 - 1)) == (None, None, "x", 2**63 - 1)
    assert held(kinds, (-(2**63), 2**53, "", 1e21)) == (-(2**63), 2**53, "", None)


def test_json_text_of_integers_beyond_64_bits_and_back():
    big = {"n": 10**30, "m": -(2**64), "s": "\u00e9"}
    text = jsontext.dumps_bytes(big)
    assert text == '{"n":1000000000000000000000000000000,"m":-18446744073709551616,"s":"é"}'.encode()
    assert jsontext.loads(text) == big


def test_numbers_compare_as_the_decimals_their_texts_spell():
    assert canonical(1e21) == canonical(10**21) and canonical(-0.0) == canonical(0) and canonical(1.0) == canonical(1)
    assert canonical(1.7976931348623157e308) == canonical(17976931348623157 * 10**292)  # jsonb's spelling
    assert canonical(0.1) != canonical(0.10000000149011612) and canonical(2**63) != canonical(9.223372036854776e18)
    diff = first_difference({"a": None, "b": ""}, {"b": ""})
    assert diff is not None and diff[0] == "/a: stored null, absent when read back" and "null member" in str(diff[1])


@pytest.mark.parametrize("size", [1, 2, 3, 255, 256, 4096, 70_000])
def test_texts_of_a_size_in_bytes(size):
    assert len(key_of("", size).encode()) == size


def test_check_refuses_a_key_the_schema_makes_longer_than_the_endpoint_holds():
    from tidemark.drivers.base import Capabilities, CommitPattern
    from tidemark.errors import SpecError
    from tidemark.runtime.startup_checks import check_capabilities

    caps = Capabilities(CommitPattern.STORE_AUTHORITATIVE, limits=ValueLimits(max_key_characters=255))
    schema = {"type": "object", "properties": {"k": {"type": "string", "minLength": 300}}}
    long_key = BindingSpec({"table": "orders"}, "c", ("/k",), BINDING.fields, schema)
    with pytest.raises(
        SpecError, match="key /k is at least 300 characters .minLength.* keys of at most 255 characters"
    ):
        check_capabilities(caps, materialization="m", driver_name="mysql", bindings=[long_key])
    schema["properties"]["k"]["minLength"] = 255
    check_capabilities(caps, materialization="m", driver_name="mysql", bindings=[long_key])
