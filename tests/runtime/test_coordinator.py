"""The coordinator (:mod:`tidemark.runtime.coordinator`) on its own, without Spark: the
in-memory endpoint in each commit pattern, Spark's part of the checkpoint written as Spark
writes it (``spark/metadata``, ``spark/offsets/N``), and the shard sessions run here, one
per range of the batch's layout, as the Spark adapter runs them.

What each test pins is an outcome the view can see: which rows the endpoint holds (a
delta-updates binding keeps every applied row, so an apply that ran twice shows twice), what
the recovery log holds, the layout a batch runs on, and what start-up or ``begin`` refuses."""

from __future__ import annotations

import hashlib
import os
import shutil
from typing import Optional

import pytest

from tidemark.collection.keys import key_hash
from tidemark.drivers import memory
from tidemark.drivers.memory import MemoryDriver
from tidemark.errors import RecoveryError
from tidemark.faults import hooked
from tidemark.protocol.messages import (
    Acknowledge,
    BindingSpec,
    Field,
    Open,
    Range,
    StartCommit,
    Store,
)
from tidemark.runtime.coordinator import BatchStart, Coordinator, even_layout
from tidemark.runtime.lease import clear_stop, request_stop
from tidemark.runtime.merge_patch import apply_update

MAT = "view"
KEY = (Field("k", "/k", "string", is_key=True), Field("batch", "/batch", "integer"))
ROWS = BindingSpec({"table": "rows"}, "events", ("/k",), KEY, delta_updates=True)

STAGED = "idempotent-apply-coordinator"  # the coordinator applies what the log names
PER_SHARD = "idempotent-apply-shard"  # a session per range applies it
AUTHORITATIVE = "store-authoritative"  # the endpoint commits data and checkpoint at once


class Crash(Exception):
    """The process dies at a fault point (raised by a hook, in this process)."""


def crash(point: str) -> None:
    raise Crash(point)


def key(i: int) -> str:
    return f"k{i}-{hashlib.sha1(str(i).encode()).hexdigest()[:8]}"  # spread over the key hash space


def docs_of(batch: int, keys: int = 8) -> dict:
    return {key(i): {"k": key(i), "batch": batch} for i in range(keys)}


class View:
    """One checkpoint folder and one in-memory endpoint, driven batch by batch."""

    def __init__(self, tmp_path, pattern: str):
        self.location = str(tmp_path / "checkpoint")
        self.config = {"pattern": pattern, "name": f"coordinator-test-{tmp_path}"}
        self.live: list[Coordinator] = []
        self.spark_query("q-1")

    # -------------------------------------------------------------- Spark's part
    def spark_query(self, query_id: str) -> None:
        spark = os.path.join(self.location, "spark")
        os.makedirs(os.path.join(spark, "offsets"), exist_ok=True)
        with open(os.path.join(spark, "metadata"), "w") as f:
            f.write(f'{{"id":"{query_id}"}}\n')

    def plan(self, batch: int, log_offset: Optional[int] = None) -> None:
        """Spark's offsets of ``batch`` (written before the batch runs; a re-run reads them again)."""
        with open(os.path.join(self.location, "spark", "offsets", str(batch)), "w") as f:
            f.write(f'v1\n{{"batchWatermarkMs":0}}\n{{"logOffset":{batch if log_offset is None else log_offset}}}\n')

    # ---------------------------------------------------------------- the run
    def driver(self) -> MemoryDriver:
        return MemoryDriver(self.config)

    def start(self, shards: int = 1) -> Coordinator:
        """A run's start-up (after a crash: a new process with a new coordinator)."""
        coord = Coordinator(
            materialization=MAT,
            driver=self.driver(),
            driver_name="memory",
            driver_config=self.config,
            bindings=(ROWS,),
            version="v1",
            checkpoint_location=self.location,
            shards=shards,
        )
        self.live.append(coord)
        coord.start_up()
        return coord

    def sessions(self, coord: Coordinator, start: BatchStart, docs: dict) -> object:
        """The shard sessions of the batch (Acknowledge the last batch, Store, StartCommit),
        one per range of its layout; returns the merged driver checkpoint for the log."""
        last = start.last.driver_checkpoint if start.last else None
        state = last
        for b, e in start.layout:
            key_range = Range(b, e)
            txn, _ = coord.driver.open(Open(MAT, coord.version, key_range, state=last, bindings=coord.bindings))
            try:
                txn.acknowledge(Acknowledge(state=last))
                mine = sorted(k for k in docs if key_range.contains(key_hash((k,))))
                if mine:
                    n = len(mine)
                    keys = tuple((k,) for k in mine)
                    txn.store(Store(0, keys, ((),) * n, tuple(docs[k] for k in mine), (False,) * n, (False,) * n))
                started = txn.start_commit(StartCommit(start.runtime_checkpoint))
            finally:
                txn.close()
            state = apply_update(state, started.state)
        return state

    def batch(self, coord: Coordinator, batch: int, docs: dict) -> BatchStart:
        self.plan(batch)
        start = coord.begin(batch)
        if not start.replayed:
            coord.commit(start, self.sessions(coord, start, docs), {"documents": len(docs)})
        return start

    # ------------------------------------------------------------- what it holds
    def rows(self) -> list[tuple[int, str]]:
        """Every row the endpoint applied, as (batch, key), in apply order within a batch."""
        return sorted((d["batch"], d["k"]) for d in self.driver().dump(MAT, ROWS))

    def close(self) -> None:
        for coord in self.live:
            if coord.lease is not None:
                coord.lease.release()
        self.live = []


