"""A batch's paths (tidemark/spark/paths.py): chosen once per batch from its own data, each a
function of what it reads (a PathContext), returning a BatchOutcome or why it declined (nothing
staged, nothing committed); the batch then takes the checked path, and is committed once."""

from __future__ import annotations

import json

import pytest
import yaml

from tidemark.spark.paths import BatchPath
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
    return _materializer(tmp_path, {"memory": {"path": str(tmp_path / "memory.json")}})  # read by executors too


def _materializer(tmp_path, endpoint: dict):
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
                        "endpoint": endpoint,
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


def test_each_batch_takes_the_path_its_own_keys_pick_and_runs_once(spark, view):
    docs = lambda *ks: [{"k": k, "n": 1} for k in ks]
    batches = [
        docs("a", "b"),  # 2 keys: the driver (no batch before)
        docs("d", "e", "f", "g"),  # 4 keys: one job on the executors
        docs("a", "c"),  # 2 keys: the driver again (the batch before does not pick it)
        docs("a", "b", "c", "d") + [BAD],  # a row needs the checks: one job, every shard stops before its Open; checked
        docs("c") + [BAD],  # the same in the driver: checked, in the driver
    ]
    reports = [view.process(_batch(spark, b, f"f{i}.json"), i) for i, b in enumerate(batches)]
    assert [(r.path, r.documents, r.keys, r.invalid) for r in reports] == [
        (BatchPath.DRIVER, 2, 2, 0),
        (BatchPath.ONE_JOB, 4, 4, 0),
        (BatchPath.DRIVER, 2, 2, 0),
        (BatchPath.CHECKED, 4, 4, 1),
        (BatchPath.CHECKED_IN_DRIVER, 1, 1, 1),
    ]
    entries = [view.log.get(i).counts for i in range(5)]  # the recovery log keeps the path's text
    assert [e["path"] for e in entries] == ["driver", "one job", "driver", "checked", "checked in driver"]
    driver = view.driver
    assert driver.dump("view", view.bindings[0]) == {
        (k,): {"k": k, "n": n} for k, n in {"a": 3, "b": 2, "c": 3, "d": 2, "e": 1, "f": 1, "g": 1}.items()
    }
    # each batch committed once: one quarantine row per batch that had an invalid document
    assert [(q["batch_id"], q["location"].rsplit("/", 1)[-1]) for q in driver.quarantined("view")] == [
        (3, "f3.json:5"),
        (4, "f4.json:2"),
    ]
    again = view.process(_batch(spark, batches[4], "f4.json"), 4)
    assert again.skipped and again.phase == "replayed"


def test_the_driver_declines_a_batch_that_needs_the_checks_and_stages_nothing(spark, view):
    from tidemark.runtime.shard import ShardTask
    from tidemark.spark.small import run_small

    start = view.coordinator.begin(0)
    task: ShardTask = view._task(start, 0)
    schema = "binding int, key_json string, key_hash long, doc string, _documents long, _needs_checks boolean"
    rows = [(0, f'["{k}"]', 7 << 20, json.dumps({"k": k, "n": 1}), 1, False) for k in "ab"]
    odd = spark.createDataFrame(rows + [(0, '["x"]', 9, None, 1, True)], schema)
    assert run_small(odd, task) is Declined.NEEDS_CHECKS
    assert view.driver.dump("view", view.bindings[0]) == {} and view.log.get(0) is None


def test_a_settled_combine_bounds_its_keys_and_is_read_without_reading_the_batch_again(spark):
    """The combine's map side runs once: rows read from the settled combine twice are the same,
    though the batch's keys are drawn anew each time the batch is read."""
    import uuid

    from pyspark.sql import functions as F

    from tidemark.collection.collection import Collection
    from tidemark.protocol.messages import Range
    from tidemark.spark.one_job import OneJobPlan
    from tidemark.spec import CollectionSpec

    drawn = F.udf(lambda _: json.dumps({"k": uuid.uuid4().hex, "n": 1}), "string").asNondeterministic()
    df = spark.range(0, 40, numPartitions=2).select(
        drawn("id").alias("value"),
        F.lit("f").alias("_file"),
        F.lit(0).cast("long").alias("_block"),
        F.col("id").alias("_row"),
    )
    assert set(df.toPandas().value) != set(df.toPandas().value)  # each read draws new keys
    coll = Collection(CollectionSpec("c", ("/k",), SCHEMA))
    plan = OneJobPlan(spark, tuple(df.columns), (coll,), tuple(Range.split(2)))
    settled = plan.combine(df)
    assert settled.bound == 40  # 40 keys, one per document: every split's groups are its documents
    first, second = (sorted(plan.finish(settled, spark, routed=False).toPandas().key_json) for _ in range(2))
    assert first == second and len(set(first)) == 40


def test_a_batch_with_an_undeclared_property_stays_on_typed_rows_reading_its_documents_once(spark, tmp_path):
    """A lean view SQLite reduces, on typed rows: a document with a property the schema does not
    declare stays there (the property rides in the row's remainder; it once took the checked
    combine), and every document is read once."""
    from pyspark.sql import functions as F

    m = _materializer(tmp_path, {"sqlite": {"path": str(tmp_path / "views.db")}})
    reads = spark.sparkContext.accumulator(0)
    read = F.udf(lambda value: (reads.add(1), value)[1], "string")  # counts each document read
    docs = [{"k": "a", "n": 1}, {"k": "b", "n": 2, "channel": "web"}, {"k": "a", "n": 3}]
    df = _batch(spark, docs, "f0.json").withColumn("value", read("value"))
    report = m.process(df, 0)
    assert (report.path, report.documents, report.keys) == (BatchPath.DRIVER_TYPED, 3, 2)
    assert reads.value == 3
    assert m.driver.dump("view", m.bindings[0]) == {
        ("a",): {"k": "a", "n": 4},
        ("b",): {"k": "b", "n": 2, "channel": "web"},
    }
