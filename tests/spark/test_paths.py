"""A batch's paths (tidemark/spark/paths.py): chosen once per batch, each a function of what it
reads (a PathContext), returning a BatchOutcome or why it declined (nothing staged, nothing
committed); the batch then takes the next path, and is committed once."""

from __future__ import annotations

import json

import pytest
import yaml

from tidemark.spark.paths import BatchPath, PathContext
from tidemark.spark.stage import Declined

pytestmark = pytest.mark.spark

SCHEMA = {
    "type": "object",
    "required": ["k", "n"],
    "reduce": {"strategy": "merge"},
    "properties": {"k": {"type": "string"}, "n": {"type": "integer", "reduce": {"strategy": "sum"}}},
}
BAD = '{"k": "a", "n": "lots"}'  # not an integer: the combine's checks find it


@pytest.fixture
def view(tmp_path):
    """A started Materializer of a view into the (file-backed) memory endpoint: two shards, at most 3 keys in the driver."""
    from tidemark.collection.collection import Collection
    from tidemark.spark.processor import Materializer
    from tidemark.spec import load_spec

    spec_path = tmp_path / "spec.yaml"
    source = {"format": "json", "path": str(tmp_path / "data")}
    spec_path.write_text(
        yaml.safe_dump(
            {
                "collections": {"c": {"key": ["/k"], "schema": SCHEMA, "source": source}},
                "materializations": {
                    "view": {
                        "endpoint": {"memory": {"path": str(tmp_path / "memory.json")}},  # read by executors too
                        "shards": 2,
                        "on_invalid": "quarantine",
                        "options": {"small_batch_keys": 3, "reduced_batch_keys": 3},
                        "bindings": [{"source": "c", "resource": {"table": "t"}}],
                    }
                },
                "checkpoint": str(tmp_path / "checkpoints"),
            }
        )
    )
    spec = load_spec(str(spec_path))
    mat = spec.materializations["view"]
    m = Materializer(spec, mat, [Collection(spec.collections["c"])], spec.checkpoint_location("view"))
    m.start_up()
    return m


def _batch(spark, docs: list, file: str):
    rows = [(d if isinstance(d, str) else json.dumps(d), file, 0, i) for i, d in enumerate(docs)]
    return spark.createDataFrame(rows, "value string, _file string, _block long, _row long")


def test_the_batch_before_and_the_batch_itself_choose_its_one_path(spark, view):
    docs = lambda *ks: [{"k": k, "n": 1} for k in ks]
    batches = [
        docs("a", "b"),  # no batch before: one job
        docs("a", "c"),  # after 2 keys: the driver
        docs("d", "e", "f", "g"),  # after 2 keys, but 4: the driver declines (too many keys), one job
        docs("a", "b") + [BAD],  # after 4 keys; a row needs the checks: the one job declines, checked
        docs("c") + [BAD],  # after 2 keys, a row needs the checks: checked, in the driver
    ]
    reports = [view.process(_batch(spark, b, f"f{i}.json"), i) for i, b in enumerate(batches)]
    assert [(r.path, r.documents, r.keys, r.invalid) for r in reports] == [
        (BatchPath.ONE_JOB, 2, 2, 0),
        (BatchPath.DRIVER, 2, 2, 0),
        (BatchPath.ONE_JOB, 4, 4, 0),
        (BatchPath.CHECKED, 2, 2, 1),
        (BatchPath.CHECKED_IN_DRIVER, 1, 1, 1),
    ]
    entries = [view.log.get(i).counts for i in range(5)]  # the recovery log keeps the path's text
    assert [e["path"] for e in entries] == ["one job", "driver", "one job", "checked", "checked in driver"]
    driver = view.driver
    assert driver.dump("view", view.bindings[0]) == {
        (k,): {"k": k, "n": n} for k, n in {"a": 3, "b": 2, "c": 2, "d": 1, "e": 1, "f": 1, "g": 1}.items()
    }
    # each batch committed once: one quarantine row per batch that had an invalid document
    assert [(q["batch_id"], q["location"].rsplit("/", 1)[-1]) for q in driver.quarantined("view")] == [
        (3, "f3.json:3"),
        (4, "f4.json:2"),
    ]
    again = view.process(_batch(spark, batches[4], "f4.json"), 4)
    assert again.skipped and again.phase == "replayed"


def test_the_driver_declines_a_batch_it_should_not_take_and_stages_nothing(spark, view):
    from tidemark.runtime.shard import ShardTask
    from tidemark.spark.small import run_small

    start = view.coordinator.begin(0)
    task: ShardTask = view._task(start, 0)
    schema = "binding int, key_json string, key_hash long, doc string, _documents long, _needs_checks boolean"
    rows = [(0, f'["{k}"]', 7 << 20, json.dumps({"k": k, "n": 1}), 1, False) for k in "abcd"]
    assert run_small(spark.createDataFrame(rows, schema), task, 3) is Declined.TOO_MANY_KEYS
    odd = spark.createDataFrame(rows[:2] + [(0, '["x"]', 9, None, 1, True)], schema)
    assert run_small(odd, task, 3) is Declined.NEEDS_CHECKS
    assert view.driver.dump("view", view.bindings[0]) == {} and view.log.get(0) is None


def test_a_path_gets_what_it_reads():
    ctx = PathContext((), "quarantine", 10, driver_keys=3)
    assert [ctx.in_driver(k) for k in (None, 0, 3, 4)] == [False, True, True, False]
    assert not PathContext((), "fail", 10, driver_keys=0).in_driver(1)