def applied(*batches: int, keys: int = 8) -> list[tuple[int, str]]:
    """The rows of ``batches``, each applied once."""
    return sorted((b, key(i)) for b in batches for i in range(keys))


@pytest.fixture
def view_of(tmp_path):
    made: list[View] = []

    def make(pattern: str) -> View:
        made.append(View(tmp_path, pattern))
        return made[-1]

    yield make
    for view in made:
        view.close()
        memory.reset(view.config["name"])


# ------------------------------------------------------------------ StartCommit, log, Acknowledge


def test_a_staged_batch_is_applied_after_the_recovery_log_holds_it_not_before(view_of):
    view = view_of(STAGED)
    coord = view.start()
    view.plan(0)
    start = coord.begin(0)
    state = view.sessions(coord, start, docs_of(0))
    assert view.rows() == []  # StartCommit only staged the batch
    assert coord.log.last() is None
    coord.commit(start, state, {})
    assert coord.log.last().batch_id == 0 and coord.log.last().driver_checkpoint == state
    assert view.rows() == applied(0)


def test_a_crash_before_the_log_append_applies_nothing_and_the_rerun_applies_the_batch_once(view_of):
    """The first attempt's staged work is named by no log entry: it is never applied, and the
    re-run of the batch (new sessions, new stages) is applied exactly once."""
    view = view_of(STAGED)
    coord = view.start()
    view.batch(coord, 0, docs_of(0))
    view.plan(1)
    start = coord.begin(1)
    state = view.sessions(coord, start, docs_of(1))
    with hooked("before_recovery_log", crash), pytest.raises(Crash):
        coord.commit(start, state, {})
    assert coord.log.last().batch_id == 0 and view.rows() == applied(0)

    coord = view.start()  # the next run: start-up acknowledges batch 0 again (already applied)
    assert view.rows() == applied(0)
    rerun = view.batch(coord, 1, docs_of(1))
    assert not rerun.replayed and rerun.layout == start.layout
    assert view.rows() == applied(0, 1)


def test_a_crash_between_the_log_append_and_the_apply_is_applied_once_at_the_next_start_up(view_of):
    view = view_of(STAGED)
    coord = view.start()
    view.batch(coord, 0, docs_of(0))
    with hooked("after_recovery_log", crash), pytest.raises(Crash):
        view.batch(coord, 1, docs_of(1))
    assert coord.log.last().batch_id == 1  # logged ...
    assert view.rows() == applied(0)  # ... not applied

    coord = view.start()  # Step 5: the last logged batch is acknowledged again
    assert view.rows() == applied(0, 1)
    again = view.batch(coord, 1, docs_of(1))  # Spark had not written commits/1: it runs batch 1 again
    assert again.replayed
    coord = view.start()
    assert view.rows() == applied(0, 1)  # acknowledged three times, applied once
    view.batch(coord, 2, docs_of(2))
    assert view.rows() == applied(0, 1, 2)


