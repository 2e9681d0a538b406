"""Combine throughput: tidemark's compiled path vs its Arrow fallback vs a hand-written groupBy().agg().

    python bench/bench_combine.py [N] [--repeats R] [--fallback-repeats F] [--master local[2]]

Generates N documents (default 1,000,000; 100 per key on average is too few keys, so the
key count is N/10) once as JSON lines under ``bench/out/combine-N/`` (8 files; reused if
present), reads them as text (``value``, ``_file``, ``_block``, ``_row``), caches that
batch in memory, and then times three variants of the same meaning on it:

* ``compiled``  -- ``combine_batch(df, coll)`` (the schema compiles: native parse,
  native validation, ``groupBy(key_json).agg(...)``);
* ``fallback``  -- ``combine_batch(df, coll, force_path="fallback")`` (``mapInArrow`` +
  the pure Python reducer);
* ``hand``      -- ``from_json`` + ``groupBy(customer).agg(...)`` written by hand, with
  the same source-order semantics (``max_by`` / ``min_by`` / ordered ``collect_list``),
  no validation, producing the same JSON document per key.

Each timed run ends with ``write.format("noop")`` of the combined documents, and for
tidemark includes everything ``combine_batch`` does (validation statistics, caching,
the sum-overflow check).  The results of the three variants are checked to be equal
(as parsed JSON) before timing.  Prints one Markdown table row per variant.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import random
import statistics
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))

SCHEMA = {
    "type": "object",
    "required": ["customer", "amount"],
    "reduce": {"strategy": "merge"},
    "properties": {
        "customer": {"type": "string"},
        "amount": {"type": "integer", "reduce": {"strategy": "sum"}},
        "orders": {"type": "integer", "reduce": {"strategy": "sum"}},
        "largest": {"type": "integer", "reduce": {"strategy": "maximize"}},
        "smallest": {"type": "number", "reduce": {"strategy": "minimize"}},
        "city": {"type": "string", "enum": ["Lisbon", "Oslo", "Quito", "Hanoi"]},
        "first_seen": {"type": "string", "reduce": {"strategy": "firstWriteWins"}},
        "vip": {"type": "boolean"},
        "items": {"type": "array", "items": {"type": "string"}, "reduce": {"strategy": "append"}},
    },
}
CITIES = ["Lisbon", "Oslo", "Quito", "Hanoi"]
FILES = 8


def generate(directory: str, n: int, seed: int = 7) -> None:
    """Write ``n`` documents as JSON lines into ``FILES`` files (skipped if already there)."""
    done = os.path.join(directory, "_DONE")
    if os.path.exists(done):
        return
    os.makedirs(directory, exist_ok=True)
    draw = random.Random(seed)
    keys = max(1, n // 10)
    per_file = -(-n // FILES)
    written = 0
    for f in range(FILES):
        with open(os.path.join(directory, f"orders-{f:04d}.json"), "w", encoding="utf-8") as out:
            for _ in range(min(per_file, n - written)):
                amount = draw.randint(1, 500)
                doc = {
                    "customer": f"customer-{draw.randrange(keys):07d}",
                    "amount": amount,
                    "orders": 1,
                    "largest": amount,
                    "smallest": amount / 4,
                    "city": draw.choice(CITIES),
                    "first_seen": f"2024-01-{draw.randint(1, 28):02d}",
                    "vip": draw.random() < 0.1,
                }
                if draw.random() < 0.5:
                    doc["items"] = [f"sku-{draw.randrange(100)}" for _ in range(draw.randint(1, 2))]
                out.write(json.dumps(doc, separators=(",", ":")) + "\n")
                written += 1
    with open(done, "w") as f:
        f.write(str(n))


def read_batch(spark, directory: str):
    from pyspark.sql import functions as F

    df = spark.read.format("text").load(directory + "/orders-*.json")
    return df.select(
        F.col("value"),
        F.col("_metadata.file_path").alias("_file"),
        F.col("_metadata.file_block_start").alias("_block"),
        F.monotonically_increasing_id().alias("_row"),
    )


def hand_written(df):
    """The same meaning as SCHEMA's reductions, written directly against Spark (no validation)."""
    from pyspark.sql import functions as F
    from pyspark.sql import types as T

    schema = T.StructType(
        [
            T.StructField("customer", T.StringType()),
            T.StructField("amount", T.LongType()),
            T.StructField("orders", T.LongType()),
            T.StructField("largest", T.LongType()),
            T.StructField("smallest", T.DoubleType()),
            T.StructField("city", T.StringType()),
            T.StructField("first_seen", T.StringType()),
            T.StructField("vip", T.BooleanType()),
            T.StructField("items", T.ArrayType(T.StringType())),
        ]
    )
    p = df.select(F.from_json("value", schema).alias("p"), F.struct("_file", "_block", "_row").alias("o")).select(
        "p.*", "o"
    )
    o = F.col("o")

    def last(c):
        return F.max_by(c, F.when(c.isNotNull(), o))

    def first(c):
        return F.min_by(c, F.when(c.isNotNull(), o))

    items = F.collect_list(F.when(F.col("items").isNotNull(), F.struct(o.alias("o"), F.col("items").alias("v"))))
    items = F.flatten(F.transform(F.sort_array(items), lambda x: x["v"]))
    agg = p.groupBy("customer").agg(
        F.sum("amount").alias("amount"),
        F.sum("orders").alias("orders"),
        F.max("largest").alias("largest"),
        F.min("smallest").alias("smallest"),
        last(F.col("city")).alias("city"),
        first(F.col("first_seen")).alias("first_seen"),
        last(F.col("vip")).alias("vip"),
        F.when(F.count("items") > 0, items).alias("items"),
    )
    return agg.select(
        F.to_json(F.array("customer")).alias("key_json"),
        F.to_json(
            F.struct("customer", "amount", "orders", "largest", "smallest", "city", "first_seen", "vip", "items")
        ).alias("doc"),
    )


