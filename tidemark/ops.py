"""What the CLI and the library do without Spark: check, reset, scale, and naming a view.

``tidemark check`` lives here, ``reset`` (and :func:`tidemark.reset`) in :mod:`tidemark.ops_reset`; they never
import pyspark (``status``: :mod:`tidemark.status`); ``tidemark run`` is :func:`tidemark.spark.runner.run_spec`.  :func:`target`
turns the arguments of :func:`tidemark.materialize` into (spec, materialization, checkpoint
location) for both.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import sys
from typing import Any, Mapping, Optional, Union, cast

from tidemark.errors import RecoveryError, SpecError
from tidemark.options import RuntimeOptions
from tidemark.spec import MaterializationSpec, SourceSpec, TidemarkSpec, load_spec, parse_spec, resolve_path

# ----------------------------------------------------------------------------- targets


def target(
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
) -> tuple[TidemarkSpec, MaterializationSpec, str]:
    """(spec, materialization, checkpoint location) of a ``materialize()`` / ``reset()`` call.

    ``source`` is a spec file, a :class:`~tidemark.spec.TidemarkSpec` (with ``materialization=``
    unless it has one), or anything else (a DataFrame, or None for ``reset``) with
    ``collection=``, ``endpoint=`` and ``checkpoint=``.  ``options`` (a
    :class:`~tidemark.options.RuntimeOptions`, or a mapping of the fields to change) replaces
    or overrides the materialization's ``options:``."""
    if isinstance(source, (str, os.PathLike, TidemarkSpec)):
        spec = source if isinstance(source, TidemarkSpec) else load_spec(str(source))
        if materialization is None:
            if len(spec.materializations) != 1:
                raise SpecError(
                    f"the spec has {len(spec.materializations)} materializations; name one with materialization=…"
                )
            materialization = next(iter(spec.materializations))
        mat = spec.materializations[named(spec, [materialization])[0]]
        checkpoint_location = spec.checkpoint_location(mat.name)
    else:
        if collection is None or endpoint is None:
            raise SpecError("materialize(df, ...) needs collection={'key': [...], 'schema': {...}} and endpoint={...}")
        if checkpoint is None:
            raise SpecError(
                "materialize(df, ...) needs checkpoint=PATH (where the recovery log and Spark's checkpoint live)"
            )
        checkpoint_location = resolve_path(str(checkpoint), os.getcwd())
        if name is None:
            name = default_name(checkpoint_location, resource)
        obj = {
            "collections": {name: {k: v for k, v in collection.items() if k != "source"}},
            "materializations": {
                name: {
                    "endpoint": endpoint,
                    "shards": shards,
                    "on_invalid": on_invalid,
                    "bindings": [
                        {"source": name, "resource": resource or {"table": name}, "delta_updates": delta_updates}
                    ],
                }
            },
            "checkpoint": str(checkpoint),
        }
        spec = parse_spec(obj, file=None, base_dir=os.getcwd())
        mat = spec.materializations[name]
    if options is not None:
        mat = _with_options(spec, mat, options)
        spec = TidemarkSpec(
            spec.collections, {**spec.materializations, mat.name: mat}, spec.checkpoint, spec.file, spec.base_dir
        )
    return spec, mat, checkpoint_location


def _with_options(spec: TidemarkSpec, mat: MaterializationSpec, options) -> MaterializationSpec:
    import dataclasses

    if not isinstance(options, RuntimeOptions):
        options = RuntimeOptions.from_mapping(options, base=mat.options, file=spec.file, path="options")
    return dataclasses.replace(mat, options=options)


def default_name(checkpoint_location: str, resource: Optional[dict]) -> str:
    """The materialization name of ``materialize(df, ...)`` without ``name=``: the one its
    checkpoint folder already records, else one derived from the resource and the
    checkpoint's location -- unique to this view, so that two jobs never share a name (and
    with it the endpoint's checkpoint rows and fences)."""
    from tidemark.runtime.recovery_log import RecoveryLog

    existing = RecoveryLog.existing_materialization(checkpoint_location)
    if existing:
        return existing
    res = resource or {}
    base = next((str(res[k]) for k in ("table", "name", "topic", "stream", "path", "prefix") if res.get(k)), "view")
    base = re.sub(r"[^A-Za-z0-9_]+", "_", base).strip("_")[:40] or "view"
    return f"{base}_{hashlib.sha256(checkpoint_location.encode()).hexdigest()[:8]}"


