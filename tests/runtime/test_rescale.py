"""Rescaling without a restart, with no Spark: the ``shards: {auto: ...}`` config, the policy's
hysteresis, ``tidemark scale`` and its refusals, and the coordinator driven batch by batch
(the shard sessions run in this process, exactly as an executor runs them) into real SQLite
and Delta endpoints: a 2→4→3 rescale ends exact, a re-run keeps its pinned layout, a
coordinator-apply endpoint holds the last batch before a layout changes, and
``layout_history`` reads it all back."""

from __future__ import annotations

import json
import os
import sqlite3

import pytest
import yaml
from typer.testing import CliRunner

from tests.support.helpers import sqlite_view
from tidemark.collection.collection import Collection
from tidemark.collection.keys import key_hash, key_json
from tidemark.errors import SpecError
from tidemark.ops import layout_history, scale
from tidemark.protocol.messages import Range
from tidemark.runtime.coordinator import even_layout
from tidemark.runtime.rescale import AutoShards
from tidemark.runtime.shard import ShardTask, merge_updates, run_shard
from tidemark.spec import load_spec, parse_spec

SCHEMA = {
    "type": "object",
    "properties": {"id": {"type": "string"}, "n": {"type": "integer", "reduce": {"strategy": "sum"}}},
    "reduce": {"strategy": "merge"},
    "required": ["id"],
}


def write_spec(folder, endpoint, shards=2) -> str:
    spec = {
        "collections": {"c": {"key": ["/id"], "schema": SCHEMA, "source": {"path": "data"}}},
        "materializations": {
            "view": {"endpoint": endpoint, "shards": shards, "bindings": [{"source": "c", "resource": {"table": "t"}}]}
        },
        "checkpoint": "chk",
    }
    path = os.path.join(folder, "spec.yaml")
    with open(path, "w") as f:
        yaml.safe_dump(spec, f)
    return path


# ----------------------------------------------------------------------------- config


def test_auto_shards_config_is_validated_naming_the_field():
    def mat(shards):
        return {
            "collections": {"c": {"key": ["/id"], "schema": SCHEMA}},
            "materializations": {
                "v": {
                    "endpoint": {"sqlite": {"path": "x.db"}},
                    "shards": shards,
                    "bindings": [{"source": "c", "resource": {"table": "t"}}],
                }
            },
        }

    spec = parse_spec(mat({"auto": {"min": 2, "max": 6, "keys_per_shard": 100}}), file=None, base_dir=".")
    m = spec.materializations["v"]
    assert m.shards == 2 and m.auto_shards == AutoShards(2, 6, 100)
    assert parse_spec(mat(3), file=None, base_dir=".").materializations["v"].auto_shards is None
    for bad, field in [
        ({"auto": {"min": 0}}, "shards.auto.min"),
        ({"auto": {"max": "8"}}, "shards.auto.max"),
        ({"auto": {"min": 5, "max": 2}}, "shards.auto.min"),
        ({"auto": {"keys_per_shard": 0}}, "shards.auto.keys_per_shard"),
        ({"auto": {"mn": 1}}, "shards.auto.mn"),
        ({"atuo": {}}, "shards"),
        (0, "shards"),
    ]:
        with pytest.raises(SpecError, match=f"materializations.v.{field}"):
            parse_spec(mat(bad), file=None, base_dir=".")


def test_the_auto_policy_changes_only_after_two_batches_agree():
    a = AutoShards(1, 8, 100)
    assert [a.target(k) for k in (0, 1, 100, 101, 799, 5000)] == [1, 1, 1, 2, 8, 8]
    assert a.next_count(2, []) == 2 and a.next_count(2, [900]) == 2  # one batch is not enough
    assert a.next_count(2, [900, 50]) == 2  # the two disagree: no flapping
    assert a.next_count(2, [900, 350]) == 4  # both above: the nearer of the two targets
    assert a.next_count(4, [120, 10]) == 2  # both below: the nearer
    assert a.next_count(4, [350, 400]) == 4
    assert AutoShards(3, 5, 100).next_count(8, [0, 0]) == 5  # bounds edited: clamp at once


# ----------------------------------------------------------------------------- driving batches without Spark