def test_spark_rerunning_the_logged_batch_acknowledges_it_without_running_it(view_of):
    """A crash after the log append, the same process goes on: ``begin`` of the logged batch
    is a replay; it applies what the log names and no shard runs."""
    view = view_of(STAGED)
    coord = view.start()
    with hooked("after_recovery_log", crash), pytest.raises(Crash):
        view.batch(coord, 0, docs_of(0))
    assert view.rows() == []
    start = coord.begin(0)
    assert start.replayed and start.layout == [] and start.last.batch_id == 0
    assert view.rows() == applied(0)


def test_per_shard_apply_acknowledges_every_range_of_the_last_layout(view_of):
    view = view_of(PER_SHARD)
    coord = view.start(shards=3)
    with hooked("after_recovery_log", crash), pytest.raises(Crash):
        view.batch(coord, 0, docs_of(0, keys=30))
    assert view.rows() == []
    view.start(shards=3)  # a session per range of batch 0's layout, Opened and Acknowledged
    assert view.rows() == applied(0, keys=30)
    hashes = [key_hash((k,)) for k in docs_of(0, keys=30)]
    assert all(any(r.contains(h) for h in hashes) for r in Range.split(3))  # every range had rows


def test_a_commit_applies_at_once_on_a_per_shard_endpoint_too(view_of):
    view = view_of(PER_SHARD)
    coord = view.start(shards=2)
    view.batch(coord, 0, docs_of(0))
    assert view.rows() == applied(0)
    view.batch(coord, 1, docs_of(1))
    assert view.rows() == applied(0, 1)


# ------------------------------------------------------------------ batch identity


def test_a_rerun_of_a_logged_batch_with_other_input_is_refused_and_changes_nothing(view_of):
    view = view_of(STAGED)
    coord = view.start()
    view.batch(coord, 0, docs_of(0))
    view.batch(coord, 1, docs_of(1))
    view.plan(1, log_offset=99)  # Spark's checkpoint now says batch 1 read other offsets
    with pytest.raises(RecoveryError, match="batch 1 with another identity.*source offsets"):
        coord.begin(1)
    assert coord.log.last().batch_id == 1 and view.rows() == applied(0, 1)
    view.plan(1)
    assert coord.begin(1).replayed  # the recorded input: a replay


def test_a_rerun_of_an_older_logged_batch_is_a_replay_that_applies_nothing(view_of):
    view = view_of(STAGED)
    coord = view.start()
    for n in range(3):
        view.batch(coord, n, docs_of(n))
    start = coord.begin(0)
    assert start.replayed and start.last.batch_id == 2
    assert view.rows() == applied(0, 1, 2)


def test_another_spark_query_under_the_same_log_is_refused(view_of):
    view = view_of(STAGED)
    coord = view.start()
    view.batch(coord, 0, docs_of(0))
    view.spark_query("q-2")  # Spark's checkpoint replaced under the recovery log
    view.plan(1)
    with pytest.raises(RecoveryError, match="belongs to Spark query q-2.*came from query q-1"):
        coord.begin(1)
    view.close()
    with pytest.raises(RecoveryError, match="belongs to Spark query q-2"):
        view.start()
    assert coord.log.last().batch_id == 0 and coord.log.intent_record(1) is None


def test_a_missing_spark_checkpoint_beside_a_log_is_refused_at_start_up(view_of):
    view = view_of(STAGED)
    coord = view.start()
    view.batch(coord, 0, docs_of(0))
    view.close()
    shutil.rmtree(os.path.join(view.location, "spark"))
    with pytest.raises(RecoveryError, match="Spark's checkpoint .* is missing.*batches up to 0"):
        view.start()


# ------------------------------------------------------------------ layouts


def test_a_batch_keeps_the_layout_it_started_with_after_a_crash_even_when_the_shard_count_changes(view_of):
    """A batch's ranges are recorded before any shard runs: a re-run after a crash uses the
    same ranges (some of them may have committed already); the next batch takes the new count."""
    view = view_of(AUTHORITATIVE)
    coord = view.start(shards=2)
    view.batch(coord, 0, docs_of(0))
    view.plan(1)
    first = coord.begin(1)
    assert first.layout == even_layout(2)
    assert coord.log.intent_record(1)["layout"] == even_layout(2)  # before any shard ran

    coord = view.start(shards=3)  # the process died; the spec now says 3 shards
    assert coord.begin(1).layout == even_layout(2)
    view.batch(coord, 1, docs_of(1))
    assert coord.log.last().layout == even_layout(2)
    assert view.batch(coord, 2, docs_of(2)).layout == even_layout(3)
    assert view.rows() == applied(0, 1, 2)


