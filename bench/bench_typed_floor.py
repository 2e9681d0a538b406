"""The floor of a typed path, part by part: what the combined document's JSON costs in Spark
and in PostgreSQL, against typed values from Spark to the table.

    python bench/bench_typed_floor.py [--batches 8] [--batch 25000] [--keys 100000] [--rounds 2]

The stream of ``bench_small_batches.py`` (nine fields), one file per batch.

Spark (``local[2]``, one batch at a time, collected as Arrow as the driver's shard sessions
get it; wall time and the JVM's CPU per batch, median of the last round):

(json)  tidemark's compiled combine, each key's document as JSON text (what runs today);
(typed) the same combine, each key's document as a struct of typed values (no ``to_json``);
(hand)  a hand-written ``from_json`` + ``groupBy().agg()`` of the same meaning, no validation.

PostgreSQL (one shard session's endpoint part on a lean table, the same combined rows;
store and commit per batch, median of the last round, and PostgreSQL's CPU):

(texts) the documents' JSON texts staged (``COPY`` into ``jsonb``), the lean statement reading
        each column from the staged document (what runs today);
(csv)   the typed values staged from Arrow (``pyarrow.csv`` into ``COPY … (FORMAT csv)``, typed
        staging columns), the same statement reading the staged columns.
"""

from __future__ import annotations

import argparse
import io
import json
import os
import statistics
import sys
import tempfile
import time
import uuid
from types import SimpleNamespace

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from bench_postgres_e2e import machine
from bench_small_batches import SCHEMA, write_stream
from cpu import CpuMeter, jvm_pid

URL = os.environ.get("TIDEMARK_TEST_POSTGRES_URL", "postgresql://postgres@127.0.0.1:5432/test")


def spark_part(spark, files: list[str], coll, rounds: int) -> dict:
    from pyspark.sql import functions as F

    from tidemark.collection.plan import compile_collection
    from tidemark.spark.combine import _compiled_columns
    from tidemark.spark.compile import key_json_expr

    plan = compile_collection(coll)

    def tidemark(df, typed: bool):
        cols = _compiled_columns(spark, plan, None)
        out = (
            df.select(*cols.stage)
            .groupBy(*cols.grouping)
            .agg(*cols.aggs)
            .select(*(cols.out_typed if typed else cols.out))
        )
        return out.filter(~F.col("_suspect")).select("key_json", "key_hash", "doc", "_documents")

    def hand(df):
        p = F.from_json(
            "value",
            "customer string, amount long, orders long, largest long, smallest long, "
            "city string, first_city string, ts long, items array<string>",
        ).alias("p")
        o = F.struct("_row")
        g = (
            df.select(p, o.alias("o"))
            .groupBy("p.customer")
            .agg(
                F.sum("p.amount").alias("amount"),
                F.sum("p.orders").alias("orders"),
                F.max("p.largest").alias("largest"),
                F.min("p.smallest").alias("smallest"),
                F.max_by("p.city", "o").alias("city"),
                F.min_by("p.first_city", "o").alias("first_city"),
                F.max("p.ts").alias("ts"),
                F.flatten(
                    F.transform(F.array_sort(F.collect_list(F.struct("o", "p.items"))), lambda s: s["items"])
                ).alias("items"),
            )
        )
        key = key_json_expr([F.col("customer")], ["string"])
        return g.select(key.alias("key_json"), F.crc32(key).alias("key_hash"), F.struct(*g.columns[1:]).alias("doc"))

    def read(path):
        return spark.read.text(path).select(
            "value",
            F.lit(path).alias("_file"),
            F.lit(0).cast("long").alias("_block"),
            F.monotonically_increasing_id().alias("_row"),
        )

    jvm = jvm_pid(spark)
    out: dict = {}
    for rnd in range(rounds):
        for name, make in (
            ("json", lambda d: tidemark(d, False)),
            ("typed", lambda d: tidemark(d, True)),
            ("hand", hand),
        ):
            walls, meter = [], CpuMeter(jvm)
            for path in files:
                t = time.perf_counter()
                table = make(read(path)).toArrow()
                walls.append(time.perf_counter() - t)
                assert table.num_rows > 0
            out[name] = (statistics.median(walls), meter.parts().get("JVM", 0.0) / len(files), table)
    return out


def typed_table(combined: dict):
    """The combined documents as the typed Arrow table a typed combine would collect."""
    import pyarrow as pa

    keys = sorted(combined)
    docs = [combined[k] for k in keys]
    cols = {"c0": pa.array(keys)}
    for j, name in enumerate(("amount", "orders", "largest", "smallest", "city", "first_city", "ts"), start=1):
        cols[f"c{j}"] = pa.array([d.get(name) for d in docs])
    cols["c8"] = pa.array([json.dumps(d["items"], separators=(",", ":")) for d in docs])
    return keys, pa.table(cols)


