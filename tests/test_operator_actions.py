"""What an operator may do between runs: each action ends exact, or in a refusal that changes
nothing (the view and the endpoint's checkpoint rows and fences stay as they were).

Every scenario runs against SQLite, PostgreSQL and Delta Lake with real Spark (the session's
local[2]); the expected view is computed independently from the input files.
"""

from __future__ import annotations

import os
import shutil

import pytest
import yaml

from tests.support.helpers import ORDERS_SCHEMA, oracle_orders, write_orders
from tests.support.operator_specs import Delta, SQLite, endpoint, write_spec
from tests.support.paths import REPO, SUPPORT
from tidemark import faults
from tidemark.errors import RecoveryError

pytestmark = pytest.mark.spark


# ----------------------------------------------------------------------------- endpoints


@pytest.fixture(
    params=["sqlite", pytest.param("postgres", marks=pytest.mark.slow), pytest.param("delta", marks=pytest.mark.slow)]
)
def ep(request, tmp_path):
    return endpoint(request, tmp_path, request.param)


def run(spark, spec):
    from tidemark.spark.runner import run_spec

    reports = []
    run_spec(spec, spark=spark, on_batch=reports.append)
    return reports


def reset(spec):
    from tidemark.ops_reset import reset_spec

    return reset_spec(spec)


# ----------------------------------------------------------------------------- scenarios


def test_spark_checkpoint_deleted_is_refused_then_reset_replays(spark, tmp_path, ep):
    """Spark's part of the checkpoint deleted (the usual way out when Spark refuses a changed
    query), new input added, maxFilesPerTrigger raised: Spark would restart at batch 0. Refused
    before anything changes; ``tidemark reset`` then rebuilds the view from the whole input."""
    data = tmp_path / "data"
    write_orders(data, files=3, per_file=80, customers=40, seed=1)
    spec = write_spec(tmp_path, data, ep)
    assert [r.batch_id for r in run(spark, spec)] == [0, 1, 2]
    expected = oracle_orders(data)
    assert ep.view() == expected

    shutil.rmtree(tmp_path / "checkpoints" / "view" / "spark")
    write_orders(data, files=2, per_file=80, customers=40, seed=2, start=3)
    spec = write_spec(tmp_path, data, ep, max_files=5)
    before = ep.positions()
    with pytest.raises(RecoveryError, match=r"Spark's checkpoint .* is missing.*tidemark reset SPEC -m view"):
        run(spark, spec)
    assert ep.view() == expected and ep.positions() == before

    assert any("deleted checkpoint folder" in line for line in reset(spec))
    assert ep.view() == {}
    run(spark, spec)
    assert ep.view() == oracle_orders(data)


def test_whole_checkpoint_deleted_is_refused_by_every_endpoint(spark, tmp_path, ep):
    data = tmp_path / "data"
    write_orders(data, files=2, per_file=80, customers=40, seed=3)
    spec = write_spec(tmp_path, data, ep)
    run(spark, spec)
    expected = oracle_orders(data)
    assert ep.view() == expected

    shutil.rmtree(tmp_path / "checkpoints")
    before = ep.positions()
    with pytest.raises(RecoveryError, match="written by another tidemark checkpoint of 'view'.*Nothing was changed"):
        run(spark, spec)
    assert ep.view() == expected and ep.positions() == before  # no fence bumped, nothing applied
    # `tidemark check` (and `run`, before Spark starts) say so too, naming the way to start over
    from tidemark.ops import check_spec

    for to_run in (False, True):
        with pytest.raises(RecoveryError, match="another tidemark checkpoint of 'view'.*tidemark reset SPEC -m view"):
            check_spec(spec, to_run=to_run)
    assert not (tmp_path / "checkpoints").exists() and ep.view() == expected


SLOW = pytest.mark.slow


