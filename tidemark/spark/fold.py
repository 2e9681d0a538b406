"""The Python fold of a batch's documents per key, inside Spark: the fallback of
:func:`tidemark.spark.combine.combine_batch` (a schema that does not compile, or a batch
the compiled path gives up on), and the *odd* keys of a compiled batch (:func:`fold_odd_keys`).

The rows are partitioned by a native key (the key's components as text) and sorted by it and
the source order, and each partition's documents are validated and reduced per key with
:meth:`Collection.reduce` inside ``mapInArrow``.
"""

from __future__ import annotations

from tidemark.collection.keys import compact_json
from tidemark.errors import ReductionError
from tidemark.spark.combined import CombineResult, check_document, locate, raise_invalid

FALLBACK_SCHEMA = (
    "kind string, key_json string, doc string, n long, _file string, _block long, _row long, "
    "reason string, value string"
)


def fold_partitions(collection, on_invalid: str):
    """The ``mapInArrow`` function: rows arrive sorted by (native key, file, block, row)."""

    def fold(batches):
        import pyarrow as pa

        names = ["kind", "key_json", "doc", "n", "_file", "_block", "_row", "reason", "value"]
        out = {n: [] for n in names}
        groups: dict[str, list] = {}
        current = [object()]

        def emit(**kw):
            for n in names:
                out[n].append(kw.get(n))

        def flush_groups():
            for key, (acc, count) in groups.items():
                emit(kind="ok", key_json=key, doc=compact_json(acc), n=count)
            groups.clear()

        def drain():
            table = pa.RecordBatch.from_pydict(
                {n: out[n] for n in names},
                schema=pa.schema(
                    [
                        ("kind", pa.string()),
                        ("key_json", pa.string()),
                        ("doc", pa.string()),
                        ("n", pa.int64()),
                        ("_file", pa.string()),
                        ("_block", pa.int64()),
                        ("_row", pa.int64()),
                        ("reason", pa.string()),
                        ("value", pa.string()),
                    ]
                ),
            )
            for n in names:
                out[n] = []
            return table

        for batch in batches:
            rows = batch.to_pydict()
            places = zip(rows["value"], rows["_file"], rows["_block"], rows["_row"], rows["_nk"])
            for value, file, block, row, native in places:
                if native != current[0]:
                    flush_groups()
                    current[0] = native
                reason, key, doc = check_document(collection, value)
                if reason is not None:
                    emit(kind="bad", key_json=key, _file=file, _block=block, _row=row, reason=reason, value=value)
                    continue
                group = groups.get(key)
                if group is None:
                    groups[key] = [doc, 1]
                    continue
                try:
                    group[0] = collection.reduce(group[0], doc)
                    group[1] += 1
                except ReductionError as exc:
                    emit(kind="error", key_json=key, reason=str(exc), _file=file, _block=block, _row=row)
            if len(out["kind"]) >= 4096:
                yield drain()
        flush_groups()
        yield drain()

    return fold


def native_key(df, collection):
    """A native grouping key (key components as text), used only to partition and sort."""
    from pyspark.sql import functions as F

    parts = []
    for ptr in collection.key:
        tokens = [t.replace("~1", "/").replace("~0", "~") for t in ptr.lstrip("/").split("/")]
        path = "$" + "".join("['" + t.replace("'", "") + "']" for t in tokens)
        parts.append(F.coalesce(F.get_json_object(F.col("value"), path), F.lit("\u0000")))
    return F.concat_ws("\u0001", *parts)


def fold_batch(df, collection, on_invalid, whole=None):
    """The Python fold of ``df``'s documents per key; ``whole``: the batch ``df`` is part of
    (where an invalid document's line is counted)."""
    from pyspark.sql import functions as F

    whole = df if whole is None else whole
    spark = df.sparkSession
    n = int(spark.conf.get("spark.sql.shuffle.partitions"))
    keyed = df.select("value", "_file", "_block", "_row", native_key(df, collection).alias("_nk"))
    folded = (
        keyed.repartition(n, "_nk")
        .sortWithinPartitions("_nk", "_file", "_block", "_row")
        .mapInArrow(fold_partitions(collection, on_invalid), FALLBACK_SCHEMA)
    ).persist()
    cached = [folded]
    try:
        stats = folded.agg(
            F.sum(F.when(F.col("kind") == "ok", F.col("n"))).alias("ok"),
            F.count(F.when(F.col("kind") == "bad", 1)).alias("bad"),
            F.count(F.when(F.col("kind") == "error", 1)).alias("errors"),
        ).collect()[0]
        if stats["errors"]:
            err = (
                folded.filter(F.col("kind") == "error")
                .orderBy("_file", "_block", "_row")
                .select("key_json", "reason")
                .limit(1)
                .collect()[0]
            )
            raise ReductionError(f"key {err['key_json']}: {err['reason']}")
        bad = folded.filter(F.col("kind") == "bad")
        if stats["bad"] and on_invalid == "fail":
            raise_invalid(
                whole, bad.select("value", "_file", "_block", "_row", "reason", "key_json"), int(stats["bad"])
            )
        combined = folded.filter(F.col("kind") == "ok").select(
            "key_json", F.crc32(F.col("key_json")).alias("key_hash"), "doc"
        )
        invalid = None
        if on_invalid == "quarantine":
            invalid = locate(whole, bad.select("value", "_file", "_block", "_row", "reason", "key_json"))
        return CombineResult(combined, invalid, int(stats["ok"] or 0), "fallback", cached)
    except BaseException:
        folded.unpersist()
        raise


def fold_odd_keys(df, staged, collection, plan, odd, odd_suspects: list[tuple], on_invalid: str) -> CombineResult:
    """The Python fold of the odd keys over all their documents in the batch: the
    non-suspects of the keys in ``odd`` (a frame of ``key_json``) or of a valid suspect, and
    those suspects (by their place in the batch)."""
    from pyspark.sql import functions as F

    from tidemark.spark import compile as C

    spark = df.sparkSession
    suspects = spark.createDataFrame(odd_suspects, "key_json string, _file string, _block long, _row long")
    keys = odd.select("key_json").unionByName(suspects.select("key_json")).distinct()
    key_json = C.key_json_expr([F.col("p")[k] for k in plan.key], plan.key_types)
    rows = ("value", "_file", "_block", "_row")
    members = (
        staged.filter(~F.col("_suspect"))
        .select(*rows, key_json.alias("key_json"))
        .join(F.broadcast(keys), "key_json", "left_semi")
        .select(*rows)
    )
    checked = (
        staged.filter("_suspect")
        .select(*rows)
        .join(F.broadcast(suspects.drop("key_json")), list(rows[1:]), "left_semi")
    )
    return fold_batch(members.unionByName(checked), collection, on_invalid, whole=df)
