"""A shard's input must end with its end row: a stream cut off by a dying JVM looks, to
PySpark's reader, like the end of the partition, and must not be committed as the batch."""

from __future__ import annotations

import pytest

from tidemark.errors import RecoveryError
from tidemark.spark.stage import END_BINDING, shard_rows

ROWS = [(1, 0, '["a"]', '{"k":"a"}', 1), (1, 0, '["b"]', '{"k":"b"}', 2)]


def test_complete_input_yields_its_rows_without_the_end_row():
    counted = [0]
    got = list(shard_rows(1, iter(ROWS + [(1, END_BINDING, "", None, 0)]), counted))
    assert got == [((1, 0, '["a"]'), '{"k":"a"}'), ((1, 0, '["b"]'), '{"k":"b"}')]
    assert counted == [3]  # the documents combined into the rows


@pytest.mark.parametrize("cut", [0, 1, 2])
def test_input_cut_off_before_the_end_row_raises_before_the_shard_can_commit(cut):
    consumed = []
    with pytest.raises(RecoveryError, match="shard 1: its input ended before the end row"):
        for row in shard_rows(1, iter(ROWS[:cut])):
            consumed.append(row)
    assert len(consumed) == cut


def test_rows_after_the_end_row_or_of_another_shard_are_refused():
    with pytest.raises(RecoveryError, match="after its end row"):
        list(shard_rows(1, iter([(1, END_BINDING, "", None, 0)] + ROWS)))
    with pytest.raises(RecoveryError, match="received a row of shard 2"):
        list(shard_rows(1, iter([(2, 0, '["a"]', "{}", 1)])))
