"""The progress record: a range's write frontier, committed with its data.

Every transaction of a range writes its documents to the data topics *and* one progress
record to the progress topic, in one Kafka transaction. The last committed progress record
of a range is therefore exactly what the range has written (the Materialize seed's
"consistency topic"); Open reads it back with read_committed (:mod:`tidemark.drivers.kafka.frontier`).

Wire form (JSON, UTF-8, compact)::

    key   = {"materialization": "...", "key_begin": 0, "key_end": 4294967295}   (sorted keys)
    value = {"v": 1, "materialization": "...", "key_begin": 0, "key_end": 4294967295,
             "sequence": 7, "runtime_checkpoint": {...}, "counts": {"docs": 10, "deletes": 1},
             "transactional_id": "tidemark.view.00000000-ffffffff", "partitions": {"customers": 6}}

``partitions``: each data topic's partition count when the range committed.  Kafka sends a
key to a partition by its hash modulo the count, so a count that changes under a live view
splits a key's records over two partitions (readers and compaction then keep two values of
one key); Open refuses it (:func:`check_partitions`).

``v`` is the format version: a reader refuses a record of a newer version
(:class:`~tidemark.errors.RecoveryError`) rather than guess. ``sequence`` counts the
range's commits (the previous frontier's + 1); it orders two records of one range that
ended up in different partitions (after the topic's partition count changed). The key is
the same for every record of a range, so a compacted progress topic keeps the frontier.
A tombstone (no value) under a range's key forgets that range's frontier.
"""

from __future__ import annotations

import json
import zlib
from dataclasses import dataclass, field
from typing import Any, Mapping, Optional

from tidemark.errors import RecoveryError
from tidemark.protocol.messages import Range

FORMAT_VERSION = 1


def progress_key(materialization: str, range: Range) -> bytes:
    """The record key of a range's progress records (the compaction key)."""
    return _dumps({"materialization": materialization, "key_begin": range.key_begin, "key_end": range.key_end})


def progress_partition(key: bytes, partitions: int) -> int:
    """The partition a progress key is written to: ``crc32(key) % partitions``.

    Explicit, so that it does not depend on a client's default partitioner. Readers scan
    every partition anyway: correctness never depends on it."""
    return zlib.crc32(key) % max(1, partitions)


@dataclass(frozen=True, slots=True)
class ProgressRecord:
    """What one committed transaction of a range wrote."""

    materialization: str
    range: Range
    sequence: int
    runtime_checkpoint: Mapping[str, Any]
    counts: Mapping[str, int] = field(default_factory=dict)
    transactional_id: Optional[str] = None
    version: int = FORMAT_VERSION
    partitions: Mapping[str, int] = field(default_factory=dict)  # data topic -> partition count

    @property
    def key(self) -> bytes:
        return progress_key(self.materialization, self.range)

    def encode(self) -> bytes:
        return _dumps(
            {
                "v": self.version,
                "materialization": self.materialization,
                "key_begin": self.range.key_begin,
                "key_end": self.range.key_end,
                "sequence": self.sequence,
                "runtime_checkpoint": dict(self.runtime_checkpoint),
                "counts": dict(self.counts),
                "transactional_id": self.transactional_id,
                **({"partitions": dict(self.partitions)} if self.partitions else {}),
            }
        )

    def next(
        self,
        runtime_checkpoint: Mapping[str, Any],
        counts: Mapping[str, int] | None = None,
        *,
        range: Range | None = None,
        transactional_id: str | None = None,
        partitions: Mapping[str, int] | None = None,
    ) -> "ProgressRecord":
        """The record of the commit after this one (optionally for a new range that inherits it)."""
        return ProgressRecord(
            self.materialization,
            range or self.range,
            self.sequence + 1,
            runtime_checkpoint,
            dict(counts or {}),
            transactional_id or self.transactional_id,
            partitions=dict(self.partitions if partitions is None else partitions),
        )

    @staticmethod
    def first(
        materialization: str,
        range: Range,
        runtime_checkpoint: Mapping[str, Any],
        counts: Mapping[str, int] | None = None,
        *,
        transactional_id: str | None = None,
        partitions: Mapping[str, int] | None = None,
    ) -> "ProgressRecord":
        return ProgressRecord(
            materialization,
            range,
            1,
            runtime_checkpoint,
            dict(counts or {}),
            transactional_id,
            partitions=dict(partitions or {}),
        )

    @staticmethod
    def decode(value: bytes, *, where: str = "progress record") -> "ProgressRecord":
        try:
            obj = json.loads(value)
        except (ValueError, UnicodeDecodeError) as exc:
            raise RecoveryError(f"{where}: not a tidemark progress record (not JSON: {exc})") from exc
        if not isinstance(obj, dict) or "v" not in obj:
            raise RecoveryError(f"{where}: not a tidemark progress record (no format version)")
        version = obj["v"]
        if not isinstance(version, int) or version > FORMAT_VERSION:
            raise RecoveryError(
                f"{where}: progress record format {version!r} is newer than this tidemark "
                f"understands ({FORMAT_VERSION}); upgrade tidemark"
            )
        try:
            key_range = Range(int(obj["key_begin"]), int(obj["key_end"]))
            checkpoint = obj["runtime_checkpoint"]
            if not isinstance(checkpoint, dict):
                raise TypeError("runtime_checkpoint is not an object")
            parts = obj.get("partitions") or {}
            return ProgressRecord(
                str(obj["materialization"]),
                key_range,
                int(obj["sequence"]),
                checkpoint,
                dict(obj.get("counts") or {}),
                obj.get("transactional_id"),
                version,
                {str(t): int(n) for t, n in dict(parts).items()},
            )
        except (KeyError, TypeError, ValueError) as exc:
            raise RecoveryError(f"{where}: malformed progress record ({type(exc).__name__}: {exc})") from exc


