"""``tidemark rebuild`` on SQLite, without Spark: build a shadow while the live view runs, cut over in one transaction.

The shadow is built by the plain runner (:mod:`tests.support.plain`: the same coordinator,
shard sessions and driver as a Spark run). Every view is compared with an oracle that
reduces the input files in plain Python here, knowing only what the edited schema means.
The kill matrix SIGKILLs the rebuild (:mod:`tests.support.rebuild_child`) at each point of
the build and of the cut-over, and after every attempt the view must be the complete old
view or the complete new one.
"""

from __future__ import annotations

import json
import os
import signal
import sqlite3
import subprocess
import sys

import pytest
import yaml

from tests.support import plain
from tests.support.harness import arm_in_sequence, fired
from tests.support.helpers import normalize, orders_spec, sqlite_view, write_orders
from tests.support.paths import REPO
from tests.support.rebuild_support import assert_whole_readings, edit, oracle, rebuild_child, rebuild_while_live_commits
from tidemark.errors import RecoveryError, SpecError
from tidemark.runtime.rebuild import Rebuild, missing_input, read_record
from tidemark.spec import load_spec

KILLED = -signal.SIGKILL


def view_of(db) -> dict:
    return normalize(sqlite_view(db)) if os.path.exists(db) else {}


def setup(tmp_path, *, deletes=0.03, shards=2):
    data, db = tmp_path / "data", str(tmp_path / "views.db")
    write_orders(data, files=2, per_file=120, customers=30, seed=5, deletes=deletes)
    spec = orders_spec(tmp_path, data_dir=data, db_path=db, shards=shards)
    old = str(tmp_path / "old.yaml")
    with open(spec) as a, open(old, "w") as b:
        b.write(a.read())
    assert plain.run(spec) == 0
    assert view_of(db) == oracle(data)
    return data, db, spec, old


def test_a_reduce_change_is_rebuilt_while_the_live_view_commits_and_readers_see_old_or_new(tmp_path):
    # one shard: the live view's shards commit one by one, so with two a reader may see one's batch
    # before the other's; the cut-over replaces every shard's rows in one transaction
    data, db, spec, old = setup(tmp_path, shards=1)
    con = sqlite3.connect(db)
    con.execute("CREATE VIEW big_spenders AS SELECT customer, amount FROM customers WHERE amount > 1000")
    con.commit()
    con.close()
    edit(spec, amount="maximize")
    reading = sqlite3.connect(db, timeout=30, check_same_thread=False)  # (used by the reader's thread only)
    query = "SELECT COALESCE(SUM(amount), 0) FROM customers"
    try:
        said, readings, builds = rebuild_while_live_commits(
            spec, old, data, lambda: reading.execute(query).fetchone()[0], seed=6
        )
    finally:
        reading.close()
    assert "now holds the view of the edited spec" in said
    assert builds == ["view__rebuild", "view__rebuild"]  # the build, then the last batches with the live view stopped
    new = oracle(data, amount="maximize")
    assert view_of(db) == new
    assert_whole_readings(readings, data, new)
    con = sqlite3.connect(db)
    tables = {r[0] for r in con.execute("SELECT name FROM sqlite_master WHERE type IN ('table', 'view')")}
    assert "customers__tm_rebuild" not in tables and "big_spenders" in tables
    assert con.execute("SELECT COUNT(*) FROM big_spenders").fetchone()[0] == sum(
        1 for d in new.values() if d["amount"] > 1000
    )
    owners = con.execute("SELECT DISTINCT materialization FROM tidemark_checkpoints").fetchall()
    record = json.loads(
        con.execute("SELECT record FROM tidemark_identities WHERE resource = 'customers'").fetchone()[0]
    )
    con.close()
    assert owners == [("view",)] and record["materialization"] == "view" and record.get("rebuilt")
    # the live view goes on from the rebuilt spec
    write_orders(data, files=1, per_file=120, customers=30, seed=7, start=3, deletes=0.03)
    assert plain.run(spec) == 0
    assert view_of(db) == oracle(data, amount="maximize")
    assert read_record(str(tmp_path / "checkpoints" / "view")) is None
    assert sorted(os.listdir(tmp_path / "checkpoints"))[0] == "view"


