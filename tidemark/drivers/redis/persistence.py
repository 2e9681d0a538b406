"""What the Redis server does to keep a commit, and what that means for exactly-once.

A commit script's writes are in memory when the script returns.  Whether they survive a
restart depends on the server's persistence:

=========================  ======================================================
``appendonly yes`` +       every write is in the AOF and fsynced before the reply:
``appendfsync always``     a crash of Redis or of the machine loses nothing
``appendfsync everysec``   written to the AOF before the reply, fsynced once a second:
                           a crash of Redis loses nothing, a crash of the machine (power,
                           kernel) up to about a second of commits
``appendfsync no``         the kernel flushes when it likes (Linux: about 30 s)
``appendonly no``, RDB     a restart loses every commit since the last snapshot
``appendonly no``, no RDB  a restart loses the view and its checkpoints
=========================  ======================================================

A lost commit is not silently double-applied: the endpoint's checkpoint goes back with
its data, so the range is behind tidemark's recovery log and the runtime refuses to go on
(``tidemark reset`` starts the view over).  Exactly-once therefore wants
``appendfsync always`` (or ``everysec`` where a machine crash may cost a reset), and a
failover to an asynchronous replica can lose acknowledged commits in the same way.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional


@dataclass(frozen=True, slots=True)
class Persistence:
    """The server's answers to ``CONFIG GET appendonly / appendfsync / save`` (None: refused,
    e.g. a managed Redis that renames CONFIG; ``error`` says why)."""

    appendonly: Optional[str]
    appendfsync: Optional[str]
    save: Optional[str]
    error: Optional[str] = None
    maxmemory: Optional[str] = None
    maxmemory_policy: Optional[str] = None

    def eviction(self) -> Optional[str]:
        """Why the server may evict the view's keys (a memory limit with an ``allkeys-*``
        policy evicts keys without a TTL: a view's documents and checkpoints), or None."""
        policy = (self.maxmemory_policy or "").lower()
        if not policy.startswith("allkeys-") or str(self.maxmemory or "0") in ("0", ""):
            return None
        return (
            f"redis: maxmemory-policy {policy} with maxmemory {self.maxmemory}: when the server is full it "
            "evicts keys without a TTL, so it could silently drop a view's documents (Loads would then reduce "
            "new documents into nothing) or its checkpoints. Fix: `CONFIG SET maxmemory-policy noeviction` "
            "(or a volatile-* policy; and in redis.conf so that it lasts), or `maxmemory 0`"
        )

    def warning(self) -> Optional[str]:
        """A warning for exactly-once mode, or None when every acknowledged commit survives
        a crash of Redis and of its machine (``appendonly yes``, ``appendfsync always``)."""
        fix = (
            "set `appendonly yes` and `appendfsync always` on the server (CONFIG SET, and in redis.conf "
            "so that it lasts)"
        )
        then = (
            "the range's checkpoint goes back with its data, so tidemark refuses to continue (the endpoint "
            "is behind its recovery log) until `tidemark reset` starts the view over"
        )
        if self.error is not None:
            return (
                f"redis: could not read the persistence settings ({self.error}); exactly-once needs every "
                f"commit to survive a restart: make sure the server runs with `appendonly yes` and "
                f"`appendfsync always`"
            )
        if self.appendonly != "yes":
            if self.save:
                lost = f"every commit since the last RDB snapshot (save {self.save!r})"
            else:
                lost = "the whole view and its checkpoints (no AOF, no RDB snapshots)"
            return f"redis: persistence is off (appendonly no): a restart of Redis loses {lost}; {then}. Fix: {fix}"
        if self.appendfsync == "always":
            return None
        if self.appendfsync == "everysec":
            return (
                f"redis: appendfsync everysec: a crash of the machine (not of Redis) can lose about the last "
                f"second of commits; {then}. For none: {fix}"
            )
        return (
            f"redis: appendfsync {self.appendfsync}: the kernel decides when the AOF reaches the disk, and a "
            f"crash of the machine can lose many seconds of commits; {then}. Fix: {fix}"
        )


def read_persistence(client) -> Persistence:
    """Ask the server (one ``CONFIG GET`` per setting: some servers refuse several at once)."""
    import redis

    out: dict[str, Optional[str]] = {}
    try:
        for name in ("appendonly", "appendfsync", "save", "maxmemory", "maxmemory-policy"):
            reply = client.config_get(name)
            value = reply.get(name, reply.get(name.encode())) if isinstance(reply, dict) else None
            out[name] = value.decode() if isinstance(value, bytes) else value
    except redis.exceptions.RedisError as exc:
        return Persistence(None, None, None, f"{type(exc).__name__}: {exc}")
    return Persistence(
        out["appendonly"],
        out["appendfsync"],
        out["save"],
        maxmemory=out["maxmemory"],
        maxmemory_policy=out["maxmemory-policy"],
    )
