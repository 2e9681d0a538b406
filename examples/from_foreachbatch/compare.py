"""A hand-written ``foreachBatch`` upsert next to tidemark, on the same stream, each failing once.

    python examples/from_foreachbatch/compare.py [--url postgresql://postgres@127.0.0.1:5432/test]

Both jobs read the same orders (one JSON-lines file per micro-batch) and keep, per
customer, the sum of the amounts, the number of orders, the largest order and the last
city, in PostgreSQL.  Each job fails once at the same moment: after its writes to
PostgreSQL committed, before Spark recorded the batch as done.  Spark must then run that
batch again when the job restarts, because it cannot know that the sink committed.

* The hand-written job adds the batch's sums a second time.
* tidemark recognises the batch: the endpoint committed it together with its checkpoint.

Then the way over (``adopt``): a hand-written job's table after the first two files becomes
a tidemark view's starting state (``tidemark.adopt``), and tidemark reduces only the newer
files on top, and the files that come after, exactly once.

The script prints how many customers each view gets wrong, against sums computed here
in plain Python.  See ``docs/from-foreachbatch.md``.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import tempfile
import uuid

import psycopg

# --- the stream ------------------------------------------------------------------

CITIES = ["Lisbon", "Oslo", "Quito", "Hanoi"]


def write_orders(
    directory: str, files: int = 4, per_file: int = 500, customers: int = 100, seed: int = 1, first: int = 0
) -> None:
    draw = random.Random(seed)
    os.makedirs(directory, exist_ok=True)
    for f in range(first, first + files):
        path = os.path.join(directory, f"orders-{f:04d}.json")
        with open(path, "w") as out:
            for _ in range(per_file):
                amount = draw.randrange(1, 1000)
                out.write(
                    json.dumps(
                        {
                            "customer": f"c{draw.randrange(customers):04d}",
                            "amount": amount,
                            "orders": 1,
                            "largest": amount,
                            "city": draw.choice(CITIES),
                        }
                    )
                    + "\n"
                )
        os.utime(path, (1_700_000_000 + f, 1_700_000_000 + f))  # the file source goes by mtime


def truth(directory: str) -> dict:
    """customer -> (amount, orders, largest, city), reduced in plain Python, in stream order."""
    view: dict = {}
    for name in sorted(os.listdir(directory)):
        with open(os.path.join(directory, name)) as f:
            for line in f:
                d = json.loads(line)
                a, n, m, _ = view.get(d["customer"], (0, 0, 0, None))
                view[d["customer"]] = (a + d["amount"], n + d["orders"], max(m, d["largest"]), d["city"])
    return view


# --- before: what users write by hand today -----------------------------------------

SPARK_SCHEMA = "customer STRING, amount BIGINT, orders BIGINT, largest BIGINT, city STRING"


def hand_written(
    spark, data: str, url: str, schema: str, checkpoint: str, fail_at_batch: int | None, table: str = "by_hand"
) -> None:
    from pyspark.sql import functions as F

    with psycopg.connect(url, autocommit=True) as con:
        con.execute(
            f'CREATE TABLE "{schema}".{table} (customer text PRIMARY KEY, amount bigint, orders bigint, '
            "largest bigint, city text)"
        )
    failed = []

    def upsert(batch_df, batch_id):
        # "last city" needs an order: the files are read in order, and so is each file
        rows = (
            batch_df.withColumn("seq", F.monotonically_increasing_id())
            .groupBy("customer")
            .agg(
                F.sum("amount").alias("amount"),
                F.sum("orders").alias("orders"),
                F.max("largest").alias("largest"),
                F.max_by("city", "seq").alias("city"),
            )
            .collect()
        )
        with psycopg.connect(url) as con:
            con.cursor().executemany(
                f'INSERT INTO "{schema}".{table} AS t VALUES (%s, %s, %s, %s, %s) ON CONFLICT (customer) DO UPDATE '
                "SET amount = t.amount + EXCLUDED.amount, orders = t.orders + EXCLUDED.orders, "
                "largest = GREATEST(t.largest, EXCLUDED.largest), city = EXCLUDED.city",
                [tuple(r) for r in rows],
            )
        if batch_id == fail_at_batch and not failed:  # committed; Spark has not recorded it
            failed.append(batch_id)
            raise RuntimeError(f"the job died after batch {batch_id}'s upsert committed")

    def start():
        df = spark.readStream.schema(SPARK_SCHEMA).option("maxFilesPerTrigger", 1).json(data)
        return (
            df.writeStream.foreachBatch(upsert)
            .option("checkpointLocation", checkpoint)
            .trigger(availableNow=True)
            .start()
        )

    try:
        start().awaitTermination()
    except Exception:
        pass
    if failed:
        start().awaitTermination()  # the restart: Spark runs the failed batch again


# --- after: tidemark ------------------------------------------------------------------

COLLECTION = {
    "key": ["/customer"],
    "schema": {
        "type": "object",
        "required": ["customer", "amount", "orders", "largest", "city"],
        "reduce": {"strategy": "merge"},
        "properties": {
            "customer": {"type": "string"},
            "amount": {"type": "integer", "reduce": {"strategy": "sum"}},
            "orders": {"type": "integer", "reduce": {"strategy": "sum"}},
            "largest": {"type": "integer", "reduce": {"strategy": "maximize"}},
            "city": {"type": "string"},  # lastWriteWins, the default
        },
    },
}


def with_tidemark(spark, data: str, url: str, schema: str, checkpoint: str, fail_at_batch: int) -> None:
    import tidemark
    from tidemark.faults import InjectedFault, rearm

    def start():
        df = spark.readStream.format("text").option("maxFilesPerTrigger", 1).load(data)
        return tidemark.materialize(
            df,
            collection=COLLECTION,
            endpoint={"postgres": {"url": url, "schema": schema}},
            resource={"table": "with_tidemark"},
            checkpoint=checkpoint,
            shards=2,
            spark=spark,
            available_now=True,
        )

    # The same failure, at tidemark's named point after everything but Spark's own commit.
    os.environ["TIDEMARK_FAULTS"] = f"before_spark_commit:raise@{fail_at_batch + 1}"
    rearm()
    try:
        start().await_termination()
    except InjectedFault:
        pass
    finally:
        os.environ.pop("TIDEMARK_FAULTS", None)
        rearm()
    start().await_termination()  # the restart: Spark runs the failed batch again


# --- the way over: adopt the hand-written job's table ----------------------------------


def adopt_then_run(spark, data: str, url: str, schema: str, workdir: str) -> None:
    """The hand-written job kept ``before_tidemark`` up to date with the first two files, and is
    stopped.  tidemark adopts that table (its rows are batch 0 of a new view), reduces the
    files modified after the table's last file on top, and then the files that come later."""
    import shutil

    import tidemark

    first = os.path.join(workdir, "first-files")
    os.makedirs(first)
    names = sorted(os.listdir(data))
    for name in names[:2]:
        shutil.copy2(os.path.join(data, name), first)
    hand_written(spark, first, url, schema, os.path.join(workdir, "chk-before"), None, table="before_tidemark")
    since = os.path.getmtime(os.path.join(data, names[1]))  # the table holds the input up to here

    def source():
        return spark.readStream.format("text").load(data)

    view = dict(
        collection=COLLECTION,
        endpoint={"postgres": {"url": url, "schema": schema}},
        resource={"table": "adopted"},
        checkpoint=os.path.join(workdir, "chk-adopted"),
        shards=2,
        spark=spark,
    )
    tidemark.adopt(source(), from_=f"{schema}.before_tidemark", since=since, **view)
    write_orders(data, files=2, per_file=500, seed=2, first=len(names))  # more input, later
    tidemark.materialize(source(), available_now=True, **view).await_termination()


