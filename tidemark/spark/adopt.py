"""``tidemark adopt`` / ``tidemark.adopt``: start a view from a table that already exists.

The steps and what makes them safe are in :mod:`tidemark.runtime.adoption`; this runs them,
with Spark for batch 0.
"""

from __future__ import annotations

import os
import warnings
from typing import Any, Callable, Mapping, Optional, Union, cast

from tidemark.errors import RecoveryError, SpecError, reset_hint
from tidemark.faults import fault_point
from tidemark.options import RuntimeOptions


def _binding_names(mat, collections) -> list[str]:
    return ["/".join(c.binding_spec(b).resource_path) for c, b in zip(collections, mat.bindings)]


def _sources(from_: Union[str, Mapping[str, str]], names: list[str], name: str) -> dict[int, str]:
    """``--from``: per binding index, the table or query its rows come from."""
    if isinstance(from_, str):
        if len(names) != 1:
            raise SpecError(
                f"materialization {name!r} has {len(names)} bindings ({', '.join(names)}): say which "
                "each --from is for, as RESOURCE=TABLE_OR_QUERY"
            )
        return {0: from_}
    out = {}
    for res, src in from_.items():
        hits = [i for i, n in enumerate(names) if res in (n, n.rsplit("/", 1)[-1])]
        if len(hits) != 1:
            raise SpecError(
                f"--from {res}=…: materialization {name!r} has no binding {res!r} (its bindings: {', '.join(names)})"
            )
        out[hits[0]] = src
    if not out:
        raise SpecError("adopt needs --from TABLE_OR_QUERY")
    return out


def parse_from(values: list[str]) -> Union[str, dict[str, str]]:
    """The CLI's ``--from`` values: one ``TABLE_OR_QUERY``, or ``RESOURCE=TABLE_OR_QUERY`` each."""
    if len(values) == 1 and not _named(values[0]):
        return values[0]
    out = {}
    for v in values:
        if not _named(v):
            raise SpecError(f"--from {v!r}: with several --from, write each as RESOURCE=TABLE_OR_QUERY")
        res, _, src = v.partition("=")
        out[res.strip()] = src.strip()
    return out


def _named(value: str) -> bool:
    head, eq, _ = value.partition("=")
    return bool(eq) and head.strip() != "" and " " not in head.strip()


