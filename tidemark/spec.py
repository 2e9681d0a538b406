"""The tidemark spec: collections and materializations, typed, frozen and validated once.

::

    collections:
      orders:
        key: [/customer]
        schema: {type: object, required: [customer], reduce: {strategy: merge},
                 properties: {customer: {type: string}, total: {type: number, reduce: {strategy: sum}}}}
        source: {format: json, path: data/orders, options: {maxFilesPerTrigger: 1}}
    materializations:
      customer_view:
        endpoint: {sqlite: {path: views.db}}
        shards: 2                   # or {auto: {min: 1, max: 8, keys_per_shard: 50000}}
        on_invalid: fail            # or quarantine
        max_document_bytes: 16777216
        options: {memory_budget_bytes: 67108864}   # runtime options (tidemark.options)
        bindings:
          - {source: orders, resource: {table: customers}, delta_updates: false}
    checkpoint: .tidemark/checkpoints

:func:`load_spec` / :func:`parse_spec` check everything once and build the frozen
dataclasses below.  Relative paths mean the spec file's folder: a source's ``path`` is
resolved here; an endpoint's config is resolved by its driver
(:meth:`tidemark.drivers.base.Driver.resolve_config`, called through the registry), once,
into :attr:`MaterializationSpec.driver_config`.

Every error is a :class:`~tidemark.errors.SpecError` naming the file and the path inside
the spec (``materializations.customer_view.bindings[0].source``).
"""

from __future__ import annotations

import hashlib
import json
import os
from dataclasses import dataclass, field, replace
from typing import Any, Callable, Mapping, Optional, TypeVar

from tidemark.collection.keys import KEY_TYPES
from tidemark.collection.schema import (
    SchemaIndex,
    pointer_tokens,
    types_of,
)
from tidemark.collection.validate import DEFAULT_MAX_DOCUMENT_BYTES
from tidemark.drivers.registry import DRIVERS, endpoint_of, resolve_config
from tidemark.errors import SpecError, SpecErrors
from tidemark.options import RuntimeOptions
from tidemark.runtime.rescale import AutoShards, parse_shards
from tidemark.spec_schema import SchemaChecks, type_name

T = TypeVar("T")

ON_INVALID = ("fail", "quarantine")
DEFAULT_CHECKPOINT = ".tidemark/checkpoints"


#: the formats of a spec's file sources (other sources: ``tidemark.materialize(df, ...)``)
FILE_FORMATS = ("json", "jsonl", "ndjson", "text")


@dataclass(frozen=True)
class SourceSpec:
    format: str = "json"
    path: Optional[str] = None  # resolved against the spec file's directory
    options: dict = field(default_factory=dict)
    select: tuple = ()  # Spark SQL expressions over the documents (tidemark.spark.select)
    log: Optional[str] = None  # "kafka" | "nats": a log source (tidemark.sources), configured by log_config
    log_config: dict = field(default_factory=dict)


@dataclass(frozen=True)
class CollectionSpec:
    name: str
    key: tuple[str, ...]
    schema: dict
    source: Optional[SourceSpec] = None


@dataclass(frozen=True)
class BindingConfig:
    source: str
    resource: dict
    delta_updates: bool = False


@dataclass(frozen=True)
class MaterializationSpec:
    name: str
    endpoint: dict  # as written: {driver: config}
    shards: int = 1
    bindings: tuple[BindingConfig, ...] = ()
    on_invalid: str = "fail"
    max_document_bytes: int = DEFAULT_MAX_DOCUMENT_BYTES
    base_dir: str = "."  # the spec file's directory: relative driver paths resolve against it
    options: RuntimeOptions = field(default_factory=RuntimeOptions)
    #: ``shards: {auto: ...}`` (``shards`` is then its ``min``, the first batch's count); None: fixed
    auto_shards: Optional[AutoShards] = None
    #: The endpoint's driver name and its config as the driver resolved it (set once, here).
    driver_name: str = field(init=False)
    driver_config: dict = field(init=False)

    def __post_init__(self):
        name, config = endpoint_of(self.endpoint)
        object.__setattr__(self, "driver_name", name)
        object.__setattr__(self, "driver_config", resolve_config(name, config, os.path.abspath(self.base_dir)))

    def version(self, spec: "TidemarkSpec") -> str:
        """A stable hash of this materialization and its collections' keys and schemas.

        The shard count is not part of it: a layout may change between batches (the
        recovery log records each batch's layout), and the ranges of one batch may be
        committed by runs with different configured counts.  Nor are runtime options."""
        colls = {}
        for b in self.bindings:
            c = spec.collections.get(b.source)
            if c is not None:
                colls[c.name] = {"key": list(c.key), "schema": c.schema}
        body = {
            "name": self.name,
            "endpoint": self.endpoint,
            "on_invalid": self.on_invalid,
            "bindings": [
                {"source": b.source, "resource": b.resource, "delta_updates": b.delta_updates} for b in self.bindings
            ],
            "collections": colls,
        }
        text = json.dumps(body, sort_keys=True, separators=(",", ":"), default=str)
        return hashlib.sha256(text.encode("utf-8")).hexdigest()[:16]


