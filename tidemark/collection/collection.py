"""A collection: key, schema, validation, reduction and projection of its documents.

Deletions.  A document whose schema location says ``reduce: {delete: true}`` (usually
under a conditional on ``_meta/op``) is a *deletion*: it replaces whatever came before
it, and a key whose reduced document is a deletion is hard-deleted at the endpoint.  A
non-deletion that follows a deletion starts afresh; to keep reductions associative (and
a batch's combined document correct when reduced into the endpoint's document), such a
document carries the *reset* marker ``{"_meta": {"reset": true}}``: reducing anything
with a reset document on the right-hand side drops the left-hand side, and the result
keeps the marker.  Formally each document is a pair ``(reset, doc)`` and
``(r1, d1) ⊕ (r2, d2) = (r1 or r2, d2 if r2 else d1 ⊕ d2)``.

Pure Python (no Spark): a :class:`Collection` is pickled to executors.
"""

from __future__ import annotations

from typing import Any, Iterable, Optional

from tidemark.collection import keys as _keys
from tidemark.collection.decimals import scale_of
from tidemark.collection.reduce import Reducer
from tidemark.collection.schema import SchemaIndex, pointer_tokens, types_of
from tidemark.collection.validate import DEFAULT_MAX_DOCUMENT_BYTES, Validator, parse_document
from tidemark.protocol.messages import BindingSpec, Field

META = "_meta"
RESET = "reset"
SCALAR_TYPES = ("string", "integer", "number", "boolean")


def is_reset(doc: Any) -> bool:
    return isinstance(doc, dict) and isinstance(doc.get(META), dict) and doc[META].get(RESET) is True


def strip_reset(doc: Any) -> Any:
    meta = {k: v for k, v in doc[META].items() if k != RESET}
    out = dict(doc)
    if meta:
        out[META] = meta
    else:
        del out[META]
    return out


def mark_reset(doc: Any) -> Any:
    if not isinstance(doc, dict):
        return doc
    meta = doc.get(META)
    out = dict(doc)
    out[META] = {**meta, RESET: True} if isinstance(meta, dict) else {RESET: True}
    return out


class Collection:
    """The runtime view of one collection spec (see :mod:`tidemark.spec`)."""

    def __init__(self, spec, *, max_document_bytes: int = DEFAULT_MAX_DOCUMENT_BYTES):
        self.spec = spec
        self.name: str = spec.name
        self.key: tuple[str, ...] = tuple(spec.key)
        self.schema: dict = spec.schema
        self.max_document_bytes = int(max_document_bytes)
        self._init()

    def _init(self) -> None:
        self.index = SchemaIndex(self.schema)
        self.reducer = Reducer(self.index)
        from tidemark.collection.fast import fast_reducer

        self._reduce = fast_reducer(self, self.reducer) or self.reducer.reduce
        self.validator = Validator(self.schema)
        self._fields: Optional[tuple[Field, ...]] = None
        self._value_names: Any = None  # see values(): names, or False
        self._has_deletions = '"delete"' in _dumps(self.schema)

    def __getstate__(self):
        return {"spec": self.spec, "max_document_bytes": self.max_document_bytes}

    def __setstate__(self, state):
        self.spec = state["spec"]
        self.name = self.spec.name
        self.key = tuple(self.spec.key)
        self.schema = self.spec.schema
        self.max_document_bytes = state["max_document_bytes"]
        self._init()

    def __repr__(self) -> str:
        return f"Collection({self.name!r}, key={list(self.key)})"

    # ------------------------------------------------------------------ documents
    def parse(self, line: str, location: str) -> dict:
        return parse_document(line, location, self.max_document_bytes)

    def validate(self, doc: Any) -> list[str]:
        return self.validator.violations(doc)

    def extract_key(self, doc: Any, location: Optional[str] = None) -> tuple:
        return _keys.extract_key(doc, self.key, location)

    # ------------------------------------------------------------------ reductions
    def is_deletion(self, doc: Any) -> bool:
        if not self._has_deletions or is_reset(doc):
            return False
        return self.index.annotation(self.index.root_applicable(doc)).delete

    def reduce(self, left: Any, right: Any) -> Any:
        """Reduce ``right`` (the later document) into ``left``."""
        if (
            not self._has_deletions
            and left.__class__ is dict
            and right.__class__ is dict
            and META not in left
            and META not in right
        ):
            return self._reduce(left, right)  # neither side is a reset: the plain reduction
        if self._has_deletions and self.is_deletion(right):
            return right
        if is_reset(right):
            return right
        left_reset = is_reset(left)
        if self._has_deletions and not left_reset and self.is_deletion(left):
            return mark_reset(right)
        if left_reset:
            return mark_reset(self._reduce(strip_reset(left), right))
        return self._reduce(left, right)

    def finish(self, doc: Any) -> Any:
        """The document as an endpoint stores it: without the reset marker of a
        delete-then-re-add (the marker matters only while reducing)."""
        return strip_reset(doc) if is_reset(doc) else doc

    def strategies(self) -> tuple[str, ...]:
        """Every reduce strategy the schema declares (the default, lastWriteWins, included)."""
        from tidemark.collection.schema import iter_schemas

        found = {"lastWriteWins"}
        for _path, node in iter_schemas(self.schema):
            red = node.get("reduce")
            if isinstance(red, dict) and isinstance(red.get("strategy"), str):
                found.add(red["strategy"])
        return tuple(sorted(found))

    def order_dependent(self) -> list[str]:
        """The schema's declared locations whose reduced value depends on the source order:
        ``lastWriteWins`` (the default) or ``firstWriteWins`` without ``order:``, and
        ``append``; as ``pointer (strategy)``.  Key properties are equal in a key's documents."""
        keys = {p for p in self.key if p.count("/") == 1}
        out: list[str] = []
        _order_dependent(self.index, self.schema, "", keys, out)
        return out

    def combine(self, docs: Iterable) -> Any:
        it = iter(docs)
        try:
            acc = next(it)
        except StopIteration:
            raise ValueError("combine() of no documents") from None
        for d in it:
            acc = self.reduce(acc, d)
        return acc

    # ------------------------------------------------------------------ projection
    def _schema_at(self, pointer: str) -> Any:
        node: Any = self.schema
        for token in pointer_tokens(pointer):
            node = _deref(self.index, node)
            props = node.get("properties", {}) if isinstance(node, dict) else {}
            if token not in props:
                return None
            node = props[token]
        return _deref(self.index, node)

    def fields(self) -> tuple[Field, ...]:
        if self._fields is not None:
            return self._fields
        out = []
        key_top = set()
        for ptr in self.key:
            tokens = pointer_tokens(ptr)
            if len(tokens) == 1:
                key_top.add(tokens[0])
            sub = self._schema_at(ptr)
            t = [x for x in (types_of(sub) or ("string",)) if x != "null"]
            out.append(
                Field(
                    name=tokens[-1] if tokens else "key",
                    pointer=ptr,
                    type=t[0] if t else "string",
                    is_key=True,
                    nullable=False,
                    format=(sub or {}).get("format"),
                )
            )
        root = _deref(self.index, self.schema)
        required = set(root.get("required", ()))
        for name, sub in (root.get("properties") or {}).items():
            if name in key_top:
                continue
            sub = _deref(self.index, sub)
            ts = types_of(sub)
            if not ts:
                continue
            non_null = [x for x in ts if x != "null"]
            if len(non_null) != 1 or non_null[0] not in SCALAR_TYPES:
                continue
            nullable = "null" in ts or name not in required
            out.append(
                Field(
                    name=name,
                    pointer="/" + name.replace("~", "~0").replace("/", "~1"),
                    type=non_null[0],
                    is_key=False,
                    nullable=nullable,
                    format=sub.get("format"),
                    scale=scale_of(sub.get("multipleOf")) if non_null[0] == "number" else None,
                )
            )
        self._fields = tuple(out)
        return self._fields

    def binding_spec(self, binding) -> BindingSpec:
        return BindingSpec(
            resource=dict(binding.resource),
            collection=self.name,
            key=self.key,
            fields=self.fields(),
            schema=self.schema,
            delta_updates=bool(binding.delta_updates),
        )

    def values(self, doc: Any) -> tuple:
        names = self._value_names
        if names is None:
            # Value fields are top-level properties: ``dict.get`` is ``resolve_pointer`` of
            # a one-token pointer, without parsing the pointer per document.
            tokens = [pointer_tokens(f.pointer) for f in self.fields() if not f.is_key]
            names = self._value_names = tuple(t[0] for t in tokens) if all(len(t) == 1 for t in tokens) else False
        if names is not False and doc.__class__ is dict:
            get = doc.get
            return tuple([get(n) for n in names])
        out = []
        for f in self.fields():
            if f.is_key:
                continue
            v = _keys.resolve_pointer(doc, f.pointer, None)
            out.append(v)
        return tuple(out)


