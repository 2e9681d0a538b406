"""Reduce strategies that changed under a live view.

Each recovery-log entry records, per binding, the ``reduce`` annotation of every schema
location of the spec the batch ran with (:func:`reductions_of`).  A later spec whose
annotations differ at a location the old schema had (:func:`reduction_changes`) would reduce
new documents into stored ones that were reduced another way: ``sum`` then ``maximize``
gives neither a sum nor a maximum.  ``tidemark check`` refuses such a spec
(:func:`check_reductions`); ``tidemark run`` warns at start.  New locations are not changes.

Pure Python (no Spark).
"""

from __future__ import annotations

from typing import Any, Optional, Sequence

from tidemark.collection.schema import iter_schemas
from tidemark.protocol.messages import JsonObject

Annotation = list[Any]  # [strategy, key (JSON pointers), order], as the recovery log keeps it

DEFAULT = ["lastWriteWins", [], ""]


def _annotation(node: JsonObject) -> Optional[Annotation]:
    red = node.get("reduce")
    if not isinstance(red, dict) or "strategy" not in red:
        return None
    return [str(red["strategy"]), list(red.get("key") or []), str(red.get("order") or "")]


def reductions_of(name: str, schema: Any) -> JsonObject:
    """``{"collection": name, "locations": {schema path: [strategy, key, order] or None}}``
    for every schema object of ``schema`` (None: no strategy there)."""
    return {"collection": name, "locations": {path: _annotation(node) for path, node in iter_schemas(schema)}}


def _describe(a: Optional[Annotation]) -> str:
    if a is None:
        return "lastWriteWins (no annotation)"
    out: str = a[0]
    extra = [f"key [{', '.join(a[1])}]"] if a[1] else []
    extra += [f"order {a[2]}"] if a[2] else []
    return out + (f" ({', '.join(extra)})" if extra else "")


def _same(a: Optional[Annotation], b: Optional[Annotation]) -> bool:
    return (a or DEFAULT) == (b or DEFAULT)


def reduction_changes(old: JsonObject, new: JsonObject) -> list[str]:
    """What changed between two :func:`reductions_of` of one binding, at locations the old
    schema had, as ``collections.<name>.schema<path>: <old> -> <new>``."""
    out = []
    name = new.get("collection") or old.get("collection")
    new_locs = new.get("locations") or {}
    for path, before in (old.get("locations") or {}).items():
        after = new_locs.get(path) if path in new_locs else None
        if path not in new_locs and before is None:
            continue
        if not _same(before, after):
            gone = "" if path in new_locs else " (location removed)"
            out.append(f"collections.{name}.schema{path}.reduce: {_describe(before)} -> {_describe(after)}{gone}")
    return out


def changes_since(logged: Sequence[JsonObject], current: Sequence[JsonObject]) -> list[str]:
    """Changes per binding (bindings matched by position and collection name)."""
    out = []
    for old, new in zip(logged or (), current):
        if old.get("collection") != new.get("collection"):
            continue
        out += reduction_changes(old, new)
    return out


def check_reductions(
    materialization: str,
    batch_id: int,
    logged: Sequence[JsonObject],
    current: Sequence[JsonObject],
    spec_file: Optional[str] = None,
) -> None:
    """Refuse a spec whose reduce annotations changed since the recovery log's last batch."""
    from tidemark.errors import SpecError, rebuild_hint, reset_hint

    changes = changes_since(logged, current)
    if not changes:
        return
    raise SpecError(
        f"materialization {materialization!r}: a reduce strategy changed on a live view: "
        + "; ".join(changes)
        + f". The view holds documents up to batch {batch_id} reduced the old way, and new documents would be "
        f"reduced into them the new way. Keep the old reduce, or start the view over from its source with "
        f"{reset_hint(materialization)}, or materialize into a new resource with its own checkpoint; or rebuild "
        f"it with the new reduce while it keeps serving: {rebuild_hint(materialization)}",
        file=spec_file,
    )
