"""``tidemark status``: is a view behind its input, and what did it last commit?

Read-only, and without Spark: everything comes from the checkpoint folder (tidemark's
recovery log and Spark's ``offsets``/``commits``/``sources`` logs), the source folders of
a spec's file sources, and the endpoint's own checkpoint rows (through the driver's
read-only :meth:`~tidemark.drivers.base.Driver.checkpoints` /
:meth:`~tidemark.drivers.base.Driver.positions`).  :func:`status_of_spec` reads a spec's
materializations; :func:`status_of_checkpoint` reads a checkpoint folder alone (views made
with :func:`tidemark.materialize` from a DataFrame).  :func:`tidemark.status_render.render` prints
it in a given width; :meth:`MaterializationStatus.as_json` is the ``--json`` form.
"""

from __future__ import annotations

import contextlib
import json
import os
from dataclasses import asdict, dataclass, field
from typing import Optional

from tidemark.errors import DriverError, SpecError, TidemarkError
from tidemark.runtime.identity import SparkCheckpoint
from tidemark.runtime.recovery_log import RecoveryLog, filesystem
from tidemark.runtime.verify import last_verified


@dataclass
class ShardStatus:
    place: str  # "00000000-7fffffff", or an endpoint's own place (e.g. a Delta table)
    fence: Optional[int]
    batch_id: Optional[int]  # the last batch the endpoint holds there


@dataclass
class InputStatus:
    """What the view's input holds that the view does not yet.  ``files_waiting`` is None
    where it cannot be told (no local file source)."""

    kind: str  # "files", "offsets", "unknown"
    files_waiting: Optional[int] = None
    bytes_waiting: Optional[int] = None
    folders: list = field(default_factory=list)  # where the files were looked for
    guessed: bool = False  # folders inferred from the files Spark read (no spec)
    read_to: dict = field(default_factory=dict)  # offsets sources: where the last committed batch ends
    offsets_waiting: Optional[int] = None  # Kafka: messages past read_to (with the brokers' address)
    lag: list = field(default_factory=list)  # log sources: per part (tidemark.sources.lag.PartLag)


@dataclass
class MaterializationStatus:
    name: str
    endpoint: Optional[str]
    checkpoint: str
    last_batch: Optional[int] = None  # last batch in the recovery log
    committed_at: Optional[float] = None  # epoch seconds of that commit
    last_counts: dict = field(default_factory=dict)  # the last batch's documents, stored, invalid, ...
    totals: dict = field(default_factory=dict)  # since the view started (batches, documents, invalid, ...)
    planned_batch: Optional[int] = None  # the newest batch Spark planned (offsets/N)
    layout: list = field(default_factory=list)  # [[begin, end], ...] of the last batch
    layouts: list = field(default_factory=list)  # layout history: [{first, last, shards, by, committed}]
    pending_scale: list = field(default_factory=list)  # `tidemark scale` requests not yet applied
    shards: list = field(default_factory=list)
    input: InputStatus = field(default_factory=lambda: InputStatus("unknown"))
    notes: list = field(default_factory=list)
    problems: list = field(default_factory=list)  # what a run would refuse (e.g. a dropped table)
    rebuild: Optional[dict] = None  # a `tidemark rebuild` in progress: id, phase, shadow, its batch and documents
    verified: Optional[dict] = None  # the last `tidemark verify`: at, batch, ok, keys, differences

    @property
    def batches_waiting(self) -> int:
        """Batches Spark planned that the view has not committed (one in progress, or failed)."""
        if self.planned_batch is None:
            return 0
        return max(0, self.planned_batch - (self.last_batch if self.last_batch is not None else -1))

    @property
    def behind(self) -> Optional[bool]:
        if self.batches_waiting:
            return True
        waiting = self.input.files_waiting if self.input.kind == "files" else self.input.offsets_waiting
        if waiting is None:
            return None
        return waiting > 0

    def as_json(self) -> dict:
        out = asdict(self)
        out["batches_waiting"] = self.batches_waiting
        out["behind"] = self.behind
        return out


# ----------------------------------------------------------------------------- reading


