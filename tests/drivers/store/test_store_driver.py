"""The ``store`` endpoint's driver without Spark: config, Validate/Apply, sessions with
standard and delta-updates bindings and quarantine, restore from the changelog, and queries
(``tidemark.open_view``, ``tidemark query``) — also from another process while a writer
commits."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys

import pytest
import yaml

pytest.importorskip("rocksdict")

import tidemark
from tests.support.paths import REPO, SUPPORT
from tests.support.store_view_child import expected_keys
from tidemark.drivers.registry import load_driver
from tidemark.drivers.store import StoreDriver
from tidemark.drivers.store.naming import binding_id
from tidemark.errors import EndpointUnavailable, FencedOff, IncompatibleSchema, RecoveryError, SpecError
from tidemark.protocol.messages import (
    Acknowledge,
    Apply,
    BindingSpec,
    Field,
    Flush,
    Load,
    Open,
    Quarantine,
    Range,
    StartCommit,
    Store,
    Validate,
)

ROOT = REPO
KEY = (Field("id", "/id", "string", is_key=True), Field("n", "/n", "integer"))
VIEW = BindingSpec({"name": "totals"}, "events", ("/id",), KEY)
LOG = BindingSpec({"name": "log"}, "events", ("/id",), KEY, delta_updates=True)
BINDINGS = (VIEW, LOG)


def cp(batch: int, checkpoint_id: str = "cp1") -> dict:
    return {"checkpoint_id": checkpoint_id, "batch_id": batch, "materialization": "m"}


def store_msg(binding: int, docs: dict, deletes=()) -> Store:
    keys = sorted(docs) + sorted(deletes)
    return Store(
        binding,
        tuple((k,) for k in keys),
        tuple(() for _ in keys),
        tuple(docs.get(k, {"id": k}) for k in keys),
        tuple(False for _ in keys),
        tuple(k in deletes for k in keys),
    )


def commit(driver, batch: int, views: dict, deletes=(), log: dict | None = None, key_range=Range(), quarantine=()):
    txn, opened = driver.open(Open("m", "v1", key_range, bindings=BINDINGS))
    txn.acknowledge(Acknowledge())
    if views or deletes:
        txn.store(store_msg(0, views, deletes))
    if log:
        txn.store(store_msg(1, log))
    if quarantine:
        txn.quarantine(Quarantine(tuple(quarantine)))
    txn.start_commit(StartCommit(cp(batch)))
    txn.close()
    return opened


def write_spec(tmp_path, config: dict, name="m") -> str:
    spec = {
        "collections": {
            "events": {
                "key": ["/id"],
                "schema": {
                    "type": "object",
                    "required": ["id"],
                    "properties": {"id": {"type": "string"}, "n": {"type": "integer"}},
                },
            }
        },
        "materializations": {
            name: {
                "endpoint": {"store": config},
                "bindings": [
                    {"source": "events", "resource": {"name": "totals"}},
                    {"source": "events", "resource": {"name": "log"}, "delta_updates": True},
                ],
            }
        },
    }
    path = tmp_path / "spec.yaml"
    path.write_text(yaml.safe_dump(spec))
    return str(path)


# ------------------------------------------------------------------- config


def test_config_and_registry(tmp_path):
    d = load_driver("store", {"path": str(tmp_path)})
    assert isinstance(d, StoreDriver) and d.capabilities().quarantine and d.capabilities().delta_updates
    with pytest.raises(SpecError, match="unknown setting"):
        StoreDriver({"path": "x", "paht": "y"})
    with pytest.raises(SpecError, match="path"):
        StoreDriver({})
    assert StoreDriver({"path": "x", "max_uncommitted_bytes": "1000"}).base.max_uncommitted_bytes == 1000
    resolved = StoreDriver.resolve_config({"path": "st", "changelog": "s3://b/x", "spill_dir": "/abs"}, "/specs")
    assert resolved == {"path": "/specs/st", "changelog": "s3://b/x", "spill_dir": "/abs"}
    assert StoreDriver.resolve_config({"path": "st", "changelog": "cl"}, "/specs")["changelog"] == "/specs/cl"


def test_relative_path_resolves_against_the_spec_folder(tmp_path, monkeypatch):
    spec = write_spec(tmp_path, {"path": "views"})
    monkeypatch.chdir("/")
    from tidemark.drivers.store.query import _load_spec

    mat = _load_spec(spec).materializations["m"]
    assert mat.driver_config["path"] == str(tmp_path / "views")


def test_validate_and_apply(tmp_path):
    d = StoreDriver({"path": str(tmp_path / "st")})
    with pytest.raises(SpecError, match="name"):
        d.validate(Validate("m", {}, (BindingSpec({"table": 3}, "c", ("/id",), KEY),)))
    twice = BindingSpec({"table": "totals"}, "c", ("/id",), KEY)  # `table` is an alias of `name`
    with pytest.raises(IncompatibleSchema, match="bound twice"):
        d.validate(Validate("m", {}, (VIEW, twice)))
    assert d.apply(Apply("m", {}, BINDINGS, dry_run=True, checkpoint_id="cp1")).created == (("totals",), ("log",))
    assert not os.path.exists(tmp_path / "st")  # a dry run writes nothing
    d.apply(Apply("m", {}, BINDINGS, checkpoint_id="cp1"))
    assert d.apply(Apply("m", {}, BINDINGS, dry_run=True)).created == ()
    with pytest.raises(IncompatibleSchema, match="other mode"):
        d.validate(Validate("m", {}, (BindingSpec({"name": "totals"}, "c", ("/id",), KEY, delta_updates=True),)))
    with pytest.raises(IncompatibleSchema, match="key cannot change"):
        d.validate(Validate("m", {}, (BindingSpec({"name": "totals"}, "c", ("/n",), KEY),)))
    with pytest.raises(RecoveryError, match="written by tidemark checkpoint cp1"):
        d.apply(Apply("m", {}, BINDINGS, checkpoint_id="cp2"))
    d.apply(Apply("other", {}, BINDINGS, checkpoint_id="cp2"))  # its own directory
    assert d.drop("m", BINDINGS) and not os.path.exists(tmp_path / "st" / "m")
    d.apply(Apply("m", {}, BINDINGS, checkpoint_id="cp2"))  # after a reset, a new checkpoint may write it


# ----------------------------------------------------------------- sessions


def test_sessions_views_deltas_quarantine_and_queries(tmp_path):
    d = StoreDriver({"path": str(tmp_path / "st")})
    d.apply(Apply("m", {}, BINDINGS, checkpoint_id="cp1"))
    assert (
        commit(
            d,
            0,
            {"a": {"id": "a", "n": 1}, "b": {"id": "b", "n": 2}, "c": {"id": "c", "n": 3}},
            log={"a": {"id": "a", "n": 1}},
        ).runtime_checkpoint
        is None
    )
    opened = commit(
        d,
        1,
        {"a": {"id": "a", "n": 10}},
        deletes=("b",),
        log={"a": {"id": "a", "n": 9}},
        quarantine=[
            {"binding": 0, "location": f"f:{i}", "key_json": None, "reason": "bad", "value": "x"} for i in range(300)
        ],
    )  # row numbers past 127: keys that are not UTF-8
    assert opened.runtime_checkpoint == cp(0)
    # Loads are read-committed: deferred until Acknowledged, then the committed documents.
    txn, opened = d.open(Open("m", "v1", Range(), bindings=BINDINGS))
    assert opened.runtime_checkpoint == cp(1)
    assert txn.load(Load(0, (("a",), ("b",), ("zz",)))) == []
    txn.acknowledge(Acknowledge())
    loaded, _ = txn.flush(Flush())
    assert [(ld.keys, ld.docs) for ld in loaded] == [((("a",),), ({"id": "a", "n": 10},))]
    txn.store(store_msg(0, {"d": {"id": "d", "n": 4}}))  # uncommitted: no reader sees it
    assert d.dump("m", VIEW) == {("a",): {"id": "a", "n": 10}, ("c",): {"id": "c", "n": 3}}
    assert d.dump("m", LOG) == [{"id": "a", "n": 1}, {"id": "a", "n": 9}]
    # A newer session fences this one.
    newer, _ = d.open(Open("m", "v1", Range(), bindings=BINDINGS))
    with pytest.raises(FencedOff):
        txn.start_commit(StartCommit(cp(2)))
    newer.close()
    rows = d.quarantined("m")
    assert [r["location"] for r in rows] == [f"f:{i}" for i in range(300)]
    assert rows[0]["batch_id"] == 1 and rows[0]["resource"] == "totals" and rows[0]["reason"] == "bad"
    rows = d.checkpoints("m")
    assert [(r.range, r.runtime_checkpoint) for r in rows] == [(Range(), cp(1))]

    spec = write_spec(tmp_path, {"path": str(tmp_path / "st")})
    with tidemark.open_view(spec, "totals") as view:
        assert view.batch == 1 and view.get("a") == {"id": "a", "n": 10} and view.get(["b"]) is None
        assert list(view.scan()) == [(("a",), {"id": "a", "n": 10}), (("c",), {"id": "c", "n": 3})]
        assert list(view.scan(prefix=["c"])) == [(("c",), {"id": "c", "n": 3})]
        assert view.quarantined()[0]["value"] == "x"
    with tidemark.open_view(spec, "m/log", isolation="read-uncommitted") as view:
        assert view.get("a") == [{"id": "a", "n": 1}, {"id": "a", "n": 9}]
    with pytest.raises(SpecError, match="no store view"):
        tidemark.open_view(spec, "nope")


def test_many_keys_in_key_order_over_four_shards_and_a_split(tmp_path):
    d = StoreDriver({"path": str(tmp_path / "st")})
    d.apply(Apply("m", {}, BINDINGS, checkpoint_id="cp1"))
    from tidemark.store import key_hash_of, tidemark_key

    keys = [f"k{i:03d}" for i in range(300)]
    for batch, n in enumerate((1, 4)):  # 1 shard, then a split into 4
        for key_range in Range.split(n):
            mine = {
                k: {"id": k, "n": batch}
                for k in keys
                if key_range.contains(key_hash_of(tidemark_key([k], binding_id("totals"))))
            }
            commit(d, batch, mine, key_range=key_range)
    spec = write_spec(tmp_path, {"path": str(tmp_path / "st")})
    with tidemark.open_view(spec, "totals") as view:
        assert view.batches == {r.name: 1 for r in Range.split(4)}
        assert [k for (k,), _ in view.scan()] == keys
        assert {doc["n"] for _, doc in view.scan(ordered=False)} == {1}


def test_read_committed_waits_for_every_shard_of_a_batch(tmp_path):
    d = StoreDriver({"path": str(tmp_path / "st")})
    d.apply(Apply("m", {}, BINDINGS, checkpoint_id="cp1"))
    left, right = Range.split(2)
    commit(d, 0, {}, key_range=left)
    commit(d, 0, {}, key_range=right)
    commit(d, 1, {}, key_range=left)  # the job stops between the two shards' commits of batch 1
    with pytest.raises(EndpointUnavailable, match="did not reach one batch"):
        d.view("m", timeout=0.2)
    with d.view("m", "read-uncommitted") as v:
        assert v.batches == {left.name: 1, right.name: 0}
    commit(d, 1, {}, key_range=right)
    assert d.view("m").batch == 1


def test_restore_from_the_changelog_after_the_local_store_is_deleted(tmp_path):
    config = {"path": str(tmp_path / "st"), "changelog": str(tmp_path / "cl"), "snapshot_every": 2}
    d = StoreDriver(config)
    d.apply(Apply("m", {}, BINDINGS, checkpoint_id="cp1"))
    for b in range(5):
        commit(d, b, {f"k{i}": {"id": f"k{i}", "n": b} for i in range(b, b + 20)}, deletes=(f"k{b - 1}",) if b else ())
    want = d.dump("m", VIEW)
    shutil.rmtree(tmp_path / "st")
    d = StoreDriver(config)
    # Before any Open: positions and queries already show what the changelog holds.
    assert [p.batch_id for p in d.positions("m", BINDINGS)] == [4]
    assert d.dump("m", VIEW) == want
    assert d.apply(Apply("m", {}, BINDINGS, dry_run=True, checkpoint_id="cp1")).created == ()
    opened = commit(d, 5, {"new": {"id": "new", "n": 5}})
    assert opened.runtime_checkpoint == cp(4)
    assert d.dump("m", VIEW) == {**want, ("new",): {"id": "new", "n": 5}}


# ------------------------------------------------------- another process


def _child(args: dict) -> subprocess.Popen:
    env = dict(os.environ, PYTHONPATH=ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""))
    return subprocess.Popen(
        [sys.executable, "-m", "tests.support.store_view_child", json.dumps(args)],
        cwd=ROOT,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


@pytest.mark.parametrize("spill", [False, True], ids=["write-batch", "spilled"])
def test_a_reader_polling_during_commits_never_sees_part_of_a_batch(tmp_path, spill):
    config = {"path": str(tmp_path / "st"), "max_uncommitted_bytes": 2000 if spill else 64 << 20}
    keys, batches = 400, 25
    child = _child({"config": config, "keys": keys, "batches": batches, "shards": 2})
    spec = write_spec(tmp_path, config)
    seen: set[int] = set()
    partial_ranges = 0
    try:
        while child.poll() is None or len(seen) < 2:
            if not os.path.isdir(tmp_path / "st" / "m" / "ranges"):
                continue
            with tidemark.open_view(spec, "totals", timeout=60) as view:
                docs = list(view.scan(ordered=False))
                if view.batch < 0:
                    continue
                got_batches = {doc["b"] for _, doc in docs}
                assert got_batches == {view.batch}, f"a view of batches {got_batches}"
                assert {k for (k,), _ in docs} == expected_keys(view.batch, keys)
                seen.add(view.batch)
            with tidemark.open_view(spec, "totals", isolation="read-uncommitted") as view:
                per_range: dict[str, set] = {}
                for (k,), doc in view.scan(ordered=False):
                    per_range.setdefault(doc["b"], set()).add(k)
                partial_ranges += len(set(view.batches.values())) > 1
                for b in per_range:  # each range holds one whole batch
                    assert b in view.batches.values()
            if child.poll() is not None and len(seen) < 2:
                break
    finally:
        out, err = child.communicate(timeout=120)
    assert child.returncode == 0, err
    assert f"committed {batches - 1}" in out
    assert len(seen) >= 2, seen  # the reader saw several batches go by


def test_cli_query(tmp_path):
    d = StoreDriver({"path": str(tmp_path / "st")})
    d.apply(Apply("m", {}, BINDINGS, checkpoint_id="cp1"))
    commit(d, 0, {k: {"id": k, "n": i} for i, k in enumerate(["b", "a", "ü", "c"])}, log={"a": {"id": "a", "n": 7}})
    spec = write_spec(tmp_path, {"path": "st"})  # relative to the spec's folder

    def query(*args):
        env = dict(os.environ, PYTHONPATH=ROOT)
        proc = subprocess.run(
            [sys.executable, "-m", "tidemark", "query", spec, *args],
            cwd="/",
            env=env,
            capture_output=True,
            text=True,
            timeout=120,
        )
        return proc.returncode, [json.loads(line) for line in proc.stdout.splitlines()], proc.stderr

    assert query("--view", "totals") == (
        0,
        [{"id": k, "n": n} for k, n in (("a", 1), ("b", 0), ("c", 3), ("ü", 2))],
        "",
    )
    assert query("--view", "totals", "--key", '"c"', "--key", '["a"]', "--key", '"zz"')[1] == [
        {"id": "a", "n": 1},
        {"id": "c", "n": 3},
    ]
    assert query("--view", "m/log", "--prefix", '["a"]', "--isolation", "read-uncommitted")[1] == [{"id": "a", "n": 7}]
    rc, _, err = query("--view", "totals", "--isolation", "dirty")
    assert rc == 1 and "read-committed or read-uncommitted" in err


def test_two_machines_committing_one_batch_resolve_to_the_recovery_logs_digest(tmp_path):
    """Fences hold per machine: attempts on two machines (two local stores, one changelog)
    can both commit batch 1.  A restore then refuses to guess; the recovery log's digest
    (StartedCommit's driver-checkpoint patch) picks the winner at the next Open."""
    cl = str(tmp_path / "cl")
    a, b, c = (StoreDriver({"path": str(tmp_path / m), "changelog": cl}) for m in "abc")
    a.apply(Apply("m", {}, BINDINGS, checkpoint_id="cp1"))
    commit(a, 0, {"x": {"id": "x", "n": 0}})
    sessions = []
    for d, n in ((a, 1), (b, 2)):  # both open at batch 0: neither fences the other
        txn, opened = d.open(Open("m", "v1", Range(), bindings=BINDINGS))
        assert opened.runtime_checkpoint == cp(0)
        txn.acknowledge(Acknowledge())
        txn.store(store_msg(0, {"x": {"id": "x", "n": n}}))
        sessions.append(txn)
    won = sessions[0].start_commit(StartCommit(cp(1))).state.updated  # the coordinator logs this one
    sessions[1].start_commit(StartCommit(cp(1)))  # the zombie on the other machine commits too
    assert list(won["store"]) == [Range().name] and won["store"][Range().name]["batch"] == 1
    with pytest.raises(RecoveryError, match="committed twice"):
        c.open(Open("m", "v1", Range(), bindings=BINDINGS))
    txn, opened = b.open(Open("m", "v1", Range(), state=won, bindings=BINDINGS))  # the next batch's Open
    assert opened.runtime_checkpoint == cp(1)
    txn.close()
    assert b.dump("m", VIEW) == a.dump("m", VIEW) == {("x",): {"id": "x", "n": 1}}  # b's store was rebuilt
    txn, _ = c.open(Open("m", "v1", Range(), bindings=BINDINGS))
    txn.close()
    assert c.dump("m", VIEW) == {("x",): {"id": "x", "n": 1}}


def test_a_late_attempts_commit_of_an_older_batch_does_not_stop_a_restore(tmp_path):
    """A speculative attempt on another machine commits batch 1 after batch 2 opened and
    committed: the changelog holds batch 1 twice.  Batch 2's entry names the batch-1 entry it
    was built on, so every machine restores the winner's chain: one without a local copy, and
    the zombie's own machine (whose local store holds the loser)."""
    cl = str(tmp_path / "cl")
    a, b, c = (StoreDriver({"path": str(tmp_path / m), "changelog": cl}) for m in "abc")
    a.apply(Apply("m", {}, BINDINGS, checkpoint_id="cp1"))
    commit(a, 0, {"x": {"id": "x", "n": 0}})
    zombie, _ = b.open(Open("m", "v1", Range(), bindings=BINDINGS))  # machine b, fenced only locally
    zombie.acknowledge(Acknowledge())
    zombie.store(store_msg(0, {"x": {"id": "x", "n": 99}}))
    commit(a, 1, {"x": {"id": "x", "n": 1}})
    commit(a, 2, {"x": {"id": "x", "n": 2}, "y": {"id": "y", "n": 2}})
    zombie.start_commit(StartCommit(cp(1)))  # late: batch 2 is already committed on a
    zombie.close()
    entries = sorted(os.listdir(os.path.join(cl, "m", Range().name, "log")))
    assert [e[:20] for e in entries].count(f"{1:020d}") == 2, entries
    want = {("x",): {"id": "x", "n": 2}, ("y",): {"id": "y", "n": 2}}
    for d in (c, b):  # no local copy; the zombie's machine
        txn, opened = d.open(Open("m", "v1", Range(), bindings=BINDINGS))
        assert opened.runtime_checkpoint == cp(2)
        txn.close()
        assert d.dump("m", VIEW) == want
    commit(b, 3, {"z": {"id": "z", "n": 3}})  # b carries on from the winner's chain
    txn, opened = c.open(Open("m", "v1", Range(), bindings=BINDINGS))
    txn.close()
    assert c.dump("m", VIEW) == {**want, ("z",): {"id": "z", "n": 3}}
