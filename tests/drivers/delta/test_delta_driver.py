"""The Delta Lake driver against real Delta tables on local disk (delta-rs, no JVM, no mocks).

``independent_view`` reads a table without delta-rs: it replays the ``_delta_log`` JSON
commits itself and reads the live Parquet files with DuckDB.  The Spark and chaos tests
import it.
"""

from __future__ import annotations

import json
import os

import pytest

from tests.support.delta_support import Runtime, independent_rows, independent_view
from tests.support.driver_protocol import MAT, binding, doc, store_msg
from tidemark import faults
from tidemark.drivers.delta import DeltaDriver, app_id
from tidemark.drivers.registry import load_driver
from tidemark.errors import IncompatibleSchema, RecoveryError, SpecError, TidemarkError
from tidemark.protocol.messages import Acknowledge, Apply, BindingSpec, Field, Flush, Load, Range, StartCommit, Validate
from tidemark.runtime.merge_patch import apply_update
from tidemark.testing.conformance import assert_conformance

deltalake = pytest.importorskip("deltalake")


# --------------------------------------------------------------------------- helpers


def location(driver, b):
    return driver.model(b).name


@pytest.fixture
def driver(tmp_path):
    d = DeltaDriver({"path": str(tmp_path / "lake")})
    yield d
    d.close()


@pytest.fixture
def armed(monkeypatch):
    def arm(spec):
        monkeypatch.setenv(faults.ENV, spec)
        faults.rearm()

    yield arm
    monkeypatch.delenv(faults.ENV, raising=False)
    faults.rearm()


# --------------------------------------------------------------------------- tests


@pytest.mark.slow  # the full kit; the quick one runs in the default suite (test_conformance.py)
def test_conformance_kit_passes(tmp_path):
    report = assert_conformance(lambda: DeltaDriver({"path": str(tmp_path / "kit")}))
    assert report.commit_pattern == "idempotent-apply-coordinator"
    assert report.properties["read-committed"].checks > 0
    assert os.listdir(tmp_path / "kit" / "_tidemark_staging") and not any(
        os.listdir(tmp_path / "kit" / "_tidemark_staging" / d)
        for d in os.listdir(tmp_path / "kit" / "_tidemark_staging")
    ), "every staged file is applied or cleaned up"


def test_registry_builds_delta(tmp_path):
    d = load_driver("delta", {"path": str(tmp_path)})
    assert isinstance(d, DeltaDriver)
    assert d.capabilities().commit_pattern.value == "idempotent-apply-coordinator"
    assert d.capabilities().quarantine


def test_round_trip_typed_columns_and_independent_reader(driver):
    b = binding()
    rt = Runtime(driver, b)
    assert "create delta table" in rt.apply().action_description
    assert rt.batch(0, {0: [doc("a", 1), doc("b", 20), doc("c", 3)]}) == {0: {}}
    loaded = rt.batch(1, {0: [doc("a", 2), doc("c", 3)]}, deletes={0: [False, True]})
    assert loaded == {0: {("a",): doc("a", 1), ("c",): doc("c", 3)}}
    want = {("a",): doc("a", 2), ("b",): doc("b", 20)}
    assert driver.dump(MAT, b) == want
    loc = location(driver, b)
    assert independent_view(loc) == {k[0]: d for k, d in want.items()}
    # typed columns, named as the properties; the document as JSON text
    assert sorted(independent_rows(loc, ["customer", "amount", "score", "vip", "tags"])) == [
        ("a", 2, 1.0, False, '["2"]'),
        ("b", 20, 10.0, True, '["20"]'),
    ]
    dt = deltalake.DeltaTable(loc)
    types = {f.name: (f.type.type, f.nullable) for f in dt.schema().fields}
    assert types == {
        "customer": ("string", False),
        "amount": ("long", True),
        "score": ("double", True),
        "vip": ("boolean", True),
        "tags": ("string", True),
        "flow_document": ("string", True),  # nullable: a lean table holds the remainder
    }
    # one MERGE per batch, each carrying the batch as its app transaction
    assert dt.transaction_version(app_id(MAT, "chk-1")) == 1
    assert [h["operation"] for h in dt.history()][:2] == ["MERGE", "MERGE"]