def _read_log(location: str, materialization: str, view: MaterializationStatus) -> None:
    log = RecoveryLog(location, materialization, create=False)
    entry, torn = log.peek_last()
    if torn:
        view.notes.append(f"the newest recovery log entry (batch {torn}) is torn; the next run re-runs it")
    if entry is None:
        return
    view.last_batch = entry.batch_id
    counts = dict(entry.counts or {})
    view.committed_at = counts.pop("committed_at", None) or log.entry_mtime(entry.batch_id)
    view.totals = counts.pop("totals", {}) or {}
    view.endpoint = view.endpoint or counts.pop("endpoint", None)
    counts.pop("endpoint", None)
    counts.pop("executors", None)
    view.last_counts = counts
    view.layout = [list(r) for r in entry.layout]
    try:
        from tidemark.runtime.rescale import layout_history

        history = layout_history(log)
        view.layouts = [{k: r[k] for k in ("first", "last", "shards", "by", "committed")} for r in history["ranges"]]
        view.pending_scale = history["pending"]
    except Exception as exc:  # noqa: BLE001 - status reads what it can
        view.notes.append(f"layout history unreadable: {type(exc).__name__}: {exc}")


def _spark_planned(location: str) -> Optional[int]:
    fs, root = filesystem(location)
    import pyarrow.fs as pafs

    infos = fs.get_file_info(pafs.FileSelector(root.rstrip("/") + "/spark/offsets", allow_not_found=True))
    ids = [int(i.base_name) for i in infos if i.base_name.isdigit()]
    return max(ids) if ids else None


def _file_source_log(location: str, source: int) -> Optional[dict]:
    """path -> batch id of the files Spark's file source ``source`` planned; None when the
    source is not a file source (or has planned nothing yet)."""
    fs, root = filesystem(location)
    import pyarrow.fs as pafs

    base = f"{root.rstrip('/')}/spark/sources/{source}"
    infos = fs.get_file_info(pafs.FileSelector(base, allow_not_found=True))
    names = [i.base_name for i in infos if not i.base_name.startswith(".") and i.type.name == "File"]
    if not names:
        return None
    planned: dict = {}
    for name in names:
        with fs.open_input_stream(f"{base}/{name}") as f:
            for line in f.read().decode("utf-8").splitlines():
                if line.startswith("{"):
                    obj = json.loads(line)
                    path = obj.get("path", "")
                    path = path.removeprefix("file://").removeprefix("file:")
                    planned[path] = obj.get("batchId", -1)
    return planned


def _local_files(folder: str, recursive: bool = True) -> dict:
    """path -> size of the data files under ``folder`` (hidden and ``_`` files skipped, as Spark does)."""
    out = {}
    if recursive:
        for root, dirs, names in os.walk(folder):
            dirs[:] = [d for d in dirs if not d.startswith((".", "_"))]
            for n in names:
                if not n.startswith((".", "_")):
                    p = os.path.join(root, n)
                    out[p] = os.path.getsize(p)
    elif os.path.isdir(folder):
        for n in os.listdir(folder):
            p = os.path.join(folder, n)
            if not n.startswith((".", "_")) and os.path.isfile(p):
                out[p] = os.path.getsize(p)
    return out


def _waiting(present: dict, planned: dict, committed: Optional[int]) -> tuple[int, int]:
    """(files, bytes) present but not in a committed batch (not planned, or planned in a
    batch the view has not committed)."""
    done = -1 if committed is None else committed
    waiting = [p for p in present if planned.get(p, done + 1) > done]
    return len(waiting), sum(present[p] for p in waiting)


def _input_from_spec(spec, mat, view: MaterializationStatus) -> None:
    if any(getattr(spec.collections[b.source].source, "log", None) for b in mat.bindings):
        from tidemark.sources.lag import log_lag

        view.input = InputStatus("log")
        try:
            parts = log_lag(spec, view.name, view.last_batch) or []
        except Exception as exc:  # noqa: BLE001 - the checkpoint still answers; say why the log does not
            view.notes.append(f"source not read: {str(exc).splitlines()[0] if str(exc) else type(exc).__name__}")
            return
        view.input.lag = [p.as_json() for p in parts]
        view.input.offsets_waiting = sum(p.behind for p in parts)
        return
    folders, present, planned = [], {}, {}
    for i, b in enumerate(mat.bindings):
        src = spec.collections[b.source].source
        if src is None or not src.path or "://" in src.path:
            return
        path = src.path if os.path.isabs(src.path) else os.path.join(spec.base_dir, src.path)
        folders.append(path)
        present.update(_local_files(path))
        planned.update(_file_source_log(view.checkpoint, i) or {})
    files, size = _waiting(present, planned, view.last_batch)
    view.input = InputStatus("files", files, size, folders)