def named(spec: TidemarkSpec, materializations: Optional[list[str]]) -> list[str]:
    """The named materializations of ``spec`` (all of them when none is named); refuses an unknown name."""
    names = materializations or list(spec.materializations)
    unknown = [n for n in names if n not in spec.materializations]
    if unknown:
        raise SpecError(
            f"unknown materialization {unknown[0]!r} (known: {', '.join(sorted(spec.materializations))})",
            file=spec.file,
        )
    return names


def bound(spec: TidemarkSpec, mat: MaterializationSpec) -> tuple:
    """The :class:`~tidemark.protocol.messages.BindingSpec` of each binding of ``mat``."""
    from tidemark.collection.collection import Collection

    colls = [Collection(spec.collections[b.source]) for b in mat.bindings]
    return tuple(c.binding_spec(b) for c, b in zip(colls, mat.bindings))


def take_leases(spec_path: "str | TidemarkSpec", materializations: Optional[list[str]] = None) -> list:
    """Take the lease of each (or each named) materialization's checkpoint before anything
    else (``tidemark run``: before Spark starts), renewed until the run's coordinator takes it
    over in this process; refuses at once a checkpoint another live run holds
    (:mod:`tidemark.runtime.lease`).  Returns the leases (release them when the run ends)."""
    from tidemark.runtime.lease import Lease

    spec = load_spec(spec_path)
    leases = []
    try:
        for n in materializations or list(spec.materializations):
            if n not in spec.materializations:
                continue  # check_spec names it
            lease = Lease(spec.checkpoint_location(n), n)
            lease.acquire()
            leases.append(lease)
            lease.keep()
    except BaseException:
        for lease in leases:
            lease.release()
        raise
    return leases


def endpoint_of_view(spec_path: str, name: str) -> Optional[str]:
    """The endpoint (driver name) of the binding named ``name`` (as :func:`committed_view`
    names it, or a materialization with one binding); None when no binding has that name."""
    spec = load_spec(spec_path)
    for mat in spec.materializations.values():
        if name == mat.name and len(mat.bindings) == 1:
            return mat.driver_name
        for b in mat.bindings:
            res = b.resource if isinstance(b.resource, dict) else {}
            names = {str(v) for v in res.values() if isinstance(v, str)}
            if name in names or any(name == f"{mat.name}/{n}" for n in names):
                return mat.driver_name
    return None


def committed_view(spec_path: str, name: str):
    """``(binding, documents)`` of the binding named ``name`` (its resource name — a topic,
    table, … — or ``MATERIALIZATION/NAME``) as its endpoint has committed it: ``{key: doc}``
    (``[doc, ...]`` for delta updates). For endpoints that can read themselves back
    (``Driver.dump``), e.g. ``tidemark tail`` on a Kafka topic."""
    from tidemark.drivers.registry import load_driver

    spec = load_spec(spec_path)
    found, names = [], []
    for mat in spec.materializations.values():
        for b in bound(spec, mat):
            rname = "/".join(b.resource_path)
            names.append(f"{mat.name}/{rname}")
            if name in (rname, f"{mat.name}/{rname}") or (name == mat.name and len(mat.bindings) == 1):
                found.append((mat, b))
    if len(found) != 1:
        what = "is ambiguous" if found else "is not a binding of the spec"
        raise SpecError(f"{name!r} {what} (bindings: {', '.join(names) or 'none'})")
    mat, binding = found[0]
    driver = load_driver(mat.driver_name, mat.driver_config)
    try:
        return binding, driver.dump(mat.name, binding)
    except NotImplementedError:
        raise SpecError(
            f"endpoint {mat.driver_name!r} cannot be read back by tidemark; read it with its own tools"
        ) from None
    finally:
        driver.close()


# ----------------------------------------------------------------------------- check


