"""A reduce strategy changed on a live view: ``tidemark check`` refuses it (the recovery log
recorded the strategies each batch ran with), ``run`` warns; after a run with the new spec
the log records it and ``check`` passes."""

from __future__ import annotations

import logging
import os
import subprocess
import sys

import pytest
import yaml

from tests.support.helpers import orders_spec, write_orders

pytestmark = pytest.mark.spark


def test_check_refuses_a_strategy_changed_on_a_live_view(spark, tmp_path, caplog):
    from tidemark.errors import SpecError
    from tidemark.ops import check_spec
    from tidemark.spark.runner import run_spec

    data = tmp_path / "data"
    write_orders(data, files=1, per_file=50, customers=10, seed=21)
    spec_path = orders_spec(tmp_path, data_dir=data, db_path=tmp_path / "views.db")
    assert check_spec(spec_path)  # before any batch: nothing to compare with
    run_spec(spec_path, spark=spark)
    assert check_spec(spec_path)  # unchanged: fine

    spec = yaml.safe_load(open(spec_path))
    spec["collections"]["orders"]["schema"]["properties"]["amount"]["reduce"] = {"strategy": "maximize"}
    with open(spec_path, "w") as f:
        yaml.safe_dump(spec, f)
    with pytest.raises(SpecError) as exc:
        check_spec(spec_path)
    assert (
        "materialization 'view': a reduce strategy changed on a live view: "
        "collections.orders.schema.properties.amount.reduce: sum -> maximize. "
        "The view holds documents up to batch 0"
    ) in str(exc.value)
    cli = subprocess.run(
        [sys.executable, "-m", "tidemark", "check", spec_path],
        capture_output=True,
        text=True,
        env={**os.environ, "COLUMNS": "300", "PYTHONPATH": os.pathsep.join(sys.path)},
        timeout=120,
    )
    assert cli.returncode == 1, cli.stdout + cli.stderr
    assert cli.stderr.startswith("error: ") and "sum -> maximize" in cli.stderr and "Traceback" not in cli.stderr

    # run anyway: a warning at start; the batch then records the new strategies
    write_orders(data, files=1, per_file=50, customers=10, seed=22, start=1)
    with caplog.at_level(logging.WARNING, logger="tidemark"):
        run_spec(spec_path, spark=spark)
    assert any(
        "a reduce strategy changed since batch 0" in r.getMessage() and "sum -> maximize" in r.getMessage()
        for r in caplog.records
    )
    assert check_spec(spec_path)
