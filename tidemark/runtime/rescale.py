"""Rescaling a running view: scale requests, the auto policy, and the layout history.

The shard count of a *new* batch (one the recovery log has no intent for) is decided by
:meth:`Rescale.decide`, in this order:

1. a pending scale request (``tidemark scale``, :func:`tidemark.scale`): the newest one;
   older pending ones are superseded by it;
2. the auto policy (``shards: {auto: {min, max, keys_per_shard}}``): the target is
   ``ceil(keys / keys_per_shard)`` clamped to ``[min, max]``, where ``keys`` is the number
   of distinct keys of a *committed* batch (the plan does not count a batch's keys before
   its shard stage, so the policy reads the previous batches'). The count changes only when
   the targets of the last two committed batches both differ from the current count on the
   same side, both having run on the current count; it then moves to the one of them
   nearer the current count (hysteresis: a change holds for at least two batches);
3. otherwise the count of the last applied scale request, as long as the spec's ``shards``
   is the one it was applied under (editing ``shards`` in the spec wins again);
4. otherwise the spec's ``shards``.

A re-run of a batch never comes here: it keeps the layout of its intent.

Requests live beside the recovery log, under ``<checkpoint>/tidemark/scale/``: each request
is a file written once (``<id>.request.json``), and the runtime marks it done with a second
file (``<id>.done.json``: the batch it took effect at, or that it was superseded). No file is
ever rewritten by two parties, so a request that arrives while a batch starts is never lost:
it is picked up by the next batch.
"""

from __future__ import annotations

import math
import time
import uuid
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Callable, Iterator, Optional

from tidemark.errors import SpecError
from tidemark.protocol.messages import JsonObject

if TYPE_CHECKING:  # pragma: no cover
    from tidemark.runtime.recovery_log import LogEntry, RecoveryLog

AUTO_FIELDS = ("min", "max", "keys_per_shard")
MAX_SHARDS = 4096


@dataclass(frozen=True)
class AutoShards:
    """``shards: {auto: {min, max, keys_per_shard}}``."""

    min: int = 1
    max: int = 8
    keys_per_shard: int = 50_000

    def target(self, keys: int) -> int:
        return max(self.min, min(self.max, math.ceil(max(keys, 0) / self.keys_per_shard) or 1))

    def as_dict(self) -> JsonObject:
        return {"min": self.min, "max": self.max, "keys_per_shard": self.keys_per_shard}

    def next_count(self, current: int, recent_keys: list[Any]) -> int:
        """The count of the next batch: ``current`` unless the targets of the last two
        committed batches (``recent_keys``, oldest first) both lie on one side of it."""
        if current < self.min or current > self.max:
            return max(self.min, min(self.max, current))  # the policy's bounds were edited
        keys = [k for k in recent_keys[-2:] if isinstance(k, int)]
        if len(keys) < 2:
            return current
        targets = [self.target(k) for k in keys]
        if all(t > current for t in targets):
            return min(targets)
        if all(t < current for t in targets):
            return max(targets)
        return current


def parse_shards(value: Any, path: str, fail: Callable[[str, str], Exception]) -> tuple[int, Optional[AutoShards]]:
    """``shards:`` of a materialization: an integer >= 1, or ``{auto: {min, max,
    keys_per_shard}}``. Returns (the starting count, the auto policy or None)."""
    if isinstance(value, int) and not isinstance(value, bool):
        if value < 1:
            raise fail(path, f"must be an integer >= 1, got {value!r}")
        return value, None
    if not isinstance(value, dict) or set(value) != {"auto"}:
        raise fail(path, f"must be an integer >= 1 or {{auto: {{min, max, keys_per_shard}}}}, got {value!r}")
    auto = value["auto"]
    if auto is None:
        auto = {}
    if not isinstance(auto, dict):
        raise fail(f"{path}.auto", f"must be a mapping with {', '.join(AUTO_FIELDS)}, got {auto!r}")
    unknown = sorted(set(auto) - set(AUTO_FIELDS))
    if unknown:
        raise fail(f"{path}.auto.{unknown[0]}", f"unknown field (known: {', '.join(AUTO_FIELDS)})")
    defaults = AutoShards()
    got = {}
    for name in AUTO_FIELDS:
        v = auto.get(name, getattr(defaults, name))
        if not isinstance(v, int) or isinstance(v, bool) or v < 1:
            raise fail(f"{path}.auto.{name}", f"must be an integer >= 1, got {v!r}")
        got[name] = v
    if got["min"] > got["max"]:
        raise fail(f"{path}.auto.min", f"must be <= auto.max ({got['max']}), got {got['min']}")
    if got["max"] > MAX_SHARDS:
        raise fail(f"{path}.auto.max", f"must be <= {MAX_SHARDS}, got {got['max']}")
    return got["min"], AutoShards(**got)


def check_count(shards: Any) -> int:
    if not isinstance(shards, int) or isinstance(shards, bool) or shards < 1:
        raise SpecError(f"--shards must be an integer >= 1, got {shards!r}; nothing was requested")
    if shards > MAX_SHARDS:
        raise SpecError(f"--shards must be <= {MAX_SHARDS}, got {shards}; nothing was requested")
    return shards


def configured_of(shards: int, auto: Optional[AutoShards]) -> Any:
    return {"auto": auto.as_dict()} if auto else shards


