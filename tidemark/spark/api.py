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

Both return a started :class:`MaterializationRun` (``start=False``: the configured
``DataStreamWriter``).  The query runs until stopped (``available_now=True``: it processes
what is there and stops).
:func:`tidemark.reset` (:mod:`tidemark.ops`) takes the same arguments and needs no Spark.
"""

from __future__ import annotations

import contextlib
import logging
import os
import signal
import threading
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Callable, Mapping, Optional, Union

from tidemark.errors import SpecError, from_task_failure
from tidemark.options import RuntimeOptions

log = logging.getLogger("tidemark")

if TYPE_CHECKING:
    from pyspark.sql.streaming import DataStreamWriter

    from tidemark.spark.processor import Materializer


@dataclass
class MaterializationRun:
    """A started materialization: the Spark query and tidemark's processor."""

    query: Any  # a StreamingQuery (classic or Spark Connect's)
    materializer: Materializer
    metrics_url: Optional[str] = None  # where /metrics is served (``metrics_port=``)

    def await_termination(self, timeout: Optional[float] = None):
        """Wait; re-raise tidemark's own error (not Spark's wrapper) if the batch failed.

        Ctrl-C while waiting (without ``timeout``, in the main thread) stops at the next safe
        point, as ``tidemark run`` does: the batch in progress finishes and commits, the query
        stops, then :class:`KeyboardInterrupt` is raised, without Spark's or py4j's traces.
        A second Ctrl-C raises it at once (also safe: a batch cut short runs again)."""
        stop = _CtrlC(self) if timeout is None and _CtrlC.wanted() else None
        try:
            with stop or contextlib.nullcontext():
                done = self.query.awaitTermination() if timeout is None else self.query.awaitTermination(timeout)
        except Exception as exc:
            if stop is not None and stop.requested:
                raise KeyboardInterrupt("stopped on request; every committed batch stays") from None
            if self.materializer.error is not None:
                raise self.materializer.error from exc
            found = from_task_failure(exc)  # a log source's refusal, from Spark's source runner
            if found is not None:
                raise found from None
            raise
        finally:
            if timeout is None or not self._active():
                self._release()
        if stop is not None and stop.requested:
            raise KeyboardInterrupt("stopped on request; every committed batch stays")
        return done

    def stop(self):
        try:
            self.query.stop()
        finally:
            self._release()

    def _stop_requested(self, request: dict) -> None:
        """Another process asks this run to stop (``tidemark rebuild``, to cut over): the batch in
        progress finishes and commits, the query stops (``await_termination`` returns)."""
        log.warning(
            "materialization %s: %s asked this run to stop; stopping after the batch in progress",
            getattr(getattr(self.materializer, "mat", None), "name", "?"),
            request.get("by", "another process"),
        )
        threading.Thread(target=_CtrlC(self)._stop, name="tidemark-stop", daemon=True).start()

    def _active(self) -> bool:
        try:
            return bool(self.query.isActive)
        except Exception:  # noqa: BLE001 - the session is gone
            return False

    def _release(self) -> None:
        lease = getattr(getattr(self.materializer, "coordinator", None), "lease", None)
        if lease is not None:
            lease.release()

    def __getattr__(self, name):
        return getattr(self.query, name)