# --- the comparison ---------------------------------------------------------------------


def compare(spark, url: str, workdir: str, fail_at_batch: int = 1) -> dict:
    """Run both jobs on one stream, then the adopt path on another; return how many customers
    each view gets wrong."""
    data = os.path.join(workdir, "orders")
    write_orders(data)
    want = truth(data)
    schema = f"from_foreachbatch_{uuid.uuid4().hex[:6]}"
    with psycopg.connect(url, autocommit=True) as con:
        con.execute(f'CREATE SCHEMA "{schema}"')
    try:
        hand_written(spark, data, url, schema, os.path.join(workdir, "chk-hand"), fail_at_batch)
        with_tidemark(spark, data, url, schema, os.path.join(workdir, "chk-tidemark"), fail_at_batch)
        adopt_data = os.path.join(workdir, "orders-adopt")
        write_orders(adopt_data)
        adopt_then_run(spark, adopt_data, url, schema, workdir)
        out = {"customers": len(want)}
        with psycopg.connect(url) as con:
            for table, expected in (("by_hand", want), ("with_tidemark", want), ("adopted", truth(adopt_data))):
                got = {
                    r[0]: tuple(r[1:])
                    for r in con.execute(f'SELECT customer, amount, orders, largest, city FROM "{schema}".{table}')
                }
                out[table] = sum(1 for k in expected.keys() | got.keys() if expected.get(k) != got.get(k))
        return out
    finally:
        with psycopg.connect(url, autocommit=True) as con:
            con.execute(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE')


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument(
        "--url", default=os.environ.get("TIDEMARK_TEST_POSTGRES_URL", "postgresql://postgres@127.0.0.1:5432/test")
    )
    args = ap.parse_args()
    from tidemark.spark.session import local_session

    spark = local_session("from-foreachbatch")
    spark.sparkContext.setLogLevel("OFF")  # the two failures are on purpose: no stack traces
    with tempfile.TemporaryDirectory() as workdir:
        out = compare(spark, args.url, workdir)
    spark.stop()
    print(f"{out['customers']} customers; each job failed once after batch 1 committed, then restarted")
    print(f"  hand-written foreachBatch upsert: {out['by_hand']} customers wrong")
    print(f"  tidemark:                         {out['with_tidemark']} customers wrong")
    print("the hand-written table after 2 files, adopted by tidemark, 4 more files on top:")
    print(f"  tidemark (adopted):               {out['adopted']} customers wrong")


if __name__ == "__main__":
    main()
