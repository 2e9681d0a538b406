"""The recovery log: one atomic entry per committed batch, beside Spark's checkpoint.

Layout under ``<checkpoint>/tidemark/``::

    meta.json            {"checkpoint_id": uuid, "materialization": name}   (written once)
    log/<batch>.json     one committed batch: runtime checkpoint, merged driver checkpoint,
                         shard layout, spec version, counts
    intent/<batch>.json  the shard layout a batch was *started* with; a re-run of that batch
                         uses the same layout even if the configured shard count changed

Entries are written through :mod:`pyarrow.fs`, so the log works on local disk and on
cluster storage (HDFS, S3, GCS). A write goes to a temporary name and is renamed into
place (local/HDFS), or is one PUT (object stores): readers never see half an entry.
Old entries are compacted away, keeping the newest ``keep`` entries.
"""

from __future__ import annotations

import json
import os
import uuid
from dataclasses import asdict, dataclass, field
from typing import Any, Optional

import pyarrow.fs as pafs

from tidemark.errors import RecoveryError


@dataclass(frozen=True)
class LogEntry:
    batch_id: int
    runtime_checkpoint: dict
    driver_checkpoint: Any
    layout: list  # [[key_begin, key_end], ...]
    version: str
    counts: dict = field(default_factory=dict)


def _filesystem(uri: str) -> tuple[pafs.FileSystem, str]:
    if "://" not in uri:
        return pafs.LocalFileSystem(), os.path.abspath(uri)
    if uri.startswith("file://"):
        return pafs.LocalFileSystem(), uri[len("file://"):]
    return pafs.FileSystem.from_uri(uri)


class RecoveryLog:
    def __init__(self, checkpoint_location: str, materialization: str, keep: int = 20):
        self.fs, root = _filesystem(checkpoint_location)
        self.root = root.rstrip("/") + "/tidemark"
        self.materialization = materialization
        self.keep = keep
        self._local = isinstance(self.fs, pafs.LocalFileSystem)
        self.fs.create_dir(self.root + "/log", recursive=True)
        self.fs.create_dir(self.root + "/intent", recursive=True)
        self.checkpoint_id = self._meta()["checkpoint_id"]

    # ------------------------------------------------------------------ io
    def _read(self, path: str) -> Optional[dict]:
        try:
            with self.fs.open_input_stream(path) as f:
                return json.loads(f.read().decode("utf-8"))
        except FileNotFoundError:
            return None

    def _write(self, path: str, obj: Any) -> None:
        data = json.dumps(obj, separators=(",", ":"), sort_keys=True).encode("utf-8")
        if self._local:
            tmp = f"{path}.tmp-{uuid.uuid4().hex}"
            with open(tmp, "wb") as f:
                f.write(data)
                f.flush()
                os.fsync(f.fileno())
            os.replace(tmp, path)
            dir_fd = os.open(os.path.dirname(path), os.O_RDONLY)
            try:
                os.fsync(dir_fd)
            finally:
                os.close(dir_fd)
        else:
            with self.fs.open_output_stream(path) as f:
                f.write(data)

    def _meta(self) -> dict:
        path = self.root + "/meta.json"
        meta = self._read(path)
        if meta is None:
            meta = {"checkpoint_id": uuid.uuid4().hex, "materialization": self.materialization}
            self._write(path, meta)
        elif meta.get("materialization") != self.materialization:
            raise RecoveryError(
                f"checkpoint {self.root} belongs to materialization {meta.get('materialization')!r}, "
                f"not {self.materialization!r}: give each materialization its own checkpoint"
            )
        return meta

    def _batches(self, sub: str) -> list[int]:
        sel = pafs.FileSelector(f"{self.root}/{sub}", allow_not_found=True)
        out = []
        for info in self.fs.get_file_info(sel):
            name = info.base_name
            if name.endswith(".json") and name[:-5].isdigit():
                out.append(int(name[:-5]))
        return sorted(out)

    # ------------------------------------------------------------------ api
    def last(self) -> Optional[LogEntry]:
        batches = self._batches("log")
        return self.get(batches[-1]) if batches else None

    def get(self, batch_id: int) -> Optional[LogEntry]:
        obj = self._read(f"{self.root}/log/{batch_id}.json")
        return LogEntry(**obj) if obj is not None else None

    def append(self, entry: LogEntry) -> None:
        last = self.last()
        if last is not None and entry.batch_id <= last.batch_id:
            raise RecoveryError(
                f"recovery log already holds batch {last.batch_id}; refusing to append batch {entry.batch_id}"
            )
        self._write(f"{self.root}/log/{entry.batch_id}.json", asdict(entry))
        self._compact()

    def intent(self, batch_id: int) -> Optional[list]:
        obj = self._read(f"{self.root}/intent/{batch_id}.json")
        return obj["layout"] if obj else None

    def write_intent(self, batch_id: int, layout: list) -> None:
        self._write(f"{self.root}/intent/{batch_id}.json", {"batch_id": batch_id, "layout": layout})

    def _compact(self) -> None:
        for sub in ("log", "intent"):
            batches = self._batches(sub)
            for b in batches[: max(0, len(batches) - self.keep)]:
                try:
                    self.fs.delete_file(f"{self.root}/{sub}/{b}.json")
                except FileNotFoundError:
                    pass
