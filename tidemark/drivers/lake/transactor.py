"""One shard session of a lake endpoint: Loads read the committed table, Stores go to staged
Parquet files that the coordinator applies after the recovery log holds the batch.

The staging folder (:class:`StagingArea`): ``STAGING/<materialization>/`` holds the staged
files of the view's batches, ``STAGING-owners/<materialization>.json`` the checkpoint that owns
the folder (a view name's staged files are one folder: another checkpoint's view of the name
must not share it)."""

from __future__ import annotations

import contextlib
import json
import urllib.parse
import uuid
from functools import partial
from typing import Any, Optional, Sequence

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.fs as pafs
import pyarrow.parquet as pq

from tidemark.drivers.base import ReadCommittedLoads, Transactor, store_of_documents
from tidemark.drivers.common.columns import arrow_type, coerce, column, dumps
from tidemark.drivers.lake.format import Staged, TableFormat, run
from tidemark.drivers.lake.lean import documents_of, lean_values
from tidemark.drivers.lake.model import LakeTable, stages_of
from tidemark.drivers.lake.quarantine import stage_quarantine
from tidemark.errors import DriverError, RecoveryError
from tidemark.faults import fault_point
from tidemark.protocol.messages import (
    Acknowledge,
    Acknowledged,
    AnyStore,
    Load,
    Loaded,
    Open,
    Quarantine,
    StartCommit,
    StartedCommit,
    StateUpdate,
)

OWNERS = "-owners"  # beside the staging folder: <staging>-owners/<view>.json


class StagingArea:
    """The staging folder of a format's endpoint (opened on first use)."""

    def __init__(self, fmt: TableFormat[Any]):
        self.format = fmt
        self.path = fmt.settings.staging  # as configured (messages)
        self._fs: Optional[tuple[pafs.FileSystem, str]] = None

    @property
    def fs(self) -> tuple[pafs.FileSystem, str]:
        """The staging file system and its base path."""
        fs = self._fs
        if fs is None:
            fs = self._fs = run(self.format, self.format.settings.staging_fs, "staging", self.path)
        return fs

    def dir(self, materialization: str) -> str:
        return f"{self.fs[1].rstrip('/')}/{urllib.parse.quote(materialization, safe='')}"

    def staged(self, names: list[str], batch: int) -> Staged:
        return Staged(*self.fs, names, batch)

    def files(self, materialization: str) -> list[pafs.FileInfo]:
        fs, _ = self.fs
        infos = fs.get_file_info(pafs.FileSelector(self.dir(materialization), allow_not_found=True))
        return [i for i in infos if i.type == pafs.FileType.File]

    def remove(self, materialization: str, before: float) -> None:
        """Delete the materialization's staged files older than ``before``."""
        for info in self.files(materialization):
            if info.mtime is None or info.mtime.timestamp() < before:
                with contextlib.suppress(FileNotFoundError):
                    self.fs[0].delete_file(info.path)

    # ------------------------------------------------------------- the owner
    def owner_path(self, materialization: str) -> str:
        return f"{self.fs[1].rstrip('/')}{OWNERS}/{urllib.parse.quote(materialization, safe='')}.json"

    def owner(self, materialization: str) -> Optional[dict]:
        """The checkpoint that owns the materialization's staging folder, or None."""
        fs, _ = self.fs
        try:
            with fs.open_input_stream(self.owner_path(materialization)) as f:
                owner = json.loads(f.read().decode("utf-8"))
        except (FileNotFoundError, ValueError):
            return None
        return owner if isinstance(owner, dict) and owner.get("checkpoint_id") else None

    def own(self, materialization: str, checkpoint_id: str, identities: Sequence[dict], replace: bool) -> None:
        """Record ``checkpoint_id`` as the staging folder's owner (where none is, or ``replace``:
        a rebuild's cut-over, after which the shadow's checkpoint owns the view)."""
        if not replace and self.owner(materialization) is not None:
            return
        first = identities[0] if identities else {}
        owner = {k: first.get(k) for k in ("checkpoint_location", "host")}
        owner.update(materialization=materialization, checkpoint_id=checkpoint_id)
        fs, base = self.fs
        fs.create_dir(base.rstrip("/") + OWNERS, recursive=True)
        with fs.open_output_stream(self.owner_path(materialization)) as f:
            f.write(dumps(owner).encode("utf-8"))

    def drop(self, materialization: str) -> list[str]:
        """Delete the materialization's staged files and its owner: what was done."""
        fs, _ = self.fs
        done = []
        stage = self.dir(materialization)
        if fs.get_file_info(stage).type != pafs.FileType.NotFound:
            fs.delete_dir(stage)
            done.append(f"deleted staged files of {materialization!r}")
        if fs.get_file_info(self.owner_path(materialization)).type != pafs.FileType.NotFound:
            fs.delete_file(self.owner_path(materialization))
        return done


