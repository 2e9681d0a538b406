"""The ``store`` endpoint: a local, transactional key-value view per shard range
(KIP-892 on RocksDB, :mod:`tidemark.store`), queryable from other processes.

Config::

    endpoint: {store: {path: DIR,                      # required; relative: to the spec's folder
                       changelog: DIR_OR_URI,          # optional: restore where a shard runs
                       max_uncommitted_bytes: 67108864, # the buffer spills to disk beyond this
                       snapshot_every: 100, keep_snapshots: 2, spill_dir: DIR,
                       retry: {lock_timeout: 60}}}
    bindings: [{source: orders, resource: {name: customers}}]

One directory per materialization (``DIR/<materialization>``), one RocksDB per shard range
inside it; every binding of the materialization shares the range's DB (keys carry a
binding id, :mod:`.naming`).  Commit pattern: store-authoritative — data and runtime
checkpoint commit in one atomic write, fenced per range (fences are flock + a counter in
the range's DB, so they hold between processes of *one machine*).

``manifest.json`` in the materialization's directory (and its changelog) records what Apply
made: each resource's key and mode, and the tidemark checkpoint that writes the view.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import os
import shutil
import uuid
from typing import Any, Optional, Sequence

from tidemark.drivers.base import Capabilities, CheckpointRow, CommitPattern, Driver, ReplaceContents
from tidemark.drivers.common.identity import kept as kept_record
from tidemark.drivers.common.settings import Setting, config_schema, read
from tidemark.drivers.store.naming import (
    QUARANTINE_ID,
    binding_id,
    binding_ids,
    changelog_dir,
    local_dir,
    quarantine_prefix,
    resource_name,
    split_key,
)
from tidemark.drivers.store.transactor import StoreTransactor
from tidemark.drivers.store.view import StoreView, heads
from tidemark.errors import DriverError, IncompatibleSchema, RecoveryError
from tidemark.faults import fault_point
from tidemark.jsontext import loads
from tidemark.protocol.messages import (
    Applied,
    Apply,
    BindingSpec,
    Open,
    Opened,
    Range,
    SpecResponse,
    Validate,
    Validated,
    ValidatedBinding,
)
from tidemark.store import Changelog, Isolation, RangeStore, StoreConfig

CAPABILITIES = Capabilities(
    commit_pattern=CommitPattern.STORE_AUTHORITATIVE,
    delta_updates=True,  # every row kept, in append order per key (see naming)
    standard_updates=True,
    max_load_keys=10_000,
    max_store_docs=10_000,
    concurrent_shards=True,
    quarantine=True,
)

SETTINGS = (
    Setting("path", required=True, description="the store's folder (relative: the spec's folder)"),
    Setting("changelog", description="a folder or object-store URI the store's commits are copied to"),
    Setting("max_uncommitted_bytes", "integer", default=64 << 20, minimum=0, description="a batch's buffer in memory"),
    Setting("snapshot_every", "integer", default=100, minimum=1, description="commits of a range between snapshots"),
    Setting("keep_snapshots", "integer", default=2, minimum=1),
    Setting("spill_dir", description="where a batch larger than its buffer spills (default: the temp folder)"),
    Setting("retry", "retry"),
)
MANIFEST = "manifest.json"

log = logging.getLogger("tidemark")


def exchange(a: str, b: str) -> None:
    """Swap two directories atomically (Linux ``renameat2(..., RENAME_EXCHANGE)``)."""
    import ctypes

    libc = ctypes.CDLL(None, use_errno=True)
    renameat2 = getattr(libc, "renameat2", None)
    if renameat2 is None:
        raise DriverError(f"store: this system cannot exchange two folders atomically (no renameat2): {a}, {b}")
    renameat2.argtypes = [ctypes.c_int, ctypes.c_char_p, ctypes.c_int, ctypes.c_char_p, ctypes.c_uint]
    at_fdcwd, rename_exchange = -100, 2
    if renameat2(at_fdcwd, os.fsencode(a), at_fdcwd, os.fsencode(b), rename_exchange) != 0:
        err = ctypes.get_errno()
        raise DriverError(f"store: exchanging {a} and {b} failed: {os.strerror(err)} (errno {err})")


def _is_local_relative(value: Any) -> bool:
    return isinstance(value, str) and bool(value) and "://" not in value and not os.path.isabs(value)


class StoreDriver(Driver):
    name = "store"

    def __init__(self, config: dict | None = None):
        super().__init__(config)
        v = read("store", self.config, SETTINGS)
        self.policy = v.pop("retry")
        self.base = StoreConfig.from_config(v, lock_timeout=self.policy.lock_timeout)

    def __repr__(self) -> str:
        return f"StoreDriver(path={self.base.path!r})"

    @classmethod
    def resolve_config(cls, config: dict, base_dir: str) -> dict:
        """Relative local paths (``path``, ``changelog``, ``spill_dir``) against the spec's folder."""
        out = dict(config)
        for k in ("path", "changelog", "spill_dir"):
            if _is_local_relative(out.get(k)):
                out[k] = os.path.abspath(os.path.join(base_dir, out[k]))
        return out

    def capabilities(self) -> Capabilities:
        return CAPABILITIES

    def spec(self) -> SpecResponse:
        return SpecResponse(
            config_schema=config_schema(SETTINGS),
            resource_schema={"type": "object", "required": ["name"], "properties": {"name": {"type": "string"}}},
        )

    # ------------------------------------------------------------------ places
    def store_config(self, materialization: str) -> StoreConfig:
        """The store of one materialization: ``path/<materialization>``."""
        cl = self.base.changelog
        return dataclasses.replace(
            self.base,
            path=local_dir(self.base.path, materialization),
            changelog=changelog_dir(cl, materialization) if cl else None,
        )

    def changelog(self, materialization: str) -> Optional[Changelog]:
        cfg = self.store_config(materialization)
        return Changelog(cfg.changelog, cfg.changelog_fs) if cfg.changelog else None

    def view(
        self, materialization: str, isolation: Isolation | str = Isolation.READ_COMMITTED, timeout: float = 30.0
    ) -> StoreView:
        """A snapshot of the materialization's store over all its ranges (see :mod:`.view`)."""
        return StoreView(self.store_config(materialization), self.changelog(materialization), isolation, timeout)

    # ---------------------------------------------------------------- manifest
    def read_manifest(self, materialization: str) -> dict:
        path = os.path.join(self.store_config(materialization).path, MANIFEST)
        try:
            with open(path, encoding="utf-8") as f:
                return json.load(f)
        except FileNotFoundError:
            pass
        cl = self.changelog(materialization)
        if cl is not None:
            try:
                with cl.fs.open_input_stream(f"{cl.root}/{MANIFEST}") as f:
                    return json.loads(f.read())
            except (FileNotFoundError, OSError):
                pass
        return {"checkpoint_id": None, "resources": {}}

    def write_manifest(self, materialization: str, manifest: dict) -> None:
        text = json.dumps(manifest, sort_keys=True, indent=1).encode("utf-8")
        d = self.store_config(materialization).path
        os.makedirs(d, exist_ok=True)
        tmp = os.path.join(d, f".{MANIFEST}.{uuid.uuid4().hex[:8]}")
        with open(tmp, "wb") as f:
            f.write(text)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, os.path.join(d, MANIFEST))
        cl = self.changelog(materialization)
        if cl is not None:
            tmp = f"{cl.root}/.{MANIFEST}.{uuid.uuid4().hex[:8]}"
            with cl.fs.open_output_stream(tmp) as out:
                out.write(text)
            cl.fs.move(tmp, f"{cl.root}/{MANIFEST}")

    # ------------------------------------------------------------- setup phase
    def _check(self, materialization: str, bindings: Sequence[BindingSpec]) -> dict:
        binding_ids(bindings)  # names valid, ids distinct
        manifest = self.read_manifest(materialization)
        for b in bindings:
            name = resource_name(b)
            have = manifest["resources"].get(name)
            if have is None:
                continue
            if bool(have.get("delta")) != bool(b.delta_updates):
                mode = "delta-updates" if b.delta_updates else "standard"
                raise IncompatibleSchema(
                    f"store view {name!r} of {materialization!r} exists in the other mode; it cannot switch to {mode} "
                    "updates (use another name, or start over with `tidemark reset`)"
                )
            if list(have.get("key") or []) != list(b.key):
                raise IncompatibleSchema(
                    f"store view {name!r} of {materialization!r} is keyed by {have.get('key')}, the binding by "
                    f"{list(b.key)}: the key cannot change (use another name, or start over with `tidemark reset`)"
                )
        return manifest

    def identities(self, materialization: str, bindings: Sequence[BindingSpec]) -> list[Optional[dict]]:
        kept = self.read_manifest(materialization).get("identities") or {}
        return [kept.get(resource_name(b)) for b in bindings]

    def validate(self, req: Validate) -> Validated:
        self._check(req.materialization, req.bindings)
        return Validated(tuple(ValidatedBinding(b.resource_path, b.delta_updates) for b in req.bindings))

    def apply(self, req: Apply) -> Applied:
        manifest = self._check(req.materialization, req.bindings)
        owner = manifest.get("checkpoint_id")
        if req.checkpoint_id and owner and owner != req.checkpoint_id:
            raise RecoveryError(
                f"store {self.store_config(req.materialization).path} is written by tidemark checkpoint {owner}, not "
                f"by {req.checkpoint_id}; give this view its own materialization name or store path, or start it "
                f"over with `tidemark reset SPEC -m {req.materialization}`. Nothing was changed"
            )
        new = [b for b in req.bindings if resource_name(b) not in manifest["resources"]]
        created = tuple(b.resource_path for b in new)
        actions = [f"create store view {resource_name(b)}" for b in new]
        if req.dry_run:
            return Applied("; ".join(actions) or "nothing to do", created)
        kept = manifest.setdefault("identities", {})
        for i, b in enumerate(req.bindings):
            manifest["resources"][resource_name(b)] = {
                "delta": bool(b.delta_updates),
                "key": list(b.key),
                "collection": b.collection,
                "id": binding_id(resource_name(b)),
            }
            if req.checkpoint_id and i < len(req.identities) and resource_name(b) not in kept:
                kept[resource_name(b)] = kept_record(req.identities[i], resource_name(b))
        if req.checkpoint_id:
            manifest["checkpoint_id"] = req.checkpoint_id
        self.write_manifest(req.materialization, manifest)
        return Applied("; ".join(actions) or "nothing to do", created)

    # ------------------------------------------------------- transaction phase
    def open(self, req: Open) -> tuple[StoreTransactor, Opened]:
        ids = binding_ids(req.bindings)
        self.resolve_duplicates(req.materialization, req.range, req.state)
        store = RangeStore.open(self.store_config(req.materialization), req.range)
        return StoreTransactor(store, req.materialization, req.bindings, ids), Opened(store.recover())

    def resolve_duplicates(self, materialization: str, key_range: Range, state: Any) -> list[str]:
        """Attempts on two machines (each fenced only on its own) may both commit a batch
        of ``key_range`` to the changelog.  The recovery log's driver checkpoint names the digest
        of the commit that counted: delete the other entries of that batch, so the Open that
        follows restores from the winner (a local store holding the loser is rebuilt)."""
        won: Any = ((state or {}).get("store") or {}).get(key_range.name) if isinstance(state, dict) else None
        cl = self.changelog(materialization) if isinstance(won, dict) else None
        if cl is None:
            return []
        refs = [r for r in cl.refs(key_range, "log") if r.batch == won.get("batch")]
        if len(refs) < 2 or won.get("digest") not in {r.digest for r in refs}:
            return []
        removed = []
        for ref in refs:
            if ref.digest != won["digest"]:
                try:
                    cl.fs.delete_file(ref.path)
                except FileNotFoundError:
                    pass
                removed.append(ref.path)
        log.warning(
            "store %s range %s: batch %s was committed by two attempts; kept %s (the recovery log's), removed %s",
            materialization,
            key_range.name,
            won.get("batch"),
            won["digest"],
            removed,
        )
        return removed

    # -------------------------------------------------------------- inspection
    def dump(self, materialization: str, binding: BindingSpec):
        bid = binding_id(resource_name(binding)).to_bytes(2, "big")
        with self.view(materialization) as view:
            mine = ((k, v) for k, v in view.items() if k[4:6] == bid)
            if binding.delta_updates:
                return [loads(v) for _, v in mine]
            return {tuple(loads(split_key(k, False)[1])): loads(v) for k, v in mine}

    def quarantined(self, materialization: str) -> list[dict]:
        """The quarantined documents of the view, oldest batch first."""
        with self.view(materialization) as view:
            begins = {0} | {r.key_begin for r in view.sources} | {lo for lo, _, _ in view.parts}
            rows: list[tuple[bytes, Any]] = []
            for b in sorted(begins):
                rows.extend((k[6:], loads(v)) for k, v in view.prefix(quarantine_prefix(b)))
            return [doc for _, doc in sorted(rows, key=lambda kv: kv[0])]

    def checkpoints(self, materialization: str) -> list[CheckpointRow]:
        cfg = self.store_config(materialization)
        if not os.path.isdir(cfg.path) and cfg.changelog is None:
            return []
        sources = heads(cfg, self.changelog(materialization), Isolation.READ_COMMITTED)
        try:
            return [
                CheckpointRow(materialization, r, s.fence, s.checkpoint)
                for r, s in sorted(sources.items(), key=lambda kv: (kv[0].key_begin, kv[0].key_end))
            ]
        finally:
            for s in sources.values():
                s.close()

    # ------------------------------------------------------------------ rebuild
    rebuild_refusal = "its views live in a changelog too, which cannot switch in one step"

    def shadow_resource(self, resource: dict, tag: str) -> Optional[dict]:
        """The same resource: a shadow materialization has a store folder of its own
        (``path/<materialization>``), which the cut-over exchanges with the live one."""
        return None if self.base.changelog else dict(resource)

    def _identities(self, req: ReplaceContents) -> dict:
        return {resource_name(b): kept_record(i, resource_name(b)) for (b, _), i in zip(req.pairs, req.identities)}

    def cut_over_state(self, req: ReplaceContents) -> str:
        manifest = self.read_manifest(req.materialization)
        if manifest.get("checkpoint_id") is None or manifest.get("checkpoint_id") != str(req.checkpoint_id):
            return "none"
        kept = manifest.get("identities") or {}
        return "done" if all(kept.get(k) == v for k, v in self._identities(req).items()) else "partial"

    def replace_contents(self, req: ReplaceContents) -> list[str]:
        """The shadow's folder and the live view's change places in one ``renameat2(RENAME_EXCHANGE)``:
        a reader opens the old store or the new one (its ranges must agree on one checkpoint and
        batch, :class:`~tidemark.drivers.store.view.StoreView`); the old store is left under the
        shadow's name, which the rebuild then drops.  Then the view-identity records of the
        manifest name the live view (a kill before that is finished by calling this again)."""
        live, shadow = self.store_config(req.materialization).path, self.store_config(req.shadow).path
        done = []
        if self.cut_over_state(req) == "none":
            if self.read_manifest(req.shadow).get("checkpoint_id") != str(req.checkpoint_id):
                raise RecoveryError(
                    f"rebuild of {req.materialization!r}: the shadow store {shadow} is not written by the shadow's "
                    f"checkpoint {req.checkpoint_id}. Nothing was changed"
                )
            fault_point("replace_contents")
            if os.path.isdir(live):
                exchange(shadow, live)
            else:
                os.replace(shadow, live)
            done.append(f"switched store {live} to the rebuilt view (the old one is now {shadow}, dropped next)")
            fault_point("after_store_exchange")
        manifest = self.read_manifest(req.materialization)
        manifest.setdefault("identities", {}).update(self._identities(req))
        self.write_manifest(req.materialization, manifest)
        return done

    def drop(self, materialization: str, bindings: Sequence[BindingSpec]) -> list[str]:
        """Remove the materialization's store directory and its changelog (stop the job first)."""
        done = []
        path = self.store_config(materialization).path
        if os.path.isdir(path):
            shutil.rmtree(path)
            done.append(f"removed store {path}")
        cl = self.changelog(materialization)
        if cl is not None:
            cl.fs.delete_dir(cl.root)
            done.append(f"removed changelog {cl.root}")
        return done


__all__ = ["StoreDriver", "CAPABILITIES", "QUARANTINE_ID"]
