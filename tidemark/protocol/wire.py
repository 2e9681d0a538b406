"""The wire form: protocol messages as JSON lines, one optional field per message.

Each line is a JSON object with exactly one field, named after the message in
snake_case, whose value holds the message's fields::

    {"open": {"materialization": "m", "version": "v1", "range": {"key_begin": 0, "key_end": 4294967295},
              "state": null, "config": {}, "bindings": [...]}}
    {"opened": {"runtime_checkpoint": null}}
    {"acknowledge": {"state": null}}                      {"acknowledged": {"state": null}}
    {"load": {"binding": 0, "keys": [["a"], ["b"]]}}      {"loaded": {"binding": 0, "keys": [["a"]], "docs": [{...}]}}
    {"flush": {}}                                          {"flushed": {"state": null}}
    {"store": {"binding": 0, "keys": [["a"]], "values": [[3, "x"]], "docs": [{...}],
               "exists": [true], "deletes": [false]}}
    {"quarantine": {"rows": [{"binding": 0, "location": "f.json:3", "key_json": "[\"a\"]", "reason": "...", "value": "..."}]}}
    {"start_commit": {"runtime_checkpoint": {...}}}       {"started_commit": {"state": {"updated": {...}, "merge_patch": true}}}

A :class:`~tidemark.protocol.messages.StoreTexts` is a ``store`` whose ``texts`` hold the
documents (``values`` and ``docs`` empty); a ``StoreRows`` has no wire form.
Keys and value rows are JSON arrays (tuples in Python).  Lines are ASCII (non-ASCII is
escaped), so any language's line reader works.  Besides the protocol messages, the wire
form has a few requests that map the rest of the :class:`~tidemark.drivers.base.Driver`
API onto an external program (``describe``, ``dump``, ``list_checkpoints``,
``coordinator_acknowledge``) and one reply a driver sends instead of any other when it
fails: ``{"error": {"type": "FencedOff", "message": "..."}}``.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any, Callable, Iterable, Optional

from tidemark.protocol.messages import (
    Acknowledge,
    Acknowledged,
    Applied,
    Apply,
    BindingSpec,
    Field,
    Flush,
    Flushed,
    JsonObject,
    Key,
    Load,
    Loaded,
    Open,
    Opened,
    Quarantine,
    Range,
    Spec,
    SpecResponse,
    StartCommit,
    StartedCommit,
    StateUpdate,
    Store,
    StoreTexts,
    Validate,
    Validated,
    ValidatedBinding,
)


class WireError(ValueError):
    """A line is not a valid wire message."""


# ----------------------------------------------------------- wire-only requests


@dataclass(frozen=True, slots=True)
class Describe:
    """Ask an external driver for its capabilities."""


@dataclass(frozen=True, slots=True)
class Described:
    capabilities: JsonObject = field(default_factory=dict)  # Capabilities fields, commit_pattern as string


@dataclass(frozen=True, slots=True)
class Dump:
    materialization: str
    binding: BindingSpec


@dataclass(frozen=True, slots=True)
class Dumped:
    """``rows`` holds ``[key, doc]`` pairs (standard bindings) or docs (delta updates)."""

    rows: tuple[Any, ...] = ()  # a pair or a document: the driver's JSON
    delta_updates: bool = False


@dataclass(frozen=True, slots=True)
class ListCheckpoints:
    materialization: str


@dataclass(frozen=True, slots=True)
class CheckpointsListed:
    """Rows as ``{"key_begin", "key_end", "fence", "runtime_checkpoint"}``."""

    rows: tuple[JsonObject, ...] = ()


@dataclass(frozen=True, slots=True)
class ListIdentities:
    """Ask for the view-identity record kept with each binding's resource (``Driver.identities``)."""

    materialization: str
    bindings: tuple[BindingSpec, ...] = ()


@dataclass(frozen=True, slots=True)
class IdentitiesListed:
    """One record per binding, in binding order: the object ``apply``'s ``identities`` gave for it
    (plus ``resolved``), or null where the resource keeps none."""

    records: tuple[Optional[JsonObject], ...] = ()


@dataclass(frozen=True, slots=True)
class CoordinatorAcknowledge:
    materialization: str
    state: Any
    runtime_checkpoint: JsonObject
    bindings: tuple[BindingSpec, ...] = ()


@dataclass(frozen=True, slots=True)
class CoordinatorAcknowledged:
    pass


@dataclass(frozen=True, slots=True)
class Error:
    """A failure reply. ``type`` names a :mod:`tidemark.errors` class (e.g. ``FencedOff``)."""

    type: str
    message: str


# ------------------------------------------------------------------ field codecs


def _keys_out(keys: Iterable[Key]) -> list[list[Any]]:
    return [list(k) for k in keys]