def test_nothing_is_visible_before_the_coordinator_applies(driver):
    b = binding()
    rt = Runtime(driver, b)
    rt.apply()
    rt.batch(0, {0: [doc("a", 1)]})
    t = rt.open()
    # Loads sent before Acknowledged are staged, answered at Flush
    assert list(t.load(Load(0, (("a",), ("zz",))))) == []
    t.acknowledge(Acknowledge(state=rt.state))
    late, _ = t.flush(Flush())
    assert [(r.keys, r.docs) for r in late] == [((("a",),), (doc("a", 1),))]
    t.store(store_msg(b, [doc("a", 5)], exists=[True]))
    started = t.start_commit(StartCommit(rt.cp(1)))
    t.close()
    files = started.state.updated["stages"][Range().name]["files"]
    assert [(f[0], f[2]) for f in files] == [(location(driver, b), 1)]
    assert driver.dump(MAT, b) == {("a",): doc("a", 1)}  # staged, not applied
    rt.log(1, started)
    assert driver.dump(MAT, b) == {("a",): doc("a", 5)}
    assert driver.staged_files(MAT) == []


def test_coordinator_acknowledge_is_idempotent(driver, armed):
    sums, events = binding("sums"), binding("events", delta=True)
    rt = Runtime(driver, sums, events)
    rt.apply()
    rt.batch(0, {0: [doc("a", 1), doc("b", 2)], 1: [doc("a", 1), doc("b", 2)]})
    t = rt.open()
    started, _ = rt.stage(t, 1, {0: [doc("a", 3), doc("c", 4)], 1: [doc("a", 3)]}, deletes={0: [False, False]})
    t.close()
    rt.state = apply_update(rt.state, started.state)
    rt.last = rt.cp(1)
    tables = sorted([location(driver, sums), location(driver, events)])
    versions = lambda: [deltalake.DeltaTable(loc).version() for loc in tables]
    before = versions()
    # killed during the second table's apply: the first table committed, the second did not
    armed("mid_apply:raise@2")
    with pytest.raises(TidemarkError) as exc_info:
        rt.acknowledge()
    assert "injected fault at mid_apply" in str(exc_info.value)
    partial = versions()
    assert partial[0] == before[0] + 1 and partial[1] == before[1]
    armed("")
    for _ in range(3):  # re-run any number of times
        rt.acknowledge()
    after = versions()
    assert after == [partial[0], partial[1] + 1]
    assert driver.dump(MAT, sums) == {("a",): doc("a", 3), ("b",): doc("b", 2), ("c",): doc("c", 4)}
    assert sorted(d["amount"] for d in driver.dump(MAT, events)) == [1, 2, 3]
    assert sorted(r[0] for r in independent_rows(location(driver, events), ["amount"])) == [1, 2, 3]
    assert driver.staged_files(MAT) == []


def test_a_merge_that_changes_nothing_still_records_the_batch(driver):
    b = binding()
    rt = Runtime(driver, b)
    rt.apply()
    rt.batch(0, {0: [doc("a", 1)]})
    # a delete marker of a key the table does not have: the MERGE changes nothing
    rt.batch(1, {0: [doc("zz", 0)]}, deletes={0: [True]})
    dt = deltalake.DeltaTable(location(driver, b))
    assert dt.transaction_version(app_id(MAT, "chk-1")) == 1
    version = dt.version()
    rt.acknowledge()
    assert deltalake.DeltaTable(location(driver, b)).version() == version
    assert driver.dump(MAT, b) == {("a",): doc("a", 1)}


def test_a_new_checkpoint_is_not_mistaken_for_applied_batches(driver):
    b = binding()
    rt = Runtime(driver, b)
    rt.apply()
    rt.batch(0, {0: [doc("a", 1)]})
    rt.batch(1, {0: [doc("b", 1)]})
    fresh = Runtime(driver, b, checkpoint_id="chk-2")  # batch ids restart at 0
    fresh.batch(0, {0: [doc("c", 1)]})
    assert set(driver.dump(MAT, b)) == {("a",), ("b",), ("c",)}


