"""The one-job plan of a batch: the unchecked combine, settled (its map side run once:
:meth:`OneJobPlan.combine`), then its rows for the driver or routed to the shards
(:meth:`OneJobPlan.finish`), from JVM column sequences prepared once per query; later batches
of a query reuse the first batch's analyzed plans with their own source, and their own settled
leaf, swapped in (``jvm/PlanRebind.java``): a batch's plan costs a few py4j calls and no
analysis."""

from __future__ import annotations

import logging
from dataclasses import dataclass

from tidemark.options import process_options
from tidemark.protocol.messages import Range
from tidemark.spark.route import route_j, union_j

log = logging.getLogger("tidemark")


@dataclass(frozen=True)
class SettledBatch:
    """A batch's combine, settled (:meth:`OneJobPlan.combine`): per binding a plan leaf over its
    aggregate's shuffle output, and at least how many keys the batch combines to."""

    leaves: tuple  # JVM LogicalPlan per binding
    bound: int  # the records the aggregates' shuffles wrote (each input split's groups)


class OneJobPlan:
    """The unchecked combine of a batch (the compiled combine without its checks: ``_needs_checks``
    marks a row that needs them) and its routing, from JVM objects built once per query: a
    batch's plan is a dozen py4j calls
    (a select or groupBy with its columns as one prebuilt ``Seq``), where building the same
    DataFrame from Column objects was about a thousand (0.2 s on a 25k-document batch).
    ``ok`` is False when some binding's schema does not compile (the checked plan then)."""

    def __init__(
        self,
        spark,
        columns: tuple,
        collections: tuple,
        ranges: tuple[Range, ...],
        typed: bool = False,
        remainder: bool = False,
    ):
        from pyspark.sql import functions as F

        from tidemark.collection.plan import compile_collection
        from tidemark.spark import internals, jvm
        from tidemark.spark.combine import _compiled_columns, source_columns

        self.ranges = ranges
        self.bindings = []
        self.ok = True
        # "combine" -> (analyzed plan, its source leaf) of the first batch; ("finish", routed?) ->
        # (analyzed plan, its settled leaf) of the first such batch
        self.templates: dict = {}
        self.rebindable = False
        self.rebound = 0  # batches whose combine was planned from the template
        self.finished = 0  # ... and whose rows were (from the settled combine's template)
        # the unrouted rows carry the document as typed values (``row``, for StoreRows; of
        # several bindings, ``row_<i>`` per binding, null in the other bindings' rows): every
        # binding's root merges, the driver stages typed values (``remainder``: with each row's
        # remainder, the properties the schema does not declare among it)
        self.typed = typed
        multi = self.multi = len(collections) > 1
        jseq = internals.jseq
        self.prep = jseq(spark, source_columns(columns) + ([F.col("_binding")] if multi else []))
        available = None
        for i, coll in enumerate(collections):
            plan = compile_collection(coll)
            if plan is None:
                self.ok = False
                return
            if available is None:
                available = jvm.available(spark)
                # one source leaf in the plan; TIDEMARK_PLAN_REBIND=0 (benchmarks): build every batch
                self.rebindable = available and len(collections) == 1 and process_options().plan_rebind
            jvm_spec = jvm.spec(plan) if available else None
            cols = _compiled_columns(spark, plan, jvm_spec)
            odd = F.col("_suspect") | (F.col("_with_extras") > F.lit(0)) | F.col("_error").isNotNull()
            # without a remainder a typed row has no place for a nullable property's null (NULL
            # is absent there), nor for the properties the schema does not declare
            self.typed = (
                self.typed and plan.root_strategy == "merge" and (remainder or not any(f.nullable for f in plan.fields))
            )
            typed_out = cols.out_typed if self.typed else None
            self.bindings.append(
                {
                    "filter": internals.jcol(F.col("_binding") == F.lit(i)) if multi else None,
                    "pre": jseq(spark, cols.pre) if cols.pre else None,
                    "stage": jseq(spark, cols.stage),
                    "grouping": jseq(spark, cols.grouping),
                    "agg0": internals.jcol(cols.aggs[0]),
                    "aggs": jseq(spark, cols.aggs[1:]),
                    "out": jseq(spark, cols.out),
                    "final": jseq(
                        spark,
                        [
                            F.lit(i).alias("binding"),
                            "key_json",
                            "key_hash",
                            "doc",
                            "_documents",
                            odd.alias("_needs_checks"),
                        ],
                    ),
                    "out_typed": jseq(spark, typed_out) if typed_out else None,
                    "final_typed": jseq(
                        spark,
                        [
                            F.lit(i).alias("binding"),
                            "key_json",
                            "key_hash",
                            F.lit(None).cast("string").alias("doc"),
                            "_documents",
                            (odd if remainder else odd | F.col("_carried")).alias("_needs_checks"),
                            F.col("doc").alias(f"row_{i}" if multi else "row"),
                        ],
                    )
                    if typed_out
                    else None,
                }
            )

    def combine(self, df) -> "SettledBatch":
        """The batch ``df``'s combine, settled (:func:`tidemark.spark.internals.settle`): per
        binding, its aggregate's map side run once (read, parse, prove, aggregate within each
        input split) and the rest of it as a plan leaf; and at least how many keys the batch
        combines to (each split's groups).  From the second batch on, the first batch's
        analyzed plan with this batch's source in it (``PlanRebind.java``), where the session
        has tidemark's jar: no analysis, three py4j calls."""
        from tidemark.spark import internals

        spark = df.sparkSession
        leaf = internals.analyzed(internals.jdf(df))
        aggregates = None
        template = self.templates.get("combine")
        if template is not None:
            plan = self._rebind(spark, template, leaf)
            if plan is not None:
                self.rebound += 1
                aggregates = [internals.jdf(internals.of_plan(spark, plan))]
        if aggregates is None:
            jdf = internals.jdf(df).select(self.prep)
            aggregates = []
            for b in self.bindings:
                j = jdf.filter(b["filter"]) if b["filter"] is not None else jdf
                if b["pre"] is not None:
                    j = j.select(b["pre"])
                aggregates.append(j.select(b["stage"]).groupBy(b["grouping"]).agg(b["agg0"], b["aggs"]))
            if self.rebindable and "combine" not in self.templates:
                self.templates["combine"] = (internals.analyzed(aggregates[0]), leaf)
        settled = [internals.settle(spark, a) for a in aggregates]
        return SettledBatch(tuple(s[0] for s in settled), sum(s[1] for s in settled))

    def finish(self, settled: "SettledBatch", spark, routed: bool = True):
        """The settled batch's combined rows: routed to the shards (:func:`route`), or
        (``routed=False``) the bindings' rows ``binding, key_json, key_hash, doc, _documents,
        _needs_checks`` unrouted, as typed values where the driver's sessions take them.  From
        the second batch on, the first batch's analyzed plan over this batch's leaf."""
        from tidemark.spark import internals

        typed_rows = not routed and self.typed
        template = self.templates.get(("finish", routed))
        if template is not None:
            plan = self._rebind(spark, template, settled.leaves[0])
            if plan is not None:
                self.finished += 1
                return internals.of_plan(spark, plan)
        parts = []
        for b, aggregated in zip(self.bindings, self.aggregated(settled, spark)):
            j = internals.jdf(aggregated)
            if typed_rows:  # the document as typed values: no JSON text made
                parts.append(j.select(b["out_typed"]).select(b["final_typed"]))
            else:
                parts.append(j.select(b["out"]).select(b["final"]))
        planned = route_j(spark, parts, self.ranges) if routed else union_j(parts, missing=typed_rows and self.multi)
        if self.rebindable and ("finish", routed) not in self.templates:
            self.templates[("finish", routed)] = (internals.analyzed(planned), settled.leaves[0])
        return internals.wrap(planned, spark)

    def aggregated(self, settled: "SettledBatch", spark) -> list:
        """Each binding's aggregated rows of the settled batch (the compiled combine's
        ``groupBy().agg()``, as :func:`tidemark.spark.combine.combine_batch` continues from them)."""
        from tidemark.spark import internals

        return [internals.of_plan(spark, leaf) for leaf in settled.leaves]

    def _rebind(self, spark, template, leaf):
        from py4j.protocol import Py4JError

        from tidemark.spark import internals

        try:
            plan = internals.rebind(spark, template, leaf)
        except Py4JError as exc:  # the class is not in this session after all: build every batch
            log.info("plans are built for every batch (%s)", str(exc).splitlines()[0][:200])
            plan = None
        if plan is None:  # another kind of source leaf: build this batch, and keep building
            self.templates, self.rebindable = {}, False
        return plan
