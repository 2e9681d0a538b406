"""Combine one micro-batch per key, in source order, on Spark.

:func:`combine_batch` takes a DataFrame of raw documents (``value``, ``_file``,
``_block``, ``_row``; source order is ascending ``(_file, _block, _row)``) and returns one
reduced document per key.

1. If the schema compiles (:mod:`tidemark.collection.plan`; the Spark side is
   :mod:`tidemark.spark.compile`), parse, validate and aggregate natively in one pass
   (``groupBy(key).agg(...)``, *suspects* -- documents native validation cannot prove
   valid -- masked out and counted per key), then check the
   suspects with the Python validator.  If every suspect is invalid: path ``"compiled"``.
2. Otherwise (or when a suspect turns out valid, or a document carries properties the
   plan does not), the vectorized fallback: repartition by key, sort by key and source
   order, and fold each key's documents with :meth:`Collection.reduce` inside
   ``mapInArrow``: path ``"fallback"``.
3. Invalid documents fail the batch (``on_invalid="fail"``: a :class:`DocumentError`
   naming ``file:line``, the key and the rule broken, for the first one in source order)
   or are returned in ``invalid`` (``on_invalid="quarantine"``).  A reduction error (e.g.
   ``sum`` overflow) raises :class:`ReductionError`.  Both are raised before anything is
   returned.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

from tidemark.collection.reduce import TIDEMARK
from tidemark.collection.strategies import UNSURE
from tidemark.errors import ReductionError
from tidemark.spark.combined import CombineResult, check_document, locate, raise_invalid

MAX_DRIVER_SUSPECTS = 100_000


def combine_batch(
    df, collection, *, on_invalid: str = "fail", force_path: Optional[str] = None, aggregated=None
) -> CombineResult:
    """Validate and combine a batch per key. ``force_path`` ("compiled"/"fallback") is for tests;
    ``aggregated``: the compiled combine's aggregate of ``df``, already run (the one-job plan's
    settled one), which step 1 then reads instead of aggregating ``df`` again."""
    if on_invalid not in ("fail", "quarantine"):
        raise ValueError(f"on_invalid must be 'fail' or 'quarantine', got {on_invalid!r}")
    df = _prepare(df)
    if force_path != "fallback":
        from tidemark.collection.plan import compile_collection

        plan = compile_collection(collection)
        if plan is not None:
            result = _compiled(df, collection, plan, on_invalid, fold_odd=force_path != "compiled", grouped=aggregated)
            if result is not None:
                return result
        if force_path == "compiled":
            raise ValueError(f"collection {collection.name!r}: this batch cannot take the compiled path")
    from tidemark.spark.fold import fold_batch

    return fold_batch(df, collection, on_invalid)


def _prepare(df):
    """``df`` as (value, _file, _block, _row): source order is ascending (_file, _block, _row)."""
    return df.select(*source_columns(df.columns))


def source_columns(columns) -> list:
    """The columns (value, _file, _block, _row) of a DataFrame with ``columns``: a missing
    ``_file`` / ``_block`` is a constant, a missing ``_row`` the row's position."""
    from pyspark.sql import functions as F

    return [
        F.col("value").cast("string").alias("value"),
        F.col("_file") if "_file" in columns else F.lit("dataframe").alias("_file"),
        (F.col("_block") if "_block" in columns else F.lit(0)).cast("long").alias("_block"),
        (F.col("_row") if "_row" in columns else F.monotonically_increasing_id()).cast("long").alias("_row"),
    ]


# ----------------------------------------------------------------------------- compiled