def check_spec(
    spec_path: "str | TidemarkSpec", materializations: Optional[list[str]] = None, *, to_run: bool = False
) -> list[str]:
    """Validate the spec and dry-run Validate/Apply against each (or each named) endpoint;
    return what was checked.  ``tidemark run`` calls it before Spark starts (``to_run``), so that a
    wrong password, an unreachable endpoint or a checkpoint another run holds is reported at once;
    ``tidemark check`` reports a running view as running."""
    spec = load_spec(spec_path)
    names = named(spec, materializations)
    lines = [
        f"spec {spec.file or spec_path}: {len(spec.collections)} collection(s), {len(spec.materializations)} materialization(s)"
    ]
    lines += [check_materialization(spec, spec.materializations[n], to_run=to_run) for n in names]
    return lines


def check_materialization(spec: TidemarkSpec, mat: MaterializationSpec, *, to_run: bool = False) -> str:
    """Capabilities, Validate and a dry-run Apply of one materialization against its endpoint."""
    from tidemark.collection.collection import Collection
    from tidemark.drivers.base import capabilities_of
    from tidemark.drivers.registry import load_driver
    from tidemark.protocol.messages import Apply, Validate
    from tidemark.runtime.reduce_path import reduce_paths
    from tidemark.runtime.startup_checks import check_capabilities, refuse_gone
    from tidemark.spec import check_source_readable

    logs = []
    for b in mat.bindings:
        check_source_readable(spec, b.source)
        src = spec.collections[b.source].source
        if src is not None and src.log:  # reachable, before Spark starts
            from tidemark.sources import check_log

            logs.append(check_log(b.source, src.log, src.log_config))
    if not to_run:  # (a run analyzes them as it builds its query)
        check_selects(spec, [b.source for b in mat.bindings])
    bindings = bound(spec, mat)
    running = check_live_view(spec, mat, bindings, to_run=to_run)
    with load_driver(mat.driver_name, mat.driver_config) as driver:
        caps = capabilities_of(driver)
        check_capabilities(
            caps, materialization=mat.name, driver_name=mat.driver_name, bindings=bindings, on_invalid=mat.on_invalid
        )
        bindings, paths = reduce_paths(
            bindings,
            [Collection(spec.collections[b.source]) for b in mat.bindings],
            caps,
            mat.options.with_env().endpoint_reduce,
        )
        check_new_checkpoint(spec, mat, driver, bindings)
        check_records(spec, mat, driver, bindings)
        validated = driver.validate(Validate(mat.name, mat.driver_config, bindings))
        applied = driver.apply(Apply(mat.name, mat.driver_config, bindings, version=mat.version(spec), dry_run=True))
        refuse_gone(mat.name, mat.driver_name, last_entry(spec, mat), applied.created)
        paths = paths + driver.row_forms(bindings)
        if caps.limits.describe() != "no limits":  # what no column or message of the endpoint holds
            paths.append(
                f"the endpoint holds {caps.limits.describe()}: a batch with a larger key or document is "
                "refused, naming the key, before it commits"
            )
    return (
        f"materialization {mat.name}: endpoint {mat.driver_name} ok, {len(validated.bindings)} binding(s)"
        + (f"; apply would: {applied.action_description}" if applied.action_description else "")
        + (f"; {running}" if running else "")
        + "".join(f"\n  {line}" for line in [*logs, *paths])
    )


def check_selects(spec: TidemarkSpec, sources: list) -> None:
    """A source's ``select:`` expressions, analyzed by Spark (a local session, started only
    for them) without reading a file: an error names the expression and why."""
    selects = [
        spec.collections[s] for s in dict.fromkeys(sources) if s in spec.collections and spec.collections[s].source
    ]
    selects = [c for c in selects if cast(SourceSpec, c.source).select]  # each has a source
    if not selects:
        return
    from tidemark.spark.select import check_select
    from tidemark.spark.session import local_session

    names = ", ".join(c.name for c in selects)
    print(f"starting a local Spark to analyze the select: expressions of {names}", file=sys.stderr, flush=True)
    spark = local_session("tidemark-check", master="local[1]")
    for c in selects:
        check_select(
            spark, c, cast(SourceSpec, c.source).select, file=spec.file, path=f"collections.{c.name}.source.select"
        )


def last_entry(spec: TidemarkSpec, mat: MaterializationSpec):
    """The recovery log's last entry of a view (None: no log, or no batch yet)."""
    from tidemark.runtime.recovery_log import RecoveryLog

    location = spec.checkpoint_location(mat.name)
    if "://" not in location and not os.path.exists(os.path.join(location, "tidemark")):
        return None
    return RecoveryLog(location, mat.name, create=False).last()