def test_abandon_drops_only_the_shadow(tmp_path):
    data, db, spec, old = setup(tmp_path)
    edit(spec, amount="maximize")
    rebuild = Rebuild(load_spec(spec), "view", plain.run, say=lambda s: None)
    rebuild.start()
    rebuild.build()
    con = sqlite3.connect(db)
    assert con.execute("SELECT COUNT(*) FROM customers__tm_rebuild").fetchone()[0] > 0
    con.close()
    from tidemark.status import status_of_spec

    [status] = status_of_spec(spec, endpoint=False)
    assert status.rebuild is not None and status.rebuild["phase"] == "building" and status.rebuild["batch"] == 1
    assert status.rebuild["files"] == 2  # (the plain runner keeps no Spark source log: files_read stays 0)
    assert any(
        n.startswith(f"rebuild {status.rebuild['id']} building: shadow view__rebuild at batch 1") for n in status.notes
    )
    from tidemark.runtime.lease import clear_stop, request_stop

    request_stop(str(tmp_path / "checkpoints" / "view"), by=f"rebuild {status.rebuild['id']}")
    [status] = status_of_spec(spec, endpoint=False)
    assert any(f"asked the live run to stop for the cut-over (pid {os.getpid()})" in n for n in status.notes)
    clear_stop(str(tmp_path / "checkpoints" / "view"))
    said = rebuild.abandon()
    rebuild.close()
    assert "abandoned" in said and "customers__tm_rebuild" in said
    con = sqlite3.connect(db)
    tables = {r[0] for r in con.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
    mats = {r[0] for r in con.execute("SELECT materialization FROM tidemark_checkpoints")}
    con.close()
    assert "customers__tm_rebuild" not in tables and mats == {"view"}
    assert not os.path.exists(tmp_path / "checkpoints" / "view__rebuild")
    assert view_of(db) == oracle(data)
    write_orders(data, files=1, per_file=60, customers=30, seed=9, start=2)
    assert plain.run(old) == 0  # the live view runs on, untouched
    assert view_of(db) == oracle(data)


def test_refusals_before_anything_changes(tmp_path):
    data, db, spec, _old = setup(tmp_path)
    location = tmp_path / "checkpoints" / "view"
    # input the live view read is gone: a rebuild from the source would lose it
    sources = location / "spark" / "sources" / "0"
    sources.mkdir(parents=True)
    gone = data / "orders-0000.json"
    (sources / "0").write_text("v1\n" + json.dumps({"path": f"file://{gone}", "timestamp": 0, "batchId": 0}) + "\n")
    assert missing_input(str(location)) == []
    os.rename(gone, tmp_path / "moved.json")
    edit(spec, amount="maximize")
    with pytest.raises(SpecError, match=r"no longer has \(.*orders-0000.json\)"):
        Rebuild(load_spec(spec), "view", plain.run).run()
    assert read_record(str(location)) is None
    # a push endpoint cannot replace a published log in place
    obj = yaml.safe_load(open(spec))
    obj["materializations"]["view"]["endpoint"] = {"memory": {}}
    with open(spec, "w") as f:
        yaml.safe_dump(obj, f)
    with pytest.raises(SpecError, match="cannot rebuild a view in place"):
        Rebuild(load_spec(spec), "view", plain.run)


# the build's points (in the shadow's sessions and its coordinator), then the cut-over's
POINTS = ["mid_store", "after_endpoint_commit", "after_recovery_log", "before_cutover", "replace_contents"]
POINTS += ["after_cutover"]


@pytest.mark.chaos
def test_kill_at_every_point_of_build_and_cut_over_leaves_old_or_new(tmp_path):
    data, db, spec, old = setup(tmp_path, shards=2)
    write_orders(data, files=1, per_file=120, customers=30, seed=6, start=2, deletes=0.03)
    assert plain.run(old) == 0
    before, after = oracle(data), oracle(data, amount="maximize")
    edit(spec, amount="maximize")
    markers = tmp_path / "markers"
    markers.mkdir()
    faults = arm_in_sequence(POINTS, markers)
    seen = []
    for _attempt in range(len(POINTS) + 2):
        proc = rebuild_child(spec, faults)
        view = view_of(db)
        assert view in (before, after), proc.stderr[-2000:]
        seen.append("new" if view == after else "old")
        if proc.returncode == 0:
            break
        assert proc.returncode == KILLED, proc.stderr[-3000:]
        if view == after and read_record(str(tmp_path / "checkpoints" / "view")) is not None:
            # the endpoint holds the new view; the checkpoint folders are not switched yet: a run waits
            with pytest.raises(RecoveryError, match="cut-over of its rebuild"):
                plain.run(spec)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert fired(markers) == set(POINTS)
    first = seen.index("new")  # old until the cut-over's transaction committed, new from then on
    assert view_of(db) == after and seen == ["old"] * first + ["new"] * (len(seen) - first), seen
    assert first >= 4, seen  # (the build's three kills and before_cutover left the old view)
    write_orders(data, files=1, per_file=60, customers=30, seed=10, start=3, deletes=0.03)
    assert plain.run(spec) == 0
    assert view_of(db) == oracle(data, amount="maximize")


def test_check_names_rebuild_for_a_changed_reduce_or_key(tmp_path):
    from tidemark.ops import check_spec

    _data, _db, spec, _old = setup(tmp_path, deletes=0.0)
    edit(spec, amount="maximize")
    with pytest.raises(SpecError, match=r"sum -> maximize.*`tidemark rebuild SPEC -m view`"):
        check_spec(spec)
    edit(spec, amount="sum", key="city")
    with pytest.raises(RecoveryError, match=r"was keyed by.*`tidemark rebuild SPEC -m view`"):
        check_spec(spec)


def test_a_source_moved_in_the_edit_is_rebuilt_from_its_new_place(tmp_path):
    from tidemark.ops import check_spec

    data, db, spec, _old = setup(tmp_path, deletes=0.0)
    location = tmp_path / "checkpoints" / "view"
    sources = location / "spark" / "sources" / "0"  # as Spark records the files it read
    sources.mkdir(parents=True)
    (sources / "0").write_text(
        "v1\n" + json.dumps({"path": f"file://{data / 'orders-0000.json'}", "timestamp": 0, "batchId": 0}) + "\n"
    )
    moved = tmp_path / "moved"
    os.rename(data, moved)
    obj = yaml.safe_load(open(spec))
    obj["collections"]["orders"]["source"]["path"] = str(moved)
    with open(spec, "w") as f:
        yaml.safe_dump(obj, f)
    with pytest.raises(RecoveryError, match=r"was read from .*`tidemark rebuild SPEC -m view`"):
        check_spec(spec)
    # the old folder's files are gone, but the edited spec reads them from the new one
    assert missing_input(str(location)) and not missing_input(str(location), [str(moved)])
    Rebuild(load_spec(spec), "view", plain.run, say=lambda s: None).run()
    assert view_of(db) == oracle(moved)
    write_orders(moved, files=1, per_file=50, customers=30, seed=11, start=2)
    assert plain.run(spec) == 0
    assert view_of(db) == oracle(moved)


def test_an_adopted_view_seeds_the_shadow_with_its_adopted_rows(tmp_path):
    from tidemark.runtime import adoption as ad

    _data, _db, spec, _old = setup(tmp_path, deletes=0.0)
    location = str(tmp_path / "checkpoints" / "view")
    record = ad.new_record("view", 1_700_000_000.0)
    file = ad.write_rows(location, 0, ['{"customer": "c-by-hand", "amount": 1}'])
    record.bindings.append(ad.AdoptedBinding(0, "customers", "by_hand", 1, file))
    ad.write_record(location, record)  # an adopt that did not finish: refused
    edit(spec, amount="maximize")
    with pytest.raises(SpecError, match="its `tidemark adopt` did not finish"):
        Rebuild(load_spec(spec), "view", plain.run).start()
    record.done = True
    ad.write_record(location, record)
    Rebuild(load_spec(spec), "view", plain.run).start()
    shadow = str(tmp_path / "checkpoints" / "view__rebuild")
    seeded = ad.read_record(shadow)  # the shadow's batch 0 is an adopt of the same rows, not yet run
    assert (seeded.materialization, seeded.since, seeded.done) == ("view__rebuild", record.since, False)
    assert [(b.binding, b.source, b.rows) for b in seeded.bindings] == [(0, "by_hand", 1)]
    with open(os.path.join(ad.folder(shadow), seeded.bindings[0].file)) as f:
        assert f.read().strip() == '{"customer": "c-by-hand", "amount": 1}'


LIVE = """
import os, sys
from tidemark.runtime.lease import Lease
lease = Lease(sys.argv[1], "view")
lease.acquire()
def stop(request):
    print("asked by", request["by"], flush=True)
    lease.release()
    os._exit(75)
lease.keep(on_stop=stop)
print("running", flush=True)
sys.stdin.readline()
"""


def _live_run(tmp_path) -> subprocess.Popen:
    """A live run of the view: holds its lease, stops (exit 75) when asked, as ``tidemark run`` does."""
    proc = subprocess.Popen(
        [sys.executable, "-c", LIVE, str(tmp_path / "checkpoints" / "view")],
        cwd=REPO,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    assert proc.stdout.readline().strip() == "running"
    return proc


def test_the_cut_over_asks_the_live_run_to_stop_and_waits_for_it(tmp_path):
    from tidemark.runtime.lease import clear_stop, request_stop

    data, db, spec, _old = setup(tmp_path)
    edit(spec, amount="maximize")
    live = _live_run(tmp_path)
    try:
        said: list = []
        Rebuild(load_spec(spec), "view", plain.run, say=said.append, wait=60).run()
        assert live.wait(timeout=30) == 75 and live.stdout.read().startswith("asked by rebuild ")
    finally:
        live.kill()
        live.wait()
    assert any("asked the live run to stop at its next batch boundary" in line for line in said), said
    assert view_of(db) == oracle(data, amount="maximize")
    # while a request stands, a run is refused before it changes anything
    chk = str(tmp_path / "checkpoints" / "view")
    request_stop(chk, by="rebuild 0000")
    write_orders(data, files=1, per_file=50, customers=30, seed=13, start=2)
    with pytest.raises(RecoveryError, match="rebuild 0000 is cutting over and asked the live run to stop"):
        plain.run(spec)
    assert view_of(db) == oracle(data, amount="maximize", files=2)
    clear_stop(chk)
    assert plain.run(spec) == 0
    assert view_of(db) == oracle(data, amount="maximize")


def test_the_cut_over_without_waiting_refuses_while_the_live_run_holds_the_view(tmp_path):
    data, db, spec, _old = setup(tmp_path)
    edit(spec, amount="maximize")
    live = _live_run(tmp_path)
    try:
        with pytest.raises(RecoveryError, match=r"in use by another run.*The shadow is built.*Stop the live run"):
            Rebuild(load_spec(spec), "view", plain.run, say=lambda s: None, wait=0).run()
        assert live.poll() is None  # not asked
    finally:
        live.kill()
        live.wait()
    assert view_of(db) == oracle(data)
    Rebuild(load_spec(spec), "view", plain.run, say=lambda s: None).run()  # the built shadow is cut over now
    assert view_of(db) == oracle(data, amount="maximize")
