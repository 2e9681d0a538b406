"""The recovery log: one atomic entry per committed batch, beside Spark's checkpoint.

Layout under ``<checkpoint>/tidemark/``::

    meta.json            {"checkpoint_id": uuid, "materialization": name}   (written once)
    log/<batch>.json     one committed batch: runtime checkpoint (with the batch identity),
                         merged driver checkpoint, shard layout, spec version, the bound
                         resources, counts, the reduce annotations; sealed with a checksum
    intent/<batch>.json  the shard layout a batch was *started* with (and what chose it); a
                         re-run of that batch uses the same layout even if the configured
                         shard count changed or a scale request arrived
    scale/<id>.*.json    scale requests and when each took effect (runtime.rescale)

Entries are written through :mod:`pyarrow.fs`, so the log works on local disk and on
cluster storage (HDFS, S3, GCS).  A write is never visible half-done:

* local disk: a temporary name, fsync, ``rename`` into place, fsync of the directory;
* object stores (S3, GCS): one PUT, which readers see whole or not at all;
* any other file system (HDFS, where a file is visible while it is written): a temporary
  name, then ``move`` into place.

Each entry carries a SHA-256 of its body.  An entry that does not parse or whose checksum
does not match (a file system that broke the rules above, a disk that lost a write) is
*torn*.  A torn **newest** entry was never reported committed to Spark (the append is the
last step before ``foreachBatch`` returns), so it is set aside (renamed ``*.torn``) with a
warning and the batch re-runs; a torn older entry is a :class:`RecoveryError`.
Old entries are compacted away, keeping the newest ``keep`` entries.
"""

from __future__ import annotations

import hashlib
import json
import logging
import uuid
from dataclasses import asdict, dataclass, field, fields
from typing import Any, Callable, Optional, cast

import pyarrow.fs as pafs

from tidemark.errors import RecoveryError
from tidemark.files import filesystem as filesystem  # re-exported: tidemark.status reads the log with it
from tidemark.files import write_atomically
from tidemark.protocol.messages import JsonObject
from tidemark.runtime.versions import FORMAT, refuse_newer

log = logging.getLogger("tidemark")

OBJECT_STORES = ("s3", "gcs", "abfs")  # one PUT is atomic; no rename

Layout = list[list[int]]  # a batch's key ranges: [[key_begin, key_end], ...]


@dataclass(frozen=True)
class LogEntry:
    batch_id: int
    runtime_checkpoint: JsonObject
    driver_checkpoint: Any
    layout: Layout  # [[key_begin, key_end], ...]
    version: str
    counts: JsonObject = field(default_factory=dict)
    resources: list[list[str]] = field(default_factory=list)  # the bound resource paths of the batch
    reductions: list[JsonObject] = field(
        default_factory=list
    )  # per binding: its reduce annotations (runtime.spec_changes)
    identities: list[JsonObject] = field(
        default_factory=list
    )  # per binding: the view's identity (runtime.view_identity)
    format: int = FORMAT  # what wrote the entry (runtime.versions; an entry without it: format 1)

    @property
    def query_id(self) -> Optional[str]:
        query_id: Optional[str] = (self.runtime_checkpoint or {}).get("query_id")
        return query_id

    @staticmethod
    def of(obj: JsonObject) -> "LogEntry":
        names = {f.name for f in fields(LogEntry)}
        return LogEntry(**{k: v for k, v in obj.items() if k in names})


def _digest(body: Any) -> str:
    return hashlib.sha256(json.dumps(body, separators=(",", ":"), sort_keys=True).encode("utf-8")).hexdigest()


class TornEntry(Exception):
    pass