def _compiled(df, collection, plan, on_invalid, fold_odd: bool = True, grouped=None):
    """One pass: parse, validate and aggregate together (suspects masked out, and counted).

    Step 1: aggregate per key over every document, suspects masked out, counting per key the
    documents, the suspects and the non-suspects with undeclared properties the plan does not
    carry; cache only that (one row per key).  Step 2: if there are too many suspects, give up
    (the caller falls back).  Step 3: check each suspect with the Python validator; an invalid
    one fails the batch (or is quarantined).  Step 4: a reduction error (sum overflow) fails
    the batch.  Step 5: the *odd* keys -- a valid suspect's, one with undeclared properties the
    plan does not carry, one whose error only the Python fold decides -- are folded in Python
    over all their documents (:func:`tidemark.spark.fold.fold_odd_keys`), the others keep the
    compiled result (path ``"mixed"``; every key odd: ``"fallback"``).  Without ``fold_odd``
    an odd key gives up instead.  ``grouped``: step 1's aggregate, already run.
    """
    from pyspark.sql import functions as F

    from tidemark.spark import jvm

    # The JVM proof, where the session has it, decides every question about the text.
    jvm_spec = jvm.spec(plan) if jvm.available(df.sparkSession) else None
    cols = _compiled_columns(df.sparkSession, plan, jvm_spec)
    source = df.select(*cols.pre) if cols.pre else df
    staged = source.select(*cols.stage)
    if grouped is None:
        grouped = staged.groupBy(*cols.grouping).agg(*cols.aggs)
    # Step 1
    out = grouped.select(*cols.out).persist()
    cached = [out]
    try:
        valid = ~F.col("_suspect")
        stats = out.agg(
            F.sum(F.when(valid, F.col("_documents"))).alias("ok"),
            F.sum(F.when(F.col("_suspect"), F.col("_documents"))).alias("suspects"),
            F.sum(F.when(valid, F.col("_with_extras"))).alias("extras"),
            F.count(F.when(valid, F.col("_error"))).alias("errors"),
        ).collect()[0]
        # Step 2
        if ((stats["extras"] or 0) and not fold_odd) or (stats["suspects"] or 0) > MAX_DRIVER_SUSPECTS:
            out.unpersist()
            return None
        # Step 3
        invalid_rows = []
        odd_suspects: list[tuple] = []  # (key_json, file, block, row) of the valid suspects
        if stats["suspects"]:
            rows = (
                staged.filter("_suspect")
                .select("value", "_file", "_block", "_row")
                .orderBy("_file", "_block", "_row")
                .collect()
            )
            for r in rows:
                reason, kj, _doc = check_document(collection, r["value"])
                if reason is None:  # native validation was unsure and the document is valid
                    if not fold_odd:
                        out.unpersist()
                        return None
                    odd_suspects.append((kj, r["_file"], r["_block"], r["_row"]))
                    continue
                invalid_rows.append(
                    {
                        "value": r["value"],
                        "_file": r["_file"],
                        "_block": r["_block"],
                        "_row": r["_row"],
                        "reason": reason,
                        "key_json": kj,
                    }
                )
            if on_invalid == "fail" and invalid_rows:
                raise_invalid(df, invalid_rows, len(invalid_rows))
        valid_keys = out.filter(valid)
        # Step 4 (an error only the Python fold can decide: the fold of that key decides it)
        unsure = F.col("_error").startswith(UNSURE)
        if stats["errors"]:
            if not fold_odd and valid_keys.filter(unsure).limit(1).count():
                out.unpersist()
                return None
            suspect_keys = {kj for kj, *_ in odd_suspects}
            for row in valid_keys.filter(F.col("_error").isNotNull() & ~unsure).select("key_json", "_error").collect():
                if row["key_json"] not in suspect_keys:  # a valid suspect's document may change it: the fold decides
                    raise ReductionError(f"key {row['key_json']}: {row['_error']}")
        combined = valid_keys.select("key_json", "key_hash", "doc")
        invalid = None
        if on_invalid == "quarantine":
            spark = df.sparkSession
            schema = "value string, _file string, _block long, _row long, reason string, key_json string"
            bad_df = spark.createDataFrame(invalid_rows, schema) if invalid_rows else spark.createDataFrame([], schema)
            invalid = locate(df, bad_df)
        documents = int(stats["ok"] or 0) + len(odd_suspects)
        # Step 5
        odd = valid_keys.filter((F.col("_with_extras") > F.lit(0)) | F.coalesce(unsure, F.lit(False)))
        if not odd_suspects and not odd.limit(1).count():
            return CombineResult(combined, invalid, documents, "compiled", cached)
        from tidemark.spark.fold import fold_odd_keys

        folded = fold_odd_keys(df, staged, collection, plan, odd, odd_suspects, on_invalid)
        cached += folded._cached
        if folded.invalid is not None:  # (none: every document of those keys was proved or checked valid)
            invalid = folded.invalid if invalid is None else invalid.unionByName(folded.invalid)
        if not combined.join(folded.combined.select("key_json"), "key_json", "left_anti").limit(1).count():
            return CombineResult(folded.combined, invalid, folded.documents, "fallback", cached)
        kept = combined.join(F.broadcast(folded.combined.select("key_json")), "key_json", "left_anti")
        return CombineResult(kept.unionByName(folded.combined), invalid, documents, "mixed", cached)
    except BaseException:
        for c in cached:
            c.unpersist()
        raise