def _input_from_checkpoint(view: MaterializationStatus, kafka: Optional[str] = None) -> None:
    """Without a spec: file sources by the folders of the files Spark read; offsets
    sources (Kafka, ...) by the offsets of the last committed batch, and with ``kafka``
    (the brokers' ``bootstrap.servers``) the messages past them."""
    planned = _file_source_log(view.checkpoint, 0)
    if planned:
        folders = sorted({os.path.dirname(p) for p in planned})
        present = {}
        for folder in folders:
            if not os.path.isdir(folder):
                view.input = InputStatus("files", None, None, folders, guessed=True)
                return
            present.update(_local_files(folder, recursive=False))
        files, size = _waiting(present, planned, view.last_batch)
        view.input = InputStatus("files", files, size, folders, guessed=True)
        return
    batch = view.last_batch if view.last_batch is not None else view.planned_batch
    if batch is None:
        return
    read_to = _source_offsets(view.checkpoint, batch)
    view.input = InputStatus("offsets", read_to=read_to if view.last_batch is not None else {})
    if kafka:
        from tidemark.sources.lag import is_spark_kafka, kafka_waiting

        topics = {t: p for offsets in read_to.values() if is_spark_kafka(offsets) for t, p in offsets.items()}
        if view.last_batch is None:  # nothing committed: every message of the topics is waiting
            topics = {t: {} for t in topics}
        try:
            view.input.offsets_waiting = kafka_waiting(kafka, topics)
        except Exception as exc:  # noqa: BLE001 - the checkpoint still answers; say why Kafka does not
            view.notes.append(f"kafka not read: {str(exc).splitlines()[0] if str(exc) else type(exc).__name__}")


def _source_offsets(location: str, batch: int) -> dict:
    """Source index -> the offsets Spark recorded for batch ``batch`` (``offsets/N``)."""
    return {str(n): v for n, v in enumerate(SparkCheckpoint(location.rstrip("/") + "/spark").source_offsets(batch))}


def _endpoint_rows(
    driver_name: str, driver_config: dict, materialization: str, bindings, view: Optional[MaterializationStatus] = None
) -> list[ShardStatus]:
    from tidemark.drivers.registry import load_driver

    with load_driver(driver_name, driver_config) as driver:
        if view is not None and getattr(driver, "reports_created", False):
            _gone(driver, driver_name, driver_config, materialization, bindings, view)
        try:
            rows = [
                ShardStatus(r.range.name, r.fence, (r.runtime_checkpoint or {}).get("batch_id"))
                for r in driver.checkpoints(materialization)
            ]
        except NotImplementedError:
            rows = []
        if rows:
            return rows
        positions = driver.positions(materialization, tuple(bindings)) or []
        return [ShardStatus(p.place, None, p.batch_id if p.batch_id >= 0 else None) for p in positions]


def _gone(driver, driver_name: str, driver_config: dict, materialization: str, bindings, view) -> None:
    """A resource the recovery log says holds the view, which the endpoint no longer has."""
    from tidemark.protocol.messages import Apply
    from tidemark.runtime.startup_checks import gone_message

    last = RecoveryLog(view.checkpoint, materialization, create=False).last()
    if last is None:
        return
    try:
        dry = driver.apply(Apply(materialization, driver_config, tuple(bindings), dry_run=True))
    except TidemarkError as exc:  # a run would refuse it too
        view.problems.append(str(exc).splitlines()[0])
        return
    text = gone_message(materialization, driver_name, last, dry.created)
    if text:
        view.problems.append(text)


def status_of_spec(
    spec_path: str, materializations: Optional[list[str]] = None, *, endpoint: bool = True
) -> list[MaterializationStatus]:
    """The status of every (or the named) materialization of a spec."""
    from tidemark.ops import bound, named
    from tidemark.spec import load_spec

    spec = load_spec(spec_path)
    out = []
    for n in named(spec, materializations):
        mat = spec.materializations[n]
        view = MaterializationStatus(n, mat.driver_name, spec.checkpoint_location(n))
        _read_log(view.checkpoint, n, view)
        _rebuild_of(spec, view)
        view.planned_batch = _spark_planned(view.checkpoint)
        _input_from_spec(spec, mat, view)
        view.verified = last_verified(view.checkpoint)
        # the endpoint only once the view has run (opening it may create a database file)
        if endpoint and RecoveryLog.existing_materialization(view.checkpoint):
            try:
                rows = _endpoint_rows(mat.driver_name, mat.driver_config, n, bound(spec, mat), view)
                view.shards = _current_first(view, rows)
            except DriverError as exc:  # the checkpoint still answers; say why the endpoint does not
                view.notes.append(f"endpoint not read: {str(exc).splitlines()[0]}")
        if not view.shards:
            view.shards = _layout_rows(view)
        out.append(view)
    return out