@pytest.mark.parametrize(
    "kind,old,new",
    [
        pytest.param("sqlite", 4, 3, marks=SLOW),
        pytest.param("sqlite", 4, 2, marks=SLOW),
        ("sqlite", 2, 4),
        pytest.param("sqlite", 3, 5, marks=SLOW),
        pytest.param("postgres", 4, 3, marks=SLOW),
        pytest.param("postgres", 2, 4, marks=SLOW),
        pytest.param("delta", 4, 3, marks=SLOW),
        pytest.param("delta", 2, 4, marks=SLOW),
    ],
)
def test_a_partial_batch_finishes_on_its_layout_then_the_new_count_applies(spark, tmp_path, request, kind, old, new):
    """A batch fails after some of its shards committed; the restart has another shard count.
    The unfinished batch completes on its recorded layout, the next batch uses the new one.
    (Every count pair runs on SQLite: the rule lives in the runtime; two on the others.)"""
    ep = endpoint(request, tmp_path, kind)
    data = tmp_path / "data"
    write_orders(data, files=1, per_file=150, customers=50, seed=old * 10 + new, deletes=0.05)
    spec = write_spec(tmp_path, data, ep, shards=old)
    run(spark, spec)
    write_orders(data, files=2, per_file=150, customers=50, seed=new, start=1, deletes=0.05)

    fired = tmp_path / "fired"
    # armed in the executors and in this process (a small batch's shards run in the driver)
    env = spark.sparkContext.environment
    env["TIDEMARK_FAULTS"] = os.environ["TIDEMARK_FAULTS"] = f"after_endpoint_commit:raise!once={fired}"
    faults.rearm()
    try:
        with pytest.raises(Exception, match="injected fault"):
            run(spark, spec)
    finally:
        del env["TIDEMARK_FAULTS"], os.environ["TIDEMARK_FAULTS"]
        faults.rearm()
    assert fired.exists()

    reports = run(spark, write_spec(tmp_path, data, ep, shards=new))
    assert [(r.batch_id, r.shards) for r in reports] == [(1, old), (2, new)]
    assert ep.view() == oracle_orders(data)


def test_an_endpoint_restored_from_an_older_backup_is_refused(spark, tmp_path, ep):
    data = tmp_path / "data"
    write_orders(data, files=2, per_file=80, customers=40, seed=5)
    spec = write_spec(tmp_path, data, ep)
    run(spark, spec)
    backup = ep.backup()
    write_orders(data, files=2, per_file=80, customers=40, seed=6, start=2)
    assert [r.batch_id for r in run(spark, spec)] == [2, 3]

    ep.restore(backup)
    restored = ep.view()
    write_orders(data, files=1, per_file=80, customers=40, seed=7, start=4)
    with pytest.raises(
        RecoveryError, match=r"holds batch 1, older than the recovery log's batch 3.*Nothing was changed"
    ):
        run(spark, spec)
    assert ep.view() == restored


def test_dropped_tables_are_refused_not_recreated_empty(spark, tmp_path, ep):
    data = tmp_path / "data"
    write_orders(data, files=2, per_file=80, customers=40, seed=8)
    spec = write_spec(tmp_path, data, ep)
    run(spark, spec)
    ep.drop()
    write_orders(data, files=1, per_file=80, customers=40, seed=9, start=2)
    with pytest.raises(RecoveryError, match="(holds no batch of this view|no longer exists).*Nothing was changed"):
        run(spark, spec)
    assert ep.view() == {}  # not re-created holding only the new input


def test_two_jobs_from_python_on_one_schema_each_own_their_view(spark, tmp_path, ep):
    """The README's Python example twice, without name=: each job gets its own name, table,
    checkpoint rows and fences; running one never touches the other."""
    import tidemark

    def job(i, files, start=0):
        data = tmp_path / f"data{i}"
        write_orders(data, files=files, per_file=60, customers=30, seed=10 + i + start, start=start)
        df = spark.readStream.format("text").option("maxFilesPerTrigger", 1).load(str(data))
        tidemark.materialize(
            df,
            collection={"key": ["/customer"], "schema": ORDERS_SCHEMA},
            endpoint=ep.endpoint(),
            resource={"table": f"customers{i}"},
            checkpoint=str(tmp_path / f"chk{i}"),
            shards=2,
            spark=spark,
            available_now=True,
        ).await_termination()
        return data

    data1 = job(1, 2)
    data2 = job(2, 2)
    before = ep.positions() if ep.name != "delta" else None
    job(1, 1, start=2)
    assert ep.view("customers1") == oracle_orders(data1)
    assert ep.view("customers2") == oracle_orders(data2)
    if before is not None:  # job 2's checkpoint rows and fences are as job 2 left them
        after = ep.positions()
        names = {row[0] for row in after}
        assert len(names) == 2
        job2 = sorted(names)[1] if sorted(names)[1].startswith("customers2") else sorted(names)[0]
        assert [r for r in after if r[0] == job2] == [r for r in before if r[0] == job2]


