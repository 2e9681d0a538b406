"""A lake endpoint (Delta or Iceberg) driven through the protocol, for the lean-row tests."""

from __future__ import annotations

import pyarrow as pa

from tests.support.driver_protocol import MAT, cp, load_all
from tidemark.protocol.messages import Acknowledge, Apply, Open, Range, StartCommit, Store, Validate
from tidemark.runtime.merge_patch import apply_update


class Lake:
    def __init__(self, name, tmp_path):
        self.name = name
        self.tmp = tmp_path
        self.driver = self.make()

    def make(self):
        if self.name == "delta":
            from tidemark.drivers.delta import DeltaDriver

            return DeltaDriver({"path": str(self.tmp / "lake")})
        from tidemark.drivers.iceberg import IcebergDriver

        catalog = {"uri": f"sqlite:///{self.tmp / 'catalog.db'}", "warehouse": str(self.tmp / "warehouse")}
        return IcebergDriver({"catalog": catalog, "namespace": "views"})

    def rows(self, b) -> tuple[pa.Table, dict]:
        """Every column of the table, and its properties, read without tidemark's code."""
        model = self.driver.model(b)
        if self.name == "delta":
            from deltalake import DeltaTable

            dt = DeltaTable(model.name)
            return dt.to_pyarrow_table(), dt.metadata().configuration
        t = self.driver.catalog.load_table(model.identifier)
        return t.scan().to_arrow(), t.properties


def apply(driver, b):
    driver.validate(Validate(MAT, driver.config, (b,)))
    return driver.apply(Apply(MAT, driver.config, (b,))).action_description


def commit(driver, b, docs, batch, state, key="customer", materialization=MAT, checkpoint_id="chk-1"):
    """One standard transaction: Acknowledge, Load, Store, StartCommit, the log, the apply.
    Returns (what Load answered, the new state)."""
    t, _ = driver.open(Open(materialization, "v1", Range(), state=state, bindings=(b,)))
    try:
        t.acknowledge(Acknowledge(state=state))
        keys = [(d[key],) for d in docs]
        loaded = load_all(t, 0, keys)
        names = [f.name for f in b.value_fields]
        t.store(
            Store(
                0,
                tuple(keys),
                tuple(tuple(d.get(n) for n in names) for d in docs),
                tuple(docs),
                tuple(k in loaded for k in keys),
                tuple(False for _ in docs),
            )
        )
        started = t.start_commit(StartCommit(cp(batch, checkpoint_id=checkpoint_id)))
    finally:
        t.close()
    state = apply_update(state, started.state)
    driver.coordinator_acknowledge(materialization, state, cp(batch, checkpoint_id=checkpoint_id), (b,))
    return loaded, state
