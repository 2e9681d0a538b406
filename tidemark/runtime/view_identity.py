"""Whose view a bound resource holds, and from what: one record per binding, compared in one place.

Every recovery-log entry records, per binding, the view's identity (:func:`binding_identity`):
the resource as the spec names it, the collection, its key pointers and their types, and
the source location the collection is read from.  At start-up, before anything is written
(and in ``tidemark check``, through the same function), :func:`check_identities` compares the
log's last record with the spec about to run and refuses what would lose or mix data:

* a **renamed resource** (``{table: orders}`` -> ``{table: orders_v2}``): the new resource would
  hold only what later batches touch (``sum`` restarted from zero);
* **swapped bindings**, or a binding now fed by **another collection**: Spark's source state
  is kept per source position, so the view would mix two streams' histories;
* a **moved source** (another path): Spark's file source would read every file again;
* a **changed key**: old-key and new-key documents would stand side by side.

The way forward is named in each message: undo the edit, or start the view over on
purpose with ``tidemark reset`` (which builds the new resource complete).  Entries written
before this record existed carry ``resources`` and ``reductions`` (collection names): those
are compared instead.

The endpoint keeps the same record with each resource (:func:`endpoint_record`: the
identity plus its owner, the materialization and checkpoint, and the batch it was created
at; the driver adds ``resolved``, the name as the endpoint resolves it).  Apply writes it
where none is kept; ``Driver.identities`` reads it back, and :func:`check_endpoint_records`
(at start-up, after the recovery log's check and before Validate/Apply write anything, and
in ``tidemark check``) refuses a resource that holds another view: another owner, another
collection or source, another key.  So a view is recognised by its endpoint even when its
checkpoint folder is gone or new.

Pure Python (no Spark, no driver).
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING, Any, Optional, Sequence

from tidemark.errors import RecoveryError, rebuild_hint, reset_hint
from tidemark.protocol.messages import BindingSpec, JsonObject
from tidemark.runtime.versions import FORMAT, refuse_newer

if TYPE_CHECKING:
    from tidemark.runtime.recovery_log import LogEntry

#: resource keys that name *where* a view is, beside its name (schema-qualified names)
QUALIFIERS = ("schema", "namespace", "database", "catalog", "bucket")


def resource_identity(binding: BindingSpec) -> list[str]:
    """The resource as the spec names it: its name and, where given, what qualifies it."""
    out = list(binding.resource_path)
    for k in QUALIFIERS:
        if k in binding.resource and binding.resource[k] not in (None, ""):
            out.append(f"{k}={binding.resource[k]}")
    return out


def source_location(source: Any, base_dir: str = ".") -> Optional[str]:
    """A spec source's location as Spark reads it (an absolute path or a URI); None for a
    DataFrame given to ``tidemark.materialize`` (its identity is the Spark checkpoint's)."""
    log = getattr(source, "log", None)
    if log:  # a Kafka topic, a NATS stream: its name (the servers may move, the records stay)
        config = getattr(source, "log_config", None) or {}
        names = [config.get("topic")] + list(config.get("topics") or []) if log == "kafka" else [config.get("stream")]
        return f"{log}:" + ",".join(str(n) for n in names if n)
    path: Optional[str] = getattr(source, "path", None)
    if not path:
        return None
    if "://" in path:
        return path.rstrip("/")
    return os.path.normpath(path if os.path.isabs(path) else os.path.join(os.path.abspath(base_dir), path))


def binding_identity(binding: BindingSpec, source: Optional[str] = None) -> JsonObject:
    """The identity record of one binding (a :class:`~tidemark.protocol.messages.BindingSpec`)."""
    key_types = {f.pointer: f.type for f in binding.key_fields}
    return {
        "resource": resource_identity(binding),
        "collection": binding.collection,
        "key": list(binding.key),
        "key_types": [key_types.get(p) for p in binding.key],
        "source": source,
    }


def _legacy(entry: LogEntry) -> list[JsonObject]:
    """Identities of a log entry written before they were recorded: resources, collections."""
    resources = list(entry.resources or [])
    collections = [r.get("collection") for r in (entry.reductions or [])]
    n = max(len(resources), len(collections))
    return [
        {
            "resource": list(resources[i]) if i < len(resources) else None,
            "collection": collections[i] if i < len(collections) else None,
            "key": None,
            "key_types": None,
            "source": None,
        }
        for i in range(n)
    ]


def _show(resource: Optional[Sequence[str]]) -> str:
    return "/".join(resource) if resource else "?"


def differences(logged: Sequence[JsonObject], current: Sequence[JsonObject]) -> list[str]:
    """What differs, binding by binding (by position, as Spark keeps its sources)."""
    out = []
    if logged and len(current) != len(logged):
        added = [f"{_show(n['resource'])!r} ({n['collection']})" for n in current[len(logged) :]]
        removed = [f"{_show(o.get('resource') or [])!r}" for o in logged[len(current) :]]
        out.append(
            f"the view has {len(logged)} binding(s), the spec {len(current)}"
            + (f" (new: {', '.join(added)})" if added else "")
            + (f" (gone: {', '.join(removed)})" if removed else "")
            + ": Spark keeps one position per source, so a running view cannot take a binding in or out"
        )
    for i, (old, new) in enumerate(zip(logged, current)):
        where = f"binding {i}"
        if old.get("collection") and old["collection"] != new["collection"]:
            moved = [j for j, n in enumerate(current) if n["collection"] == old["collection"]]
            hint = f" (now binding {moved[0]}: were bindings reordered?)" if moved else ""
            out.append(
                f"{where} read collection {old['collection']!r}, now {new['collection']!r}{hint}: Spark keeps "
                "a source's position per binding, so the view would mix two streams' histories"
            )
            continue
        if old.get("resource") and list(old["resource"]) != list(new["resource"]):
            out.append(
                f"{where} ({new['collection']}) was materialized into {_show(old['resource'])!r}, now "
                f"{_show(new['resource'])!r}: the new resource would hold only what later batches touch "
                f"(sums restarting from zero); the view up to here is in {_show(old['resource'])!r}"
            )
        if old.get("key") is not None and list(old["key"]) != list(new["key"]):
            out.append(
                f"{where} ({new['collection']}) was keyed by {old['key']}, now {new['key']}: documents of the "
                "old and the new key would stand side by side"
            )
        elif old.get("key_types") is not None and list(old["key_types"]) != list(new["key_types"]):
            out.append(f"{where} ({new['collection']}) key types were {old['key_types']}, now {new['key_types']}")
        if old.get("source") and new.get("source") and old["source"] != new["source"]:
            out.append(
                f"{where} ({new['collection']}) was read from {old['source']}, now {new['source']}: Spark would "
                "read the new source from its start (sums doubled)"
            )
    return out


def check_identities(
    materialization: str, entry: Optional[LogEntry], current: Sequence[JsonObject], *, spec_file: Optional[str] = None
) -> None:
    """Refuse a spec whose bindings no longer match the view the recovery log's last batch
    (``entry``) wrote.  Raises :class:`~tidemark.errors.RecoveryError` naming both sides."""
    if entry is None:
        return
    logged = list(getattr(entry, "identities", None) or []) or _legacy(entry)
    found = differences(logged, current)
    if not found:
        return
    where = f" ({spec_file})" if spec_file else ""
    raise RecoveryError(
        f"materialization {materialization!r}{where}: the spec no longer describes the view its checkpoint holds up to "
        f"batch {entry.batch_id}: " + "; ".join(found) + ". Undo the edit (the old names are above), or start the "
        f"view over on purpose with {reset_hint(materialization)}, which builds it complete from its source"
        + (
            f"; or rebuild it from the edited spec while it keeps serving: {rebuild_hint(materialization)}"
            if any(
                ("was keyed by" in d or "key types were" in d or "was read from" in d or "binding(s), the spec" in d)
                for d in found
            )
            else ""
        )
        + ". Nothing was changed"
    )


def endpoint_record(
    identity: JsonObject,
    materialization: str,
    checkpoint_id: Optional[str],
    created_at_batch: int,
    checkpoint_location: Optional[str] = None,
) -> JsonObject:
    """The record an endpoint keeps with a binding's resource (``Apply.identities``): the view,
    the checkpoint that owns it (id, folder and host: :mod:`tidemark.runtime.ownership`)."""
    from tidemark.runtime.ownership import owner_fields

    return {
        "materialization": materialization,
        "checkpoint_id": checkpoint_id,
        **(owner_fields(checkpoint_location) if checkpoint_location else {}),
        **identity,
        "created_at_batch": created_at_batch,
        "format": FORMAT,
    }


def record_differences(
    stored: JsonObject, materialization: str, checkpoint_id: Optional[str], current: JsonObject
) -> list[str]:
    """What makes a kept record another view's than this binding's (``current``: its identity)."""
    where = stored.get("resolved") or _show(stored.get("resource"))
    refuse_newer(stored, f"the view-identity record kept with {where!r}")
    since = stored.get("created_at_batch")
    made = f" since batch {since}" if isinstance(since, int) else ""
    out = []
    if (stored.get("materialization"), stored.get("checkpoint_id")) != (materialization, checkpoint_id):
        whose = (
            f"materialization {stored.get('materialization')!r}"
            if stored.get("materialization") != materialization
            else f"another tidemark checkpoint of {materialization!r}"
        )
        out.append(
            f"{where!r} holds the view of {whose} (checkpoint {stored.get('checkpoint_id')}{made}), not of this "
            f"checkpoint ({checkpoint_id}): if this checkpoint folder was deleted or moved, restore it; if this "
            "is another job, give it its own resource"
        )
        return out
    if stored.get("collection") and stored["collection"] != current["collection"]:
        out.append(f"{where!r} holds collection {stored['collection']!r}{made}, not {current['collection']!r}")
    if stored.get("key") is not None and list(stored["key"]) != list(current["key"]):
        out.append(
            f"{where!r} is keyed by {stored['key']}{made}, not {current['key']}: documents of the old and the new "
            "key would stand side by side"
        )
    elif stored.get("key_types") is not None and list(stored["key_types"]) != list(current["key_types"]):
        out.append(f"{where!r} has key types {stored['key_types']}{made}, not {current['key_types']}")
    if stored.get("source") and current.get("source") and stored["source"] != current["source"]:
        out.append(f"{where!r} holds what was read from {stored['source']}{made}, not from {current['source']}")
    return out


def other_folders(
    stored: Sequence[Optional[JsonObject]], materialization: str, checkpoint_id: Optional[str], location: Optional[str]
) -> list[str]:
    """The checkpoints of another folder that keep records of a view of this name (a checkpoint
    of this very folder with another id is this view's own: the folder was made again)."""
    from tidemark.runtime.ownership import Owner

    here = Owner.here(materialization, checkpoint_id, location) if location else None
    out = []
    for old in stored:
        owner = Owner.of(old)
        if owner and owner.materialization == materialization and owner.checkpoint_id != checkpoint_id:
            if here is None or not here.same_folder(owner):
                out.append(owner.describe())
    return out


def check_endpoint_records(
    materialization: str,
    driver_name: str,
    stored: Optional[Sequence[Optional[JsonObject]]],
    current: Sequence[JsonObject],
    checkpoint_id: Optional[str],
    *,
    spec_file: Optional[str] = None,
    checkpoint_location: Optional[str] = None,
) -> None:
    """Refuse bindings whose resources keep another view's record (``stored``: what
    ``Driver.identities`` returned; ``current``: this spec's identities).  Raises
    :class:`~tidemark.errors.RecoveryError` naming both sides; a resource with no record passes."""
    if not stored:
        return
    found = []
    for i, (old, new) in enumerate(zip(stored, current)):
        if isinstance(old, dict):
            found += [
                f"binding {i} ({new['collection']}): {d}"
                for d in record_differences(old, materialization, checkpoint_id, new)
            ]
    if not found:
        return
    where = f" ({spec_file})" if spec_file else ""
    others = sorted(
        {
            str(old.get("materialization"))
            for old in stored
            if isinstance(old, dict) and old.get("materialization") not in (None, materialization)
        }
    )
    if others:  # another view's: a reset of this one cannot help (and drops only what this one owns)
        way = (
            f". Give {materialization!r} its own resources; to start {others[0]!r} over on purpose, reset it "
            f"with its own spec (`tidemark reset SPEC -m {others[0]}`). Nothing was changed"
        )
    elif other_folders(stored, materialization, checkpoint_id, checkpoint_location):
        way = (
            f". A view belongs to its checkpoint, not its name: {materialization!r} there is another job's. If "
            f"this is another job, give it another materialization name (and its own resources); if it is the "
            f"same job, run it from that checkpoint folder or restore it here. Nothing was changed"
        )
    else:
        way = (
            ". Undo the edit; or, to build this view anew in these resources, start it over on "
            f"purpose with {reset_hint(materialization)}, which drops them with their records. Nothing was changed"
        )
    raise RecoveryError(
        f"materialization {materialization!r}{where}: endpoint {driver_name!r} keeps another view in its resources: "
        + "; ".join(found)
        + way
    )


__all__ = [
    "binding_identity",
    "check_endpoint_records",
    "check_identities",
    "differences",
    "endpoint_record",
    "record_differences",
    "resource_identity",
    "source_location",
]
