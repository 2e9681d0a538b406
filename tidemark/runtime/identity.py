"""A batch's identity: which Spark query ran it, its number, and what input it read.

Spark keeps, under its checkpoint location (``<checkpoint>/spark``):

* ``metadata``   ``{"id": "<uuid>"}`` — the query's identity, written once when the
  checkpoint is created; a deleted or replaced Spark checkpoint gets a new one;
* ``offsets/N``  ``v1``, a line of batch metadata, then one line per source with the
  offsets batch N reads — written *before* batch N runs and read again when it re-runs.

tidemark names a batch by ``(query_id, batch_id, offsets)`` where ``offsets`` is a digest
of the source lines of ``offsets/N``.  A re-run is recognised only when all three match;
the batch number alone never makes a batch "already committed".  Nothing here imports
Spark: the files are read through :mod:`pyarrow.fs`, so the checkpoint may live on HDFS
or an object store.
"""

from __future__ import annotations

import hashlib
import json
import re
from dataclasses import dataclass
from typing import Any, Optional

from tidemark.files import filesystem
from tidemark.protocol.messages import JsonObject


@dataclass(frozen=True, slots=True)
class BatchIdentity:
    query_id: Optional[str]
    batch_id: int
    offsets: Optional[str]  # digest of the batch's source offsets

    def as_checkpoint(self) -> JsonObject:
        return {"query_id": self.query_id, "batch_id": self.batch_id, "offsets": self.offsets}

    @staticmethod
    def of(cp: Optional[JsonObject]) -> Optional["BatchIdentity"]:
        if not isinstance(cp, dict) or not isinstance(cp.get("batch_id"), int):
            return None
        return BatchIdentity(cp.get("query_id"), cp["batch_id"], cp.get("offsets"))

    def differences(self, other: "BatchIdentity") -> list[str]:
        """What differs, in words; a field that one side does not record (written by an
        older tidemark) is not compared."""
        out = []
        if self.batch_id != other.batch_id:
            out.append(f"batch {other.batch_id} vs {self.batch_id}")
        if self.query_id and other.query_id and self.query_id != other.query_id:
            out.append(f"Spark query {other.query_id} vs {self.query_id}")
        if self.offsets and other.offsets and self.offsets != other.offsets:
            out.append(f"source offsets {other.offsets} vs {self.offsets}")
        return out

    def describe(self) -> str:
        return f"batch {self.batch_id} of Spark query {self.query_id or '?'} (offsets {self.offsets or '?'})"


class SparkCheckpoint:
    """Read-only view of Spark's part of a tidemark checkpoint."""

    def __init__(self, location: str):
        self.location = location
        self.fs, self.root = filesystem(location)
        self.root = self.root.rstrip("/")

    def _text(self, path: str) -> Optional[str]:
        try:
            with self.fs.open_input_stream(f"{self.root}/{path}") as f:
                text: str = f.read().decode("utf-8")
                return text
        except FileNotFoundError:
            return None

    def query_id(self) -> Optional[str]:
        """The query id in ``metadata``, or None when Spark's checkpoint does not exist."""
        text = self._text("metadata")
        if not text:
            return None
        try:
            query_id: Optional[str] = json.loads(text.splitlines()[0]).get("id")
            return query_id
        except (ValueError, IndexError, AttributeError):
            return None

    def offsets(self, batch_id: int) -> Optional[str]:
        """A digest of the source offsets of batch N (None: not written)."""
        text = self._text(f"offsets/{batch_id}")
        if text is None:
            return None
        lines = text.splitlines()
        body = "\n".join(lines[2:]) if lines[:1] == ["v1"] else text
        return hashlib.sha256(body.encode("utf-8")).hexdigest()[:16]

    def source_offsets(self, batch_id: int) -> list[Any]:
        """Each source's offsets Spark recorded for batch N (parsed JSON, or the line as it
        is), in the query's source order; [] where the batch was not planned."""
        text = self._text(f"offsets/{batch_id}") or ""
        out: list[Any] = []  # JSON values, or lines
        for line in text.splitlines()[2:]:  # "v1", the batch's metadata, then one line per source
            try:
                out.append(json.loads(line))
            except ValueError:
                out.append(line)
        return out

    def identity(self, batch_id: int) -> BatchIdentity:
        return BatchIdentity(self.query_id(), batch_id, self.offsets(batch_id))


#: Spark's atomic write of ``offsets/N`` or ``commits/N``: a hidden temporary file renamed into
#: place (``.N.<uuid>.tmp``, and its ``.crc`` on a local file system)
_UNFINISHED = re.compile(r"\.\.?\d+\.[0-9a-f-]+\.tmp(\.crc)?")


def remove_unfinished_writes(location: str) -> list[str]:
    """Remove the temporary files a killed Spark left in its offset and commit logs under
    ``location`` (Spark's checkpoint folder), and return their paths.  Spark never reads them
    (a log entry exists once renamed into place), but Spark 4 refuses to start a query whose
    ``offsets`` folder holds anything while no batch was written (``kill -9`` during the first
    batch's offsets).  Called only by the run that holds the checkpoint's lease."""
    from pyarrow import fs as pafs

    files, root = filesystem(location)
    root = root.rstrip("/")
    removed = []
    for log in ("offsets", "commits"):
        try:
            infos = files.get_file_info(pafs.FileSelector(f"{root}/{log}", allow_not_found=True))
        except OSError:
            continue
        for info in infos:
            if info.type == pafs.FileType.File and _UNFINISHED.fullmatch(info.base_name):
                files.delete_file(info.path)
                removed.append(info.path)
    return removed