@dataclass(frozen=True)
class TidemarkSpec:
    collections: Mapping[str, CollectionSpec]
    materializations: Mapping[str, MaterializationSpec]
    checkpoint: str = DEFAULT_CHECKPOINT
    file: Optional[str] = None
    base_dir: str = "."

    def checkpoint_location(self, materialization: str) -> str:
        """The checkpoint folder of one materialization (recovery log and Spark's checkpoint)."""
        return os.path.join(resolve_path(self.checkpoint, self.base_dir), materialization)


def resolve_path(path: str, base: str) -> str:
    """``path`` (a URI, absolute, or relative to ``base``) as a URI or an absolute path."""
    if "://" in path or os.path.isabs(path):
        return path
    return os.path.abspath(os.path.join(base, path))


# ----------------------------------------------------------------------------- loading


def load_spec(path) -> TidemarkSpec:
    """Read a YAML or JSON spec file and validate it.  A spec already read is returned as it
    is: a command reads its spec file once, and every part of it uses that one reading (an
    edit while it runs takes effect at the next command)."""
    if isinstance(path, TidemarkSpec):
        return path
    path = os.fspath(path)
    try:
        with open(path, encoding="utf-8") as f:
            text = f.read()
    except OSError as exc:
        raise SpecError(f"cannot read the spec: {exc.strerror or exc}", file=path) from exc
    if path.endswith(".json"):
        try:
            obj = json.loads(text)
        except json.JSONDecodeError as exc:
            raise SpecError(f"invalid JSON at line {exc.lineno} column {exc.colno}: {exc.msg}", file=path) from None
    else:
        import yaml

        try:
            obj = yaml.safe_load(text)
        except yaml.YAMLError as exc:
            mark = getattr(exc, "problem_mark", None)
            where = f" at line {mark.line + 1} column {mark.column + 1}" if mark else ""
            problem = getattr(exc, "problem", None) or str(exc)
            raise SpecError(f"invalid YAML{where}: {problem}", file=path) from None
    return parse_spec(obj, file=path, base_dir=os.path.dirname(os.path.abspath(path)))


def parse_spec(obj: Any, *, file: Optional[str] = None, base_dir: str = ".") -> TidemarkSpec:
    """Validate a spec given as a mapping (e.g. parsed YAML) and build a :class:`TidemarkSpec`."""
    return _Parser(file, base_dir).spec(obj)


