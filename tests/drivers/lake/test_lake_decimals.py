"""Exact decimals in the lakes' columns: ``multipleOf: 0.01`` is a ``decimal(38,2)`` column in
Delta and Iceberg (a sum of cents is exact there, not ``…1.1400000001``), and a table that an
older tidemark made with a ``double`` column keeps it and goes on (each apply casts to it)."""

from __future__ import annotations

from decimal import Decimal

import pytest

from tests.support import delta_support, iceberg_support
from tidemark.protocol.messages import BindingSpec, Field

pytest.importorskip("deltalake")
pytest.importorskip("pyiceberg")


def binding(scale, *, delta=False):
    fields = (
        Field("customer", "/customer", "string", is_key=True, nullable=False),
        Field("total", "/total", "number", scale=scale),
    )
    return BindingSpec(
        resource={"table": "totals"}, collection="orders", key=("/customer",), fields=fields, delta_updates=delta
    )


CENTS = [1485169.14, 0.1, 0.2, 12.34]


def docs(values):
    return [{"customer": f"c{i}", "total": v} for i, v in enumerate(values)]


def runtime(endpoint, tmp_path, b):
    if endpoint == "delta":
        from tidemark.drivers.delta import DeltaDriver

        d = DeltaDriver({"path": str(tmp_path / "lake")})
        return d, delta_support.Runtime(d, b)
    from tidemark.drivers.iceberg import IcebergDriver

    d = IcebergDriver(iceberg_support.config(tmp_path, "sqlite"))
    return d, iceberg_support.Runtime(d, b)


def column_type(endpoint, driver, b) -> str:
    if endpoint == "delta":
        import deltalake

        dt = deltalake.DeltaTable(driver.model(b).name)
        return str(next(f.type.type for f in dt.schema().fields if f.name == "total"))
    table = driver.open_table(driver.model(b).name)
    return str(table.schema().find_field("total").field_type)


def stored(endpoint, driver, b) -> list:
    if endpoint == "delta":
        rows = delta_support.independent_rows(driver.model(b).name, ["customer", "total"])
    else:
        rows = iceberg_support.independent_rows(driver, b, ["customer", "total"])
    return sorted(rows)


@pytest.mark.parametrize("endpoint", ["delta", "iceberg"])
@pytest.mark.parametrize("delta_updates", [False, True])
def test_an_exact_decimal_is_a_decimal_column(endpoint, delta_updates, tmp_path):
    b = binding(2, delta=delta_updates)
    driver, rt = runtime(endpoint, tmp_path, b)
    try:
        rt.apply()
        rt.batch(0, {0: docs(CENTS)})
        assert column_type(endpoint, driver, b) == "decimal(38, 2)" if endpoint == "iceberg" else "decimal(38,2)"
        got = stored(endpoint, driver, b)
        assert got == [(f"c{i}", Decimal(repr(v)).quantize(Decimal("0.01"))) for i, v in enumerate(CENTS)]
        assert all(isinstance(v, Decimal) for _, v in got)
    finally:
        driver.close()


@pytest.mark.parametrize("endpoint", ["delta", "iceberg"])
@pytest.mark.parametrize("delta_updates", [False, True])
def test_a_double_column_of_an_older_table_is_kept(endpoint, delta_updates, tmp_path):
    old = binding(None, delta=delta_updates)  # as tidemark made it before: a double column
    driver, rt = runtime(endpoint, tmp_path, old)
    try:
        rt.apply()
        rt.batch(0, {0: docs([1.5])})
    finally:
        driver.close()
    new = binding(2, delta=delta_updates)
    driver, rt = runtime(endpoint, tmp_path, new)
    try:
        assert "add column" not in rt.apply().action_description
        rt.batch(1, {0: docs([2.25, 3.5])})
        assert column_type(endpoint, driver, new) == "double"
        got = stored(endpoint, driver, new)
        want = [("c0", 2.25), ("c1", 3.5)]
        assert got == (sorted([("c0", 1.5)] + want) if delta_updates else want)
    finally:
        driver.close()
