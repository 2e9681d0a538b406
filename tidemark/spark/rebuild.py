"""``tidemark rebuild`` with Spark: the shadow is built by :func:`tidemark.spark.api.materialize`.

The steps, the record and the cut-over are :mod:`tidemark.runtime.rebuild` (no Spark); this
module gives it the function that runs a materialization to the end of its input.
"""

from __future__ import annotations

from typing import Any, Callable, Optional, Union

from tidemark.spec import TidemarkSpec, load_spec


def rebuild(
    source: Union[str, TidemarkSpec],
    *,
    materialization: Optional[str] = None,
    spark=None,
    abandon: bool = False,
    on_batch: Optional[Callable] = None,
    say: Optional[Callable[[str], None]] = None,
) -> str:
    """Rebuild a live view from the edited spec ``source`` while it keeps serving, then replace its
    contents in one endpoint transaction (``abandon``: drop the shadow of a rebuild in
    progress instead).  ``spark``: a SparkSession, or a function that makes one (called only if
    something is built).  Returns what was done, in words."""
    from tidemark.runtime.rebuild import Rebuild

    spec = source if isinstance(source, TidemarkSpec) else load_spec(str(source))
    if materialization is None:
        if len(spec.materializations) != 1:
            from tidemark.errors import SpecError

            raise SpecError(f"the spec has {len(spec.materializations)} materializations; name one with -m")
        materialization = next(iter(spec.materializations))
    session: list[Any] = []

    def run_view(shadow_spec: TidemarkSpec, name: str) -> None:
        from tidemark.spark.api import _spark, materialize

        if not session:
            session.append(_spark(spark() if callable(spark) else spark))
        run: Any = materialize(
            shadow_spec, materialization=name, available_now=True, spark=session[0], on_batch=on_batch
        )
        run.await_termination()

    job = Rebuild(spec, materialization, run_view, **({"say": say} if say else {}))
    try:
        return job.abandon() if abandon else job.run()
    finally:
        job.close()


__all__ = ["rebuild"]
