"""A Redis endpoint as a library: open a range, load, commit (exactly-once) or write
(at-least-once).  The driver classes build on this; it knows nothing of the protocol's
messages beyond ``Range`` and keys.

::

    store = RedisStore(RedisConfig.from_config({"url": "redis://127.0.0.1:6379/0"}))
    fence = store.open_range("view", Range())           # bumps fences, inherits a checkpoint
    docs = store.load("orders:", [("c1",), ("c2",)])    # {key: doc} for keys that exist
    store.commit(fence, {"batch_id": 7, ...},
                 upserts=[("orders:", ("c1",), {...})], deletes=[("orders:", ("c2",))])
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from dataclasses import field as dc_field
from typing import Any, Iterable, Optional, Sequence

from tidemark.drivers.base import CheckpointRow, chunked
from tidemark.drivers.common.columns import dumps
from tidemark.drivers.common.fences import fenced_off
from tidemark.drivers.common.identity import parse_record, record_text
from tidemark.drivers.common.redact import redact
from tidemark.drivers.common.settings import Setting, read
from tidemark.drivers.redis import connection, fences
from tidemark.drivers.redis.layout import (
    CHECKPOINT,
    DEFAULT_NAMESPACE,
    FENCE,
    checkpoints_key,
    data_key,
    encode_doc,
    field,
    glob_escape,
    quarantine_key,
)
from tidemark.drivers.redis.persistence import Persistence, read_persistence
from tidemark.drivers.redis.script import COMMIT_LUA
from tidemark.errors import EndpointRefused, FencedOff, IncompatibleSchema, RecoveryError, SpecError
from tidemark.jsontext import loads
from tidemark.policy import DEFAULT_POLICY, RetryPolicy
from tidemark.protocol.messages import Doc, Key, Range

EXACTLY_ONCE, AT_LEAST_ONCE = "exactly-once", "at-least-once"
SETTINGS = (
    Setting("url", required=True, description="redis://[:PASSWORD@]HOST:PORT/DB (its password is never shown)"),
    Setting("mode", default=EXACTLY_ONCE, choices=(EXACTLY_ONCE, AT_LEAST_ONCE)),
    Setting("namespace", default=DEFAULT_NAMESPACE, description="the prefix of tidemark's own keys"),
    Setting("load_chunk", "integer", default=1000, minimum=1, description="keys per MGET"),
    Setting("write_chunk", "integer", default=1000, minimum=1, description="commands per pipeline (at-least-once)"),
    Setting("max_commit_bytes", "integer", default=512 * 1024 * 1024, minimum=1, description="one commit's payload"),
    Setting("retry", "retry"),
)


@dataclass(frozen=True, slots=True)
class RedisConfig:
    """``endpoint: {redis: {url: …, mode: exactly-once | at-least-once, namespace: "tidemark:",
    load_chunk: 1000, write_chunk: 1000, max_commit_bytes: 536870912, retry: {…}}}``."""

    url: str
    mode: str = EXACTLY_ONCE
    namespace: str = DEFAULT_NAMESPACE  # where tidemark's own keys live
    load_chunk: int = 1000  # keys per MGET
    write_chunk: int = 1000  # commands per pipeline round trip (at-least-once writes)
    max_commit_bytes: int = 512 * 1024 * 1024  # one commit script's payload, at most
    policy: RetryPolicy = dc_field(default=DEFAULT_POLICY)

    @staticmethod
    def from_config(config: dict) -> "RedisConfig":
        if not isinstance(config, dict):
            raise SpecError("endpoint redis: needs {url: redis://HOST:PORT/DB}")
        v = read("redis", config, SETTINGS)
        return RedisConfig(
            v["url"],
            v["mode"],
            v["namespace"],
            load_chunk=v["load_chunk"],
            write_chunk=v["write_chunk"],
            max_commit_bytes=v["max_commit_bytes"],
            policy=v["retry"],
        )

    def __repr__(self) -> str:  # the URL may carry a password
        return f"RedisConfig(url={redact(self.url)!r}, mode={self.mode!r}, namespace={self.namespace!r})"

    @property
    def exactly_once(self) -> bool:
        return self.mode == EXACTLY_ONCE


@dataclass(frozen=True, slots=True)
class Committed:
    """What a commit wrote: documents set, keys deleted, the payload's size."""

    upserts: int
    deletes: int
    bytes: int
    appends: int = 0