def test_schema_growth(driver):
    b = binding()
    rt = Runtime(driver, b)
    rt.apply()
    rt.batch(0, {0: [doc("a", 1)]})
    # batch 1 is staged with the old schema; the schema grows before it is applied
    t = rt.open()
    started, _ = rt.stage(t, 1, {0: [doc("b", 2)]})
    t.close()
    grown = binding(extra=(Field("city", "/city", "string"),))
    rt2 = Runtime(driver, grown)
    rt2.state = rt.state
    assert "add column city string" in rt2.apply().action_description
    rt2.log(1, started)
    rt2.batch(2, {0: [doc("c", 3, city="Oslo"), doc("a", 4, city="Quito")]})
    loc = location(driver, b)
    assert sorted(independent_rows(loc, ["customer", "city"])) == [("a", "Quito"), ("b", None), ("c", "Oslo")]
    assert driver.dump(MAT, grown)[("c",)] == doc("c", 3, city="Oslo")
    with pytest.raises(IncompatibleSchema, match="amount"):
        driver.validate(Validate(MAT, {}, (binding(types={"amount": "string"}),)))
    with pytest.raises(IncompatibleSchema, match="key"):
        driver.validate(Validate(MAT, {}, (binding(key_name="id"),)))
    with pytest.raises(IncompatibleSchema, match="mode"):
        driver.validate(Validate(MAT, {}, (binding(delta=True),)))
    assert rt2.apply().action_description == "nothing to do"


def test_delta_updates_append(driver):
    b = binding("events", delta=True)
    rt = Runtime(driver, b)
    rt.apply()
    rt.batch(0, {0: [doc("a", 1), doc("b", 2)]})
    rt.batch(1, {0: [doc("a", 5)]}, deletes={0: [True]})
    rt.acknowledge()
    rt.acknowledge()
    assert sorted(driver.dump(MAT, b), key=lambda d: d["amount"]) == [doc("a", 1), doc("b", 2), doc("a", 5)]
    rows = independent_rows(location(driver, b), ["customer", "amount"])
    assert sorted(rows) == [("a", 1), ("a", 5), ("b", 2)]
    assert [h["operation"] for h in deltalake.DeltaTable(location(driver, b)).history()][:2] == ["WRITE", "WRITE"]


def test_orphaned_staged_files_are_cleaned_up(driver):
    b = binding()
    rt = Runtime(driver, b)
    rt.apply()
    rt.batch(0, {0: [doc("a", 1)]})
    # a shard dies mid-Store (its file is never closed), another commits but the
    # recovery log never records it: both attempts leave staged files behind
    dead = rt.open(Range(0, 99))
    dead.acknowledge(Acknowledge(state=rt.state))
    dead.flush(Flush())
    dead.store(store_msg(b, [doc("x", 9)]))
    unlogged = rt.open()
    unlogged_started, _ = rt.stage(unlogged, 1, {0: [doc("y", 9)]})
    assert len(driver.staged_files(MAT)) == 2
    # Spark re-runs batch 1: only the logged attempt is applied, the orphans are removed
    rt.batch(1, {0: [doc("b", 2)]})
    assert driver.staged_files(MAT) == []
    assert driver.dump(MAT, b) == {("a",): doc("a", 1), ("b",): doc("b", 2)}
    assert unlogged_started.state is not None


def test_identifiers_and_keys_that_need_quoting(driver):
    b = binding("odd", key_name='k"ey', types={"Amo'unt": "integer", "select": "string"})
    rt = Runtime(driver, b)
    rt.apply()
    keys = ["it's", 'quo"te', "back\\slash", "ключ", "tab\tkey", "emoji🙂"]
    rt.batch(0, {0: [{'k"ey': k, "Amo'unt": i, "select": "from"} for i, k in enumerate(keys)]})
    loaded = rt.batch(1, {0: [{'k"ey': k, "Amo'unt": 10, "select": "where"} for k in keys[:3]]})
    assert sorted(k for (k,) in loaded[0]) == sorted(keys[:3])
    view = driver.dump(MAT, b)
    assert view[("it's",)] == {'k"ey': "it's", "Amo'unt": 10, "select": "where"}
    assert sorted(independent_rows(location(driver, b), ['k"ey', "Amo'unt"])) == sorted(
        [(k, 10) for k in keys[:3]] + [(k, i) for i, k in enumerate(keys) if i >= 3]
    )


