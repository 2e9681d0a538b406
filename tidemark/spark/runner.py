"""``tidemark run``: run the materializations of a spec on Spark.

``check``, ``status`` and ``reset`` need no Spark: :mod:`tidemark.ops`."""

from __future__ import annotations

from typing import Callable, Optional


def run_spec(
    spec_path: str,
    *,
    available_now: bool = True,
    materializations: Optional[list[str]] = None,
    spark=None,
    on_batch: Optional[Callable] = None,
    max_files_per_trigger: Optional[int] = None,
):
    """Run every (or the named) materialization of a spec; return their runs when done."""
    from tidemark.spark.api import _spark, materialize
    from tidemark.spec import load_spec

    spec = load_spec(spec_path)
    names = materializations or list(spec.materializations)
    spark = _spark(spark)
    runs = [
        materialize(
            spec,
            materialization=n,
            available_now=available_now,
            spark=spark,
            on_batch=on_batch,
            max_files_per_trigger=max_files_per_trigger,
        )
        for n in names
    ]
    for run in runs:
        run.await_termination()
    return runs
