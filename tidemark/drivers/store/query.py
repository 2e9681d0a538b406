"""Queries of a ``store`` view from any process: ``tidemark.open_view`` and ``tidemark query``.

::

    import tidemark
    with tidemark.open_view("spec.yaml", "customers") as view:   # read-committed
        view.get("c0001")              # the document, or None
        for key, doc in view.scan():   # every document, in key order
            ...
        view.batch                     # the batch the view shows

``NAME`` is the binding's resource name (``MATERIALIZATION/NAME`` when several store
materializations use it; a materialization's own name when it has one binding).  Nothing
here imports Spark.  For a delta-updates binding ``get`` returns the key's rows (in append
order) and ``scan`` yields one ``(key, row)`` per row.
"""

from __future__ import annotations

import os
from typing import Any, Iterator, Sequence

from tidemark.drivers.store.naming import binding_id, resource_name, split_key
from tidemark.errors import DriverError, SpecError
from tidemark.jsontext import loads
from tidemark.protocol.messages import BindingSpec
from tidemark.store import Isolation, tidemark_key


def _load_spec(spec: Any):
    if not isinstance(spec, (str, os.PathLike)):
        return spec  # a parsed spec
    from tidemark.spec import load_spec

    return load_spec(spec)


def _as_key(key: Any) -> tuple:
    return tuple(key) if isinstance(key, (list, tuple)) else (key,)


def key_order(key: Sequence) -> tuple:
    """Natural order of keys (booleans, then integers, then strings per component)."""
    return tuple((0, v) if isinstance(v, bool) else (1, v) if isinstance(v, int) else (2, str(v)) for v in key)


def find_view(spec, name: str):
    """``(materialization spec, binding spec)`` of the store view ``name``."""
    found, names = [], []
    for mat in spec.materializations.values():
        if mat.driver_name != "store":
            continue
        for b in mat.bindings:
            coll = spec.collections[b.source]
            bs = BindingSpec(dict(b.resource), coll.name, tuple(coll.key), (), dict(coll.schema), bool(b.delta_updates))
            rname = resource_name(bs)
            names.append(f"{mat.name}/{rname}")
            if name in (rname, f"{mat.name}/{rname}") or (name == mat.name and len(mat.bindings) == 1):
                found.append((mat, bs))
    if len(found) == 1:
        return found[0]
    if not found:
        raise SpecError(f"no store view {name!r} in the spec (store views: {', '.join(names) or 'none'})")
    raise SpecError(
        f"store view {name!r} is ambiguous; name one of {', '.join(f'{m.name}/{resource_name(b)}' for m, b in found)}"
    )


class View:
    """One binding of a store materialization, as a consistent snapshot (see
    :class:`tidemark.drivers.store.view.StoreView` for the isolation levels)."""

    def __init__(
        self,
        driver,
        materialization: str,
        binding: BindingSpec,
        isolation: Isolation | str = Isolation.READ_COMMITTED,
        timeout: float = 30.0,
    ):
        self.driver, self.materialization, self.binding = driver, materialization, binding
        self.name = resource_name(binding)
        self.id = binding_id(self.name)
        self.delta = bool(binding.delta_updates)
        self.key_size = len(binding.key)
        cfg = driver.store_config(materialization)
        if not os.path.isdir(cfg.path) and not cfg.changelog:
            raise DriverError(
                f"store view {self.name!r}: no store at {cfg.path} (has materialization "
                f"{materialization!r} run on this machine? is `path` right?)"
            )
        self._view = driver.view(materialization, isolation, timeout)

    # ------------------------------------------------------------------ state
    @property
    def isolation(self) -> Isolation:
        return self._view.isolation

    @property
    def batch(self) -> int:
        return self._view.batch

    @property
    def batches(self) -> dict[str, int]:
        return self._view.batches

    def refresh(self) -> "View":
        self._view.refresh()
        return self

    # ------------------------------------------------------------------ reads
    def _check_key(self, key: tuple, what: str, partial: bool = False) -> tuple:
        if (len(key) > self.key_size) if partial else (len(key) != self.key_size):
            raise ValueError(
                f"view {self.name!r} has keys of {self.key_size} component(s) ({list(self.binding.key)}); "
                f"the {what} {list(key)} has {len(key)}"
            )
        return key

    def get_raw(self, key: Any) -> Any:
        key = self._check_key(_as_key(key), "key")
        skey = tidemark_key(key, self.id)
        if self.delta:
            return [v for _, v in self._view.prefix(skey)]
        return self._view.get(skey)

    def get(self, key: Any) -> Any:
        """The document of ``key`` (a tuple, or the value of a one-component key), or None;
        for a delta-updates view, the list of its rows."""
        raw = self.get_raw(key)
        if self.delta:
            return [loads(v) for v in raw]
        return None if raw is None else loads(raw)

    def scan_raw(self, prefix: Any = None, ordered: bool = True) -> Iterator[tuple[tuple, bytes]]:
        """``(key, document JSON bytes)``; see :meth:`scan`."""
        pre = None if prefix is None else self._check_key(_as_key(prefix), "prefix", partial=True)
        if pre is not None and len(pre) == self.key_size:  # a whole key: one seek
            hits = self.get_raw(pre)
            for v in hits if self.delta else [] if hits is None else [hits]:
                yield pre, v
            return
        bid = self.id.to_bytes(2, "big")
        matches = []
        for k, v in self._view.items():
            if k[4:6] != bid:
                continue
            key = tuple(loads(split_key(k, self.delta)[1]))
            if pre is not None and key[: len(pre)] != pre:
                continue
            if not ordered:
                yield key, v
            else:
                matches.append((key_order(key), k, key, v))
        if ordered:
            matches.sort(key=lambda m: (m[0], m[1]))
            for _, _, key, v in matches:
                yield key, v

    def scan(self, prefix: Any = None, ordered: bool = True) -> Iterator[tuple[tuple, Any]]:
        """``(key, document)`` of every key starting with the components ``prefix`` (all
        keys when None), in key order — sorted in memory; ``ordered=False`` streams them in
        store order (by key hash) instead.  A delta-updates view yields every row, a key's
        rows in append order."""
        for key, v in self.scan_raw(prefix, ordered):
            yield key, loads(v)

    def quarantined(self) -> list[dict]:
        return self.driver.quarantined(self.materialization)

    def close(self) -> None:
        self._view.close()

    def __enter__(self) -> "View":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"View({self.materialization}/{self.name}, {self.isolation.value}, batch {self.batch})"


def open_view(spec: Any, name: str, isolation: Isolation | str = "read-committed", timeout: float = 30.0) -> View:
    """Open the store view ``name`` of ``spec`` (a spec file, or a loaded spec) for reading."""
    from tidemark.drivers.store.driver import StoreDriver

    parsed = _load_spec(spec)
    mat, binding = find_view(parsed, name)
    try:
        isolation = Isolation(isolation)
    except ValueError:
        raise SpecError(f"isolation must be read-committed or read-uncommitted, got {isolation!r}") from None
    return View(StoreDriver(mat.driver_config), mat.name, binding, isolation, timeout)


__all__ = ["View", "open_view", "find_view", "key_order"]