def test_a_second_materialization_on_the_same_table_is_refused(spark, tmp_path, ep):
    """Another job (another name, its own checkpoint) pointed at a table this view writes is
    refused before it writes anything; the first view stays as it was."""
    data = tmp_path / "data"
    write_orders(data, files=1, per_file=80, customers=40, seed=11)
    run(spark, write_spec(tmp_path, data, ep))
    expected = oracle_orders(data)

    other = tmp_path / "other"
    other.mkdir()
    spec = yaml.safe_load((tmp_path / "spec.yaml").read_text())
    spec["materializations"] = {"intruder": spec["materializations"]["view"]}
    spec["checkpoint"] = str(other / "checkpoints")
    (other / "spec.yaml").write_text(yaml.safe_dump(spec))
    before = ep.positions()
    with pytest.raises(RecoveryError, match="holds the view of materialization 'view'.*Nothing was changed"):
        run(spark, str(other / "spec.yaml"))
    assert ep.view() == expected and ep.positions() == before


# ----------------------------------------------------------------------------- the view's identity


def test_a_renamed_table_is_refused_naming_the_old_one_then_reset_builds_it_complete(spark, tmp_path, ep):
    """``{table: customers}`` -> ``{table: customers_v2}`` on a live view, more input added:
    refused before anything is written (the new table would hold only later batches), naming
    both tables and ``tidemark reset``; after a reset the new table holds the whole input."""
    data = tmp_path / "data"
    write_orders(data, files=2, per_file=80, customers=40, seed=21)
    spec = write_spec(tmp_path, data, ep)
    run(spark, spec)
    expected = oracle_orders(data)
    before = ep.positions()

    renamed = yaml.safe_load(open(spec).read())
    renamed["materializations"]["view"]["bindings"][0]["resource"] = {"table": "customers_v2"}
    open(spec, "w").write(yaml.safe_dump(renamed))
    write_orders(data, files=1, per_file=80, customers=40, seed=22, start=2)
    with pytest.raises(
        RecoveryError,
        match=r"'customers', now 'customers_v2'.*tidemark reset SPEC -m view.*"
        r"Nothing was changed",
    ):
        run(spark, spec)
    assert ep.view() == expected and ep.view("customers_v2") == {} and ep.positions() == before

    reset(spec)
    run(spark, spec)
    assert ep.view("customers_v2") == oracle_orders(data)


def test_a_moved_source_folder_is_refused(spark, tmp_path, ep):
    """The source's path changed (the files copied to a new folder): Spark would read every
    file again and double the sums. Refused, naming both paths."""
    data = tmp_path / "data"
    write_orders(data, files=2, per_file=80, customers=40, seed=23)
    spec = write_spec(tmp_path, data, ep)
    run(spark, spec)
    expected = oracle_orders(data)
    shutil.copytree(data, tmp_path / "moved")
    spec = write_spec(tmp_path, tmp_path / "moved", ep)
    with pytest.raises(RecoveryError, match=r"read from .*data, now .*moved.*Nothing was changed"):
        run(spark, spec)
    assert ep.view() == expected


def test_a_second_run_of_a_running_checkpoint_is_refused_at_once(spark, tmp_path):
    """Another process holds the checkpoint (a run still going): ``tidemark run`` (the CLI,
    before Spark starts) and ``run_spec`` both refuse, naming the holder; the view and its
    staged work are untouched; once the holder ends, the run goes ahead."""
    import subprocess
    import sys

    ep = SQLite(tmp_path)
    data = tmp_path / "data"
    write_orders(data, files=2, per_file=80, customers=40, seed=24)
    spec = write_spec(tmp_path, data, ep)
    run(spark, spec)
    write_orders(data, files=1, per_file=80, customers=40, seed=25, start=2)
    expected = ep.view()
    root = REPO
    holder = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import sys; sys.path.insert(0, sys.argv[1]); from tidemark.runtime.lease import Lease; "
            "l = Lease(sys.argv[2], 'view'); l.acquire(); l.keep(); print('held', flush=True); sys.stdin.readline(); "
            "l.release()",
            root,
            str(tmp_path / "checkpoints" / "view"),
        ],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert holder.stdout.readline().strip() == "held"
        cli = subprocess.run(
            [sys.executable, "-m", "tidemark", "run", spec, "--available-now"],
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert cli.returncode != 0
        first = cli.stderr.strip().splitlines()[0]
        assert "in use by another run" in first and f"pid {holder.pid}" in first, cli.stderr
        assert "Traceback" not in cli.stderr
        with pytest.raises(RecoveryError, match="in use by another run"):
            run(spark, spec)
        assert ep.view() == expected
    finally:
        holder.stdin.write("\n")
        holder.stdin.flush()
        holder.wait(timeout=30)
    assert [r.batch_id for r in run(spark, spec)] == [2]
    assert ep.view() == oracle_orders(data)
