"""One Iceberg shard session: Loads read the committed table, Stores go to staged Parquet."""

from __future__ import annotations

import json
import urllib.parse
import uuid
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
from pyiceberg.expressions import And, BooleanExpression, In

from tidemark.drivers.base import Driver, ReadCommittedLoads, Transactor  # Driver: the IcebergDriver that opened it
from tidemark.drivers.common.columns import DOCUMENT_COLUMN, coerce, dumps
from tidemark.drivers.iceberg.tables import TableModel, arrow_type, column, stages_of, table_batch
from tidemark.errors import RecoveryError
from tidemark.faults import fault_point
from tidemark.protocol.messages import (
    Acknowledge,
    Acknowledged,
    Load,
    Loaded,
    Open,
    StartCommit,
    StartedCommit,
    StateUpdate,
    Store,
)


class IcebergTransactor(ReadCommittedLoads, Transactor):
    """One shard session: Loads read the table as of this transaction's Acknowledged, Stores
    stream into one staged Parquet file per binding."""

    def __init__(self, driver: Driver, req: Open, models: list[TableModel]):
        self.driver = driver
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
        self._seq = 0

    # ------------------------------------------------------------- phases
    def acknowledge(self, msg: Acknowledge) -> Acknowledged:
        # The coordinator applied the previous batch before this transaction started.
        if msg.state is not None:
            self._state = msg.state
        self._tables = {}
        self._acknowledged = True
        return Acknowledged()

    def _table(self, binding: int):
        """The table as of this transaction (its current snapshot, read once), checked against
        the batches the recovery log says are applied to it."""
        table = self._tables.get(binding)
        if table is None:
            model = self.models[binding]
            table = self.driver.run(lambda: self.driver.load(model), "load", model.name)
            for stage in stages_of(self._state):
                if not any(name == model.name and rows for name, _f, rows in stage.get("files") or ()):
                    continue
                have = table_batch(table, self.materialization, stage.get("checkpoint_id"))
                if have < int(stage.get("batch", -1)):
                    raise RecoveryError(
                        f"Iceberg table {model.name!r} is at batch {have} of checkpoint {stage.get('checkpoint_id')}, "
                        f"but the recovery log says batch {stage.get('batch')} was applied to it (was the table "
                        "replaced or rolled back?); Loads would not be read-committed"
                    )
            self._tables[binding] = table
        return table

    def _evaluate(self, msg: Load) -> list[Loaded]:
        """One chunk of keys: a scan of the key columns and the document with an ``In``
        filter per key column (pyiceberg prunes files by it, pyarrow filters rows), then an
        exact membership test (composite keys) in Arrow."""
        if not msg.keys:
            return []
        model = self.models[msg.binding]
        table = self._table(msg.binding)
        if table.current_snapshot() is None:
            return []
        wanted: dict[tuple, tuple] = {}
        for key in msg.keys:
            wanted[tuple(coerce(c.kind, v) for c, v in zip(model.keys, key))] = tuple(key)
        expr: BooleanExpression | None = None
        for j, c in enumerate(model.keys):
            term = In(c.name, {k[j] for k in wanted})
            expr = term if expr is None else And(expr, term)
        names = tuple(c.name for c in model.keys) + (DOCUMENT_COLUMN,)

        def scan() -> pa.Table:
            return table.scan(row_filter=expr, selected_fields=names).to_arrow()

        found_rows = self.driver.run(scan, "load", model.name)
        if len(model.keys) > 1 and found_rows.num_rows:  # the In per column over-selects
            probe = pa.table(
                {
                    c.name: pa.array([k[j] for k in wanted], arrow_type(c.kind)).cast(
                        found_rows.schema.field(c.name).type
                    )
                    for j, c in enumerate(model.keys)
                }
            )
            found_rows = found_rows.join(probe, keys=[c.name for c in model.keys], join_type="left semi")
        if not found_rows.num_rows:
            return []
        docs = found_rows.column(DOCUMENT_COLUMN).to_pylist()
        cols = [pc.cast(found_rows.column(c.name), arrow_type(c.kind)).to_pylist() for c in model.keys]
        found = {}
        for row, d in zip(zip(*cols), docs):
            key = wanted.get(tuple(row))
            if key is not None:
                found[key] = json.loads(d)
        keys = [k for k in msg.keys if tuple(k) in found]
        return [Loaded(msg.binding, tuple(keys), tuple(found[tuple(k)] for k in keys))] if keys else []

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
            files.append([self.models[binding].name, f"{quoted}/{name}", self._rows.get(binding, 0)])
        fault_point("before_endpoint_commit")
        self._rows = {}
        self._acknowledged = False
        self._tables = {}
        stage = {"batch": int(cp["batch_id"]), "checkpoint_id": str(cp.get("checkpoint_id")), "files": files}
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