def adopt(
    source,
    *,
    from_: Union[str, Mapping[str, str]],
    since: Union[str, float, None] = None,
    materialization: Optional[str] = None,
    collection: Optional[dict] = None,
    endpoint: Optional[dict] = None,
    resource: Optional[dict] = None,
    checkpoint: Optional[str] = None,
    shards: Union[int, dict] = 1,
    name: Optional[str] = None,
    on_invalid: str = "fail",
    options: Union[RuntimeOptions, Mapping[str, Any], None] = None,
    spark=None,
    on_batch: Optional[Callable] = None,
    order: Optional[str] = None,
) -> dict:
    """Start a view from the rows of an existing table: the view's batch 0 is those rows (each
    a key's reduced document), with the input beyond ``since`` reduced on top; ``run`` /
    ``materialize`` go on from there, exactly once.

    ``source`` and the view's arguments are :func:`tidemark.materialize`'s (a spec and
    ``materialization=``, or a streaming DataFrame with ``collection=``, ``endpoint=``,
    ``checkpoint=`` …).  ``from_``: the table (``name`` or ``schema.name``; a Delta table's path)
    or ``SELECT`` query of the endpoint whose rows to adopt; with several bindings, a mapping
    of resource name to table or query.  ``spark``: the session (or a function that makes it, called only
    once Spark is needed).  ``since``: the time up to which the table holds the
    input (RFC 3339 or epoch seconds; default: now) — a file source's files modified later are
    reduced on top; other DataFrame sources start where the DataFrame says (e.g. Kafka's
    ``startingOffsets``), and all they give in the first batch is reduced on top.  ``order``:
    as for :func:`tidemark.materialize`.

    Refuses, before anything is written: a checkpoint that already holds batches, rows that
    break the collection's schema or repeat a key (the first ones named).  An adopt that was
    stopped is finished by calling it again with the same ``from_``.  Returns what was
    adopted: ``{"rows": {resource: n}, "since": "…", "batch": BatchReport or None}``."""
    from tidemark.collection.collection import collections_of
    from tidemark.drivers.registry import load_driver
    from tidemark.ops import check_materialization, target
    from tidemark.runtime import adoption as ad
    from tidemark.runtime.identity import SparkCheckpoint
    from tidemark.runtime.lease import Lease
    from tidemark.runtime.recovery_log import RecoveryLog
    from tidemark.spark.api import MaterializationRun, _spark, materialize
    from tidemark.spec import TidemarkSpec

    view: dict[str, Any] = dict(  # the view's arguments, to target() and to materialize()
        collection=collection,
        endpoint=endpoint,
        resource=resource,
        checkpoint=checkpoint,
        shards=shards,
        name=name,
        on_invalid=on_invalid,
        options=options,
    )
    spec, mat, location = target(source, materialization=materialization, **view)
    if "://" in location:
        raise SpecError(f"adopt needs a local checkpoint folder, not {location}")
    collections = collections_of(spec, mat)
    names = _binding_names(mat, collections)
    wanted = _sources(from_, names, mat.name)
    Lease(location, mat.name).check_free()
    spark_cp = SparkCheckpoint(os.path.join(location, "spark"))
    record = ad.read_record(location)
    if record is not None and record.done:
        raise RecoveryError(
            f"materialization {mat.name!r} was adopted already ({record.describe()}) and is a live "
            f"view: run it. To adopt again, start over with {reset_hint(mat.name)}"
        )
    if record is not None:
        recorded = {b.binding: b.source for b in record.bindings}
        if recorded != wanted:
            said = ", ".join(f"{names[i]} from {s!r}" for i, s in sorted(recorded.items()))
            raise RecoveryError(
                f"materialization {mat.name!r}: an adopt of {said} did not finish; finish that one "
                f"(the same --from), or start over with {reset_hint(mat.name)}. Nothing was changed"
            )
        if since is not None and ad.parse_since(str(since)) != record.since:
            raise RecoveryError(
                f"materialization {mat.name!r}: the adopt that did not finish reads input after "
                f"{ad.stamp(record.since)}, not --since {since}; finish it without --since, or "
                f"start over with {reset_hint(mat.name)}. Nothing was changed"
            )
    else:
        last = RecoveryLog(location, mat.name, create=False).last()
        if last is not None or spark_cp.query_id() is not None:
            at = f"batches up to {last.batch_id}" if last is not None else "a Spark checkpoint"
            raise RecoveryError(
                f"materialization {mat.name!r}: its checkpoint {location} holds {at} already; adopt "
                f"starts a view. Start over with {reset_hint(mat.name)}, then adopt. Nothing was changed"
            )
        # the endpoint before anything is read or written: credentials, the tables, another owner
        check_materialization(spec, mat, to_run=True)
        from tidemark.sources.origin import adopt_origins

        adopt_origins(spec, mat, location, since is not None)  # a log source: from its end now
        record = ad.new_record(mat.name, ad.parse_since(None if since is None else str(since)))
        with load_driver(mat.driver_name, mat.driver_config) as driver:
            try:
                docs = {
                    i: ad.read_documents(driver.read_rows(src), collections[i], src, names[i])
                    for i, src in sorted(wanted.items())
                }
            except NotImplementedError as exc:
                raise SpecError(f"materialization {mat.name!r}: {exc}") from None
        for i, texts in docs.items():
            record.bindings.append(
                ad.AdoptedBinding(i, names[i], wanted[i], len(texts), ad.write_rows(location, i, texts))
            )
        ad.write_record(location, record)  # the intent: from here on, run refuses until adopt finishes
    fault_point("adopt_recorded")
    report = None
    if spark_cp.identity(0).offsets is None or not _committed(location, 0):
        reports = []

        def fed(r):
            reports.append(r)
            if on_batch is not None:
                on_batch(r)

        is_spec = isinstance(source, (str, os.PathLike, TidemarkSpec))
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", FutureWarning)  # Trigger.Once: batch 0 only, with every file
            run = cast(  # started (start=True): a run
                MaterializationRun,
                materialize(
                    spec if is_spec else source,
                    materialization=mat.name if is_spec else None,
                    **view,
                    spark=_spark(spark() if callable(spark) else spark),
                    on_batch=fed,
                    order=order,
                    _adoption=record,
                ),
            )
        run.await_termination()
        report = next((r for r in reports if r.batch_id == 0), None)
    if not _committed(location, 0) or RecoveryLog(location, mat.name, create=False).get(0) is None:
        raise RecoveryError(
            f"materialization {mat.name!r}: the adopt's batch 0 did not commit; run "
            "`tidemark adopt` again with the same --from to finish it"
        )
    fault_point("adopt_before_done")
    record.done = True
    ad.write_record(location, record)
    return {"rows": {b.resource: b.rows for b in record.bindings}, "since": ad.stamp(record.since), "batch": report}


def _committed(location: str, batch_id: int) -> bool:
    return os.path.exists(os.path.join(location, "spark", "commits", str(batch_id)))


__all__ = ["adopt", "parse_from"]
