"""The fault-point matrix of the SQL endpoints' commit path and the kill sequences run
over it, shared by the endpoints' crash tests."""

from __future__ import annotations

from tests.support.harness import arm_in_sequence, fired, run_until_done
from tests.support.helpers import (
    COMPILED_NULLABLE_SCHEMA,
    COMPILED_SCHEMA,
    compiled_oracle,
    orders_spec,
    write_compiled_orders,
)

# The crash table of docs/guarantees.md, in the order a batch reaches the points.
POINTS = [
    "plan",  # before anything of the batch ran
    "open",  # a shard session opened (fence bumped), nothing written
    "mid_load",  # during Load of shard s
    "mid_store",  # during Store of shard s
    "before_endpoint_commit",  # inside the endpoint transaction, before COMMIT
    "after_endpoint_commit",  # shard s committed; the recovery log does not have N
    "before_recovery_log",  # every shard committed; the log write never happens
    "after_recovery_log",  # the log has N; Spark's commits/N is never written
    "before_spark_commit",  # after the (no-op for SQLite) apply, before commits/N
]


def kill_every_point_on_the_reduce_path(tmp_path, endpoint: dict, view, seed: int) -> None:
    """A binding the endpoint reduces itself (no Load; docs/reductions.md, "Reduced in the
    endpoint"; a nullable property and an object of members among its properties), killed at every point but ``mid_load`` — after the staged rows
    (``mid_store``), before and after the commit of the reducing statement, after the
    recovery log, … — with 2 shards on the commit path without Spark: ``view()`` must equal
    the Python fold of every file, nothing applied twice."""
    from tidemark.ops import check_spec

    data, markers = tmp_path / "data", tmp_path / "markers"
    markers.mkdir()
    files = write_compiled_orders(data, files=2, per_file=150, customers=40, seed=seed, nullable=True)
    spec = orders_spec(
        tmp_path,
        data_dir=data,
        db_path=None,
        shards=2,
        schema=COMPILED_NULLABLE_SCHEMA,
        endpoint=endpoint,
        extra_mat={"options": {"small_batch_keys": 0}},
    )
    assert "binding customers: reduced by the endpoint in its commit (no Load)" in "\n".join(check_spec(spec))
    assert run_until_done(spec, plain=True).kills == 0
    files += write_compiled_orders(data, files=4, per_file=150, customers=40, seed=seed + 1, start=2, nullable=True)

    points = [p for p in POINTS if p != "mid_load"]  # no Loads on this path
    outcome = run_until_done(spec, faults=arm_in_sequence(points, markers), max_attempts=len(points) + 2, plain=True)

    assert fired(markers) == set(points), outcome
    assert view() == compiled_oracle(files)


def kill_typed_rows_between_the_staging_and_the_statement(
    tmp_path, endpoint: dict, view, seed: int, points=("mid_store", "before_endpoint_commit", "after_endpoint_commit")
) -> None:
    """A lean view whose shard sessions run in the driver on typed values (``StoreRows``):
    `tidemark run` (with Spark: the typed values come from its combine) SIGKILLed after the
    staged rows, before and after the reducing statement's commit; ``view()`` must equal the
    Python fold of every file after the restarts."""
    data, markers = tmp_path / "data", tmp_path / "markers"
    markers.mkdir()
    files = write_compiled_orders(data, files=2, per_file=150, customers=40, seed=seed)
    spec = orders_spec(tmp_path, data_dir=data, db_path=None, shards=2, schema=COMPILED_SCHEMA, endpoint=endpoint)
    assert run_until_done(spec).kills == 0  # batch 0 on Spark; the next ones in the driver, typed
    files += write_compiled_orders(data, files=3, per_file=150, customers=40, seed=seed + 1, start=2)
    points = list(points)
    outcome = run_until_done(spec, faults=arm_in_sequence(points, markers), max_attempts=len(points) + 2)
    assert fired(markers) == set(points), outcome
    assert view() == compiled_oracle(files)
