"""Invalid documents of a lake endpoint's batch: one staged Parquet file per session, named in
the stage (``"quarantine": [[FILE, ROWS]]``) and applied with the batch by the endpoint.

Columns as the SQL endpoints' ``tidemark_quarantine``: ``materialization``, ``batch_id``,
``location`` (file:line), ``key_json``, ``reason``, ``value`` (the line as read)."""

from __future__ import annotations

from typing import Iterable

import pyarrow as pa
import pyarrow.fs as pafs
import pyarrow.parquet as pq

from tidemark.drivers.common.columns import quarantine_rows

COLUMNS = ("materialization", "batch_id", "location", "key_json", "reason", "value")
SCHEMA = pa.schema(
    [
        pa.field("materialization", pa.string(), nullable=False),
        pa.field("batch_id", pa.int64()),
        pa.field("location", pa.string()),
        pa.field("key_json", pa.string()),
        pa.field("reason", pa.string(), nullable=False),
        pa.field("value", pa.string()),
    ]
)


def stage_quarantine(fs: pafs.FileSystem, path: str, materialization: str, batch_id: int, rows: Iterable[dict]) -> int:
    """Write the invalid documents of one transaction to the staged file ``path``; the row count."""
    tuples = quarantine_rows(materialization, batch_id, rows)
    table = pa.Table.from_pylist([dict(zip(COLUMNS, t)) for t in tuples], schema=SCHEMA)
    with fs.open_output_stream(path) as stream:
        pq.write_table(table, stream, compression="snappy")
    return table.num_rows
