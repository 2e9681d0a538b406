"""Helpers for the Iceberg driver's tests: a SQL catalog's configuration, a driver runtime,
and a table's rows read back without pyiceberg's scan."""

from __future__ import annotations

import pytest

from tests.support.driver_protocol import MAT, cp, load_all, store_msg
from tidemark.protocol.messages import Acknowledge, Apply, BindingSpec, Flush, Load, Open, Range, StartCommit, Validate
from tidemark.runtime.merge_patch import apply_update

# skips its importers without pyiceberg, as importing the test module these helpers came from did
pytest.importorskip("pyiceberg")


def config(tmp_path, kind, postgres_url=None, name="tidemark"):
    if kind == "sqlite":
        return {
            "catalog": {"uri": f"sqlite:///{tmp_path / 'catalog.db'}", "warehouse": str(tmp_path / "warehouse")},
            "namespace": "views",
        }
    return {
        "catalog": {"uri": postgres_url, "warehouse": str(tmp_path / "warehouse"), "name": name},
        "namespace": "views",
    }


def drop_pg_catalog(url, name):
    import psycopg

    with psycopg.connect(url, autocommit=True) as con:
        for t in ("iceberg_tables", "iceberg_namespace_properties"):
            con.execute(f"DELETE FROM {t} WHERE catalog_name = %s", (name,))


def independent_rows(driver, b, columns) -> list[tuple]:
    import duckdb

    files = [
        f.removeprefix("file://")
        for f in driver.open_table(driver.model(b).name).inspect.files().column("file_path").to_pylist()
    ]
    if not files:
        return []
    cols = ", ".join('"' + c.replace('"', '""') + '"' for c in columns)
    con = duckdb.connect()
    try:
        return con.execute(f"SELECT {cols} FROM read_parquet(?, union_by_name = true)", [files]).fetchall()
    finally:
        con.close()


class Runtime:
    """Plays the runtime's commit for one materialization (as test_delta_driver's): the
    recovery log is a list, the coordinator Acknowledge runs after each append."""

    def __init__(self, driver, *bindings: BindingSpec, checkpoint_id="chk-1", mat=MAT):
        self.driver, self.mat, self.bindings, self.checkpoint_id = driver, mat, tuple(bindings), checkpoint_id
        self.state = None
        self.last: dict | None = None

    def apply(self, checkpoint_id=None):
        self.driver.validate(Validate(self.mat, self.driver.config, self.bindings))
        return self.driver.apply(Apply(self.mat, self.driver.config, self.bindings, checkpoint_id=checkpoint_id))

    def open(self, key_range=Range()):
        return self.driver.open(Open(self.mat, "v1", key_range, state=self.state, bindings=self.bindings))[0]

    def stage(self, t, batch, per_binding, deletes=None):
        """One transaction: Acknowledge, Load (standard bindings), Store, StartCommit."""
        t.acknowledge(Acknowledge(state=self.state))
        loaded = {}
        for i, docs in per_binding.items():
            b = self.bindings[i]
            if not b.delta_updates:
                loaded[i] = load_all(t, i, [tuple(d[f.name] for f in b.key_fields) for d in docs])
        if not loaded:
            t.flush(Flush())
        for i, docs in per_binding.items():
            b = self.bindings[i]
            keys = [tuple(d[f.name] for f in b.key_fields) for d in docs]
            t.store(store_msg(b, docs, (deletes or {}).get(i), [k in loaded.get(i, {}) for k in keys], binding_index=i))
        return t.start_commit(StartCommit(self.cp(batch))), loaded

    def cp(self, batch):
        return dict(cp(batch), checkpoint_id=self.checkpoint_id, materialization=self.mat)

    def log(self, batch, *started):
        for s in started:
            self.state = apply_update(self.state, s.state)
        self.last = self.cp(batch)
        self.acknowledge()

    def acknowledge(self):
        self.driver.coordinator_acknowledge(self.mat, self.state, self.last, self.bindings)

    def batch(self, batch, per_binding, deletes=None, key_range=Range()):
        t = self.open(key_range)
        started, loaded = self.stage(t, batch, per_binding, deletes)
        t.close()
        self.log(batch, started)
        return loaded
