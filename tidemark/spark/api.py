"""``tidemark.materialize``: the public entry point, usable in any PySpark job.

Two forms::

    # a spec file (or TidemarkSpec) and the name of one of its materializations
    query = tidemark.materialize("spec.yaml", materialization="customer_view")

    # any streaming DataFrame with a JSON ``value`` column (or any columns)
    query = tidemark.materialize(
        df,
        collection={"key": ["/customer"], "schema": {...}},
        endpoint={"sqlite": {"path": "views.db"}},
        resource={"table": "customers"},
        checkpoint="/chk/customers",
        shards=4,
    )

Both return a started ``StreamingQuery`` (``start=False``: the configured
``DataStreamWriter``).  ``available_now=True`` processes what is there and stops.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Callable, Optional

from tidemark.errors import SpecError


@dataclass
class MaterializationRun:
    """A started materialization: the Spark query and tidemark's processor."""

    query: object
    materializer: object

    def await_termination(self, timeout: Optional[float] = None):
        """Wait; re-raise tidemark's own error (not Spark's wrapper) if the batch failed."""
        try:
            if timeout is None:
                return self.query.awaitTermination()
            return self.query.awaitTermination(timeout)
        except Exception as exc:
            if self.materializer.error is not None:
                raise self.materializer.error from exc
            raise

    def stop(self):
        self.query.stop()

    def __getattr__(self, name):
        return getattr(self.query, name)


def _spark(spark):
    if spark is not None:
        return spark
    from pyspark.sql import SparkSession

    active = SparkSession.getActiveSession()
    if active is not None:
        return active
    from tidemark.spark.session import local_session

    return local_session()


def materialize(
    source,
    *,
    materialization: Optional[str] = None,
    collection: Optional[dict] = None,
    endpoint: Optional[dict] = None,
    resource: Optional[dict] = None,
    checkpoint: Optional[str] = None,
    shards: int = 1,
    name: Optional[str] = None,
    delta_updates: bool = False,
    on_invalid: str = "fail",
    available_now: bool = True,
    processing_time: Optional[str] = None,
    start: bool = True,
    spark=None,
    on_batch: Optional[Callable] = None,
    max_files_per_trigger: Optional[int] = None,
):
    """Materialize a collection into an endpoint, exactly once. See the module docstring."""
    from tidemark.collection.collection import Collection
    from tidemark.collection.spec import TidemarkSpec
    from tidemark.spark.processor import Materializer
    from tidemark.spark.sources import prepare_dataframe, read_collection

    spark = _spark(spark)
    spec, mat, checkpoint_location = _target(
        source, materialization=materialization, collection=collection, endpoint=endpoint, resource=resource,
        checkpoint=checkpoint, shards=shards, name=name, delta_updates=delta_updates, on_invalid=on_invalid)
    if isinstance(source, (str, os.PathLike, TidemarkSpec)):
        streams = []
        for i, b in enumerate(mat.bindings):
            cspec = spec.collections[b.source]
            if max_files_per_trigger and not (cspec.source and "maxFilesPerTrigger" in (cspec.source.options or {})):
                cspec = _with_option(cspec, "maxFilesPerTrigger", max_files_per_trigger)
            streams.append(read_collection(spark, cspec, i, file=spec.file, base_dir=spec.base_dir))
    else:
        streams = [prepare_dataframe(source, 0, source_name=mat.name)]

    collections = [Collection(spec.collections[b.source], max_document_bytes=mat.max_document_bytes) for b in mat.bindings]
    stream = streams[0]
    for s in streams[1:]:
        stream = stream.unionByName(s)

    materializer = Materializer(spec, mat, collections, checkpoint_location, on_batch=on_batch)
    materializer.start_up()
    writer = (
        stream.writeStream.foreachBatch(materializer)
        .option("checkpointLocation", os.path.join(checkpoint_location, "spark"))
        .queryName(f"tidemark_{mat.name}")
    )
    if available_now:
        writer = writer.trigger(availableNow=True)
    elif processing_time:
        writer = writer.trigger(processingTime=processing_time)
    if not start:
        return writer
    return MaterializationRun(writer.start(), materializer)