class View:
    """One materialization driven batch by batch: ``Coordinator.begin`` → ``run_shard`` per
    range (in this process) → ``Coordinator.commit``; Spark's offsets are written as Spark
    would (a file per batch), so batch identity works as in a real query."""

    def __init__(self, tmp_path, endpoint, shards=2):
        from tidemark.runtime.coordinator import Coordinator
        from tidemark.runtime.spec_changes import reductions_of

        self.spec_path = write_spec(str(tmp_path), endpoint, shards)
        self.spec = load_spec(self.spec_path)
        self.mat = self.spec.materializations["view"]
        self.coll = Collection(self.spec.collections["c"])
        self.bindings = (self.coll.binding_spec(self.mat.bindings[0]),)
        self.location = self.spec.checkpoint_location("view")
        spark = os.path.join(self.location, "spark")
        os.makedirs(os.path.join(spark, "offsets"), exist_ok=True)
        with open(os.path.join(spark, "metadata"), "w") as f:
            f.write('{"id":"q-1"}\n')
        from tidemark.drivers.registry import load_driver

        self.driver = load_driver(self.mat.driver_name, self.mat.driver_config)
        self.coord = Coordinator(
            materialization="view",
            driver=self.driver,
            driver_name=self.mat.driver_name,
            driver_config=self.mat.driver_config,
            bindings=self.bindings,
            version=self.mat.version(self.spec),
            checkpoint_location=self.location,
            shards=self.mat.shards,
            strategies=[self.coll.strategies()],
            reductions=[reductions_of("c", SCHEMA)],
            auto=self.mat.auto_shards,
        )
        self.coord.start_up()
        self.oracle: dict = {}

    def begin(self, n: int):
        with open(os.path.join(self.location, "spark", "offsets", str(n)), "w") as f:
            f.write(f'v1\n{{"batchTimestampMs":{n}}}\n{{"logOffset":{n}}}\n')
        return self.coord.begin(n)

    def batch(self, n: int, docs: dict, start=None):
        start = start or self.begin(n)
        if start.replayed:
            return start
        ranges = tuple(Range(b, e) for b, e in start.layout)
        rows: list[list] = [[] for _ in ranges]
        for k in sorted(docs, key=lambda k: key_json((k,))):
            h = key_hash((k,))
            i = next(i for i, r in enumerate(ranges) if r.key_begin <= h <= r.key_end)
            rows[i].append(((i, 0, key_json((k,))), json.dumps(docs[k])))
        last = start.last
        task = ShardTask(
            materialization="view",
            version=self.coord.version,
            driver_name=self.mat.driver_name,
            driver_config=self.mat.driver_config,
            bindings=self.bindings,
            collections=(self.coll,),
            checkpoint_id=self.coord.checkpoint_id,
            batch_id=n,
            ranges=ranges,
            driver_checkpoint=last.driver_checkpoint if last else None,
            runtime_checkpoint=start.runtime_checkpoint,
            committed_batch=last.batch_id if last else -1,
            capabilities=self.coord.caps,
        )
        results = [run_shard(task, i, iter(r)) for i, r in enumerate(rows)]
        state = merge_updates(last.driver_checkpoint if last else None, results)
        self.coord.commit(start, state, {"keys": sum(r.keys for r in results)})
        for k, d in docs.items():
            self.oracle[k] = {"id": k, "n": self.oracle.get(k, {}).get("n", 0) + d["n"]}
        return start


def docs_of(n: int, keys: int = 40) -> dict:
    return {f"k{(n * 7 + i) % 60:02d}": {"id": f"k{(n * 7 + i) % 60:02d}", "n": n + i} for i in range(keys)}


def sqlite_rows(db) -> dict:
    return {k: {"id": doc["id"], "n": doc["n"]} for k, doc in sqlite_view(db, "t", "id").items()}


