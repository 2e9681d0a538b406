"""The view-identity record (tidemark.runtime.view_identity): what a recovery-log entry
records per binding, and the one comparison every start-up (and ``tidemark check``) makes."""

from __future__ import annotations

import pytest

from tidemark.errors import RecoveryError
from tidemark.protocol.messages import BindingSpec, Field
from tidemark.runtime.recovery_log import LogEntry
from tidemark.runtime.view_identity import binding_identity, check_identities, source_location
from tidemark.spec import SourceSpec


def _binding(table="orders", collection="orders", key=("/customer",), key_type="string", **resource):
    fields = tuple(Field(p.lstrip("/"), p, key_type, is_key=True) for p in key) + (Field("total", "/total", "number"),)
    return BindingSpec(resource={"table": table, **resource}, collection=collection, key=tuple(key), fields=fields)


def _entry(identities, batch=7, **kw):
    return LogEntry(batch, {}, None, [[0, 2**32 - 1]], "v1", identities=identities, **kw)


def _refusal(old, new) -> str:
    with pytest.raises(RecoveryError) as err:
        check_identities("m", _entry(old), new)
    return str(err.value)


def test_the_same_bindings_pass_and_a_first_run_has_nothing_to_compare():
    ids = [binding_identity(_binding(), "/data/orders")]
    check_identities("m", _entry(ids), [binding_identity(_binding(), "/data/orders")])
    check_identities("m", None, ids)


def test_a_renamed_resource_is_refused_naming_both_names_and_reset():
    msg = _refusal([binding_identity(_binding("orders"))], [binding_identity(_binding("orders_v2"))])
    assert "'orders'" in msg and "'orders_v2'" in msg and "tidemark reset SPEC -m m" in msg
    assert "batch 7" in msg and msg.endswith("Nothing was changed")


def test_a_schema_qualified_resource_moved_to_another_schema_is_refused():
    msg = _refusal([binding_identity(_binding(schema="a"))], [binding_identity(_binding(schema="b"))])
    assert "orders/schema=a" in msg and "orders/schema=b" in msg


def test_swapped_bindings_are_refused_naming_where_the_collection_went():
    old = [binding_identity(_binding("a", "orders")), binding_identity(_binding("b", "refunds"))]
    new = [binding_identity(_binding("b", "refunds")), binding_identity(_binding("a", "orders"))]
    msg = _refusal(old, new)
    assert "binding 0 read collection 'orders', now 'refunds' (now binding 1: were bindings reordered?)" in msg


def test_a_changed_key_and_a_changed_key_type_are_refused():
    assert "keyed by ['/customer'], now ['/id']" in _refusal(
        [binding_identity(_binding())], [binding_identity(_binding(key=("/id",)))]
    )
    assert "key types" in _refusal([binding_identity(_binding())], [binding_identity(_binding(key_type="integer"))])


def test_a_binding_added_or_removed_is_refused_naming_it_and_rebuild():
    one = [binding_identity(_binding("orders"))]
    two = one + [binding_identity(_binding("cities", collection="by_city"))]
    msg = _refusal(one, two)
    assert "the view has 1 binding(s), the spec 2 (new: 'cities' (by_city))" in msg, msg
    assert "tidemark rebuild SPEC -m m" in msg and msg.endswith("Nothing was changed")
    msg = _refusal(two, one)
    assert "the view has 2 binding(s), the spec 1 (gone: 'cities')" in msg and "tidemark rebuild" in msg, msg


def test_a_moved_source_is_refused_and_a_dataframe_source_is_not_compared():
    assert "read from /data/orders, now /data/orders2" in _refusal(
        [binding_identity(_binding(), "/data/orders")], [binding_identity(_binding(), "/data/orders2")]
    )
    check_identities("m", _entry([binding_identity(_binding(), "/data/orders")]), [binding_identity(_binding(), None)])


def test_entries_written_before_the_record_are_compared_by_resource_and_collection():
    legacy = LogEntry(3, {}, None, [], "v0", resources=[["orders"]], reductions=[{"collection": "orders"}])
    check_identities("m", legacy, [binding_identity(_binding())])
    with pytest.raises(RecoveryError, match="'orders_v2'"):
        check_identities("m", legacy, [binding_identity(_binding("orders_v2"))])


def test_source_locations_resolve_against_the_spec_folder(tmp_path):
    assert source_location(SourceSpec(path="data"), str(tmp_path)) == str(tmp_path / "data")
    assert source_location(SourceSpec(path="s3://b/x/"), ".") == "s3://b/x"
    assert source_location(None) is None
