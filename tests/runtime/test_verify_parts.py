"""tidemark/runtime/verify.py's parts without Spark: the files of each batch read off a Spark
checkpoint (a compacted file-source log too), the comparison and its differences."""

from __future__ import annotations

import json

from tidemark.runtime.verify import canonical, compare, differences, file_batches


def spark_checkpoint(root, batches: int, compact_at: int = 9) -> None:
    """What Spark writes for ``batches`` batches of a file source reading one file each, its
    log compacted at ``compact_at`` (``N.compact`` repeats every entry up to N; the files
    before it are kept, as Spark keeps them until they are old enough to delete)."""
    offsets, sources = root / "spark" / "offsets", root / "spark" / "sources" / "0"
    offsets.mkdir(parents=True)
    sources.mkdir(parents=True)

    def entry(b):
        return json.dumps({"path": f"file:///data/orders-{b:04d}.json", "timestamp": b, "batchId": b})

    for b in range(batches):
        (offsets / str(b)).write_text('v1\n{"batchWatermarkMs":0}\n{"logOffset":%d}\n' % b)
        (sources / str(b)).write_text("v1\n" + entry(b) + "\n")
        if b == compact_at:
            (sources / f"{b}.compact").write_text("v1\n" + "\n".join(entry(x) for x in range(b + 1)) + "\n")
            (sources / str(b)).unlink()


def test_each_batch_reads_its_files_once_also_across_a_compacted_log(tmp_path):
    spark_checkpoint(tmp_path, 12)
    got = file_batches(str(tmp_path), 0, 11)
    assert got == [[f"file:///data/orders-{b:04d}.json"] for b in range(12)]
    assert file_batches(str(tmp_path), 0, 4) == got[:5]


def test_a_batch_that_read_two_logged_files_gets_both(tmp_path):
    spark_checkpoint(tmp_path, 3)
    (tmp_path / "spark" / "offsets" / "1").write_text('v1\n{"batchWatermarkMs":0}\n{"logOffset":2}\n')
    (tmp_path / "spark" / "offsets" / "2").unlink()
    assert file_batches(str(tmp_path), 0, 1) == [
        ["file:///data/orders-0000.json"],
        ["file:///data/orders-0001.json", "file:///data/orders-0002.json"],
    ]


def test_numbers_compare_by_value_and_differences_name_their_paths():
    assert canonical({"a": 2.0, "b": [1.0, {"c": 3.5}], "_meta": {"op": "u"}}) == {"a": 2, "b": [1, {"c": 3.5}]}
    assert differences({"a": 1, "b": {"c": 2}}, {"a": 1, "b": {"c": 3}, "d": 4}) == [("/b/c", 2, 3), ("/d", "…", 4)]
    result = compare("t", {'["k1"]': {"n": 1}, '["k2"]': {"n": 2}}, {'["k1"]': {"n": 1.0}, '["k3"]': {"n": 3}})
    assert result.counts == {"missing": 1, "extra": 1, "differ": 0} and result.equal == 1 and not result.ok
    assert compare("t", {'["k1"]': {"n": 1}}, {'["k1"]': {"n": 2}}, keys={'["k2"]'}).ok  # another key: not compared
