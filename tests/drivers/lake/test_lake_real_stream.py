"""Delta and Iceberg views of a stream as real ones look: a nullable property (absent, ``null``
or a value) and an object of members of several types, through Spark's one-job combine."""

from __future__ import annotations

import pytest

from tests.support.helpers import (
    COMPILED_NULLABLE_SCHEMA,
    assert_verified,
    compiled_oracle,
    normalize,
    orders_spec,
    write_compiled_orders,
)

pytestmark = pytest.mark.spark


@pytest.mark.parametrize("lake", ["delta", "iceberg"])
def test_a_stream_with_nulls_and_objects_of_members_is_exact_in_a_lake(spark, tmp_path, lake):
    pytest.importorskip("deltalake" if lake == "delta" else "pyiceberg")
    from tidemark.spark.runner import run_spec

    data = tmp_path / "data"
    files = write_compiled_orders(data, files=3, per_file=120, customers=30, seed=61, nullable=True)
    if lake == "delta":
        endpoint: dict = {"delta": {"path": str(tmp_path / "lake")}}
    else:
        from tests.support.iceberg_specs import sqlite_catalog

        endpoint = {"iceberg": {"catalog": sqlite_catalog(tmp_path), "namespace": "views"}}
    spec = orders_spec(
        tmp_path, data_dir=data, db_path=None, shards=2, endpoint=endpoint, schema=COMPILED_NULLABLE_SCHEMA
    )
    reports: list = []
    run_spec(spec, spark=spark, on_batch=reports.append)
    assert len(reports) == 3 and all(r.path in ("one job", "driver") for r in reports)
    want = compiled_oracle(files)
    assert any(d.get("note", "") is None for d in want.values())  # nulls reached the view
    if lake == "delta":
        from tests.support.delta_support import independent_view

        got = independent_view(str(tmp_path / "lake" / "customers"))
    else:
        from tests.support.iceberg_specs import iceberg_view

        got = iceberg_view(endpoint["iceberg"]["catalog"], "customers")
    assert normalize(got) == want
    assert_verified(spec)