def _rebuild_of(spec, view: MaterializationStatus) -> None:
    """A rebuild in progress (:mod:`tidemark.runtime.rebuild`): how far its shadow is."""
    from tidemark.runtime.rebuild import read_record

    record = read_record(view.checkpoint)
    if record is None:
        return
    shadow = MaterializationStatus(record.shadow, view.endpoint, spec.checkpoint_location(record.shadow))
    if RecoveryLog.existing_materialization(shadow.checkpoint):
        _read_log(shadow.checkpoint, record.shadow, shadow)
    docs, live_docs = shadow.totals.get("documents", 0), view.totals.get("documents", 0)
    view.rebuild = {
        "id": record.id,
        "phase": record.phase,
        "shadow": record.shadow,
        "batch": shadow.last_batch,
        "documents": docs,
        "started_at": record.started_at,
    }
    share = f", about {min(100, round(100 * docs / live_docs))}% of the live view's" if live_docs else ""
    built_to = "no batch yet" if shadow.last_batch is None else f"batch {shadow.last_batch}"
    from tidemark.ops import file_counts

    files = None
    if view.name in spec.materializations:
        with contextlib.suppress(OSError, ValueError, KeyError):
            files = file_counts(spec, view.name, shadow.checkpoint)
    if files is not None:
        view.rebuild["files"], view.rebuild["files_read"] = files
        share += f"; {files[1]} of {files[0]} file(s) read"
    from tidemark.runtime.lease import stop_request

    asked = stop_request(view.checkpoint)
    view.notes.append(
        f"rebuild {record.id} {record.phase}: shadow {record.shadow} at {built_to}, {docs} documents{share}"
        + ("; the cut-over did not finish: run `tidemark rebuild` again" if record.phase == "cutting" else "")
        + (f"; it asked the live run to stop for the cut-over (pid {asked.get('pid')})" if asked else "")
    )


def _current_first(view: MaterializationStatus, rows: list[ShardStatus]) -> list[ShardStatus]:
    """The endpoint's rows of the current layout first, in key order; rows of earlier layouts
    (an endpoint keeps a split range's parent) only while they matter: while a current range
    has not yet committed a batch as new as theirs (it inherits from them at its next Open)."""
    if not view.layout:
        return rows
    from tidemark.protocol.messages import Range

    order = {Range(b, e).name: i for i, (b, e) in enumerate(view.layout)}
    current = sorted((r for r in rows if r.place in order), key=lambda r: order[r.place])
    older = [r for r in rows if r.place not in order]
    if not current:
        return rows  # places that are not ranges (a coordinator-apply endpoint's tables)
    oldest = min(-1 if r.batch_id is None else r.batch_id for r in current)
    if len(current) < len(order):
        oldest = -1
    matter = [r for r in older if r.batch_id is not None and r.batch_id > oldest]
    if len(matter) < len(older):
        view.notes.append(
            f"{len(older) - len(matter)} range(s) of earlier layouts are kept by the endpoint; the "
            "current ranges took over from them"
        )
    return current + matter


def status_of_checkpoint(location: str, *, kafka: Optional[str] = None) -> MaterializationStatus:
    """The status of the view whose checkpoint folder is ``location`` (its endpoint's rows
    are not read: the folder does not hold the endpoint's settings).  ``kafka``: the
    ``bootstrap.servers`` of a Kafka source, to count the messages waiting."""
    from tidemark.spec import resolve_path

    location = location if "://" in location else resolve_path(location, os.getcwd())
    name = RecoveryLog.existing_materialization(location)
    if name is None:
        raise SpecError(f"{location} is not a tidemark checkpoint folder (no tidemark/meta.json in it)")
    view = MaterializationStatus(name, None, location)
    _read_log(location, name, view)
    view.planned_batch = _spark_planned(location)
    _input_from_checkpoint(view, kafka)
    view.shards = _layout_rows(view)
    return view


def _layout_rows(view: MaterializationStatus) -> list[ShardStatus]:
    return [ShardStatus(f"{b:08x}-{e:08x}", None, view.last_batch) for b, e in view.layout]