def test_live_rescale_2_4_3_is_exact_and_a_rerun_keeps_its_layout(tmp_path):
    db = tmp_path / "views.db"
    v = View(tmp_path, {"sqlite": {"path": str(db)}}, shards=2)
    v.batch(0, docs_of(0))
    v.batch(1, docs_of(1))
    scale(v.spec_path, shards=4)
    assert layout_history(v.spec_path)["pending"][0]["shards"] == 4
    v.batch(2, docs_of(2))
    v.batch(3, docs_of(3))  # the applied request holds while the spec says 2

    scale(str(tmp_path / "chk" / "view"), shards=3, materialization="view")  # by checkpoint folder
    assert len(v.batch(4, docs_of(4)).layout) == 3
    # batch 5 starts on 2 shards and dies before it commits; a request for 3 arrives meanwhile:
    # the re-run of batch 5 keeps its pinned layout, the next batch takes the request
    scale(v.spec_path, shards=2)
    again = v.begin(5)
    assert len(again.layout) == 2
    scale(v.spec_path, shards=3)
    rerun = v.coord.begin(5)  # the process died after the intent; the batch runs again
    assert rerun.layout == again.layout == even_layout(2)
    v.batch(5, docs_of(5), start=rerun)
    v.batch(6, docs_of(6))
    assert sqlite_rows(db) == v.oracle

    hist = layout_history(v.spec_path)
    assert [(r["first"], r["last"], r["shards"], r["by"]) for r in hist["ranges"]] == [
        (0, 1, 2, "configured"),
        (2, 3, 4, "scale"),
        (4, 4, 3, "scale"),
        (5, 5, 2, "scale"),
        (6, 6, 3, "scale"),
    ]
    assert hist["pending"] == []
    assert [(r["shards"], r["done"]["batch_id"]) for r in hist["requests"]] == [(4, 2), (3, 4), (2, 5), (3, 6)]

    # `tidemark status` shows the layout history and a pending change, within 80 columns
    from tidemark.status import status_of_spec
    from tidemark.status_render import render

    scale(v.spec_path, shards=5)
    (st,) = status_of_spec(v.spec_path)
    assert [(r["first"], r["last"], r["shards"]) for r in st.layouts] == [
        (0, 1, 2),
        (2, 3, 4),
        (4, 4, 3),
        (5, 5, 2),
        (6, 6, 3),
    ]
    lines = render(st, width=80)
    text = " ".join(line.strip() for line in lines)
    assert all(len(line) <= 80 for line in lines)
    assert "batches 0-1: 2 shard(s), configured; batches 2-3: 4 shard(s), scale" in text
    assert "5 shard(s) requested, applied at the next batch" in text
    assert st.as_json()["pending_scale"][0]["shards"] == 5


def test_scale_refuses_before_writing_anything(tmp_path):
    from tidemark.cli import app

    db = tmp_path / "views.db"
    spec = write_spec(str(tmp_path), {"sqlite": {"path": str(db)}})
    with pytest.raises(SpecError, match="has not run yet.*set its `shards:`"):
        scale(spec, shards=3)
    assert not (tmp_path / "chk").exists()
    v = View(tmp_path, {"sqlite": {"path": str(db)}})
    v.batch(0, docs_of(0))
    with pytest.raises(SpecError, match="--shards must be an integer >= 1, got 0"):
        scale(spec, shards=0)
    with pytest.raises(SpecError, match="unknown materialization 'other'"):
        scale(spec, shards=3, materialization="other")
    with pytest.raises(SpecError, match="unknown materialization 'other'.*belongs to 'view'"):
        scale(str(tmp_path / "chk" / "view"), shards=3, materialization="other")
    with pytest.raises(SpecError, match="neither a spec file nor a tidemark checkpoint"):
        scale(str(tmp_path / "nowhere"), shards=3)
    runner = CliRunner()
    bad = runner.invoke(app, ["scale", spec, "--shards", "0"])
    assert bad.exit_code == 1 and "--shards must be an integer >= 1" in bad.output
    assert layout_history(spec)["requests"] == []
    ok = runner.invoke(app, ["scale", spec, "-m", "view", "--shards", "5"])
    assert ok.exit_code == 0, ok.output
    assert [r["shards"] for r in layout_history(spec)["pending"]] == [5]


def test_editing_the_spec_shards_wins_over_an_applied_request(tmp_path):
    db = tmp_path / "views.db"
    v = View(tmp_path, {"sqlite": {"path": str(db)}}, shards=2)
    v.batch(0, docs_of(0))
    scale(v.spec_path, shards=4)
    v.batch(1, docs_of(1))
    v.batch(2, docs_of(2))
    oracle = v.oracle
    v = View(tmp_path, {"sqlite": {"path": str(db)}}, shards=3)  # restarted with shards: 3
    v.oracle = oracle
    assert len(v.batch(3, docs_of(3)).layout) == 3
    assert sqlite_rows(db) == v.oracle
    assert [(r["shards"], r["last"]) for r in layout_history(v.spec_path)["ranges"]] == [(2, 0), (4, 2), (3, 3)]


def test_the_auto_policy_follows_the_key_count_through_the_coordinator(tmp_path):
    db = tmp_path / "views.db"
    v = View(tmp_path, {"sqlite": {"path": str(db)}}, shards={"auto": {"min": 1, "max": 4, "keys_per_shard": 10}})
    counts = []
    for n, keys in enumerate([35, 35, 35, 5, 35, 5, 5, 5]):
        counts.append(len(v.batch(n, docs_of(n, keys)).layout))
    # min at first; up after two batches of 35 keys (target 4); a lone small batch changes
    # nothing; down after two small ones
    assert counts == [1, 1, 4, 4, 4, 4, 4, 1]
    assert sqlite_rows(db) == v.oracle
    assert {r["by"] for r in layout_history(v.spec_path)["ranges"]} == {"auto"}