class RecoveryLog:
    def __init__(self, checkpoint_location: str, materialization: str, keep: int = 20, *, create: bool = True):
        self.location = checkpoint_location
        self.fs, root = filesystem(checkpoint_location)
        self.root = root.rstrip("/") + "/tidemark"
        self.materialization = materialization
        self.keep = keep
        self._local = isinstance(self.fs, pafs.LocalFileSystem)
        self._object_store = self.fs.type_name in OBJECT_STORES
        meta = self._meta(False)
        self.checkpoint_id: Optional[str] = meta["checkpoint_id"] if meta else None
        if create:
            self.create()

    def create(self) -> None:
        """Create the log's folders and identity (once; a no-op when they exist)."""
        self.fs.create_dir(self.root + "/log", recursive=True)
        self.fs.create_dir(self.root + "/intent", recursive=True)
        self.checkpoint_id = cast(JsonObject, self._meta(True))["checkpoint_id"]  # create: never None

    @staticmethod
    def existing_materialization(checkpoint_location: str) -> Optional[str]:
        """The materialization a checkpoint folder belongs to, or None (no folder yet)."""
        fs, root = filesystem(checkpoint_location)
        try:
            with fs.open_input_stream(root.rstrip("/") + "/tidemark/meta.json") as f:
                name: Optional[str] = json.loads(f.read().decode("utf-8")).get("materialization")
                return name
        except (FileNotFoundError, ValueError):
            return None

    # ------------------------------------------------------------------ io
    def _read(self, path: str) -> Optional[JsonObject]:
        try:
            with self.fs.open_input_stream(path) as f:
                data = f.read()
        except FileNotFoundError:
            return None
        try:
            obj: Optional[JsonObject] = json.loads(data.decode("utf-8"))
            return obj
        except (UnicodeDecodeError, ValueError) as exc:
            raise TornEntry(f"{path}: {exc}") from None

    def _write(self, path: str, obj: Any) -> None:
        data = json.dumps(obj, separators=(",", ":"), sort_keys=True).encode("utf-8")
        if self._local:
            write_atomically(path, data)
        elif self._object_store:
            with self.fs.open_output_stream(path) as f:
                f.write(data)
        else:
            tmp = f"{path}.tmp-{uuid.uuid4().hex}"
            with self.fs.open_output_stream(tmp) as f:
                f.write(data)
            try:
                self.fs.delete_file(path)  # HDFS's rename does not replace
            except (FileNotFoundError, OSError):
                pass
            self.fs.move(tmp, path)

    def _meta(self, create: bool) -> Optional[JsonObject]:
        path = self.root + "/meta.json"
        try:
            meta = self._read(path)
        except TornEntry as exc:
            raise RecoveryError(
                f"the checkpoint's identity file is damaged ({exc}); restore the checkpoint "
                "folder from a copy, or start over with `tidemark reset`"
            ) from None
        if meta is None:
            if not create:
                return None
            meta = {"checkpoint_id": uuid.uuid4().hex, "materialization": self.materialization, "format": FORMAT}
            self._write(path, meta)
            return meta
        refuse_newer(meta, f"checkpoint folder {self.location} ({path})")
        if meta.get("materialization") != self.materialization:
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
    def batches(self) -> list[int]:
        return self._batches("log")

    def last(self) -> Optional[LogEntry]:
        batches = self._batches("log")
        if not batches:
            return None
        try:
            return self._entry(batches[-1])
        except TornEntry as exc:
            aside = f"{self.root}/log/{batches[-1]}.json.torn-{uuid.uuid4().hex[:8]}"
            self.fs.move(f"{self.root}/log/{batches[-1]}.json", aside)
            log.warning(
                "recovery log: the newest entry (batch %s) is torn (%s) and was never reported committed; "
                "set aside as %s, the batch runs again",
                batches[-1],
                exc,
                aside,
            )
            return self.last()

    def peek_last(self) -> tuple[Optional[LogEntry], Optional[int]]:
        """Read-only :meth:`last` (for ``tidemark status``): (the newest whole entry, the
        batch of a torn newer entry or None).  Sets nothing aside."""
        torn = None
        for batch in reversed(self._batches("log")):
            try:
                entry = self._entry(batch)
            except TornEntry:
                torn = torn if torn is not None else batch
                continue
            if entry is not None:
                return entry, torn
        return None, torn

    def entry_mtime(self, batch_id: int) -> Optional[float]:
        """When batch ``batch_id``'s entry was written (epoch seconds), if the file system says."""
        info = self.fs.get_file_info(f"{self.root}/log/{batch_id}.json")
        return info.mtime.timestamp() if info.mtime is not None else None

    def get(self, batch_id: int) -> Optional[LogEntry]:
        try:
            return self._entry(batch_id)
        except TornEntry as exc:
            raise RecoveryError(
                f"recovery log entry of batch {batch_id} is damaged ({exc}); restore the "
                "checkpoint folder from a copy, or start over with `tidemark reset`"
            ) from None

    def _entry(self, batch_id: int) -> Optional[LogEntry]:
        path = f"{self.root}/log/{batch_id}.json"
        obj = self._read(path)
        if obj is None:
            return None
        if "entry" in obj:  # sealed: {"entry": {...}, "sha256": ...}
            if _digest(obj["entry"]) != obj.get("sha256"):
                raise TornEntry(f"{path}: checksum mismatch")
            obj = obj["entry"]
        refuse_newer(obj, f"recovery log entry {path}")
        try:
            return LogEntry.of(obj)
        except TypeError as exc:
            raise TornEntry(f"{path}: {exc}") from None

    def append(self, entry: LogEntry) -> None:
        last = self.last()
        if last is not None and entry.batch_id <= last.batch_id:
            raise RecoveryError(
                f"recovery log already holds batch {last.batch_id}; refusing to append batch {entry.batch_id}"
            )
        body = asdict(entry)
        self._write(f"{self.root}/log/{entry.batch_id}.json", {"entry": body, "sha256": _digest(body)})
        self._compact()

    def rewrite_as(self, materialization: str, change: Callable[[JsonObject], JsonObject]) -> None:
        """This log, as another materialization's: ``meta.json`` names ``materialization`` and
        every entry is ``change(entry)`` (a rebuild's shadow log becoming the live view's,
        :mod:`tidemark.runtime.rebuild`; the folder is a copy nothing else reads yet)."""
        meta = self._meta(False)
        if meta is None:
            raise RecoveryError(f"{self.root}: no recovery log to rewrite")
        self._write(self.root + "/meta.json", {**meta, "materialization": materialization})
        for batch in self.batches():
            entry = self.get(batch)
            if entry is not None:
                body = change(asdict(entry))
                self._write(f"{self.root}/log/{batch}.json", {"entry": body, "sha256": _digest(body)})
        self.materialization = materialization

    def intent(self, batch_id: int) -> Optional[Layout]:
        obj = self.intent_record(batch_id)
        return obj["layout"] if obj else None

    def intent_record(self, batch_id: int) -> Optional[JsonObject]:
        """``{"batch_id", "layout", "reason"}`` of a started batch (``reason``: what chose
        its layout, see :mod:`tidemark.runtime.rescale`; absent in older records)."""
        try:
            record = self._read(f"{self.root}/intent/{batch_id}.json")
        except TornEntry as exc:
            raise RecoveryError(
                f"the layout record of batch {batch_id} is damaged ({exc}); restore the "
                "checkpoint folder from a copy, or start over with `tidemark reset`"
            ) from None
        refuse_newer(record, f"the layout record {self.root}/intent/{batch_id}.json")
        return record

    def intent_batches(self) -> list[int]:
        return self._batches("intent")

    def write_intent(self, batch_id: int, layout: Layout, reason: Optional[JsonObject] = None) -> None:
        body: JsonObject = {"batch_id": batch_id, "layout": layout, "format": FORMAT}
        if reason:
            body["reason"] = reason
        self._write(f"{self.root}/intent/{batch_id}.json", body)

    def _compact(self) -> None:
        for sub in ("log", "intent"):
            batches = self._batches(sub)
            for b in batches[: max(0, len(batches) - self.keep)]:
                try:
                    self.fs.delete_file(f"{self.root}/{sub}/{b}.json")
                except FileNotFoundError:
                    pass
