"""``tidemark run``: run the materializations of a spec on Spark.

``check``, ``status`` and ``reset`` need no Spark: :mod:`tidemark.ops`."""

from __future__ import annotations

from typing import TYPE_CHECKING, Callable, Optional, cast

if TYPE_CHECKING:
    from tidemark.spec import TidemarkSpec


def run_spec(
    spec_path: "str | TidemarkSpec",
    *,
    available_now: bool = True,
    materializations: Optional[list[str]] = None,
    spark=None,
    on_batch: Optional[Callable] = None,
    max_files_per_trigger: Optional[int] = None,
    metrics_port=None,
    on_metrics: Optional[Callable[[str], None]] = None,
):
    """Run every (or the named) materialization of a spec; return their runs when done.
    ``metrics_port``: serve Prometheus metrics (see :mod:`tidemark.metrics`); ``on_metrics``
    is called once with their URL."""
    from tidemark.spark.api import MaterializationRun, _spark, materialize
    from tidemark.spec import load_spec

    spec = load_spec(spec_path)
    names = materializations or list(spec.materializations)
    spark = _spark(spark)
    runs = [
        cast(  # started (start=True): a run
            MaterializationRun,
            materialize(
                spec,
                materialization=n,
                available_now=available_now,
                spark=spark,
                on_batch=on_batch,
                max_files_per_trigger=max_files_per_trigger,
                metrics_port=metrics_port,
            ),
        )
        for n in names
    ]
    if on_metrics is not None and runs and runs[0].metrics_url:
        on_metrics(runs[0].metrics_url)
    for run in runs:
        run.await_termination()
    return runs