class StagedFilesTransactor(ReadCommittedLoads, Transactor):
    """One shard session: Loads read each table as of this transaction's Acknowledged, Stores
    stream into one staged Parquet file per binding, StartCommit names the files in the
    driver checkpoint (the stage)."""

    def __init__(self, fmt: TableFormat[Any], area: StagingArea, req: Open, models: list[LakeTable]):
        self.format = fmt
        self.area = area
        self.materialization = req.materialization
        self.range = req.range
        self.models = models
        self.session = uuid.uuid4().hex[:12]
        self._acknowledged = False
        self._deferred: list[Load] = []
        self._tables: dict[int, Any] = {}
        self._state: Any = req.state
        self._writers: dict[int, tuple[Any, pq.ParquetWriter, str]] = {}
        self._rows: dict[int, int] = {}
        self._quarantine: list[dict] = []
        self._seq = 0

    # ------------------------------------------------------------- phases
    def acknowledge(self, msg: Acknowledge) -> Acknowledged:
        # The coordinator applied the previous batch before this transaction started.
        if msg.state is not None:
            self._state = msg.state
        self._tables = {}
        self._acknowledged = True
        return Acknowledged()

    def _table(self, binding: int) -> Any:
        """The table as of this transaction (read once), checked against the batches the
        recovery log says are applied to it."""
        table = self._tables.get(binding)
        if table is None:
            model = self.models[binding]
            table = run(self.format, lambda: self.format.open(model.name), "load", model.name)
            if table is None:
                raise DriverError(f"{self.format.label} {model.name!r} does not exist (dropped after Apply?)")
            for stage in stages_of(self._state):
                if not any(name == model.name and rows for name, _f, rows in stage.get("files") or ()):
                    continue
                have = self.format.batch(table, self.materialization, stage)
                if have < int(stage.get("batch", -1)):
                    raise RecoveryError(
                        f"{self.format.label} {model.name!r} is at batch {have} of this checkpoint, but the "
                        f"recovery log says batch {stage.get('batch')} was applied to it (was the table "
                        "replaced or rolled back?); Loads would not be read-committed"
                    )
            self._tables[binding] = table
        return table

    def _evaluate(self, msg: Load) -> list[Loaded]:
        """One chunk of keys: the format's scan, pruned by the chunk's key values, then an exact
        membership test in Arrow (a test per key column over-selects composite keys)."""
        if not msg.keys:
            return []
        model = self.models[msg.binding]
        table = self._table(msg.binding)
        wanted: dict[tuple, tuple] = {}
        for key in msg.keys:
            wanted[tuple(coerce(c.kind, v) for c, v in zip(model.keys, key))] = tuple(key)
        values = [sorted({k[j] for k in wanted}, key=lambda v: (type(v).__name__, v)) for j in range(len(model.keys))]
        found_rows = run(self.format, lambda: self.format.scan(table, model, values), "load", model.name)
        if found_rows is None or not found_rows.num_rows:
            return []
        key_cols = [found_rows.column(c.name).cast(arrow_type(c.kind)) for c in model.keys]
        mask = None
        for col, vs, c in zip(key_cols, values, model.keys):
            hit = pc.is_in(col, value_set=pa.array(vs, arrow_type(c.kind)))
            mask = hit if mask is None else pc.and_(mask, hit)
        idx = pc.indices_nonzero(mask)
        if not len(idx):
            return []
        docs = documents_of(_plain_strings(found_rows).take(idx), model.held, model.lean)
        found = {}
        for row, doc in zip(zip(*(col.take(idx).to_pylist() for col in key_cols)), docs):
            wanted_key = wanted.get(tuple(row))
            if wanted_key is not None:
                found[wanted_key] = doc
        keys = [k for k in msg.keys if tuple(k) in found]
        return [Loaded(msg.binding, tuple(keys), tuple(found[tuple(k)] for k in keys))] if keys else []

    def store(self, msg: AnyStore) -> None:
        msg = store_of_documents(msg)
        if not msg.keys:
            return
        model = self.models[msg.binding]
        schema = model.staged_schema()
        arrays = [column(c.kind, [k[j] for k in msg.keys]) for j, c in enumerate(model.keys)]
        if model.lean:  # a column per property, the document's remainder (see lake.lean)
            docs = [d if isinstance(d, dict) else {} for d in msg.docs]
            held = model.held
            held_values, rests = lean_values(docs, held)
            by_name = dict(zip((name for name, _ in held), held_values))
            arrays += [column(c.kind, by_name[c.name]) for c in model.values]
            arrays.append(pa.array(rests, pa.string()))
        else:
            arrays += [column(c.kind, [v[j] for v in msg.values]) for j, c in enumerate(model.values)]
            arrays.append(pa.array([dumps(d) for d in msg.docs], pa.string()))
        arrays.append(pa.array([bool(x) for x in msg.deletes], pa.bool_()))
        batch = pa.RecordBatch.from_arrays(arrays, schema=schema)
        run(
            self.format,
            lambda: self._writer(msg.binding, schema).write_batch(batch),
            "store",
            self.area.path,
            idempotent=False,
        )
        self._rows[msg.binding] = self._rows.get(msg.binding, 0) + len(msg.keys)

    def _file_name(self, suffix: str) -> str:
        self._seq += 1
        return f"{self.range.name}-{self.session}-{self._seq:04d}-{suffix}.parquet"

    def _writer(self, binding: int, schema: pa.Schema) -> pq.ParquetWriter:
        if binding not in self._writers:
            fs, _ = self.area.fs
            directory = self.area.dir(self.materialization)
            fs.create_dir(directory, recursive=True)
            name = self._file_name(f"b{binding}")
            stream = fs.open_output_stream(f"{directory}/{name}")
            self._writers[binding] = (stream, pq.ParquetWriter(stream, schema, compression="snappy"), name)
        return self._writers[binding][1]

    def quarantine(self, msg: Quarantine) -> None:
        """Invalid documents: staged at StartCommit, applied with the batch."""
        self._quarantine.extend(msg.rows)

    def _stage_quarantine(self, batch: int) -> list[list]:
        """The transaction's invalid documents in one staged file: ``[[FILE, ROWS]]`` or ``[]``."""
        rows, self._quarantine = self._quarantine, []
        if not rows:
            return []
        fs, _ = self.area.fs
        directory = self.area.dir(self.materialization)
        name = self._file_name("q")

        def write() -> int:
            fs.create_dir(directory, recursive=True)
            return stage_quarantine(fs, f"{directory}/{name}", self.materialization, batch, rows)

        n = run(self.format, write, "stage quarantine", self.area.path)
        return [[f"{urllib.parse.quote(self.materialization, safe='')}/{name}", n]]

    def start_commit(self, msg: StartCommit) -> StartedCommit:
        """Close the staged files; name them in the driver checkpoint (applied after the log commits)."""
        cp = msg.runtime_checkpoint
        files = []
        writers, self._writers = self._writers, {}
        quoted = urllib.parse.quote(self.materialization, safe="")
        for binding, (stream, writer, name) in sorted(writers.items()):
            run(self.format, partial(_close, stream, writer), "stage", self.area.path, idempotent=False)
            files.append([self.models[binding].name, f"{quoted}/{name}", self._rows.get(binding, 0)])
        quarantined = self._stage_quarantine(int(cp["batch_id"]))
        fault_point("before_endpoint_commit")
        self._rows = {}
        self._acknowledged = False
        self._tables = {}
        # "quarantine" is always set: the merge patch must replace the range's previous list
        stage = {
            "batch": int(cp["batch_id"]),
            **self.format.tag(self.materialization, cp.get("checkpoint_id")),
            "files": files,
            "quarantine": quarantined,
        }
        fault_point("after_endpoint_commit")
        return StartedCommit(StateUpdate({"stages": {self.range.name: stage}}, merge_patch=True))

    def close(self) -> None:
        for stream, writer, _ in self._writers.values():
            try:
                writer.close()
                stream.close()
            except Exception:  # noqa: BLE001 - an abandoned attempt; its files are orphans
                pass
        self._writers = {}
        self._quarantine = []


def _plain_strings(table: pa.Table) -> pa.Table:
    """``table`` with its string views (DataFusion's) as strings, which ``take`` accepts."""
    views = [i for i, f in enumerate(table.schema) if pa.types.is_string_view(f.type)]
    for i in views:
        table = table.set_column(i, table.schema.field(i).with_type(pa.string()), table.column(i).cast(pa.string()))
    return table


def _close(stream: Any, writer: pq.ParquetWriter) -> None:
    writer.close()
    stream.close()
