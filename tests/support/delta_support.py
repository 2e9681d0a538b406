"""Helpers for the Delta driver's tests: a driver runtime, the table's live files, and its
rows read back independently of tidemark (its JSON log and DuckDB)."""

from __future__ import annotations

import json
import os
import urllib.parse

import pytest

from tests.support.driver_protocol import MAT, cp, load_all, store_msg
from tidemark.drivers.delta import DeltaDriver
from tidemark.protocol.messages import (
    Acknowledge,
    Apply,
    BindingSpec,
    Flush,
    Load,
    Open,
    Quarantine,
    Range,
    StartCommit,
    Validate,
)
from tidemark.runtime.merge_patch import apply_update

# skips its importers without deltalake, as importing the test module these helpers came from did
pytest.importorskip("deltalake")


def live_files(location) -> list[str]:
    """The Parquet files of a Delta table's latest version, from its JSON log alone."""
    log = os.path.join(location, "_delta_log")
    live: dict[str, None] = {}
    for name in sorted(f for f in os.listdir(log) if f.endswith(".json")):
        with open(os.path.join(log, name), encoding="utf-8") as f:
            for line in f:
                action = json.loads(line)
                if "add" in action:
                    assert not action["add"].get("deletionVector"), "the independent reader has no deletion vectors"
                    live[urllib.parse.unquote(action["add"]["path"])] = None
                elif "remove" in action:
                    live.pop(urllib.parse.unquote(action["remove"]["path"]), None)
    return [os.path.join(location, p) for p in live]


def independent_rows(location, columns) -> list[tuple]:
    import duckdb

    files = live_files(location)
    if not files:
        return []
    cols = ", ".join('"' + c.replace('"', '""') + '"' for c in columns)
    con = duckdb.connect()
    try:
        return con.execute(f"SELECT {cols} FROM read_parquet(?, union_by_name = true)", [files]).fetchall()
    finally:
        con.close()


def independent_configuration(location) -> dict:
    """The table's configuration (properties), from its JSON log alone."""
    log = os.path.join(location, "_delta_log")
    conf: dict = {}
    for name in sorted(f for f in os.listdir(log) if f.endswith(".json")):
        with open(os.path.join(log, name), encoding="utf-8") as f:
            for line in f:
                action = json.loads(line)
                if "metaData" in action:
                    conf = action["metaData"].get("configuration") or {}
    return conf


def independent_view(location, key="customer") -> dict:
    """{key: document} of a standard table (either form), read without delta-rs."""
    import duckdb
    import pyarrow as pa

    from tests.support.helpers import lake_documents

    files = live_files(location)
    if not files:
        return {}
    con = duckdb.connect()
    try:
        rows = con.execute("SELECT * FROM read_parquet(?, union_by_name = true)", [files]).to_arrow_table()
    finally:
        con.close()
    return lake_documents(pa.table(rows), key, independent_configuration(location))


class Runtime:
    """Plays the runtime's commit for one materialization: the recovery log is a list."""

    def __init__(self, driver: DeltaDriver, *bindings: BindingSpec, checkpoint_id="chk-1", mat=MAT):
        self.driver = driver
        self.mat = mat
        self.bindings = tuple(bindings)
        self.state = None
        self.checkpoint_id = checkpoint_id
        self.last: dict | None = None

    def apply(self):
        self.driver.validate(Validate(self.mat, self.driver.config, self.bindings))
        return self.driver.apply(Apply(self.mat, self.driver.config, self.bindings))

    def open(self, key_range=Range()):
        return self.driver.open(Open(self.mat, "v1", key_range, state=self.state, bindings=self.bindings))[0]

    def stage(self, t, batch, per_binding, deletes=None, quarantine=()):
        """One transaction: Acknowledge, Load (standard bindings), Store, Quarantine, StartCommit."""
        t.acknowledge(Acknowledge(state=self.state))
        loaded = {}
        for i, docs in per_binding.items():
            b = self.bindings[i]
            keys = [tuple(d[f.name] for f in b.key_fields) for d in docs]
            if not b.delta_updates:
                loaded[i] = load_all(t, i, keys)
        if not loaded:
            t.flush(Flush())
        for i, docs in per_binding.items():
            b = self.bindings[i]
            keys = [tuple(d[f.name] for f in b.key_fields) for d in docs]
            t.store(store_msg(b, docs, (deletes or {}).get(i), [k in loaded.get(i, {}) for k in keys], binding_index=i))
        if quarantine:
            t.quarantine(Quarantine(tuple(quarantine)))
        return t.start_commit(StartCommit(self.cp(batch))), loaded

    def cp(self, batch):
        return dict(cp(batch), checkpoint_id=self.checkpoint_id, materialization=self.mat)

    def log(self, batch, *started):
        """The recovery log commits batch N, then the coordinator Acknowledge runs."""
        for s in started:
            self.state = apply_update(self.state, s.state)
        self.last = self.cp(batch)
        self.acknowledge()

    def acknowledge(self):
        self.driver.coordinator_acknowledge(self.mat, self.state, self.last, self.bindings)

    def batch(self, batch, per_binding, deletes=None, key_range=Range(), quarantine=()):
        t = self.open(key_range)
        started, loaded = self.stage(t, batch, per_binding, deletes, quarantine)
        t.close()
        self.log(batch, started)
        return loaded