_BY_SOURCE_ORDER = ("lastWriteWins", "firstWriteWins", "append")


def _order_dependent(index: SchemaIndex, node: Any, ptr: str, keys: set, out: list) -> None:
    node = _deref(index, node)
    if not isinstance(node, dict) or ptr in keys:
        return
    red = node.get("reduce")
    red = red if isinstance(red, dict) else {}
    strategy = red.get("strategy", "lastWriteWins")
    if strategy in _BY_SOURCE_ORDER:
        if not red.get("order"):
            out.append(f"{ptr or '/'} ({strategy})")
        return
    if strategy != "merge":
        return  # sum, minimize, maximize, set: the same result in any order (up to ties)
    for name, sub in (node.get("properties") or {}).items():
        _order_dependent(index, sub, f"{ptr}/{name.replace('~', '~0').replace('/', '~1')}", keys, out)
    if isinstance(node.get("items"), dict):
        _order_dependent(index, node["items"], f"{ptr}/*", keys, out)


def _deref(index: SchemaIndex, node: Any) -> Any:
    seen = 0
    while isinstance(node, dict) and isinstance(node.get("$ref"), str) and seen < 32:
        node = index.resolve_ref(node["$ref"])
        seen += 1
    return node


def _dumps(obj: Any) -> str:
    import json

    return json.dumps(obj, sort_keys=True, default=str)


def collection_from_spec(spec, name: str) -> Collection:
    """The :class:`Collection` named ``name`` of a :class:`~tidemark.spec.TidemarkSpec`."""
    if name not in spec.collections:
        from tidemark.errors import SpecError

        raise SpecError(f"unknown collection {name!r} (known: {', '.join(sorted(spec.collections))})", file=spec.file)
    max_bytes = DEFAULT_MAX_DOCUMENT_BYTES
    for mat in spec.materializations.values():
        if any(b.source == name for b in mat.bindings):
            max_bytes = mat.max_document_bytes
            break
    return Collection(spec.collections[name], max_document_bytes=max_bytes)


def collections_of(spec, mat) -> list[Collection]:
    """The :class:`Collection` of each binding of materialization ``mat`` of ``spec``, with its document size limit."""
    return [Collection(spec.collections[b.source], max_document_bytes=mat.max_document_bytes) for b in mat.bindings]