def test_the_ranges_given_to_recovery_are_those_of_the_last_batch_and_of_the_batch_in_flight(view_of):
    view = view_of(AUTHORITATIVE)
    coord = view.start(shards=2)
    assert coord.known_ranges(None) == []
    view.batch(coord, 0, docs_of(0))
    last = coord.log.last()
    assert coord.known_ranges(last) == Range.split(2)
    view.close()
    coord = view.start(shards=4)
    view.plan(1)
    coord.begin(1)  # batch 1's intent: 4 ranges; it dies before committing
    assert coord.known_ranges(last) == sorted(
        set(Range.split(2)) | set(Range.split(4)), key=lambda r: (r.key_begin, r.key_end)
    )


def test_no_batch_begins_while_a_stop_is_requested(view_of):
    view = view_of(STAGED)
    coord = view.start()
    view.batch(coord, 0, docs_of(0))
    request_stop(view.location, by="rebuild 1234")
    view.plan(1)
    try:
        with pytest.raises(RecoveryError, match="rebuild 1234 asked this run to stop at a batch boundary"):
            coord.begin(1)
        assert coord.log.intent_record(1) is None  # nothing of batch 1 was recorded
    finally:
        clear_stop(view.location)
    assert not coord.begin(1).replayed


# ------------------------------------------------------------------ start-up: the endpoint against the log


def test_an_endpoint_one_batch_ahead_of_the_log_is_accepted_at_start_up(view_of):
    """Store-authoritative: the ranges committed batch 1, the process died before the log
    append. Start-up accepts it; batch 1 runs again on the same layout (its ranges skip it)."""
    view = view_of(AUTHORITATIVE)
    coord = view.start(shards=2)
    view.batch(coord, 0, docs_of(0))
    with hooked("before_recovery_log", crash), pytest.raises(Crash):
        view.batch(coord, 1, docs_of(1))
    assert {p.batch_id for p in coord.positions()} == {1} and coord.log.last().batch_id == 0
    coord = view.start(shards=2)
    start = coord.begin(1)
    assert not start.replayed and start.layout == even_layout(2)


def test_an_endpoint_newer_than_a_restored_checkpoint_folder_is_refused(view_of, tmp_path):
    view = view_of(AUTHORITATIVE)
    coord = view.start()
    view.batch(coord, 0, docs_of(0))
    view.close()
    backup = str(tmp_path / "backup")
    shutil.copytree(view.location, backup)
    coord = view.start()
    view.batch(coord, 1, docs_of(1))
    view.batch(coord, 2, docs_of(2))
    view.close()
    shutil.rmtree(view.location)
    shutil.copytree(backup, view.location)  # the checkpoint folder restored from the copy at batch 0
    with pytest.raises(RecoveryError, match="holds batch 2, newer than the recovery log's batch 0"):
        view.start()


def test_an_endpoint_holding_batches_of_a_log_whose_entries_are_gone_is_refused(view_of):
    view = view_of(AUTHORITATIVE)
    coord = view.start()
    view.batch(coord, 0, docs_of(0))
    view.batch(coord, 1, docs_of(1))
    view.close()
    folder = os.path.join(view.location, "tidemark", "log")
    for name in os.listdir(folder):
        if name.endswith(".json"):
            os.remove(os.path.join(folder, name))
    with pytest.raises(RecoveryError, match="holds batch 1 of this checkpoint, but its recovery log .* holds none"):
        view.start()


def test_the_first_batch_committed_by_the_endpoint_but_not_logged_is_accepted(view_of):
    view = view_of(AUTHORITATIVE)
    coord = view.start()
    with hooked("before_recovery_log", crash), pytest.raises(Crash):
        view.batch(coord, 0, docs_of(0))
    assert coord.log.last() is None
    coord = view.start()
    assert not coord.begin(0).replayed