def _keys_in(keys: Iterable[Iterable[Any]]) -> tuple[Key, ...]:
    return tuple(tuple(k) for k in keys)


def _range_out(r: Range) -> dict[str, int]:
    return {"key_begin": r.key_begin, "key_end": r.key_end}


def _range_in(d: JsonObject) -> Range:
    return Range(int(d["key_begin"]), int(d["key_end"]))


def _update_out(u: Optional[StateUpdate]) -> Optional[JsonObject]:
    return None if u is None else {"updated": u.updated, "merge_patch": u.merge_patch}


def _update_in(d: Optional[JsonObject]) -> Optional[StateUpdate]:
    return None if d is None else StateUpdate(d.get("updated"), bool(d.get("merge_patch", True)))


def _field_out(f: Field) -> JsonObject:
    out: JsonObject = {
        "name": f.name,
        "pointer": f.pointer,
        "type": f.type,
        "is_key": f.is_key,
        "nullable": f.nullable,
        "format": f.format,
    }
    if f.scale is not None:
        out["scale"] = f.scale
    return out


def _field_in(d: JsonObject) -> Field:
    scale = d.get("scale")
    return Field(
        d["name"],
        d["pointer"],
        d["type"],
        bool(d.get("is_key", False)),
        bool(d.get("nullable", True)),
        d.get("format"),
        scale if isinstance(scale, int) and not isinstance(scale, bool) else None,
    )


def binding_out(b: BindingSpec) -> JsonObject:
    return {
        "resource": b.resource,
        "collection": b.collection,
        "key": list(b.key),
        "fields": [_field_out(f) for f in b.fields],
        "schema": b.schema,
        "delta_updates": b.delta_updates,
    }


def binding_in(d: JsonObject) -> BindingSpec:
    return BindingSpec(
        d["resource"],
        d["collection"],
        tuple(d["key"]),
        tuple(_field_in(f) for f in d["fields"]),
        d.get("schema") or {},
        bool(d.get("delta_updates", False)),
    )


def _bindings_out(bs: Iterable[BindingSpec]) -> list[JsonObject]:
    return [binding_out(b) for b in bs]


def _bindings_in(ds: Optional[Iterable[JsonObject]]) -> tuple[BindingSpec, ...]:
    return tuple(binding_in(d) for d in ds or ())


def _vb_out(v: ValidatedBinding) -> JsonObject:
    return {"resource_path": list(v.resource_path), "delta_updates": v.delta_updates, "constraints": v.constraints}


def _vb_in(d: JsonObject) -> ValidatedBinding:
    return ValidatedBinding(tuple(d["resource_path"]), bool(d.get("delta_updates", False)), d.get("constraints") or {})


def _tuple(x: Iterable[Any]) -> tuple[Any, ...]:
    return tuple(x)


def _rows_in(x: Iterable[Iterable[Any]]) -> tuple[tuple[Any, ...], ...]:
    return tuple(tuple(r) for r in x)


def _rows_out(x: Iterable[Iterable[Any]]) -> list[list[Any]]:
    return [list(r) for r in x]


def _store_texts_out(msg: StoreTexts) -> JsonObject:
    """A StoreTexts as the ``store`` line it has always been: a Store of no documents (nothing
    exists or is deleted) with ``texts``."""
    nothing = (False,) * len(msg.keys)
    (body,) = to_json(Store(msg.binding, msg.keys, (), (), nothing, nothing)).values()
    return {"store": {**body, "texts": list(msg.texts), "rows": None}}


def _store_texts_in(body: JsonObject) -> StoreTexts:
    """The StoreTexts of a ``store`` body with ``texts``."""
    if body.get("values") or body.get("docs") or any(body.get("exists") or ()) or any(body.get("deletes") or ()):
        raise WireError("a store with texts has no values or docs, and nothing exists or is deleted")
    return StoreTexts(body["binding"], _keys_in(body["keys"]), _tuple(body["texts"]))