def test_integer_boolean_and_composite_keys(driver):
    ints = binding("ints", key_type="integer", key_name="id")
    bools = binding("bools", key_type="boolean", key_name="flag")
    fields = (
        Field("region", "/region", "string", is_key=True, nullable=False),
        Field("id", "/id", "integer", is_key=True, nullable=False),
        Field("amount", "/amount", "integer"),
    )
    pair = BindingSpec({"table": "pairs"}, "orders", ("/region", "/id"), fields)
    rt = Runtime(driver, ints, bools, pair)
    rt.apply()
    pairs = [{"region": r, "id": i, "amount": 1} for r in ("eu", "us") for i in (1, 2)]
    rt.batch(0, {0: [doc(1, 1, key_name="id"), doc(2, 2, key_name="id")], 1: [doc(True, 1, key_name="flag")], 2: pairs})
    loaded = rt.batch(
        1,
        {
            0: [doc(2, 5, key_name="id"), doc(3, 3, key_name="id")],
            1: [doc(True, 2, key_name="flag"), doc(False, 2, key_name="flag")],
            2: [{"region": "eu", "id": 2, "amount": 7}, {"region": "us", "id": 3, "amount": 7}],
        },
    )
    assert loaded == {
        0: {(2,): doc(2, 2, key_name="id")},
        1: {(True,): doc(True, 1, key_name="flag")},
        2: {("eu", 2): {"region": "eu", "id": 2, "amount": 1}},
    }
    assert set(driver.dump(MAT, pair)) == {("eu", 1), ("eu", 2), ("us", 1), ("us", 2), ("us", 3)}
    assert driver.dump(MAT, bools) == {(True,): doc(True, 2, key_name="flag"), (False,): doc(False, 2, key_name="flag")}


def test_a_replaced_table_is_detected_before_loads(driver):
    import shutil

    b = binding()
    rt = Runtime(driver, b)
    rt.apply()
    rt.batch(0, {0: [doc("a", 1)]})
    shutil.rmtree(location(driver, b))
    rt.apply()  # an empty table, without batch 0
    t = rt.open()
    t.acknowledge(Acknowledge(state=rt.state))
    with pytest.raises(RecoveryError, match="read-committed"):
        t.load(Load(0, (("a",),)))
    t.close()


def test_resource_path_and_config_errors(tmp_path):
    from tidemark.errors import SpecError

    d = DeltaDriver({"path": str(tmp_path / "lake")})
    absolute = BindingSpec({"path": str(tmp_path / "elsewhere" / "t")}, "orders", ("/customer",), binding().fields)
    relative = BindingSpec({"path": "nested/t"}, "orders", ("/customer",), binding().fields)
    assert d.model(absolute).name == str(tmp_path / "elsewhere" / "t")
    assert d.model(relative).name == str(tmp_path / "lake" / "nested" / "t")
    with pytest.raises(SpecError, match="path"):
        DeltaDriver({})
    with pytest.raises(SpecError, match="table"):
        d.model(BindingSpec({"table": "../up"}, "orders", ("/customer",), binding().fields))


def bad(line, reason="not an object", value="not json"):
    return {"binding": 0, "location": f"orders.json:{line}", "key_json": None, "reason": reason, "value": value}