def check_new_checkpoint(spec: TidemarkSpec, mat: MaterializationSpec, driver, bindings) -> None:
    """A checkpoint with no recovery log yet (a first run, or a deleted checkpoint folder):
    refuse an endpoint that another checkpoint writes, as start-up would, but before Spark
    starts.  (A checkpoint with a log is compared at start-up, after its own dead writers
    are recovered.)"""
    from tidemark.runtime.ownership import refuse_foreign
    from tidemark.runtime.recovery_log import RecoveryLog

    location = spec.checkpoint_location(mat.name)
    if "://" in location or os.path.exists(os.path.join(location, "tidemark")):
        return
    positions = [*(driver.positions(mat.name, bindings) or []), *driver.owners(mat.name)]
    if positions:
        mine = RecoveryLog(location, mat.name, create=False).checkpoint_id
        refuse_foreign(mat.name, mat.driver_name, positions, mine, None, location)


def check_records(spec: TidemarkSpec, mat: MaterializationSpec, driver, bindings) -> None:
    """The view-identity records the endpoint keeps, compared as start-up compares them."""
    from tidemark.runtime.recovery_log import RecoveryLog
    from tidemark.runtime.view_identity import binding_identity, check_endpoint_records, source_location

    checkpoint_id = RecoveryLog(spec.checkpoint_location(mat.name), mat.name, create=False).checkpoint_id
    sources = [source_location(spec.collections[b.source].source, spec.base_dir) for b in mat.bindings]
    check_endpoint_records(
        mat.name,
        mat.driver_name,
        driver.identities(mat.name, bindings),
        [binding_identity(b, s) for b, s in zip(bindings, sources)],
        checkpoint_id,
        spec_file=spec.file,
        checkpoint_location=spec.checkpoint_location(mat.name),
    )


def check_live_view(spec: TidemarkSpec, mat: MaterializationSpec, bindings, *, to_run: bool = False) -> str:
    """What the coordinator's start-up refuses, before Spark starts and with the same code: a
    checkpoint another run holds (:mod:`tidemark.runtime.lease`), bindings that no longer
    describe the view (:mod:`tidemark.runtime.view_identity`), and reduce annotations changed
    since the view's last committed batch (:mod:`tidemark.runtime.spec_changes`).  Returns, for
    ``tidemark check`` (not ``to_run``), the run that holds the checkpoint now, if any."""
    from tidemark.runtime.adoption import refuse_unfinished
    from tidemark.runtime.lease import Lease
    from tidemark.runtime.rebuild import refuse_unfinished as refuse_unfinished_rebuild
    from tidemark.runtime.recovery_log import RecoveryLog
    from tidemark.runtime.spec_changes import check_reductions, reductions_of
    from tidemark.runtime.view_identity import binding_identity, check_identities, source_location

    location = spec.checkpoint_location(mat.name)
    refuse_unfinished(mat.name, location)
    refuse_unfinished_rebuild(mat.name, location)
    if not (os.path.exists(os.path.join(location, "tidemark")) or "://" in location):
        return ""
    running = ""
    try:
        Lease(location, mat.name).check_free()
    except RecoveryError as exc:
        if to_run:
            raise
        running = "running now: " + str(exc).split(" is in use by another run, ", 1)[-1].split(". One checkpoint", 1)[0]
    last = RecoveryLog(location, mat.name, create=False).last()
    if last is None:
        return running
    sources = [source_location(spec.collections[b.source].source, spec.base_dir) for b in mat.bindings]
    check_identities(mat.name, last, [binding_identity(b, s) for b, s in zip(bindings, sources)], spec_file=spec.file)
    if last.reductions:
        current = [reductions_of(b.source, spec.collections[b.source].schema) for b in mat.bindings]
        check_reductions(mat.name, last.batch_id, last.reductions, current, spec.file)
    return running


# ----------------------------------------------------------------------------- input lag


def pending_files(spec: TidemarkSpec, materialization: str) -> Optional[int]:
    """Input lag: files under the bindings' source paths not yet planned into a batch (:func:`file_counts`)."""
    counts = file_counts(spec, materialization, spec.checkpoint_location(materialization))
    return None if counts is None else counts[0] - counts[1]


