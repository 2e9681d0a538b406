"""The Spark part of a batch, part by part: where a 25k-document batch's JVM time goes.

    python bench/bench_stage_parts.py [--docs 25000] [--repeats 7] [--shape simple|events]

One file of ``--docs`` documents of ``bench_small_batches``' stream (100k keys, nine fields),
or of ``bench_whole_runs``' order event stream (``--shape events``), is read as a batch DataFrame, and each query below is planned first and then timed on its
own (medians of ``--repeats`` interleaved runs, after two warm-up runs of each):

(h)  the hand-written job's aggregate (``groupBy().agg()`` of typed columns) into ``noop``;
(c)  tidemark's unchecked compiled combine (parse, prove valid, key, combine) into ``noop``;
(r)  (c) routed to the shards (the exchange by shard, the sort by key) into ``noop``;
(a)  (r) handed to Python in Arrow batches, which count the rows (the shard stage, minus
     the shard sessions);
(d)  (c) unrouted, as Arrow into the driver (the shard sessions in the driver).

So (c) − (h) is what validation and the document's JSON cost, (r) − (c) the routing, (a) − (r)
the transfer into Python.  (r), (a) and (d) are the one-job plan as a batch runs it: the
combine settled (its map stage run and counted), then its rows planned over it; the timing
holds both.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))
sys.path.insert(0, HERE)

import bench_small_batches as B
import bench_whole_runs as W


def count_rows(batches):
    import pyarrow as pa

    n = 0
    for rb in batches:
        n += rb.num_rows
    yield pa.RecordBatch.from_arrays([pa.array([n])], names=["n"])


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--docs", type=int, default=25_000)
    ap.add_argument("--repeats", type=int, default=7)
    ap.add_argument("--shape", choices=("simple", "events"), default="simple")
    args = ap.parse_args()
    from pyspark.sql import functions as F

    from tidemark.collection.collection import Collection
    from tidemark.protocol.messages import Range
    from tidemark.spark.one_job import OneJobPlan
    from tidemark.spark.session import local_session
    from tidemark.spec import CollectionSpec

    print(B.machine())
    work = tempfile.mkdtemp(prefix="tm-parts-")
    events = args.shape == "events"
    if events:
        W.write_events(work, args.docs, 100_000, 1)
        path = os.path.join(work, "events-00000.json")
        coll = Collection(CollectionSpec("orders", ("/order_id",), W.EVENTS_SCHEMA))
    else:
        B.write_stream(work, args.docs, 100_000, 1)
        path = os.path.join(work, "orders-00000.json")
        coll = Collection(CollectionSpec("orders", ("/customer",), B.SCHEMA))
    spark = local_session("tidemark-bench", master="local[2]", shuffle_partitions=2)
    ranges = tuple(Range.split(2))
    plans: dict = {}

    def source():
        return text_source(spark, path).select("value", "_file", "_block", F.lit(0).alias("_binding"))

    def one_job(routed_: bool):
        """The batch's one-job rows: the combine settled (its map stage runs here), then finished."""
        df = source()
        key = tuple(df.columns)
        if key not in plans:
            plans[key] = OneJobPlan(spark, key, (coll,), ranges)
        return plans[key].finish(plans[key].combine(df), spark, routed_)

    def combined():
        from pyspark.sql import DataFrame

        df = source()
        plan = plans[tuple(df.columns)]
        b = plan.bindings[0]
        j = df._jdf.select(plan.prep).select(b["stage"]).groupBy(b["grouping"]).agg(b["agg0"], b["aggs"])
        return DataFrame(j.select(b["out"]).select(b["final"]), spark)

    def hand():
        if events:
            return W.peer_aggregate(spark.read.schema(W.EVENTS_SPARK_SCHEMA).json(path), "events")
        df = spark.read.schema(B.SPARK_SCHEMA).json(path)
        return df.groupBy("customer").agg(
            F.sum("amount"),
            F.sum("orders"),
            F.max("largest"),
            F.min("smallest"),
            F.max_by("city", "ts"),
            F.min_by("first_city", "ts"),
            F.max("ts"),
            F.to_json(
                F.flatten(F.transform(F.array_sort(F.collect_list(F.struct("ts", "items"))), lambda s: s["items"]))
            ),
        )

    queries = {
        "(h) hand-written aggregate": lambda: hand().write.format("noop").mode("overwrite").save,
        "(c) tidemark combine, unchecked": lambda: combined().write.format("noop").mode("overwrite").save,
        # the one-job rows: their combine's map stage runs inside the timing (settled, then finished)
        "(r) + routed to the shards": lambda: lambda: one_job(True).write.format("noop").mode("overwrite").save(),
        "(a) + Arrow batches into Python": lambda: lambda: one_job(True).mapInArrow(count_rows, "n long").collect(),
        "(d) combined, as Arrow into the driver": lambda: lambda: one_job(False).toArrow(),
    }
    one_job(True)  # build the plan once
    medians(
        queries, args.repeats, 2, f"one batch of {args.docs:,} documents, Spark local[2], medians of {args.repeats}:"
    )


def text_source(spark, path: str):
    """A file's lines as a batch's source DataFrame (``value``, ``_file``, ``_block``, ``_row``)."""
    from pyspark.sql import functions as F

    return (
        spark.read.format("text")
        .load(path)
        .select(
            "value",
            F.col("_metadata.file_path").alias("_file"),
            F.col("_metadata.file_block_start").alias("_block"),
            F.lit(0).cast("long").alias("_row"),
        )
    )


def medians(queries: dict, repeats: int, warmups: int, title: str) -> None:
    """Run each of ``queries`` (name -> a function that plans and returns the action to time)
    ``warmups + repeats`` times, interleaved, and print the medians of the last ``repeats``."""
    times: dict = {k: [] for k in queries}
    for rep in range(repeats + warmups):
        for name, make in queries.items():
            action = make()  # planned outside the timing
            t = time.perf_counter()
            action()
            if rep >= warmups:
                times[name].append(time.perf_counter() - t)
    print(f"\n{title}")
    for name, ts in times.items():
        print(f"  {name:36s} {statistics.median(ts) * 1000:7.0f} ms  (min {min(ts) * 1000:.0f})")


if __name__ == "__main__":
    main()
