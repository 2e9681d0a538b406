"""The floor of the event stream's combine, and what one JVM aggregate per key would gain.

    python bench/bench_fold_floor.py [--docs 25000] [--repeats 8]

One file of ``--docs`` documents of ``bench_whole_runs``' order event stream (100k keys) is read
as a batch, and each query below is planned first and then timed on its own into ``noop``
(medians of ``--repeats`` interleaved runs, after four warm-up runs of each):

(h)  the hand-written job's ``groupBy().agg()`` (``bench_whole_runs.peer_aggregate``);
(s)  tidemark's staged rows (parse, the JVM proof, instants, null flags, undeclared members,
     the source order), grouped as the combine groups them, counted: the floor under any
     per-key aggregate on tidemark's rows;
(b)  (s) with the compiled combine's built-in aggregates (``compile.aggregations``);
(c)  (b) with the typed row out (key text, hash, the typed struct, the remainder): the combine
     a batch runs;
(j)  (s) with the fold as one hand-written JVM aggregate instead of (b)'s aggregates
     (``bench/jvm/EventsFold.java``, Spark's public ``Aggregator`` API, compiled here with
     ``javac``; for this schema only, no errors or undeclared members).

So (b) − (s) is what the built-in aggregates cost, (j) − (s) what one JVM aggregate costs,
(c) − (b) the typed row out, and (h) what the peer's whole aggregate costs.
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))
sys.path.insert(0, HERE)

import bench_small_batches as B
import bench_whole_runs as W
from bench_stage_parts import medians, text_source


def compile_fold(work: str) -> str:
    """``bench/jvm/EventsFold.java`` compiled against PySpark's jars: the classes' directory."""
    import pyspark

    from tidemark.options import java_home

    home = java_home()
    javac = os.path.join(home, "bin", "javac") if home else shutil.which("javac")
    jars = Path(pyspark.__file__).parent / "jars"
    out = os.path.join(work, "classes")
    cmd = [str(javac), "--release", "17", "-nowarn", "-cp", str(jars / "*"), "-d", out]
    subprocess.run([*cmd, os.path.join(HERE, "jvm", "EventsFold.java")], check=True)
    return out


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--docs", type=int, default=25_000)
    ap.add_argument("--repeats", type=int, default=8)
    args = ap.parse_args()
    from pyspark.sql import functions as F

    from tidemark.collection.collection import Collection
    from tidemark.collection.plan import compile_collection
    from tidemark.spark import combine, jvm
    from tidemark.spark.session import local_session
    from tidemark.spec import CollectionSpec

    print(B.machine())
    work = tempfile.mkdtemp(prefix="tm-fold-floor-")
    classes = compile_fold(work)
    W.write_events(work, args.docs, 100_000, 1)
    path = os.path.join(work, "events-00000.json")
    coll = Collection(CollectionSpec("orders", ("/order_id",), W.EVENTS_SCHEMA))
    spark = local_session(
        "tidemark-bench", master="local[2]", shuffle_partitions=2, **{"spark.driver.extraClassPath": classes}
    )
    plan = compile_collection(coll)
    cols = combine._compiled_columns(spark, plan, jvm.spec(plan) if jvm.available(spark) else None)

    def staged():
        return text_source(spark, path).select(*cols.stage)

    names = ["event_time", "status", "_ts1", "_tf1", "first_seen", "_ts2", "_tf2", "amount", "n", "tags", "note"]
    inputs = [F.col(f"p.{n}") if not n.startswith("_") else F.col(n) for n in names]
    inputs += [F.col("p.address"), F.col("_file"), F.col("_block"), F.col("_row")]
    schema = staged().select(*inputs).schema
    spark._jvm.tidemark.bench.EventsFold.register(
        spark._jsparkSession, spark._jsparkSession.parseDataType(schema.json())
    )
    fold = F.call_function("events_fold", *inputs)

    def grouped():
        return staged().groupBy(*cols.grouping)

    def noop(frame):
        return frame().write.format("noop").mode("overwrite").save  # planned here, saved when timed

    queries = {
        "(h) hand-written aggregate": lambda: noop(
            lambda: W.peer_aggregate(spark.read.schema(W.EVENTS_SPARK_SCHEMA).json(path), "events")
        ),
        "(s) staged rows, grouped, counted": lambda: noop(lambda: grouped().count()),
        "(b) + built-in aggregates": lambda: noop(lambda: grouped().agg(*cols.aggs)),
        "(c) + the typed row out": lambda: noop(lambda: grouped().agg(*cols.aggs).select(*cols.out_typed)),
        "(j) (s) + one JVM aggregate": lambda: noop(lambda: grouped().agg(fold.alias("folded"))),
    }
    title = f"one batch of {args.docs:,} event documents, Spark local[2], medians of {args.repeats}:"
    medians(queries, args.repeats, 4, title)


if __name__ == "__main__":
    main()