class _CtrlC:
    """SIGINT while a run is awaited: in a thread (no py4j call inside a signal handler, where
    PySpark's own handler makes one), let the batch in progress finish, refuse later ones,
    stop the query."""

    def __init__(self, run: MaterializationRun):
        self.run = run
        self.requested = False
        self._previous = None

    @staticmethod
    def wanted() -> bool:
        """In the main thread, unless the SIGINT handler stops runs itself (``tidemark run``'s)."""
        if threading.current_thread() is not threading.main_thread():
            return False
        owner = getattr(signal.getsignal(signal.SIGINT), "__self__", None)
        return not getattr(owner, "stops_between_batches", False)

    def __enter__(self):
        self._previous = signal.signal(signal.SIGINT, self._handler)
        return self

    def __exit__(self, *exc):
        signal.signal(signal.SIGINT, self._previous)
        return False

    def _handler(self, signum, frame):
        if self.requested:
            raise KeyboardInterrupt
        self.requested = True
        log.warning("stopping after the batch in progress (Ctrl-C again to stop at once)")
        threading.Thread(target=self._stop, daemon=True).start()

    def _stop(self) -> None:
        from tidemark.spark.processor import GATE

        GATE.refuse_and_wait()
        try:
            self.run.query.stop()
        except Exception:  # noqa: BLE001 - stopped already, or the session is gone
            pass
        finally:
            GATE.reopen()  # the script may go on (catch KeyboardInterrupt) and run again


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
    shards: Union[int, dict] = 1,
    name: Optional[str] = None,
    delta_updates: bool = False,
    on_invalid: str = "fail",
    options: Union[RuntimeOptions, Mapping[str, Any], None] = None,
    available_now: bool = False,
    processing_time: Optional[str] = None,
    start: bool = True,
    spark=None,
    on_batch: Optional[Callable] = None,
    max_files_per_trigger: Optional[int] = None,
    metrics_port: Union[int, str, None] = None,
    order: Optional[str] = None,
    _adoption=None,
) -> MaterializationRun | DataStreamWriter:
    """Materialize a collection into an endpoint, exactly once.

    ``source`` is either a spec (a YAML/JSON file path or a :class:`~tidemark.spec.TidemarkSpec`;
    name one of its materializations with ``materialization=`` unless it has only one), or a
    streaming DataFrame with a JSON ``value`` column (or any columns), described by
    ``collection={"key": [...], "schema": {...}}``, ``endpoint={driver: config}``,
    ``resource=`` (default ``{"table": name}``), ``checkpoint=`` (required), ``shards=`` (a count, or
    ``{"auto": {"min", "max", "keys_per_shard"}}``; docs/operations.md, also for ``tidemark.scale``),
    ``name=`` (default: see :func:`tidemark.ops.default_name`), ``delta_updates=`` and
    ``on_invalid=`` (``"fail"`` or ``"quarantine"``).

    ``options``: the runtime options (:class:`~tidemark.options.RuntimeOptions`, or a mapping of
    the fields to change); they replace / override the spec's ``options:``, and environment
    variables (:data:`tidemark.options.ENV`) override both.  By default the query runs until
    stopped, a batch as soon as the previous one is done, or every ``processing_time=`` (e.g.
    ``"10 seconds"``); ``available_now=True`` processes what is there and stops.  ``spark``:
    the session (default: the active one, or a local one); where it does not set
    ``spark.sql.shuffle.partitions``, the query gets the CLI's 4
    (:data:`tidemark.spark.session.SHUFFLE_PARTITIONS`; not with ``start=False``).  ``on_batch``: called with each batch's
    :class:`~tidemark.spark.processor.BatchReport`.  ``max_files_per_trigger``: files per batch
    of a spec's file sources that set none.  ``metrics_port``: serve Prometheus metrics of
    this materialization at ``http://HOST:PORT/metrics`` (a port, or ``"HOST:PORT"``; 0 picks
    a free port; see :mod:`tidemark.metrics`); the URL is the run's ``metrics_url``.

    Source order: a DataFrame's rows are ordered by its ``_file`` / ``_block`` columns, or by
    Kafka's ``topic`` / ``partition`` / ``offset`` columns kept beside a string ``value``, or —
    for a file source such as ``spark.readStream.text(dir)`` — by file and position, which
    tidemark reads from Spark's ``_metadata``.  Any other DataFrame has no defined order
    within a batch: where the schema has locations whose value depends on it
    (``lastWriteWins``/``firstWriteWins`` without ``order:``, ``append``) it is refused with
    the locations named, unless ``order="any"`` says the order does not matter to you
    (docs/reductions.md, "Source order").

    Returns a started :class:`MaterializationRun` (not a ``StreamingQuery``: it holds one in
    ``.query``; ``.await_termination()`` re-raises tidemark's own error, ``.stop()``, and the
    query's other attributes pass through), or with ``start=False`` the configured
    ``DataStreamWriter`` (not started).  Raises :class:`~tidemark.errors.SpecError` for an
    invalid spec or arguments, and start-up's refusals
    (:class:`~tidemark.errors.RecoveryError`) before anything is written.
    """
    from tidemark.collection.collection import collections_of
    from tidemark.ops import target
    from tidemark.spark.processor import Materializer
    from tidemark.spark.session import quiet_failed_queries, start_query
    from tidemark.spark.sources import prepare_dataframe, read_collection, source_order
    from tidemark.spec import TidemarkSpec, check_source_readable

    spark = _spark(spark)
    quiet_failed_queries(spark)
    spec, mat, checkpoint_location = target(
        source,
        materialization=materialization,
        collection=collection,
        endpoint=endpoint,
        resource=resource,
        checkpoint=checkpoint,
        shards=shards,
        name=name,
        delta_updates=delta_updates,
        on_invalid=on_invalid,
        options=options,
    )
    if isinstance(source, (str, os.PathLike, TidemarkSpec)):
        streams = []
        for i, b in enumerate(mat.bindings):
            cspec = spec.collections[b.source]
            check_source_readable(spec, b.source)
            if max_files_per_trigger and not (cspec.source and "maxFilesPerTrigger" in (cspec.source.options or {})):
                cspec = _with_option(cspec, "maxFilesPerTrigger", max_files_per_trigger)
            streams.append(
                read_collection(
                    spark,
                    cspec,
                    i,
                    file=spec.file,
                    base_dir=spec.base_dir,
                    mtime=_adoption is not None,
                    checkpoint=checkpoint_location,
                )
            )
    else:
        streams = [prepare_dataframe(source, 0, source_name=mat.name, mtime=_adoption is not None)]

    collections = collections_of(spec, mat)
    if not isinstance(source, (str, os.PathLike, TidemarkSpec)) and not source_order(source):
        check_unordered(mat.name, collections[0], order)
    stream = streams[0]
    for s in streams[1:]:
        stream = stream.unionByName(s)

    metrics_url = None
    if metrics_port is not None:
        on_batch, metrics_url, watch = _with_metrics(metrics_port, spec, mat, source, on_batch)
    materializer = Materializer(spec, mat, collections, checkpoint_location, on_batch=on_batch, adoption=_adoption)
    if metrics_port is not None:
        watch(materializer)
    materializer.start_up()
    from tidemark.runtime.identity import remove_unfinished_writes

    for path in remove_unfinished_writes(os.path.join(checkpoint_location, "spark")):  # the lease is ours now
        log.info("removed %s: a write Spark did not finish (the process was stopped during it)", path)
    writer = (
        stream.writeStream.foreachBatch(materializer)
        .option("checkpointLocation", os.path.join(checkpoint_location, "spark"))
        .queryName(f"tidemark_{mat.name}")
    )
    if _adoption is not None:  # batch 0 only, with every file there is (runtime.adoption)
        writer = writer.trigger(once=True)
    elif available_now:
        writer = writer.trigger(availableNow=True)
    elif processing_time:
        writer = writer.trigger(processingTime=processing_time)
    lease = materializer.coordinator.lease
    assert lease is not None  # start_up took it
    if not start:
        lease.keep()  # renewed until this process ends (the caller starts the query)
        return writer
    try:
        run = MaterializationRun(start_query(writer, spark), materializer, metrics_url)
    except BaseException:
        lease.release()
        raise
    lease.keep(alive=run._active, on_stop=run._stop_requested)
    return run