def _target(source, *, materialization=None, collection=None, endpoint=None, resource=None, checkpoint=None,
            shards=1, name=None, delta_updates=False, on_invalid="fail"):
    """(spec, materialization, checkpoint location) of a materialize()/reset() call; no Spark."""
    from tidemark.collection.spec import TidemarkSpec, load_spec, parse_spec

    if isinstance(source, (str, os.PathLike)) or isinstance(source, TidemarkSpec):
        spec = source if isinstance(source, TidemarkSpec) else load_spec(str(source))
        if materialization is None:
            if len(spec.materializations) != 1:
                raise SpecError(
                    f"the spec has {len(spec.materializations)} materializations; name one with materialization=…"
                )
            materialization = next(iter(spec.materializations))
        if materialization not in spec.materializations:
            known = ", ".join(sorted(spec.materializations))
            raise SpecError(f"unknown materialization {materialization!r} (known: {known})", file=spec.file)
        mat = spec.materializations[materialization]
        checkpoint_location = os.path.join(_resolve(spec.checkpoint, spec.base_dir), mat.name)
    else:
        if collection is None or endpoint is None:
            raise SpecError("materialize(df, ...) needs collection={'key': [...], 'schema': {...}} and endpoint={...}")
        if checkpoint is None:
            raise SpecError("materialize(df, ...) needs checkpoint=PATH (where the recovery log and Spark's checkpoint live)")
        checkpoint_location = _resolve(str(checkpoint), os.getcwd())
        if name is None:
            name = default_name(checkpoint_location, resource)
        obj = {
            "collections": {name: {k: v for k, v in collection.items() if k != "source"}},
            "materializations": {
                name: {
                    "endpoint": endpoint,
                    "shards": shards,
                    "on_invalid": on_invalid,
                    "bindings": [{"source": name, "resource": resource or {"table": name}, "delta_updates": delta_updates}],
                }
            },
            "checkpoint": str(checkpoint),
        }
        spec = parse_spec(obj, file=None, base_dir=os.getcwd())
        mat = spec.materializations[name]

    return spec, mat, checkpoint_location


def reset(source=None, *, materialization: Optional[str] = None, collection: Optional[dict] = None,
          endpoint: Optional[dict] = None, resource: Optional[dict] = None, checkpoint: Optional[str] = None,
          name: Optional[str] = None, delta_updates: bool = False) -> list[str]:
    """Start a view over on purpose: drop its resources and everything its endpoint records
    of it (checkpoint rows, fences, staged files, quarantine), then its checkpoint folder.

    Takes the arguments given to :func:`materialize` (a spec and a materialization name, or
    ``collection=``, ``endpoint=``, ``resource=``, ``checkpoint=`` and ``name=``); the
    DataFrame itself is not needed (pass ``None``).  Returns what was done.  The next run
    replays the source from its start into a fresh view."""
    from tidemark.collection.collection import Collection
    from tidemark.spark.runner import reset_view

    spec, mat, checkpoint_location = _target(
        source, materialization=materialization, collection=collection, endpoint=endpoint, resource=resource,
        checkpoint=checkpoint, name=name, delta_updates=delta_updates)
    colls = [Collection(spec.collections[b.source]) for b in mat.bindings]
    bindings = tuple(c.binding_spec(b) for c, b in zip(colls, mat.bindings))
    return reset_view(mat.name, mat.driver_name, mat.driver_config, bindings, checkpoint_location)


def default_name(checkpoint_location: str, resource: Optional[dict]) -> str:
    """The materialization name of ``materialize(df, ...)`` without ``name=``: the one its
    checkpoint folder already records, else one derived from the resource and the
    checkpoint's location -- unique to this view, so that two jobs never share a name (and
    with it the endpoint's checkpoint rows and fences)."""
    import hashlib
    import re

    from tidemark.runtime.recovery_log import RecoveryLog

    existing = RecoveryLog.existing_materialization(checkpoint_location)
    if existing:
        return existing
    res = resource or {}
    base = next((str(res[k]) for k in ("table", "name", "topic", "stream", "path", "prefix") if res.get(k)), "view")
    base = re.sub(r"[^A-Za-z0-9_]+", "_", base).strip("_")[:40] or "view"
    return f"{base}_{hashlib.sha256(checkpoint_location.encode()).hexdigest()[:8]}"


def _resolve(path: str, base: str) -> str:
    if "://" in path or os.path.isabs(path):
        return path
    return os.path.abspath(os.path.join(base, path))


def _with_option(cspec, key, value):
    import dataclasses

    src = cspec.source
    new_src = dataclasses.replace(src, options={**(src.options or {}), key: value})
    return dataclasses.replace(cspec, source=new_src)