class RedisStore:
    """One Redis endpoint. Not shared between threads (one per shard session is cheap)."""

    def __init__(self, config: RedisConfig, client=None):
        self.config = config
        self.client = client if client is not None else connection.connect(config.url, config.policy)
        self._commit = self.client.register_script(COMMIT_LUA)  # EVALSHA; loads it on NOSCRIPT

    def _run(self, fn, what: str):
        return connection.run(fn, self.config.url, what, self.config.policy)

    # -------------------------------------------------------------- open
    def open_range(self, materialization: str, key_range: Range) -> fences.RangeFence:
        """Bump the fence of every range overlapping ``key_range`` and return the opened range's
        fence and inherited checkpoint (see :mod:`tidemark.drivers.redis.fences`).  In
        at-least-once mode there are no fences: fence 0, checkpoint None, nothing written."""
        if not self.config.exactly_once:
            return fences.RangeFence(materialization, key_range, 0, None)
        return self._run(
            lambda: fences.open_range(self.client, self.config.namespace, materialization, key_range),
            f"open {materialization} {key_range.name}",
        )

    # -------------------------------------------------------------- load
    def load(self, prefix: str, keys: Sequence[Key]) -> dict[Key, Doc]:
        """The documents of ``keys`` that exist, ``{key: doc}``: one ``MGET`` per
        ``load_chunk`` keys, all chunks of a call in one pipelined round trip."""
        keys = list(keys)
        if not keys:
            return {}
        encoded = [data_key(prefix, k) for k in keys]

        def body() -> list:
            pipe = self.client.pipeline(transaction=False)
            for part in chunked(encoded, self.config.load_chunk):
                pipe.mget(part)
            return [v for values in pipe.execute() for v in values]

        values = self._run(body, f"load {len(keys)} keys under {prefix!r}")
        return {k: loads(v) for k, v in zip(keys, values) if v is not None}

    # ------------------------------------------------------------ commit
    def commit(
        self,
        fence: fences.RangeFence,
        checkpoint: dict,
        upserts: Iterable[tuple[str, Key, Doc]] = (),
        deletes: Iterable[tuple[str, Key]] = (),
        appends: Iterable[tuple[str, Key, Doc]] = (),
        quarantine: Sequence[Doc] = (),
    ) -> Committed:
        """Write ``upserts`` (``(prefix, key, doc)``), append ``appends`` (``(prefix, key,
        doc)``: ``RPUSH`` to the key's list, delta updates), delete ``deletes`` (``(prefix,
        key)``), append ``quarantine`` to the materialization's quarantine list and set the
        range's checkpoint, in one script, only while ``fence`` is current.

        Step 1: encode everything; refuse a payload above ``max_commit_bytes``.
        Step 2: ``EVALSHA`` the commit script (``EVAL`` once if the server lost it).
        Step 3: the script answered "fenced": raise FencedOff; nothing was written.

        Safe to call twice for one batch: a retry after a lost reply finds the checkpoint
        already there and writes nothing (appends are not doubled)."""
        if not self.config.exactly_once:
            raise SpecError("endpoint redis: commit() needs mode exactly-once; at-least-once uses write()")
        cp_text = dumps(checkpoint)
        key: Key | str  # a key of the batch; below, the key the script names
        up_keys, up_vals = [], []
        for prefix, key, doc in upserts:  # Step 1
            up_keys.append(data_key(prefix, key))
            up_vals.append(encode_doc(doc))
        push_keys, push_vals = [], []
        for prefix, key, doc in appends:
            push_keys.append(data_key(prefix, key))
            push_vals.append(encode_doc(doc))
        if quarantine:
            qkey = quarantine_key(self.config.namespace, fence.materialization).encode("utf-8")
            for row in quarantine:
                push_keys.append(qkey)
                push_vals.append(encode_doc(row))
        del_keys = [data_key(prefix, key) for prefix, key in deletes]
        size = (
            sum(map(len, up_keys))
            + sum(map(len, up_vals))
            + sum(map(len, push_keys))
            + sum(map(len, push_vals))
            + sum(map(len, del_keys))
            + len(cp_text)
        )
        if size > self.config.max_commit_bytes:
            raise EndpointRefused(
                f"redis {redact(self.config.url)}: commit of range {fence.range.name} is {size} bytes, above "
                f"max_commit_bytes ({self.config.max_commit_bytes}); one commit is one atomic script and cannot be "
                "split: use more shards or smaller batches (or raise max_commit_bytes and the server's "
                "client-query-buffer-limit)"
            )
        hkey = checkpoints_key(self.config.namespace, fence.materialization)
        keys = [hkey, *up_keys, *push_keys, *del_keys]
        args = [
            field(fence.range, FENCE),
            str(fence.fence),
            field(fence.range, CHECKPOINT),
            cp_text,
            len(up_keys),
            len(push_keys),
            *up_vals,
            *push_vals,
        ]
        ok, current = self._run(
            lambda: self._commit(keys=keys, args=args),  # Step 2
            f"commit {fence.materialization} {fence.range.name}",
        )
        if ok == 0:  # Step 3
            raise _fenced(fence, current)
        if ok == 3:
            key = current.decode("utf-8", "replace") if isinstance(current, bytes) else current
            raise IncompatibleSchema(
                f"redis {redact(self.config.url)}: key {key!r} holds a value that is not a list, so delta-update rows "
                "cannot be appended to it (was the binding switched from standard to delta updates? give it another "
                "prefix, or start over with `tidemark reset`); nothing of this commit was written"
            )
        return Committed(len(up_keys), len(del_keys), size, len(push_keys))

    # ----------------------------------------------------- at-least-once
    def write(
        self,
        upserts: Iterable[tuple[str, Key, Doc]] = (),
        deletes: Iterable[tuple[str, Key]] = (),
        appends: Iterable[tuple[str, Key, Doc]] = (),
        quarantine: Sequence[Doc] = (),
        materialization: str = "",
    ) -> int:
        """At-least-once: no fence, no checkpoint; ``MSET`` and ``DEL`` of up to ``write_chunk``
        keys per command, an ``RPUSH`` per appended row, sent in pipelines of ``write_chunk``
        commands.  A crash may leave some of a batch written; its replay writes it again (a
        ``sum`` then counts twice; last-write-wins documents come out right).  Returns the
        number of keys set, rows appended and keys deleted."""
        wc = self.config.write_chunk
        sets = [(data_key(p, k), encode_doc(d)) for p, k, d in upserts]
        pushes: list[tuple[bytes | str, bytes]] = [(data_key(p, k), encode_doc(d)) for p, k, d in appends]
        qkey = quarantine_key(self.config.namespace, materialization)
        pushes += [(qkey, encode_doc(row)) for row in quarantine]
        dels = [data_key(p, k) for p, k in deletes]
        cmds: list[tuple] = [("mset", dict(part)) for part in chunked(sets, wc)]
        cmds += [("rpush", key, value) for key, value in pushes]
        cmds += [("del", part) for part in chunked(dels, wc)]
        for part in chunked(cmds, wc):

            def body(part=part) -> None:
                pipe = self.client.pipeline(transaction=False)
                for op, *args in part:
                    if op == "mset":
                        pipe.mset(args[0])
                    elif op == "rpush":
                        pipe.rpush(*args)
                    else:
                        pipe.delete(*args[0])
                pipe.execute()

            self._run(body, f"write {len(part)} commands")
        return len(sets) + len(pushes) + len(dels)

    # -------------------------------------------------------- inspection
    def checkpoints(self, materialization: str) -> list[CheckpointRow]:
        states = self._run(
            lambda: fences.read_states(self.client, self.config.namespace, materialization),
            f"read checkpoints of {materialization}",
        )
        return [CheckpointRow(materialization, s.range, s.fence, s.checkpoint) for s in states]

    def dump(self, prefix: str) -> dict[Key, Doc]:
        """Every document under ``prefix`` (SCAN; for tests and the conformance kit)."""
        from tidemark.collection.keys import key_from_json

        def body() -> dict:
            out = {}
            for part in chunked(self.client.scan_iter(match=glob_escape(prefix) + "\\[*", count=1000), 1000):
                for k, v in zip(part, self.client.mget(part)):
                    if v is not None:
                        out[key_from_json(k.decode()[len(prefix) :])] = loads(v)
            return out

        return self._run(body, f"dump {prefix!r}")

    def dump_lists(self, prefix: str) -> list[Doc]:
        """Every appended row under ``prefix`` (delta updates): per key, in append order."""

        def body() -> list:
            out: list[Doc] = []
            for part in chunked(self.client.scan_iter(match=glob_escape(prefix) + "\\[*", count=1000), 1000):
                pipe = self.client.pipeline(transaction=False)
                for k in part:
                    pipe.lrange(k, 0, -1)
                for values in pipe.execute():
                    out.extend(loads(v) for v in values)
            return out

        return self._run(body, f"dump rows under {prefix!r}")

    def quarantined(self, materialization: str) -> list[Doc]:
        """The materialization's quarantined documents, oldest first."""
        key = quarantine_key(self.config.namespace, materialization)
        return [
            loads(v) for v in self._run(lambda: self.client.lrange(key, 0, -1), f"read quarantine of {materialization}")
        ]

    def claim(
        self,
        materialization: str,
        checkpoint_id: Optional[str],
        prefixes: Sequence[str],
        *,
        dry_run: bool = False,
        records: Sequence[dict] = (),
    ) -> None:
        """Record that ``materialization`` of tidemark checkpoint ``checkpoint_id`` writes each
        prefix (the ``<namespace>resources`` hash), or refuse — before anything is written — a
        prefix another materialization or checkpoint writes.  ``checkpoint_id`` None (or a dry
        run, ``tidemark check``): only compare with another materialization's claim."""
        key = self.config.namespace + "resources"
        mine = dumps({"materialization": materialization, "checkpoint_id": checkpoint_id})

        def body() -> None:
            have = self.client.hmget(key, list(prefixes)) if prefixes else []
            for prefix, raw in zip(prefixes, have):
                if raw is None:
                    continue
                owner = json.loads(raw)
                if owner.get("materialization") != materialization or (
                    checkpoint_id is not None and owner.get("checkpoint_id") != checkpoint_id
                ):
                    raise RecoveryError(
                        f"redis prefix {prefix!r} is written by materialization {owner.get('materialization')!r} of "
                        f"tidemark checkpoint {owner.get('checkpoint_id')}, not by {materialization!r} of checkpoint "
                        f"{checkpoint_id}; give this view its own prefix. Nothing was changed"
                    )
            if checkpoint_id is not None and not dry_run:
                for prefix in prefixes:
                    self.client.hsetnx(key, prefix, mine)
                for prefix, record in zip(prefixes, records):
                    self.client.hsetnx(self.config.namespace + "identities", prefix, record_text(record, prefix))

        self._run(body, f"claim the prefixes of {materialization}")

    def identities(self, prefixes: Sequence[str]) -> list[Optional[dict]]:
        """The view-identity record of each prefix (the ``<namespace>identities`` hash), or None."""
        if not prefixes:
            return []
        raw = self._run(
            lambda: self.client.hmget(self.config.namespace + "identities", list(prefixes)), "read the view identities"
        )
        return [parse_record(r) for r in raw]

    def drop(self, materialization: str, prefixes: Sequence[str]) -> list[str]:
        """Delete the bindings' documents and the materialization's checkpoints hash."""
        done = []

        def body() -> None:
            for prefix in prefixes:
                n = 0
                for part in chunked(self.client.scan_iter(match=glob_escape(prefix) + "\\[*", count=1000), 1000):
                    n += self.client.delete(*part)
                done.append(f"deleted {n} documents under {prefix!r}")
            for prefix in prefixes:
                raw = self.client.hget(self.config.namespace + "resources", prefix)
                if raw is not None and json.loads(raw).get("materialization") == materialization:
                    self.client.hdel(self.config.namespace + "resources", prefix)
                raw = self.client.hget(self.config.namespace + "identities", prefix)
                if raw is not None and json.loads(raw).get("materialization") == materialization:
                    self.client.hdel(self.config.namespace + "identities", prefix)
            if self.client.delete(checkpoints_key(self.config.namespace, materialization)):
                done.append(f"deleted the checkpoints of {materialization!r}")
            if self.client.delete(quarantine_key(self.config.namespace, materialization)):
                done.append(f"deleted the quarantined documents of {materialization!r}")

        self._run(body, f"drop {materialization}")
        return done

    def persistence(self) -> Persistence:
        """The server's persistence settings (see :mod:`tidemark.drivers.redis.persistence`)."""
        return read_persistence(self.client)

    def close(self) -> None:
        self.client.close()


def _fenced(fence: fences.RangeFence, current: Any) -> FencedOff:
    current = current.decode() if isinstance(current, bytes) else current
    if not current:
        return FencedOff(
            f"materialization {fence.materialization!r} range {fence.range.name}: its fence is gone "
            "from the endpoint (the view was dropped or reset); nothing of this commit was written"
        )
    return fenced_off(fence.materialization, fence.range, fence.fence)