class _Parser:
    """Checks a spec part by part: each collection, each materialization, each binding, and
    within them each field that does not depend on another, so that every error the check
    can find is reported, each with its place (:class:`~tidemark.errors.SpecErrors`)."""

    def __init__(self, file: Optional[str], base_dir: str):
        self.file = file
        self.base_dir = base_dir
        self.errors: list[SpecError] = []

    def fail(self, path: str, message: str) -> SpecError:
        return SpecError(message, file=self.file, path=path or None)

    def attempt(self, fn: Callable[..., T], *args: Any) -> Optional[T]:
        """``fn(*args)``, or None with its spec errors kept for the report."""
        try:
            return fn(*args)
        except SpecError as exc:
            self.errors.append(exc)
            return None

    def mapping(self, obj: Any, path: str, allowed: tuple[str, ...], required: tuple[str, ...] = ()) -> dict:
        if not isinstance(obj, dict):
            raise self.fail(path, f"must be a mapping, got {type_name(obj)}")
        found = [
            self.fail(_join(path, str(k)), f"unknown field {str(k)!r} (allowed: {', '.join(allowed)})")
            for k in obj
            if k not in allowed
        ]
        found += [self.fail(path, f"missing required field {k!r}") for k in required if k not in obj]
        if found:
            raise SpecErrors.of(found)
        return obj

    # ------------------------------------------------------------------ top level
    def spec(self, obj: Any) -> TidemarkSpec:
        if obj is None:
            raise self.fail("", "the spec is empty")
        self.mapping(obj, "", ("collections", "materializations", "checkpoint"), ("collections",))
        raw_colls = obj.get("collections") or {}
        if not isinstance(raw_colls, dict):
            raise self.fail("collections", f"must be a mapping of name to collection, got {type_name(raw_colls)}")
        parsed = {str(n): self.attempt(self.collection, str(n), c, f"collections.{n}") for n, c in raw_colls.items()}
        raw_mats = obj.get("materializations") or {}
        if not isinstance(raw_mats, dict):
            self.errors.append(
                self.fail(
                    "materializations", f"must be a mapping of name to materialization, got {type_name(raw_mats)}"
                )
            )
            raw_mats = {}
        # a binding of a collection with errors of its own is checked as far as it goes
        known = {n: c for n, c in parsed.items()}
        mats = {
            str(n): self.attempt(self.materialization, str(n), m, f"materializations.{n}", known)
            for n, m in raw_mats.items()
        }
        checkpoint = obj.get("checkpoint", DEFAULT_CHECKPOINT)
        if not isinstance(checkpoint, str) or not checkpoint:
            self.errors.append(self.fail("checkpoint", "must be a non-empty path"))
        if self.errors:
            raise SpecErrors.of(self.errors)
        collections = {n: c for n, c in parsed.items() if c is not None}
        return TidemarkSpec(
            collections, {n: m for n, m in mats.items() if m is not None}, checkpoint, self.file, self.base_dir
        )

    # ------------------------------------------------------------------ collections
    def collection(self, name: str, obj: Any, path: str) -> CollectionSpec:
        self.mapping(obj, path, ("key", "schema", "source"), ("key", "schema"))
        errors: list[SpecError] = []
        schema = obj["schema"]
        source = obj.get("source")
        if not isinstance(schema, dict):
            errors.append(self.fail(f"{path}.schema", f"must be a JSON Schema object, got {type_name(schema)}"))
        else:
            _part(errors, self.check_schema, schema, f"{path}.schema")
        key = obj["key"]
        if isinstance(key, str):
            key = [key]
        if not isinstance(key, list) or not key:
            errors.append(self.fail(f"{path}.key", "must be a non-empty list of JSON pointers, e.g. [/customer]"))
        elif not errors:  # keys are looked up in a schema that passed its own check
            for i, ptr in enumerate(key):
                _part(errors, self.check_key, schema, ptr, f"{path}.key[{i}]")
        source = None
        if obj.get("source") is not None:
            source = _part(errors, self.source, obj["source"], f"{path}.source")
        if errors:
            raise SpecErrors.of(errors)
        return CollectionSpec(name, tuple(key), schema, source)

    def source(self, obj: Any, path: str) -> SourceSpec:
        from tidemark.sources import KINDS, log_settings

        self.mapping(obj, path, ("format", "path", "options", "select", *KINDS))
        logs = [k for k in KINDS if k in obj]
        if logs:
            if len(logs) > 1 or obj.get("path") is not None or obj.get("format") is not None:
                raise self.fail(path, f"a source reads files (path:) or one log ({' or '.join(KINDS)}:), not both")
            kind = logs[0]
            config = obj[kind]
            if not isinstance(config, dict):
                raise self.fail(f"{path}.{kind}", "must be a mapping of the source's settings")
            try:
                log_settings(kind, config, f"{path}.{kind}")
            except SpecError as exc:
                raise self.fail(f"{path}.{kind}", str(exc)) from None
            obj = {k: v for k, v in obj.items() if k != kind}
            return replace(self.source(obj, path), log=kind, log_config=dict(config))
        fmt = obj.get("format", "json")
        if not isinstance(fmt, str) or not fmt:
            raise self.fail(f"{path}.format", "must be a Spark source format name, e.g. json")
        if fmt.lower() not in FILE_FORMATS:
            import difflib

            near = difflib.get_close_matches(fmt.lower(), FILE_FORMATS, n=1)
            raise self.fail(
                f"{path}.format",
                f"format {fmt!r} is not one the spec runner reads "
                f"({', '.join(FILE_FORMATS)}{'; did you mean ' + repr(near[0]) + '?' if near else ''}); "
                "read other sources yourself and call tidemark.materialize(df, ...)",
            )
        src_path = obj.get("path")
        if src_path is not None:
            if not isinstance(src_path, str) or not src_path:
                raise self.fail(f"{path}.path", "must be a non-empty path")
            if "://" not in src_path and not os.path.isabs(src_path):
                src_path = os.path.normpath(os.path.join(os.path.abspath(self.base_dir), src_path))
        options = obj.get("options") or {}
        if not isinstance(options, dict):
            raise self.fail(f"{path}.options", "must be a mapping of Spark source options")
        select = obj.get("select") or ()
        if isinstance(select, str):
            select = [select]
        if not isinstance(select, (list, tuple)) or not all(isinstance(e, str) and e.strip() for e in select):
            raise self.fail(
                f"{path}.select",
                'must be a list of Spark SQL expressions over the documents, e.g. ["*", "1 AS n"]',
            )
        return SourceSpec(fmt, src_path, dict(options), tuple(select))

    def check_schema(self, schema: dict, path: str) -> None:
        """The schema as JSON Schema, and each ``reduce`` in it: every error, each with its place."""
        errors = SchemaChecks(self.fail, schema, path).run()
        if errors:
            raise SpecErrors.of(errors)

    def check_key(self, schema: dict, ptr: Any, path: str) -> None:
        if not isinstance(ptr, str) or not ptr.startswith("/") or ptr == "/":
            raise self.fail(path, f"must be a JSON pointer to a property, e.g. /id, got {ptr!r}")
        index = SchemaIndex(schema)
        node: Any = schema
        for token in pointer_tokens(ptr):
            node = _deref(index, node)
            props: dict[str, Any] = {}
            for s in [node, *(node.get("allOf") or [])] if isinstance(node, dict) else []:
                s = _deref(index, s)
                if isinstance(s, dict):
                    props.update(s.get("properties") or {})
            if token not in props:
                raise self.fail(
                    path, f"key {ptr} is not a property of the schema (known: {', '.join(sorted(props)) or 'none'})"
                )
            node = props[token]
        node = _deref(index, node)
        types = types_of(node)
        if types is None:
            raise self.fail(path, f"key {ptr} must declare a type (one of {', '.join(KEY_TYPES)})")
        bad = [t for t in types if t not in KEY_TYPES]
        if bad:
            raise self.fail(path, f"key {ptr} has type {'/'.join(types)}; keys must be one of {', '.join(KEY_TYPES)}")

    # ------------------------------------------------------------------ materializations
    def materialization(self, name: str, obj: Any, path: str, collections: dict) -> MaterializationSpec:
        self.mapping(
            obj,
            path,
            ("endpoint", "shards", "bindings", "on_invalid", "max_document_bytes", "options"),
            ("endpoint", "bindings"),
        )
        errors: list[SpecError] = []
        endpoint = obj["endpoint"]
        _part(errors, self.check_endpoint, endpoint, f"{path}.endpoint")
        options = _part(
            errors, lambda: RuntimeOptions.from_mapping(obj.get("options"), file=self.file, path=f"{path}.options")
        )
        shards_of = _part(errors, parse_shards, obj.get("shards", 1), f"{path}.shards", self.fail)
        on_invalid = obj.get("on_invalid", "fail")
        if on_invalid not in ON_INVALID:
            errors.append(
                self.fail(f"{path}.on_invalid", f"must be one of {', '.join(ON_INVALID)}, got {on_invalid!r}")
            )
        max_bytes = obj.get("max_document_bytes", DEFAULT_MAX_DOCUMENT_BYTES)
        if not isinstance(max_bytes, int) or isinstance(max_bytes, bool) or max_bytes < 1:
            errors.append(self.fail(f"{path}.max_document_bytes", f"must be a positive integer, got {max_bytes!r}"))
        raw = obj["bindings"]
        if not isinstance(raw, list) or not raw:
            errors.append(self.fail(f"{path}.bindings", "must be a non-empty list of bindings"))
            raw = []
        bindings = []
        seen: dict[str, int] = {}
        for i, b in enumerate(raw):
            binding = _part(errors, self.binding, b, f"{path}.bindings[{i}]", collections, seen, i)
            if binding is not None:
                bindings.append(binding)
        if errors:
            raise SpecErrors.of(errors)
        assert options is not None and shards_of is not None
        shards, auto_shards = shards_of
        try:
            return MaterializationSpec(
                name,
                endpoint,
                shards,
                tuple(bindings),
                on_invalid,
                max_bytes,
                os.path.abspath(self.base_dir),
                options,
                auto_shards,
            )
        except SpecError as exc:  # the driver's own config resolution (or its library missing)
            raise self.fail(f"{path}.endpoint.{_driver_of(endpoint)}", str(exc)) from None

    def binding(self, b: Any, bpath: str, collections: dict, seen: dict[str, int], i: int) -> BindingConfig:
        self.mapping(b, bpath, ("source", "resource", "delta_updates"), ("source", "resource"))
        errors: list[SpecError] = []
        source = b["source"]
        if source not in collections:
            known = ", ".join(sorted(collections)) or "none"
            errors.append(self.fail(f"{bpath}.source", f"unknown collection {source!r} (known: {known})"))
        resource = b["resource"]
        if not isinstance(resource, dict) or not resource:
            errors.append(self.fail(f"{bpath}.resource", "must be a non-empty mapping, e.g. {table: customers}"))
        else:
            ident = json.dumps(resource, sort_keys=True, default=str)
            if ident in seen:
                errors.append(
                    self.fail(f"{bpath}.resource", f"duplicate resource {resource!r} (also bindings[{seen[ident]}])")
                )
            seen.setdefault(ident, i)
        delta = b.get("delta_updates", False)
        if not isinstance(delta, bool):
            errors.append(self.fail(f"{bpath}.delta_updates", "must be true or false"))
        if errors:
            raise SpecErrors.of(errors)
        return BindingConfig(str(source), dict(resource), delta)

    def check_endpoint(self, endpoint: Any, path: str) -> None:
        try:
            name, _config = endpoint_of(endpoint)
        except SpecError as exc:
            raise self.fail(path, str(exc)) from None
        if name not in DRIVERS and not name.startswith("command:") and name != "command":
            known = ", ".join(sorted(DRIVERS) + ["command:PROGRAM"])
            raise self.fail(f"{path}.{name}", f"unknown endpoint driver {name!r} (known: {known})")