@dataclass(frozen=True)
class _Columns:
    """The compiled combine's expressions: ``df.select(*pre)`` (only where subexpression
    elimination is off), ``.select(*stage)``, ``.groupBy(*grouping).agg(*aggs)``,
    ``.select(*out)``."""

    pre: tuple
    stage: tuple
    grouping: tuple
    aggs: tuple
    out: tuple
    out_typed: Optional[tuple]  # ``out`` with the document as typed values (``doc``: a struct), or None


def _compiled_columns(spark, plan, jvm_spec: Optional[str]) -> _Columns:
    """The expressions of ``plan``, built once per Spark context and plan.

    They name columns only, so every batch can use them.  Building them is a few thousand
    py4j calls (about 0.25 s); for a batch of a few documents that was a third of its time."""
    from tidemark.spark.session import built_once

    subexpr_off = str(spark.conf.get("spark.sql.subexpressionElimination.enabled", "true")).lower() == "false"
    return built_once(
        spark,
        ("combine", repr(plan), jvm_spec, subexpr_off),
        lambda: _build_columns(plan, jvm_spec, subexpr_off),
    )


def _build_columns(plan, jvm_spec: Optional[str], subexpr_off: bool) -> _Columns:
    from pyspark.sql import functions as F

    from tidemark.collection.formats import is_date_time_field
    from tidemark.spark import compile as C
    from tidemark.spark import jvm
    from tidemark.spark import suspects as V
    from tidemark.spark.datetimes import instant_parts

    whole = jvm_spec is not None
    # Every per-row expression is written over the ``from_json`` expression itself and
    # computed in one projection.  ``from_json`` does not take part in whole-stage code
    # generation, so that projection is compiled on its own, split into small methods
    # (common subexpressions, the parse among them, are evaluated once per row).  Written
    # as projections over a ``p`` column instead, the checks are fused into one generated
    # method that grows with the schema, and past 8,000 bytes of bytecode the JVM no
    # longer compiles it: the whole combine then runs about twice as slowly.  Without
    # subexpression elimination (a session that turned it off) the parse would run once per
    # reference, so there the checks read a parsed column after all.
    pc = F.from_json(
        F.col("value"), C.parse_schema(plan, corrupt=not whole), C.JSON_OPTIONS_NO_CORRUPT if whole else C.JSON_OPTIONS
    )
    pre: tuple = ()
    if subexpr_off:
        pre = ("value", "_file", "_block", "_row", pc.alias("p"))
        pc = F.col("p")
    plain = V.plain_document(plan, F.col("value"), pc, jvm_spec)
    nulls = V.null_flags(plan, F.col("value"), plain, jvm_spec)
    undeclared = V.undeclared_members(plan, F.col("value"), plain, jvm_spec)
    suspect = V.suspect_expr(plan, F.col("value"), pc, plain, whole, nulls)
    if any(f.kept_order for f in plan.fields):  # a document naming the kept order values: the Python fold reads them
        suspect = suspect | F.col("value").contains(f'"{TIDEMARK}"')
    # Each date-time's instant, once per row in this projection (generated code): computed
    # inside the aggregates it took a third of the combine on the event stream's schema.
    # Columns no aggregate reads are pruned by Spark's optimizer.
    instants, staged_instants = {}, []
    for i, f in enumerate(plan.fields):
        if f.kind == "scalar" and is_date_time_field(f):
            seconds, fraction = instant_parts(pc[f.name])
            staged_instants += [seconds.alias(f"_ts{i}"), fraction.alias(f"_tf{i}")]
            instants[f.name] = (F.col(f"_ts{i}"), F.col(f"_tf{i}"))
    stage = (
        "value",
        "_file",
        "_block",
        "_row",
        pc.alias("p"),
        suspect.alias("_suspect"),
        V.extras_expr(plan, F.col("value"), pc, plain, whole).alias("_extras"),
        F.struct("_file", "_block", "_row").alias("_o"),
        *staged_instants,
        *(flag.alias(f"_z{i}") for i, flag in enumerate(nulls.values())),
        *(() if undeclared is None else (undeclared.alias("_u"),)),
    )
    pc = F.col("p")
    ok = ~F.col("_suspect")
    # Suspects go to one group of their own (``_suspect``), so only the aggregates that collect
    # values need masking; that group's ``_documents`` counts them and it is dropped afterwards.
    aggs, doc, error, typed_doc = C.aggregations(
        plan,
        pc,
        F.col("value"),
        F.col("_o"),
        valid=ok,
        mask_scalars=False,
        key_cols={k: f"_k{i}" for i, k in enumerate(plan.key)},
        instants=instants,
        nulls={name: F.col(f"_z{i}") for i, name in enumerate(nulls)},
        undeclared=None if undeclared is None else F.col("_u"),
    )
    masked_keys = [F.when(ok, pc[k]) for k in plan.key]
    key_cols = [m.alias(f"_k{i}") for i, m in enumerate(masked_keys)]
    # A hash of the key leads the grouping columns: the aggregation sorts its rows by the
    # grouping columns (past a small number of keys), and a sort compares a prefix of the
    # first column before whole rows.  Keys often share long prefixes (``customer-000…``);
    # hashes do not, so most comparisons end at the prefix.
    grouping = (F.xxhash64(*masked_keys).alias("_key_hash64"), F.col("_suspect"), *key_cols)
    all_aggs = (*aggs, F.count(F.lit(1)).alias("_documents"), F.count_if(F.col("_extras")).alias("_with_extras"))
    key_json = C.key_json_expr([F.col(f"_k{i}") for i in range(len(plan.key))], plan.key_types)

    # documents of the key held undeclared top-level properties, carried in ``doc`` (a typed doc
    # has no place for them; an object's carried members are in its text there)
    carried = F.lit(False)
    if undeclared is not None and jvm.carries_undeclared(plan):
        root = F.map_keys(C.undeclared_merged(F.col(C.UNDECLARED)))
        carried = F.coalesce(F.exists(root, lambda name: name.startswith(jvm.undeclared_prefix(None))), F.lit(False))

    def out(document):
        return (
            "_suspect",
            key_json.alias("key_json"),
            F.crc32(key_json).alias("key_hash"),
            document.alias("doc"),
            error.alias("_error"),
            "_documents",
            "_with_extras",
            carried.alias("_carried"),
        )

    return _Columns(pre, stage, grouping, all_aggs, out(doc), out(typed_doc) if typed_doc is not None else None)
