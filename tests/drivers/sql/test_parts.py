"""A SQL endpoint is assembled from parts: its driver class names them and overrides nothing."""

from __future__ import annotations

import pytest

from tidemark.drivers.registry import driver_class
from tidemark.drivers.sql import SqlDriver
from tidemark.drivers.sql.parts import SqlParts


@pytest.mark.parametrize("name", ["sqlite", "postgres", "mysql"])
def test_a_sql_endpoint_names_its_parts_and_overrides_no_step(name):
    cls = driver_class(name)
    assert cls.__mro__[1] is SqlDriver
    own = {k for k in vars(cls) if not k.startswith("_")}
    assert own == {"name", "endpoint"}, f"{cls.__name__} defines {sorted(own - {'name', 'endpoint'})}"


def test_the_parts_come_from_the_config_alone(tmp_path):
    driver = driver_class("sqlite")({"path": str(tmp_path / "v.db"), "synchronous": "normal"})
    try:
        assert isinstance(driver.parts, SqlParts) and driver.settings.synchronous == "NORMAL"
        assert driver.schema == "main" and driver.dialect.title == "SQLite"
        assert driver.capabilities().endpoint_reduce == driver.dialect.reduction.strategies
        assert repr(driver) == f"SQLiteDriver(path={str(tmp_path / 'v.db')!r})"
    finally:
        driver.close()