class Rescale:
    """The scale requests of one view (beside its recovery log) and the layout decision."""

    def __init__(self, log: "RecoveryLog"):
        self.log = log
        self.dir = log.root + "/scale"

    # ------------------------------------------------------------------ requests
    def request(self, shards: int) -> JsonObject:
        """Record a pending request (one atomic write). Returns it."""
        check_count(shards)
        self.log.fs.create_dir(self.dir, recursive=True)
        req = {
            "id": f"{time.time_ns():020d}-{uuid.uuid4().hex[:8]}",
            "shards": shards,
            "requested_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        }
        self.log._write(f"{self.dir}/{req['id']}.request.json", req)
        return req

    def _names(self) -> set[str]:
        import pyarrow.fs as pafs

        return {i.base_name for i in self.log.fs.get_file_info(pafs.FileSelector(self.dir, allow_not_found=True))}

    def requests(self, *, newest_first: bool = False, names: Optional[set[str]] = None) -> Iterator[JsonObject]:
        """Every request, oldest first (or newest first), each with its ``done`` record
        (None: pending); read lazily, one request at a time."""
        names = self._names() if names is None else names
        for name in sorted((n for n in names if n.endswith(".request.json")), reverse=newest_first):
            rid = name[: -len(".request.json")]
            req = self._read(f"{self.dir}/{name}")
            if req is None:
                continue
            done = self._read(f"{self.dir}/{rid}.done.json") if f"{rid}.done.json" in names else None
            yield {**req, "done": done}

    def _read(self, path: str) -> Optional[JsonObject]:
        from tidemark.runtime.recovery_log import TornEntry

        try:
            return self.log._read(path)
        except TornEntry:
            return None  # a request cut short was never acknowledged to whoever made it

    def pending(self) -> list[JsonObject]:
        """The requests not yet done, oldest first (reads only those)."""
        names = self._names()
        open_names = {
            n for n in names if n.endswith(".request.json") and n[: -len(".request.json")] + ".done.json" not in names
        }
        return list(self.requests(names=open_names))

    def mark_done(
        self, request_id: str, batch_id: int, *, configured: Any, superseded_by: Optional[str] = None
    ) -> None:
        body = {
            "batch_id": batch_id,
            "configured": configured,
            "done_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        }
        if superseded_by:
            body["superseded_by"] = superseded_by
        self.log._write(f"{self.dir}/{request_id}.done.json", body)

    # ------------------------------------------------------------------ decision
    def decide(self, last: Optional["LogEntry"], shards: int, auto: Optional[AutoShards]) -> tuple[int, JsonObject]:
        """(shard count, reason) of a new batch; see the module docstring."""
        configured = configured_of(shards, auto)
        pending = self.pending()
        if pending:
            newest = pending[-1]
            return newest["shards"], {
                "by": "scale",
                "request": newest["id"],
                "superseded": [r["id"] for r in pending[:-1]],
            }
        if auto is not None:
            if last is None:
                return auto.min, {"by": "auto", "keys": []}
            recent = self._recent_keys(last)
            return auto.next_count(len(last.layout), recent), {"by": "auto", "keys": recent}
        held = next(
            (r for r in self.requests(newest_first=True) if r["done"] and not r["done"].get("superseded_by")), None
        )  # the newest applied one
        if held is not None and held["done"].get("configured") == configured:
            return held["shards"], {"by": "scale", "held": held["id"]}
        return shards, {"by": "configured"}

    def _recent_keys(self, last: "LogEntry") -> list[Any]:
        """Key counts of the last two committed batches that ran on the current count (a
        batch before a change does not argue for the next one)."""
        prev = self.log.get(last.batch_id - 1) if last.batch_id > 0 else None
        return [e.counts.get("keys") for e in (prev, last) if e is not None and len(e.layout) == len(last.layout)]

    def settle(self, reason: Optional[JsonObject], batch_id: int, *, configured: Any) -> None:
        """Mark the requests a batch's intent took up as done (again after a crash: idempotent)."""
        if not reason or reason.get("by") != "scale" or not reason.get("request"):
            return
        rid = reason["request"]
        open_ids = {r["id"] for r in self.pending()}
        for old in reason.get("superseded") or ():
            if old in open_ids:
                self.mark_done(old, batch_id, configured=configured, superseded_by=rid)
        if rid in open_ids:
            self.mark_done(rid, batch_id, configured=configured)


# ----------------------------------------------------------------------------- history


def layout_history(log: "RecoveryLog") -> JsonObject:
    """What layout each batch range ran on, from the recovery log (its retained entries and
    intents), and the pending scale requests.

    Returns ``{"ranges": [{"first": B, "last": B, "shards": n, "layout": [...], "by": ...}],
    "pending": [{"id", "shards", "requested_at"}], "requests": [...]}``; a range whose
    ``committed`` is False holds a batch that was started but is not in the log yet."""
    committed = {b: log.get(b) for b in log.batches()}
    intents = {b: log.intent_record(b) for b in log.intent_batches()}
    ranges: list[JsonObject] = []
    for b in sorted(set(committed) | set(intents)):
        entry = committed.get(b)
        rec = intents.get(b) or {}
        layout = entry.layout if entry is not None else rec.get("layout")
        if layout is None:
            continue
        by = (rec.get("reason") or {}).get("by")
        cur = ranges[-1] if ranges else None
        if cur and cur["layout"] == layout and cur["last"] == b - 1 and cur["committed"] == (entry is not None):
            cur["last"] = b
            continue
        ranges.append(
            {
                "first": b,
                "last": b,
                "shards": len(layout),
                "layout": layout,
                "by": by or "configured",
                "committed": entry is not None,
            }
        )
    reqs = list(Rescale(log).requests()) if log.checkpoint_id else []
    pending = [{k: r[k] for k in ("id", "shards", "requested_at")} for r in reqs if r["done"] is None]
    return {"ranges": ranges, "pending": pending, "requests": reqs}


__all__ = ["AutoShards", "Rescale", "parse_shards", "layout_history", "check_count", "configured_of"]