def check_unordered(name: str, collection, order: Optional[str]) -> None:
    """Refuse a DataFrame without a defined source order where reductions depend on it,
    unless ``order="any"`` says the order does not matter."""
    if order not in (None, "any"):
        raise SpecError(
            f'materialize(order={order!r}): the only value is "any" (the source order does not matter '
            "to you); an event-time order is a reduce's `order:` in the schema"
        )
    where = collection.order_dependent()
    if where and order != "any":
        shown = ", ".join(where[:4]) + (f" and {len(where) - 4} more" if len(where) > 4 else "")
        raise SpecError(
            f"materialization {name}: {shown} depend on the source order, which this DataFrame does not define "
            '(Spark may hand a batch\'s rows over in any order, so "last" would be whichever row came last). '
            "Fix one of: give the reduce an event-time order (reduce: {strategy: lastWriteWins, order: /updated_at}); "
            "keep Kafka's topic, partition and offset columns beside a string value; add _file and _block columns "
            'that order your rows; or pass order="any" to materialize if any order is right for you '
            '(docs/reductions.md, "Source order"). Nothing was started'
        )


def _with_metrics(port, spec, mat, source, on_batch):
    """(on_batch that also feeds the metrics, the metrics URL, a function that watches the
    materializer's failures)."""
    from tidemark.metrics import serve
    from tidemark.sources.lag import input_waiting
    from tidemark.spec import TidemarkSpec

    metrics, url = serve(port)
    from_spec = isinstance(source, (str, os.PathLike, TidemarkSpec))
    metrics.register(mat.name, (lambda: input_waiting(spec, mat.name)) if from_spec else None)

    def fed(report):
        metrics.batch(report)
        if on_batch is not None:
            on_batch(report)

    def watch(materializer):
        materializer.on_error = lambda exc: metrics.failure(mat.name, exc)

    return fed, url, watch


def _with_option(cspec, key, value):
    import dataclasses

    src = cspec.source
    new_src = dataclasses.replace(src, options={**(src.options or {}), key: value})
    return dataclasses.replace(cspec, source=new_src)