def jvm_cpu_seconds(spark) -> float:
    """CPU seconds the Spark JVM (driver and, in local mode, the executors) has used so far."""
    pid = spark.sparkContext._jvm.java.lang.ProcessHandle.current().pid()
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def run_variant(name: str, df, coll):
    from tidemark.spark.combine import combine_batch

    t0 = time.perf_counter()
    if name == "hand":
        hand_written(df).write.format("noop").mode("overwrite").save()
        path = "hand"
    else:
        res = combine_batch(df, coll, force_path="fallback" if name == "fallback" else None)
        try:
            res.combined.write.format("noop").mode("overwrite").save()
            path = res.path
        finally:
            res.unpersist()
    return time.perf_counter() - t0, path


def check_equal(df, coll) -> int:
    from tidemark.spark.combine import combine_batch

    outs = {}
    for name in ("compiled", "fallback"):
        res = combine_batch(df, coll, force_path=name)
        try:
            outs[name] = {r.key_json: json.loads(r.doc) for r in res.combined.collect()}
        finally:
            res.unpersist()
    outs["hand"] = {r.key_json: json.loads(r.doc) for r in hand_written(df).collect()}
    assert outs["compiled"] == outs["fallback"] == outs["hand"], "the three variants disagree"
    return len(outs["hand"])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("n", nargs="?", type=int, default=1_000_000)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--fallback-repeats", type=int, default=1)
    ap.add_argument("--master", default="local[2]")
    ap.add_argument("--shuffle-partitions", type=int, default=4)
    ap.add_argument("--skip-check", action="store_true")
    args = ap.parse_args()

    from tidemark.collection.collection import Collection
    from tidemark.spark.session import local_session
    from tidemark.spec import CollectionSpec

    directory = os.path.join(HERE, "out", f"combine-{args.n}")
    t0 = time.perf_counter()
    generate(directory, args.n)
    print(f"data: {directory} ({time.perf_counter() - t0:.1f}s)", flush=True)

    spark = local_session("bench-combine", master=args.master, shuffle_partitions=args.shuffle_partitions)
    coll = Collection(CollectionSpec("orders", ("/customer",), SCHEMA))
    df = read_batch(spark, directory).persist()
    n = df.count()
    print(
        f"documents: {n}, master {args.master}, shuffle partitions {args.shuffle_partitions}, "
        f"Spark {spark.version}, Python {platform.python_version()}",
        flush=True,
    )
    if not args.skip_check:
        t0 = time.perf_counter()
        keys = check_equal(df, coll)
        print(
            f"check: compiled == fallback == hand-written on {keys} keys ({time.perf_counter() - t0:.1f}s)", flush=True
        )

    warm = df.limit(min(n, 50_000)).persist()
    warm.count()
    for name in (
        ("hand", "compiled", "fallback") if args.fallback_repeats else ("hand", "compiled")
    ):  # warm-up on a slice
        run_variant(name, warm, coll)
    warm.unpersist()
    times: dict[str, list[float]] = {"hand": [], "compiled": [], "fallback": []}
    cpus: dict[str, list[float]] = {"hand": [], "compiled": [], "fallback": []}
    for r in range(max(args.repeats, args.fallback_repeats)):
        for name in ("hand", "compiled", "fallback"):
            if r >= (args.fallback_repeats if name == "fallback" else args.repeats):
                continue
            cpu0 = jvm_cpu_seconds(spark)
            secs, path = run_variant(name, df, coll)
            cpu = jvm_cpu_seconds(spark) - cpu0
            assert path == name, f"{name} took the {path} path"
            times[name].append(secs)
            cpus[name].append(cpu)
            print(f"  run {r + 1} {name:9s} {secs:7.2f}s  {n / secs:>10,.0f} docs/s  JVM CPU {cpu:6.2f}s", flush=True)

    print()
    print("| variant | runs | best s | median s | docs/s (median) | JVM CPU s (median) |")
    print("|---|---|---|---|---|---|")
    med = {k: statistics.median(v) for k, v in times.items() if v}
    for name in ("hand", "compiled", "fallback"):
        v = times[name]
        if v:
            print(
                f"| {name} | {len(v)} | {min(v):.2f} | {med[name]:.2f} | {n / med[name]:,.0f} | "
                f"{statistics.median(cpus[name]):.2f} |"
            )
    print()
    for name in ("compiled", "fallback"):
        if name in med:
            print(
                f"{name} / hand-written throughput (median): {med['hand'] / med[name]:.2f} wall, "
                f"{statistics.median(cpus['hand']) / statistics.median(cpus[name]):.2f} by JVM CPU time"
            )
    df.unpersist()
    spark.stop()


if __name__ == "__main__":
    main()