def test_quarantine_is_applied_once_with_the_batch(driver, armed):
    b = binding()
    rt = Runtime(driver, b)
    rt.apply()
    rt.batch(0, {0: [doc("a", 1)]})
    t = rt.open()
    started, _ = rt.stage(
        t,
        1,
        {0: [doc("b", 2)]},
        quarantine=[bad(3), bad(9, "/amount: not an integer", {"customer": "c", "amount": "x"})],
    )
    t.close()
    stage = started.state.updated["stages"][Range().name]
    assert [n for _, n in stage["quarantine"]] == [2]
    assert driver.quarantined(MAT) == []  # staged, not applied
    rt.state = apply_update(rt.state, started.state)
    rt.last = rt.cp(1)
    # killed while appending the dead letters: the data table committed, the quarantine did not
    armed("mid_apply:raise@2")
    with pytest.raises(TidemarkError, match="injected fault at mid_apply"):
        rt.acknowledge()
    assert driver.dump(MAT, b) == {("a",): doc("a", 1), ("b",): doc("b", 2)}
    assert driver.quarantined(MAT) == []
    armed("")
    for _ in range(3):  # re-run the coordinator apply any number of times
        rt.acknowledge()
    want = [
        {
            "materialization": MAT,
            "batch_id": 1,
            "location": "orders.json:3",
            "key_json": None,
            "reason": "not an object",
            "value": "not json",
        },
        {
            "materialization": MAT,
            "batch_id": 1,
            "location": "orders.json:9",
            "key_json": None,
            "reason": "/amount: not an integer",
            "value": '{"customer":"c","amount":"x"}',
        },
    ]
    assert driver.quarantined(MAT) == want
    qt = driver.quarantine_location
    assert qt == str(driver.root) + "/tidemark_quarantine"
    assert sorted(independent_rows(qt, ["batch_id", "location"])) == [(1, "orders.json:3"), (1, "orders.json:9")]
    assert deltalake.DeltaTable(qt).transaction_version(app_id(MAT, "chk-1")) == 1
    assert driver.dump(MAT, b) == {("a",): doc("a", 1), ("b",): doc("b", 2)}
    assert driver.staged_files(MAT) == []
    # a batch without invalid documents replaces the range's list; a later one appends once
    rt.batch(2, {0: [doc("c", 3)]})
    rt.batch(3, {0: [doc("d", 4)]}, quarantine=[bad(4)])
    rt.acknowledge()
    assert [(r["batch_id"], r["location"]) for r in driver.quarantined(MAT)] == [
        (1, "orders.json:3"),
        (1, "orders.json:9"),
        (3, "orders.json:4"),
    ]
    # another materialization shares the table; drop removes only this one's rows
    other = Runtime(driver, binding("others"), checkpoint_id="chk-o", mat="other")
    other.apply()
    other.batch(0, {0: [doc("z", 1)]}, quarantine=[bad(1)])
    assert [r["location"] for r in driver.quarantined("other")] == ["orders.json:1"]
    assert f"deleted 3 quarantine rows of {MAT!r}" in driver.drop(MAT, (b,))
    assert driver.quarantined(MAT) == []
    assert [r["materialization"] for r in driver.quarantined("other")] == ["other"]
    assert independent_rows(qt, ["materialization"]) == [("other",)]


def test_the_quarantine_table_cannot_be_bound(driver):
    with pytest.raises(SpecError, match="dead-letter"):
        driver.model(BindingSpec({"table": "tidemark_quarantine"}, "orders", ("/customer",), binding().fields))


def test_a_table_of_an_older_tidemark_gets_its_records_on_the_next_apply(driver):
    """A table made before identity records (and owners) existed: the next Apply records them
    (delta-rs refuses a table property it does not know unless told; the upgrade trial's
    ``Error parsing property 'tidemark.identity'``), and the view goes on."""
    from tidemark.drivers.common.identity import PROPERTY
    from tidemark.drivers.lake.model import KEY_PROPERTY, MODE_PROPERTY, OWNER_PROPERTY

    b = binding()
    model = driver.model(b)
    deltalake.DeltaTable.create(
        model.name,
        schema=model.arrow_schema(),
        configuration={KEY_PROPERTY: '["customer"]', MODE_PROPERTY: "false"},
        raise_if_key_not_exists=False,
    )
    record = {"materialization": MAT, "checkpoint_id": "chk-1", "resource": ["customers"]}
    applied = driver.apply(Apply(MAT, driver.config, (b,), checkpoint_id="chk-1", identities=(record,)))
    assert "create" not in applied.action_description
    conf = deltalake.DeltaTable(model.name).metadata().configuration
    assert json.loads(conf[OWNER_PROPERTY]) == {"materialization": MAT, "checkpoint_id": "chk-1"}
    assert json.loads(conf[PROPERTY])["materialization"] == MAT
    rt = Runtime(driver, b)
    rt.batch(0, {0: [doc("a", 1)]})
    assert driver.dump(MAT, b) == {("a",): doc("a", 1)}