def test_a_coordinator_apply_endpoint_holds_the_last_batch_before_the_layout_changes(tmp_path, monkeypatch):
    """Delta applies a batch on the coordinator after the log append. A crash between the two
    leaves the tables a batch behind; the next batch on another layout applies it first."""
    import deltalake

    from tidemark.faults import InjectedFault, rearm

    lake = tmp_path / "lake"
    v = View(tmp_path, {"delta": {"path": str(lake)}}, shards=2)
    v.batch(0, docs_of(0))
    monkeypatch.setenv("TIDEMARK_FAULTS", "after_recovery_log:raise")
    rearm()
    with pytest.raises(InjectedFault):
        v.batch(1, docs_of(1))
    for k, d in docs_of(1).items():  # batch 1 is in the recovery log
        v.oracle[k] = {"id": k, "n": v.oracle.get(k, {}).get("n", 0) + d["n"]}
    monkeypatch.delenv("TIDEMARK_FAULTS")
    rearm()
    behind = {p.place: p.batch_id for p in v.coord.positions()}
    assert set(behind.values()) == {0}  # logged batch 1 is not applied yet
    scale(v.spec_path, shards=4)
    start = v.begin(2)
    assert len(start.layout) == 4
    assert {p.batch_id for p in v.coord.positions()} == {1}  # applied before the new layout was recorded
    v.batch(2, docs_of(2), start=start)
    got = {
        r["id"]: {"id": r["id"], "n": r["n"]}
        for r in deltalake.DeltaTable(str(lake / "t")).to_pyarrow_table().to_pylist()
    }
    assert got == v.oracle


def test_the_newest_of_several_pending_requests_wins_and_auto_bounds_are_kept(tmp_path):
    db = tmp_path / "views.db"
    v = View(tmp_path, {"sqlite": {"path": str(db)}}, shards={"auto": {"min": 1, "max": 4, "keys_per_shard": 1000}})
    v.batch(0, docs_of(0))
    with pytest.raises(SpecError, match=r"within shards.auto \[1, 4\]; 6 is outside it"):
        scale(v.spec_path, shards=6)
    scale(v.spec_path, shards=4)
    scale(v.spec_path, shards=3)
    assert len(v.batch(1, docs_of(1)).layout) == 3
    reqs = layout_history(v.spec_path)["requests"]
    assert [(r["shards"], r["done"]["batch_id"], r["done"].get("superseded_by")) for r in reqs] == [
        (4, 1, reqs[1]["id"]),
        (3, 1, None),
    ]
    # few keys, but only batches that ran on 3 shards argue for the next change
    assert [len(v.batch(n, docs_of(n)).layout) for n in (2, 3, 4)] == [3, 1, 1]  # 3 held for batches 1 and 2
    assert sqlite_rows(db) == v.oracle


def test_a_scaled_count_that_outlives_the_spec_s_is_said_once_per_run(tmp_path, caplog):
    """``shards: 2`` in the spec, ``tidemark scale --shards 4``: the batches after the one that
    took the request stay on 4 (the request holds while the spec's count is unchanged), and
    the run says so once, naming both counts and how to go back."""
    import logging

    db = tmp_path / "views.db"
    v = View(tmp_path, {"sqlite": {"path": str(db)}}, shards=2)
    v.batch(0, docs_of(0))
    scale(v.spec_path, shards=4)
    with caplog.at_level(logging.WARNING, logger="tidemark"):
        assert [len(v.batch(n, docs_of(n)).layout) for n in (1, 2, 3)] == [4, 4, 4]
    said = [r.getMessage() for r in caplog.records if "as `tidemark scale` asked" in r.getMessage()]
    assert len(said) == 1 and "not on the spec's shards: 2" in said[0] and "tidemark scale --shards 2" in said[0]
    assert sqlite_rows(db) == v.oracle


def test_status_after_a_scale_lists_the_current_layout_and_not_the_ranges_it_replaced(tmp_path):
    from tidemark.protocol.messages import Range
    from tidemark.status import status_of_spec

    db = tmp_path / "views.db"
    v = View(tmp_path, {"sqlite": {"path": str(db)}}, shards=2)
    v.batch(0, docs_of(0))
    scale(v.spec_path, shards=4)
    v.batch(1, docs_of(1))
    [st] = status_of_spec(v.spec_path)
    assert [s.place for s in st.shards] == [r.name for r in Range.split(4)]
    assert all(s.batch_id == 1 for s in st.shards)
    assert any("2 range(s) of earlier layouts" in n for n in st.notes)