def check_partitions(materialization: str, records, now: Mapping[str, int]) -> None:
    """Refuse data topics whose partition count differs from the one the view's ranges
    recorded when they committed (``records``: their progress records), before anything is
    written: with another count, Kafka sends a key's next records to another partition."""
    for topic, count in sorted(now.items()):
        were = sorted({(r.partitions[topic], _batch(r)) for r in records if topic in r.partitions}, key=lambda x: -x[1])
        changed = [(n, b) for n, b in were if n != count]
        if changed:
            n, batch = changed[0]
            from tidemark.errors import IncompatibleSchema, reset_hint

            raise IncompatibleSchema(
                f"kafka: topic {topic!r} has {count} partitions, but materialization {materialization!r} wrote it with "
                f"{n} (up to batch {batch}): Kafka puts a key's records in the partition its hash picks among the "
                f"partitions, so the view's keys would have their old records in one partition and their next ones in "
                f"another, and readers and compaction would keep two values of one key. Kafka cannot take partitions "
                f"away: recreate the topic with {n} partitions from a backup, or start the view over with "
                f"{reset_hint(materialization)} (it recreates the topic). Nothing was written"
            )


def _batch(record: "ProgressRecord") -> int:
    b = record.runtime_checkpoint.get("batch_id")
    return b if isinstance(b, int) else -1


def identity_key(topic: str) -> bytes:
    """The record key of a data topic's view-identity record in the progress topic: its value
    is the record (JSON), a tombstone forgets it.  Not a progress key (``decode_key`` skips it)."""
    return _dumps({"identity": topic})


def decode_identity_key(key: bytes | None) -> Optional[str]:
    """The data topic of a view-identity key, or None for a key that is not one."""
    try:
        obj = json.loads(key) if key else None
        return str(obj["identity"]) if isinstance(obj, dict) and "identity" in obj else None
    except (ValueError, TypeError, UnicodeDecodeError):
        return None


def decode_key(key: bytes | None) -> tuple[str, Range] | None:
    """``(materialization, range)`` of a progress key, or None for a key that is not one."""
    if not key:
        return None
    try:
        obj = json.loads(key)
        return str(obj["materialization"]), Range(int(obj["key_begin"]), int(obj["key_end"]))
    except (ValueError, KeyError, TypeError, UnicodeDecodeError):
        return None


def _dumps(obj: Any) -> bytes:
    return json.dumps(obj, sort_keys=True, separators=(",", ":"), ensure_ascii=False).encode("utf-8")
