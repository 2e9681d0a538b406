"""One Delta shard session: Loads read the committed table, Stores go to staged Parquet."""

from __future__ import annotations

import json
import urllib.parse
import uuid
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
from deltalake import DeltaTable, QueryBuilder

from tidemark.drivers.base import Driver, ReadCommittedLoads, Transactor  # Driver: the DeltaDriver that opened it
from tidemark.drivers.common.columns import BOOLEAN, DOCUMENT_COLUMN, coerce, dumps
from tidemark.drivers.delta.quarantine import stage_quarantine
from tidemark.drivers.delta.tables import (
    IN_LIST_MAX,
    TableModel,
    app_id,
    applied_batch,
    arrow_type,
    column,
    ident,
    sql_literal,
    stages_of,
)
from tidemark.errors import RecoveryError
from tidemark.faults import fault_point
from tidemark.protocol.messages import (
    Acknowledge,
    Acknowledged,
    Load,
    Loaded,
    Open,
    Quarantine,
    StartCommit,
    StartedCommit,
    StateUpdate,
    Store,
)


class DeltaTransactor(ReadCommittedLoads, Transactor):
    """One shard session: Loads read the committed table, Stores go to staged Parquet."""

    def __init__(self, driver: Driver, req: Open, models: list[TableModel]):
        self.driver = driver
        self.materialization = req.materialization
        self.range = req.range
        self.models = models
        self.session = uuid.uuid4().hex[:12]
        self._acknowledged = False
        self._deferred: list[Load] = []
        self._snapshots: dict[int, DeltaTable] = {}
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
        self._snapshots = {}
        self._acknowledged = True
        return Acknowledged()

    def _snapshot(self, binding: int) -> DeltaTable:
        """The table as of this transaction, checked against the batches the log says are applied."""
        dt = self._snapshots.get(binding)
        if dt is None:
            model = self.models[binding]
            dt = self.driver.run(lambda: self.driver.table(model.location), "load", model.location)
            for stage in stages_of(self._state):
                if any(loc == model.location and rows for loc, _n, rows in stage.get("files") or ()):
                    have = applied_batch(dt, str(stage.get("app", "")))
                    if have < int(stage.get("batch", -1)):
                        raise RecoveryError(
                            f"Delta table {model.location!r} is at batch {have} of {stage.get('app')!r}, but the "
                            f"recovery log says batch {stage.get('batch')} was applied to it (was the table "
                            "replaced?); Loads would not be read-committed"
                        )
            self._snapshots[binding] = dt
        return dt

    def _evaluate(self, msg: Load) -> list[Loaded]:
        """One chunk of keys: a DataFusion scan whose predicate prunes files by their key
        statistics (the chunk's min/max, plus ``IN (...)`` for small chunks), then an
        exact membership test in Arrow."""
        if not msg.keys:
            return []
        model = self.models[msg.binding]
        dt = self._snapshot(msg.binding)
        wanted: dict[tuple, tuple] = {}
        for key in msg.keys:
            wanted[tuple(coerce(c.kind, v) for c, v in zip(model.keys, key))] = tuple(key)
        where, value_sets = [], []
        for j, c in enumerate(model.keys):
            vals = sorted({k[j] for k in wanted}, key=lambda v: (type(v).__name__, v))
            value_sets.append(pa.array(vals, arrow_type(c.kind)))
            if c.kind != BOOLEAN and len({type(v) for v in vals}) == 1:
                where.append(
                    f"{ident(c.name)} >= {sql_literal(vals[0])} AND {ident(c.name)} <= {sql_literal(vals[-1])}"
                )
            if len(vals) <= IN_LIST_MAX:
                where.append(f"{ident(c.name)} IN ({', '.join(sql_literal(v) for v in vals)})")
        cols = ", ".join(ident(c.name) for c in model.keys)
        sql = f"SELECT {cols}, {ident(DOCUMENT_COLUMN)} FROM t WHERE {' AND '.join(where) or 'true'}"

        def query() -> pa.Table:
            return pa.table(QueryBuilder().register("t", dt).execute(sql).read_all())

        table = self.driver.run(query, "load", model.location)
        n = len(model.keys)
        key_cols = [table.column(j).cast(arrow_type(c.kind)) for j, c in enumerate(model.keys)]
        mask = None
        for col, vs in zip(key_cols, value_sets):
            m = pc.is_in(col, value_set=vs)
            mask = m if mask is None else pc.and_(mask, m)
        idx = pc.indices_nonzero(mask) if mask is not None else pa.array([], pa.uint64())
        if not len(idx):
            return []
        docs = table.column(n).cast(pa.string()).take(idx).to_pylist()
        found = {}
        for i, row in enumerate(zip(*(col.take(idx).to_pylist() for col in key_cols))):
            key = wanted.get(tuple(row))
            if key is not None:  # multi-column keys: a test per column over-selects
                found[key] = json.loads(docs[i])
        if not found:
            return []
        keys = [k for k in msg.keys if tuple(k) in found]
        return [Loaded(msg.binding, tuple(keys), tuple(found[tuple(k)] for k in keys))]

    def store(self, msg: Store) -> None:
        if not msg.keys:
            return
        model = self.models[msg.binding]
        schema = model.staged_schema()
        arrays = [column(c.kind, [k[j] for k in msg.keys]) for j, c in enumerate(model.keys)]
        arrays += [column(c.kind, [v[j] for v in msg.values]) for j, c in enumerate(model.values)]
        arrays.append(pa.array([dumps(d) for d in msg.docs], pa.string()))
        arrays.append(pa.array([bool(x) for x in msg.deletes], pa.bool_()))
        batch = pa.RecordBatch.from_arrays(arrays, schema=schema)
        self.driver.run(
            lambda: self._writer(msg.binding, schema).write_batch(batch), "store", self.driver.staging, idempotent=False
        )
        self._rows[msg.binding] = self._rows.get(msg.binding, 0) + len(msg.keys)

    def _writer(self, binding: int, schema: pa.Schema) -> pq.ParquetWriter:
        if binding not in self._writers:
            fs, _ = self.driver.fs
            directory = self.driver.stage_dir(self.materialization)
            fs.create_dir(directory, recursive=True)
            self._seq += 1
            name = f"{self.range.name}-{self.session}-{self._seq:04d}-b{binding}.parquet"
            stream = fs.open_output_stream(f"{directory}/{name}")
            self._writers[binding] = (stream, pq.ParquetWriter(stream, schema, compression="snappy"), name)
        return self._writers[binding][1]

    def quarantine(self, msg: Quarantine) -> None:
        """Invalid documents: staged at StartCommit, applied with the batch (:mod:`.quarantine`)."""
        self._quarantine.extend(msg.rows)

    def _stage_quarantine(self, batch: int) -> list[list]:
        """The transaction's invalid documents in one staged file: ``[[FILE, ROWS]]`` or ``[]``."""
        rows, self._quarantine = self._quarantine, []
        if not rows:
            return []
        fs, _ = self.driver.fs
        directory = self.driver.stage_dir(self.materialization)
        self._seq += 1
        name = f"{self.range.name}-{self.session}-{self._seq:04d}-q.parquet"

        def write() -> int:
            fs.create_dir(directory, recursive=True)
            return stage_quarantine(fs, f"{directory}/{name}", self.materialization, batch, rows)

        n = self.driver.run(write, "stage quarantine", self.driver.staging)
        return [[f"{urllib.parse.quote(self.materialization, safe='')}/{name}", n]]

    def start_commit(self, msg: StartCommit) -> StartedCommit:
        """Close the staged files; name them in the driver checkpoint (applied after the log commits)."""
        cp = msg.runtime_checkpoint
        files = []
        writers, self._writers = self._writers, {}
        quoted = urllib.parse.quote(self.materialization, safe="")
        for binding, (stream, writer, name) in sorted(writers.items()):
            self.driver.run(
                lambda stream=stream, writer=writer: (writer.close(), stream.close()),
                "stage",
                self.driver.staging,
                idempotent=False,
            )
            files.append([self.models[binding].location, f"{quoted}/{name}", self._rows.get(binding, 0)])
        quarantined = self._stage_quarantine(int(cp["batch_id"]))
        fault_point("before_endpoint_commit")
        self._rows = {}
        self._acknowledged = False
        self._snapshots = {}
        # "quarantine" is always set: the merge patch must replace the range's previous list
        stage = {
            "batch": int(cp["batch_id"]),
            "app": app_id(self.materialization, cp.get("checkpoint_id")),
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
