"""tidemark/spark/small.py without Spark: the driver-side routing of a small batch."""

from __future__ import annotations

import pytest

from tidemark.errors import RecoveryError
from tidemark.protocol.messages import Range
from tidemark.spark.small import driver_keys, rows_table, split
from tidemark.spark.stage import END_BINDING, shard_rows


def test_rows_go_to_the_range_of_their_hash_sorted_then_an_end_row():
    ranges = Range.split(2)
    mid = ranges[1].key_begin
    rows = split(
        ranges,
        rows_table(
            [1, 0, 0, 0], ['"b"', '"z"', '"é"', '"a"'], [5, mid, 7, mid + 9], ["d1", "d2", "d3", "d4"], [1, 2, 3, 4]
        ),
    )
    assert rows[0] == [(0, 0, '"é"', "d3", 3), (0, 1, '"b"', "d1", 1), (0, END_BINDING, "", None, 0)]
    assert rows[1] == [(1, 0, '"a"', "d4", 4), (1, 0, '"z"', "d2", 2), (1, END_BINDING, "", None, 0)]
    counted = [0]
    assert [k for (_, _, k), _ in shard_rows(1, iter(rows[1]), counted)] == ['"a"', '"z"']
    assert counted == [6]


def test_code_point_order_is_utf8_byte_order():
    keys = ['"\uffff"', '"\U0001f600"', '"a"', '"\u00e9"', '"Z"']
    rows = split(Range.split(1), rows_table([0] * 5, keys, [1] * 5, [None] * 5, [1] * 5))[0][:-1]
    assert [r[2] for r in rows] == sorted(keys, key=lambda k: k.encode("utf-8"))


def test_a_layout_out_of_order_and_a_hash_outside_it():
    a, b = Range(0, 99), Range(100, 199)
    assert [r[0] for r in split((b, a), rows_table([0, 0], ['"x"', '"y"'], [150, 3], [None, None], [1, 1]))[1][:1]] == [
        1
    ]
    with pytest.raises(RecoveryError, match=r'key "y" hashes to 500, outside every range'):
        split((a, b), rows_table([0], ['"y"'], [500], [None], [1]))


def test_the_driver_takes_larger_batches_when_the_endpoint_reduces_every_binding():
    from tidemark.options import RuntimeOptions
    from tidemark.protocol.messages import BindingSpec

    def b(reduced: bool, delta: bool = False) -> BindingSpec:
        return BindingSpec({"table": "t"}, "c", ("/k",), (), endpoint_reduce=reduced, delta_updates=delta)

    opts = RuntimeOptions(small_batch_keys=25, reduced_batch_keys=1000)
    assert driver_keys(opts, [b(True), b(True)]) == 1000
    assert driver_keys(opts, [b(True), b(False)]) == 25  # one binding Loads: the Load path's limit
    assert driver_keys(opts, [b(True, delta=True)]) == 25
    assert driver_keys(opts, []) == 25
    # small_batch_keys: 0 keeps every batch on Spark's executors, whatever the path
    assert driver_keys(RuntimeOptions(small_batch_keys=0), [b(True)]) == 0
    assert driver_keys(RuntimeOptions(reduced_batch_keys=0), [b(True)]) == 0


def test_every_shard_at_once_in_the_driver_when_the_endpoint_reduces():
    from types import SimpleNamespace

    from tidemark.protocol.messages import BindingSpec
    from tidemark.spark.small import MAX_REDUCED_THREADS, MAX_THREADS, threads

    def task(shards: int, reduced: bool):
        b = BindingSpec({"table": "t"}, "c", ("/k",), (), endpoint_reduce=reduced)
        return SimpleNamespace(ranges=Range.split(shards), bindings=(b,))

    assert threads(task(16, True)) == 16
    assert threads(task(100, True)) == MAX_REDUCED_THREADS
    assert threads(task(16, False)) == MAX_THREADS
    assert threads(task(2, False)) == 2


def test_an_empty_batch_gives_each_shard_its_end_row_only():
    assert split(Range.split(2), rows_table([], [], [], [], [])) == [
        [(0, END_BINDING, "", None, 0)],
        [(1, END_BINDING, "", None, 0)],
    ]


def test_typed_rows_take_their_keys_from_the_row_where_the_key_is_top_level_properties():
    import pyarrow as pa

    from tidemark.spark.small import split_typed

    ranges = Range.split(2)
    mid = ranges[1].key_begin
    rows = pa.array(
        [{"id": "b", "n": 2, "x": 1}, {"id": "a", "n": 1, "x": 2}, {"id": "c", "n": 3, "x": 3}],
        pa.struct([("id", pa.string()), ("n", pa.int64()), ("x", pa.int64())]),
    )
    table = pa.table(
        {
            "binding": pa.array([0, 0, 0], pa.int32()),
            "key_json": ['["b",2]', '["a",1]', '["c",3]'],
            "key_hash": pa.array([5, 7, mid], pa.int64()),
            "_documents": pa.array([1, 2, 4], pa.int64()),
            "row": rows,
        }
    )
    for key in (("/id", "/n"), ("/id", "/nested/n"), ()):  # from the row's columns, then from key_json
        got = [shard.parts[0] for shard in split_typed(ranges, table, [key])]
        assert [g.keys for g in got] == [[("a", 1), ("b", 2)], [("c", 3)]]
        assert [g.rows.column("x").to_pylist() for g in got] == [[2, 1], [3]]
        assert [g.documents for g in got] == [3, 4]


def test_typed_rows_of_several_bindings_are_split_per_binding_with_each_its_own_columns():
    import pyarrow as pa

    from tidemark.spark.small import split_typed

    ranges = Range.split(2)
    mid = ranges[1].key_begin
    first = pa.struct([("id", pa.string()), ("n", pa.int64())])
    second = pa.struct([("sku", pa.int64()), ("tags", pa.string())])
    table = pa.table(
        {
            "binding": pa.array([1, 0, 0, 1], pa.int32()),
            "key_json": ["[7]", '["b"]', '["a"]', "[3]"],
            "key_hash": pa.array([5, 6, 7, mid], pa.int64()),
            "_documents": pa.array([1, 2, 4, 8], pa.int64()),
            "row_0": pa.array([None, {"id": "b", "n": 2}, {"id": "a", "n": 1}, None], first),
            "row_1": pa.array([{"sku": 7, "tags": "[]"}, None, None, {"sku": 3, "tags": '["x"]'}], second),
        }
    )
    shards = split_typed(ranges, table, [("/id",), ("/sku",)])
    assert [[(p.binding, p.keys, p.documents) for p in s.parts] for s in shards] == [
        [(0, [("a",), ("b",)], 6), (1, [(7,)], 1)],
        [(1, [(3,)], 8)],
    ]
    assert shards[0].parts[0].rows.column_names == ["id", "n"]
    assert shards[0].parts[1].rows.to_pylist() == [{"sku": 7, "tags": "[]"}]
    assert [s.documents for s in shards] == [7, 8]