def file_counts(spec: TidemarkSpec, materialization: str, checkpoint: str) -> Optional[tuple[int, int]]:
    """(files under the bindings' source paths, how many Spark's file-source log in ``checkpoint``
    planned into a batch); None where it cannot tell (no local source path)."""
    mat = spec.materializations[materialization]
    spark_root = os.path.join(checkpoint, "spark", "sources")
    present_n = planned_n = 0
    for i, b in enumerate(mat.bindings):
        src = spec.collections[b.source].source
        if src is None or not src.path or "://" in src.path:
            return None
        path = src.path if os.path.isabs(src.path) else os.path.join(spec.base_dir, src.path)
        present: set[str] = set()
        for root, _dirs, names in os.walk(path):
            present.update(os.path.join(root, n) for n in names if not n.startswith((".", "_")))
        planned: set[str] = set()
        log_dir = os.path.join(spark_root, str(i))
        for name in [n for n in os.listdir(log_dir) if not n.startswith(".")] if os.path.isdir(log_dir) else ():
            with open(os.path.join(log_dir, name)) as f:
                for line in f:
                    if line.startswith("{"):
                        planned.add(json.loads(line)["path"].removeprefix("file://").removeprefix("file:"))
        present_n += len(present)
        planned_n += len(present & planned)
    return present_n, planned_n


# ----------------------------------------------------------------------------- scale


def _view_log(source, materialization: Optional[str]):
    """(materialization name, its RecoveryLog) of a spec (file or TidemarkSpec) or of a
    checkpoint folder; refuses an unknown materialization, or a view that never ran."""
    from tidemark.runtime.recovery_log import RecoveryLog

    is_spec = isinstance(source, TidemarkSpec) or (isinstance(source, (str, os.PathLike)) and os.path.isfile(source))
    name: Optional[str]
    if is_spec:
        spec, mat, location = target(source, materialization=materialization)
        name = mat.name
    else:
        location = str(source)
        if "://" not in location:
            location = os.path.abspath(location)
        name = RecoveryLog.existing_materialization(location)
        if name is None:
            raise SpecError(
                f"{source!r} is neither a spec file nor a tidemark checkpoint folder (no tidemark/meta.json)"
            )
        if materialization is not None and materialization != name:
            raise SpecError(f"unknown materialization {materialization!r}: checkpoint {location} belongs to {name!r}")
    log = RecoveryLog(location, name, create=False)
    if log.checkpoint_id is None:
        raise SpecError(
            f"materialization {name!r} has not run yet (no checkpoint at {location}): set its `shards:` "
            "in the spec instead; nothing was requested"
        )
    return name, log


def scale(source, *, shards: int, materialization: Optional[str] = None) -> dict:
    """Ask a view to run on ``shards`` shards from its next new batch (a running query picks
    it up there; a stopped one at its next run). ``source``: a spec file (or
    :class:`~tidemark.spec.TidemarkSpec`) with ``materialization=`` unless it has one, or the
    view's checkpoint folder. Returns the request ``{"id", "shards", "requested_at"}``. Needs
    no Spark; refuses ``shards < 1`` and an unknown materialization before writing anything."""
    from tidemark.runtime.rescale import Rescale, check_count

    check_count(shards)
    name, log = _view_log(source, materialization)
    if isinstance(source, TidemarkSpec) or (isinstance(source, (str, os.PathLike)) and os.path.isfile(source)):
        _spec, mat, _loc = target(source, materialization=name)
        auto = mat.auto_shards
        if auto is not None and not auto.min <= shards <= auto.max:
            raise SpecError(
                f"materialization {name!r} scales itself within shards.auto [{auto.min}, {auto.max}]; "
                f"{shards} is outside it (the policy would undo it at the next batch): edit "
                "shards.auto in the spec instead; nothing was requested"
            )
    return Rescale(log).request(shards)


def layout_history(source, *, materialization: Optional[str] = None) -> dict:
    """The batch ranges each layout was in force for (over the batches the recovery log
    retains), what chose it, and the pending scale requests:
    :func:`tidemark.runtime.rescale.layout_history`."""
    from tidemark.runtime.rescale import layout_history as history

    _name, log = _view_log(source, materialization)
    return history(log)