# name, class, {field: (to_json, from_json)} — fields not listed pass through unchanged.
Codec = tuple[Callable[[Any], Any], Callable[[Any], Any]]  # a field's value <-> its JSON
_SPECS: list[tuple[str, type, dict[str, Codec]]] = [
    ("spec", Spec, {}),
    ("spec_response", SpecResponse, {}),
    ("validate", Validate, {"bindings": (_bindings_out, _bindings_in)}),
    (
        "validated",
        Validated,
        {"bindings": (lambda bs: [_vb_out(b) for b in bs], lambda ds: tuple(_vb_in(d) for d in ds))},
    ),
    ("apply", Apply, {"bindings": (_bindings_out, _bindings_in), "identities": (list, _tuple)}),
    ("applied", Applied, {"created": (_rows_out, _rows_in)}),
    ("open", Open, {"range": (_range_out, _range_in), "bindings": (_bindings_out, _bindings_in)}),
    ("opened", Opened, {}),
    ("acknowledge", Acknowledge, {}),
    ("acknowledged", Acknowledged, {"state": (_update_out, _update_in)}),
    ("load", Load, {"keys": (_keys_out, _keys_in)}),
    ("loaded", Loaded, {"keys": (_keys_out, _keys_in), "docs": (list, _tuple)}),
    ("flush", Flush, {}),
    ("flushed", Flushed, {"state": (_update_out, _update_in)}),
    (
        "store",
        Store,
        {
            "keys": (_keys_out, _keys_in),
            "values": (_rows_out, _rows_in),
            "docs": (list, _tuple),
            "exists": (list, _tuple),
            "deletes": (list, _tuple),
        },
    ),
    ("quarantine", Quarantine, {"rows": (list, _tuple)}),
    ("start_commit", StartCommit, {}),
    ("started_commit", StartedCommit, {"state": (_update_out, _update_in)}),
    ("describe", Describe, {}),
    ("described", Described, {}),
    ("dump", Dump, {"binding": (binding_out, binding_in)}),
    ("dumped", Dumped, {"rows": (list, _tuple)}),
    ("list_checkpoints", ListCheckpoints, {}),
    ("checkpoints_listed", CheckpointsListed, {"rows": (list, _tuple)}),
    ("list_identities", ListIdentities, {"bindings": (_bindings_out, _bindings_in)}),
    ("identities_listed", IdentitiesListed, {"records": (list, _tuple)}),
    ("coordinator_acknowledge", CoordinatorAcknowledge, {"bindings": (_bindings_out, _bindings_in)}),
    ("coordinator_acknowledged", CoordinatorAcknowledged, {}),
    ("error", Error, {}),
]
_BY_CLASS = {cls: (name, codecs) for name, cls, codecs in _SPECS}
#: each class is a dataclass (its fields are the message's)
_BY_NAME: dict[str, tuple[Any, dict[str, Codec]]] = {name: (cls, codecs) for name, cls, codecs in _SPECS}

MESSAGE_NAMES = tuple(name for name, _, _ in _SPECS)


def to_json(msg: Any) -> JsonObject:
    """The wire object of a message: ``{"name": {fields...}}``."""
    if isinstance(msg, StoreTexts):
        return _store_texts_out(msg)
    try:
        name, codecs = _BY_CLASS[type(msg)]
    except KeyError:
        raise WireError(f"{type(msg).__name__} has no wire form") from None
    body: JsonObject = {}
    for f in msg.__dataclass_fields__:
        value = getattr(msg, f)
        codec = codecs.get(f)
        body[f] = codec[0](value) if codec else value
    return {name: body}


def from_json(obj: Any) -> Any:
    """The message of a wire object."""
    if not isinstance(obj, dict) or len(obj) != 1:
        raise WireError(f"a wire message is an object with exactly one field, got {str(obj)[:200]}")
    ((name, body),) = obj.items()
    try:
        cls, codecs = _BY_NAME[name]
    except KeyError:
        raise WireError(f"unknown wire message {name!r} (known: {', '.join(MESSAGE_NAMES)})") from None
    if body is None:
        body = {}
    if not isinstance(body, dict):
        raise WireError(f"{name}: the message body must be an object")
    try:
        if name == "store" and body.get("texts"):
            return _store_texts_in(body)
        kwargs = {}
        for f in cls.__dataclass_fields__:
            if f in body:
                codec = codecs.get(f)
                kwargs[f] = codec[1](body[f]) if codec else body[f]
        return cls(**kwargs)
    except (TypeError, ValueError, KeyError, AttributeError) as exc:
        detail = f"missing field {exc}" if isinstance(exc, KeyError) else str(exc)
        raise WireError(f"{name}: {detail}") from exc


def encode(msg: Any) -> str:
    """One JSON line (without the newline)."""
    return json.dumps(to_json(msg), separators=(",", ":"), ensure_ascii=True, allow_nan=False)


def decode(line: str | bytes) -> Any:
    """The message of one JSON line."""
    try:
        obj = json.loads(line)
    except ValueError as exc:
        text = line if isinstance(line, str) else line.decode("utf-8", "replace")
        raise WireError(f"not a JSON line: {text[:200]!r}") from exc
    return from_json(obj)


__all__ = [
    "encode",
    "decode",
    "to_json",
    "from_json",
    "binding_in",
    "binding_out",
    "WireError",
    "Describe",
    "Described",
    "Dump",
    "Dumped",
    "ListCheckpoints",
    "CheckpointsListed",
    "CoordinatorAcknowledge",
    "CoordinatorAcknowledged",
    "Error",
    "MESSAGE_NAMES",
]