def _part(errors: list[SpecError], fn: Callable[..., T], *args: Any) -> Optional[T]:
    """``fn(*args)``, or None with its spec error added to ``errors`` (a part of the spec
    whose check does not depend on another's)."""
    try:
        return fn(*args)
    except SpecError as exc:
        errors.append(exc)
        return None


def _driver_of(endpoint: dict) -> str:
    return str(next(iter(endpoint)))


def _deref(index: SchemaIndex, node: Any) -> Any:
    for _ in range(32):
        if isinstance(node, dict) and isinstance(node.get("$ref"), str):
            node = index.resolve_ref(node["$ref"])
        else:
            break
    return node


def _join(path: str, name: str) -> str:
    return f"{path}.{name}" if path else name


def check_source_readable(spec: "TidemarkSpec", collection: str) -> None:
    """Refuse a collection whose source folder does not exist or cannot be read, naming the
    spec's file and place (``tidemark check``, ``tidemark run`` before Spark starts, and the
    spec runner itself: one function).  URIs and glob patterns are left to Spark."""
    c = spec.collections[collection]
    path = c.source.path if c.source else None
    if not path or "://" in path or any(ch in path for ch in "*?[{"):
        return
    where = f"collections.{collection}.source.path"
    if not os.path.exists(path):
        raise SpecError(
            f"the source folder {path} does not exist (create it, or fix the path; a file source "
            "reads the files put into it)",
            file=spec.file,
            path=where,
        )
    if not os.access(path, os.R_OK | (os.X_OK if os.path.isdir(path) else 0)):
        raise SpecError(f"the source folder {path} cannot be read by this user", file=spec.file, path=where)