def pg_part(files: list[str], coll, rounds: int) -> dict:
    import psycopg
    import pyarrow.csv as pacsv

    from tidemark.drivers.postgres import PostgresDriver
    from tidemark.drivers.postgres.dialect import REDUCE
    from tidemark.drivers.sql.reduce import reduce_statement
    from tidemark.drivers.sql.transactor import staged_columns
    from tidemark.protocol.messages import Acknowledge, Apply, Flush, Open, Range, StartCommit, StoreTexts
    from tidemark.runtime.reduce_path import reduce_paths

    data = []
    for path in files:
        combined: dict = {}
        with open(path) as f:
            for line in f:
                d = json.loads(line)
                combined[d["customer"]] = coll.reduce(combined[d["customer"]], d) if d["customer"] in combined else d
        data.append(combined)
    spec = coll.binding_spec(SimpleNamespace(resource={"table": "customers"}, delta_updates=False))
    (b,), _ = reduce_paths([spec], [coll], PostgresDriver({"url": URL}).capabilities())
    out: dict = {}
    for rnd in range(rounds):
        for way in ("texts", "csv"):
            schema = f"bench_{uuid.uuid4().hex[:8]}"
            driver = PostgresDriver({"url": URL, "schema": schema})
            driver.apply(Apply("view", "v1", (b,)))
            stores, commits = [], []
            meter = CpuMeter(None)
            try:
                for n, combined in enumerate(data):
                    t, _ = driver.open(Open("view", "v1", Range(), bindings=(b,)))
                    t.acknowledge(Acknowledge())
                    model = t.models[0]
                    keys = sorted(combined)
                    texts = tuple(json.dumps(combined[k], separators=(",", ":")) for k in keys)
                    _, table = typed_table(combined)
                    t0 = time.perf_counter()
                    if way == "texts":
                        t.store(StoreTexts(0, tuple((k,) for k in keys), texts))
                        t.flush(Flush())
                        t1 = time.perf_counter()
                        t.start_commit(StartCommit({"batch_id": n}))
                    else:
                        buf = io.BytesIO()
                        pacsv.write_csv(table, buf, pacsv.WriteOptions(include_header=False))
                        cols = ", ".join(
                            f"c{j} {c}"
                            for j, c in enumerate(
                                ["text", "bigint", "bigint", "bigint", "bigint", "text", "text", "bigint", "jsonb"]
                            )
                        )
                        con = t.con
                        with con.transaction():
                            con.execute(f"CREATE TEMP TABLE IF NOT EXISTS typed ({cols})")
                            con.execute("TRUNCATE typed")
                            with con.cursor().copy("COPY typed FROM STDIN (FORMAT csv)") as copy:
                                copy.write(buf.getvalue())
                        t1 = time.perf_counter()
                        names, _ = staged_columns(model, REDUCE.quote)
                        sources = [f"c{j}" for j in range(9)] + ["NULL::jsonb"]
                        sql = reduce_statement(REDUCE, model.ident, model, model.reduce, "typed", names, sources)
                        with con.transaction():
                            con.execute(sql)
                            con.execute(
                                f"UPDATE {driver.ck} SET checkpoint = %s::jsonb", (json.dumps({"batch_id": n}),)
                            )
                    t2 = time.perf_counter()
                    t.close()
                    stores.append(t1 - t0)
                    commits.append(t2 - t1)
                view = {k[0]: d for k, d in driver.dump("view", b).items()}
            finally:
                driver.close()
                with psycopg.connect(URL, autocommit=True) as con:
                    con.execute(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE')
            out[way] = (
                statistics.median(stores),
                statistics.median(commits),
                meter.parts().get("postgres", 0.0) / len(data),
                view,
            )
    return out


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--batches", type=int, default=8)
    ap.add_argument("--batch", type=int, default=25_000)
    ap.add_argument("--keys", type=int, default=100_000)
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--skip", default="", help="spark, postgres")
    args = ap.parse_args()
    print(machine())
    from tidemark.collection.collection import Collection
    from tidemark.spec import CollectionSpec

    coll = Collection(CollectionSpec("orders", ("/customer",), SCHEMA))
    work = tempfile.mkdtemp(prefix="tm-typed-")
    write_stream(work, args.batch * args.batches, args.keys, args.batches)
    files = [os.path.join(work, n) for n in sorted(os.listdir(work))]
    if "spark" not in args.skip:
        from tidemark.spark.session import local_session

        spark = local_session("tidemark-bench", master="local[2]", shuffle_partitions=2)
        got = spark_part(spark, files, coll, args.rounds)
        print(f"\nSpark, per batch of {args.batch:,} (median of the last round; wall, JVM CPU):")
        for name, (wall, cpu, table) in got.items():
            print(f"  ({name}) {wall * 1000:7.0f} ms  JVM {cpu * 1000:7.0f} ms  {table.num_rows:,} keys")
        spark.stop()
    if "postgres" not in args.skip:
        got = pg_part(files, coll, args.rounds)
        same = got["texts"][3] == got["csv"][3]
        print(f"\nPostgreSQL, one session per batch (median of the last round; views equal: {same}):")
        for way, (store, commit, cpu, _view) in got.items():
            print(
                f"  ({way}) store {store * 1000:6.0f} ms  commit {commit * 1000:6.0f} ms  "
                f"PostgreSQL CPU {cpu * 1000:6.0f} ms per batch"
            )


if __name__ == "__main__":
    main()
