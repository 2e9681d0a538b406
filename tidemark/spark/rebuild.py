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
    wait: Optional[float] = None,
) -> str:
    """Rebuild a live view from the edited spec ``source`` while it keeps serving, then replace its
    contents in one endpoint transaction (``abandon``: drop the shadow of a rebuild in
    progress instead).  ``spark``: a SparkSession, or a function that makes one (called only if
    something is built).  ``wait``: seconds the cut-over waits for the live run to stop when
    asked (default 600; 0: do not ask, refuse while it runs).  Returns what was done, in words."""
    from tidemark.runtime.rebuild import Rebuild

    spec = source if isinstance(source, TidemarkSpec) else load_spec(str(source))
    if materialization is None:
        if len(spec.materializations) != 1:
            from tidemark.errors import SpecError

            raise SpecError(f"the spec has {len(spec.materializations)} materializations; name one with -m")
        materialization = next(iter(spec.materializations))
    session: list[Any] = []

    def run_view(shadow_spec: TidemarkSpec, name: str) -> None:
        from tidemark.collection.collection import Collection
        from tidemark.runtime.adoption import read_record as adopted
        from tidemark.spark.adopt import adopt
        from tidemark.spark.api import _spark, materialize

        if not session:
            session.append(_spark(spark() if callable(spark) else spark))
        adoption = adopted(shadow_spec.checkpoint_location(name))
        if adoption is not None and not adoption.done:  # a rebuild of an adopted view: its batch 0
            mat = shadow_spec.materializations[name]
            names = [
                "/".join(Collection(shadow_spec.collections[b.source]).binding_spec(b).resource_path)
                for b in mat.bindings
            ]
            recorded = {names[b.binding]: b.source for b in adoption.bindings}
            adopt(shadow_spec, materialization=name, from_=recorded, spark=session[0], on_batch=on_batch)
        run: Any = materialize(
            shadow_spec, materialization=name, available_now=True, spark=session[0], on_batch=on_batch
        )
        run.await_termination()

    options: dict[str, Any] = {"say": say} if say else {}
    if wait is not None:
        options["wait"] = wait
    job = Rebuild(spec, materialization, run_view, **options)
    try:
        return job.abandon() if abandon else job.run()
    finally:
        job.close()


__all__ = ["rebuild"]
