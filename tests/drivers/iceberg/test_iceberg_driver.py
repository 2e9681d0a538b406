"""The Iceberg driver against real Iceberg tables (pyiceberg, no JVM, no mocks), driven through the
protocol the way the runtime does (``Runtime`` of tests/support/delta_support.py: the recovery log is a list).

Every test runs on both SQL catalogs: a SQLite file (the embedded case) and PostgreSQL (a shared
catalog; one catalog name per test, its rows deleted afterwards).  ``independent_rows`` reads a
table without pyiceberg's scan: the current metadata file named by the catalog's own SQL table,
JSON-parsed, and the live Parquet files read by DuckDB.  Needs neither Spark nor delta-rs.
"""

from __future__ import annotations

import json
import os
import sqlite3
import threading
import uuid

import pytest

from tests.support.driver_protocol import MAT, binding, doc, store_msg
from tidemark import faults
from tidemark.errors import FencedOff, IncompatibleSchema, RecoveryError, SpecError, TidemarkError
from tidemark.protocol.messages import Acknowledge, Apply, BindingSpec, Field, Flush, Load, Range, StartCommit, Validate
from tidemark.runtime.merge_patch import apply_update

pytest.importorskip("pyiceberg")
from tests.support.iceberg_support import Runtime, config, drop_pg_catalog, independent_rows
from tidemark.drivers.iceberg import IcebergDriver, applied_property
from tidemark.drivers.registry import load_driver
from tidemark.testing.conformance import assert_conformance

# --------------------------------------------------------------------------- helpers


@pytest.fixture(params=["sqlite", "postgres"])
def make(request, tmp_path):
    """A factory of drivers on one endpoint (each call: a new driver, its own catalog connection)."""
    kind = request.param
    url = request.getfixturevalue("postgres_url") if kind == "postgres" else None
    name = f"tm_{uuid.uuid4().hex[:10]}"
    made = []

    def factory(**more):
        d = IcebergDriver({**config(tmp_path, kind, url, name), **more})
        made.append(d)
        return d

    yield factory
    for d in made:
        d.close()
    if url:
        drop_pg_catalog(url, name)


@pytest.fixture
def driver(make):
    return make()


@pytest.fixture
def armed(monkeypatch):
    def arm(spec):
        monkeypatch.setenv(faults.ENV, spec)
        faults.rearm()

    yield arm
    monkeypatch.delenv(faults.ENV, raising=False)
    faults.rearm()


def metadata(driver, b) -> dict:
    """The table's current metadata JSON, found through the catalog's SQL table (not pyiceberg)."""
    model = driver.model(b)
    uri = driver.settings.properties["uri"]
    query = (
        "SELECT metadata_location FROM iceberg_tables WHERE catalog_name = ? AND table_namespace = ? AND table_name = ?"
    )
    args = (driver.settings.catalog_name, ".".join(model.identifier[:-1]), model.identifier[-1])
    if uri.startswith("sqlite:///"):
        with sqlite3.connect(uri[len("sqlite:///") :]) as con:
            ((location,),) = con.execute(query, args).fetchall()
    else:
        import psycopg

        with psycopg.connect(uri.replace("postgresql+psycopg://", "postgresql://")) as con:
            ((location,),) = con.execute(query.replace("?", "%s"), args).fetchall()
    with open(location.removeprefix("file://"), encoding="utf-8") as f:
        return json.load(f)


def batches(driver, b) -> list[int]:
    """The tidemark batch of every snapshot of the table, oldest first (from the metadata JSON)."""
    meta = metadata(driver, b)
    return [
        int(s["summary"]["tidemark.batch"])
        for s in sorted(meta.get("snapshots", []), key=lambda s: s["sequence-number"])
    ]


class Owned(Runtime):
    """The runtime's Apply carries its checkpoint id, so tables record their owner."""

    def apply(self, checkpoint_id=None):
        return super().apply(checkpoint_id or self.checkpoint_id)


# --------------------------------------------------------------------------- tests


def test_registry_config_and_redaction(tmp_path):
    d = load_driver("iceberg", config(tmp_path, "sqlite"))
    assert isinstance(d, IcebergDriver)
    assert d.capabilities().commit_pattern.value == "idempotent-apply-coordinator"
    with pytest.raises(SpecError, match="catalog"):
        IcebergDriver({"namespace": "v"})
    with pytest.raises(SpecError, match="namespace"):
        IcebergDriver({"catalog": {"warehouse": str(tmp_path)}})
    embedded = IcebergDriver({"catalog": {"warehouse": str(tmp_path / "w")}, "namespace": "v"})
    assert embedded.settings.properties["uri"] == f"sqlite:///{tmp_path / 'w' / 'catalog.db'}"
    resolved = IcebergDriver.resolve_config(
        {"catalog": {"uri": "sqlite:///cat.db", "warehouse": "wh"}, "staging": "st", "namespace": "v"}, str(tmp_path)
    )
    assert resolved["catalog"] == {"uri": f"sqlite:///{tmp_path / 'cat.db'}", "warehouse": str(tmp_path / "wh")}
    assert resolved["staging"] == str(tmp_path / "st")
    secret = IcebergDriver(
        {
            "catalog": {
                "uri": "postgresql://u:s3cr3t@127.0.0.1:1/db",
                "warehouse": str(tmp_path),
                "s3.secret-access-key": "hush",
            },
            "namespace": "v",
        }
    )
    assert secret.settings.properties["uri"].startswith("postgresql+psycopg://")
    assert "s3cr3t" not in repr(secret)
    with pytest.raises(TidemarkError) as exc_info:
        secret.catalog
    assert "s3cr3t" not in str(exc_info.value) and "hush" not in str(exc_info.value)
    with pytest.raises(SpecError, match="table"):
        d.model(BindingSpec({"table": "a.b"}, "orders", ("/customer",), binding().fields))


@pytest.mark.slow  # CI runs it after the default suite (-m slow)
def test_conformance_kit_passes_on_a_postgres_catalog(tmp_path, postgres_url):
    name = f"tm_kit_{uuid.uuid4().hex[:8]}"
    try:
        report = assert_conformance(lambda: IcebergDriver(config(tmp_path, "postgres", postgres_url, name)), quick=True)
    finally:
        drop_pg_catalog(postgres_url, name)
    assert report.commit_pattern == "idempotent-apply-coordinator"
    assert report.properties["read-committed"].checks > 0


def test_round_trip_typed_columns_and_one_snapshot_per_batch(driver):
    b = binding()
    rt = Runtime(driver, b)
    assert "create iceberg table views.customers" in rt.apply().action_description
    assert rt.batch(0, {0: [doc("a", 1), doc("b", 20), doc("c", 3)]}) == {0: {}}
    loaded = rt.batch(1, {0: [doc("a", 2), doc("c", 3)]}, deletes={0: [False, True]})
    assert loaded == {0: {("a",): doc("a", 1), ("c",): doc("c", 3)}}
    want = {("a",): doc("a", 2), ("b",): doc("b", 20)}
    assert driver.dump(MAT, b) == want
    assert sorted(independent_rows(driver, b, ["customer", "amount", "score", "vip", "tags"])) == [
        ("a", 2, 1.0, False, '["2"]'),
        ("b", 20, 10.0, True, '["20"]'),
    ]
    meta = metadata(driver, b)
    schema = next(s for s in meta["schemas"] if s["schema-id"] == meta["current-schema-id"])
    assert {f["name"]: (f["type"], f["required"]) for f in schema["fields"]} == {
        "customer": ("string", True),
        "amount": ("long", False),
        "score": ("double", False),
        "vip": ("boolean", False),
        "tags": ("string", False),
        "flow_document": ("string", False),  # a lean table: the document's remainder
    }
    assert schema["identifier-field-ids"] == [1]
    props = meta["properties"]
    assert props["commit.retry.num-retries"] == "0"
    assert json.loads(props[applied_property(MAT)]) == {"checkpoint_id": "chk-1", "batch": 1}
    snaps = sorted(meta["snapshots"], key=lambda s: s["sequence-number"])
    assert [
        (
            s["summary"]["operation"],
            s["summary"]["tidemark.batch"],
            s["summary"]["tidemark.checkpoint-id"],
            s["summary"]["tidemark.materialization"],
        )
        for s in snaps
    ] == [("append", "0", "chk-1", MAT), ("overwrite", "1", "chk-1", MAT)]
    assert driver.staged_files(MAT) == []


def test_nothing_is_visible_before_the_coordinator_applies(driver):
    b = binding()
    rt = Runtime(driver, b)
    rt.apply()
    rt.batch(0, {0: [doc("a", 1)]})
    t = rt.open()
    assert list(t.load(Load(0, (("a",), ("zz",))))) == []  # before Acknowledged: answered at Flush
    t.acknowledge(Acknowledge(state=rt.state))
    late, _ = t.flush(Flush())
    assert [(r.keys, r.docs) for r in late] == [((("a",),), (doc("a", 1),))]
    t.store(store_msg(b, [doc("a", 5)], exists=[True]))
    started = t.start_commit(StartCommit(rt.cp(1)))
    t.close()
    assert [(f[0], f[2]) for f in started.state.updated["stages"][Range().name]["files"]] == [("views.customers", 1)]
    assert driver.dump(MAT, b) == {("a",): doc("a", 1)}  # staged, not applied
    rt.log(1, started)
    assert driver.dump(MAT, b) == {("a",): doc("a", 5)}


def test_coordinator_acknowledge_is_idempotent(driver, armed):
    sums, events = binding("sums"), binding("events", delta=True)
    rt = Runtime(driver, sums, events)
    rt.apply()
    rt.batch(0, {0: [doc("a", 1), doc("b", 2)], 1: [doc("a", 1), doc("b", 2)]})
    t = rt.open()
    started, _ = rt.stage(t, 1, {0: [doc("a", 3), doc("c", 4)], 1: [doc("a", 3)]}, deletes={0: [False, False]})
    t.close()
    rt.state, rt.last = apply_update(rt.state, started.state), rt.cp(1)
    # killed during the second table's apply (events < sums): the first table committed, the second did not
    armed("mid_apply:raise@2")
    with pytest.raises(TidemarkError, match="injected fault at mid_apply"):
        rt.acknowledge()
    assert (batches(driver, events), batches(driver, sums)) == ([0, 1], [0])
    armed("iceberg_after_commit:raise@1")  # killed right after the second table's commit
    with pytest.raises(TidemarkError, match="iceberg_after_commit"):
        rt.acknowledge()
    armed("")
    for _ in range(3):  # re-run any number of times: no second snapshot for a batch
        rt.acknowledge()
    assert batches(driver, events) == batches(driver, sums) == [0, 1]
    assert driver.dump(MAT, sums) == {("a",): doc("a", 3), ("b",): doc("b", 2), ("c",): doc("c", 4)}
    assert sorted(d["amount"] for d in driver.dump(MAT, events)) == [1, 2, 3]
    assert driver.staged_files(MAT) == []


def test_two_coordinators_racing_apply_the_batch_once(make):
    first, second = make(), make()  # two drivers: two catalog connections
    b = binding()
    rt = Runtime(first, b)
    rt.apply()
    rt.batch(0, {0: [doc("a", 1), doc("b", 1)]})
    t = rt.open()
    started, _ = rt.stage(t, 1, {0: [doc("a", 2), doc("c", 1)]}, deletes={0: [False, False]})
    t.close()
    rt.state, rt.last = apply_update(rt.state, started.state), rt.cp(1)
    both_read = threading.Barrier(2, timeout=60)  # both read "batch 0 applied" before either commits
    errors = []

    def apply(d):
        try:
            d.coordinator_acknowledge(MAT, rt.state, rt.last, (b,))
        except Exception as exc:
            errors.append(exc)

    with faults.hooked("mid_apply", lambda _name: both_read.wait()):
        threads = [threading.Thread(target=apply, args=(d,)) for d in (first, second)]
        for th in threads:
            th.start()
        for th in threads:
            th.join(120)
    assert not errors, errors
    assert batches(first, b) == [0, 1]  # the loser's compare-and-swap failed; its reload found batch 1
    assert first.dump(MAT, b) == {("a",): doc("a", 2), ("b",): doc("b", 1), ("c",): doc("c", 1)}


def test_a_zombie_session_is_never_applied(driver):
    b = binding()
    rt = Runtime(driver, b)
    rt.apply()
    rt.batch(0, {0: [doc("a", 1)]})
    # a task attempt stages batch 1 and is then superseded: a retry of its range stages it
    # again, and only the retry's patch reaches the recovery log
    zombie = rt.open()
    zombie_started, _ = rt.stage(zombie, 1, {0: [doc("a", 100), doc("z", 100)]})
    retry = rt.open()
    started, _ = rt.stage(retry, 1, {0: [doc("a", 2)]})
    rt.log(1, started)
    # the zombie finishes after the log: its patch names files no log entry will ever hold
    assert zombie_started.state.updated["stages"][Range().name]["files"]
    assert driver.dump(MAT, b) == {("a",): doc("a", 2)}
    assert driver.staged_files(MAT) == []  # the zombie's files are removed with the applied ones
    rt.acknowledge()
    assert batches(driver, b) == [0, 1]


def test_owner_refusal_and_positions(make):
    driver = make()
    b = binding()
    rt = Owned(driver, b, checkpoint_id="chk-1")
    rt.apply()
    rt.batch(0, {0: [doc("a", 1)]})
    rt.batch(1, {0: [doc("b", 1)]})
    (pos,) = driver.positions(MAT, (b,))
    assert (pos.place, pos.materialization, pos.checkpoint_id, pos.batch_id, pos.resource) == (
        "iceberg table views.customers",
        MAT,
        "chk-1",
        1,
        ("customers",),
    )
    other = make()
    with pytest.raises(
        RecoveryError,
        match=r"belongs to materialization 'view' of tidemark checkpoint chk-1.*"
        r"Nothing was changed",
    ):
        Owned(other, binding(extra=(Field("city", "/city", "string"),)), checkpoint_id="chk-2").apply()
    assert "city" not in {
        f.name for f in driver.open_table(driver.model(b).name).schema().fields
    }  # nothing was changed
    intruder = Runtime(other, b, checkpoint_id="chk-2")
    intruder.state = rt.state
    t = intruder.open()
    started, _ = intruder.stage(t, 0, {0: [doc("x", 9)]})
    t.close()
    with pytest.raises(FencedOff, match="belongs to materialization 'view'"):
        intruder.log(0, started)
    assert driver.dump(MAT, b) == {("a",): doc("a", 1), ("b",): doc("b", 1)}
    assert batches(driver, b) == [0, 1]
    assert driver.positions("nobody", (binding("missing"),)) == []


def test_an_empty_batch_is_recorded_with_an_empty_snapshot(driver):
    b = binding()
    rt = Runtime(driver, b)
    rt.apply()
    rt.batch(0, {0: [doc("a", 1)]})
    rt.batch(1, {0: [doc("zz", 0)]}, deletes={0: [True]})  # deletes a key the table does not have
    rt.batch(2, {})
    rt.acknowledge()
    assert batches(driver, b) == [0, 1, 2]
    assert driver.dump(MAT, b) == {("a",): doc("a", 1)}


def test_a_new_checkpoint_is_not_mistaken_for_applied_batches(driver):
    b = binding()
    rt = Runtime(driver, b)
    rt.apply()
    rt.batch(0, {0: [doc("a", 1)]})
    rt.batch(1, {0: [doc("b", 1)]})
    Runtime(driver, b, checkpoint_id="chk-2").batch(0, {0: [doc("c", 1)]})  # batch ids restart at 0
    assert set(driver.dump(MAT, b)) == {("a",), ("b",), ("c",)}


def test_schema_growth(driver):
    b = binding()
    rt = Runtime(driver, b)
    rt.apply()
    rt.batch(0, {0: [doc("a", 1)]})
    t = rt.open()  # batch 1 is staged with the old schema; the schema grows before it is applied
    started, _ = rt.stage(t, 1, {0: [doc("b", 2)]})
    t.close()
    grown = binding(extra=(Field("city", "/city", "string"),))
    rt2 = Runtime(driver, grown)
    rt2.state = rt.state
    assert "add column city string to views.customers" in rt2.apply().action_description
    rt2.log(1, started)
    rt2.batch(2, {0: [doc("c", 3, city="Oslo"), doc("a", 4, city="Quito")]})
    assert sorted(independent_rows(driver, b, ["customer", "city"])) == [("a", "Quito"), ("b", None), ("c", "Oslo")]
    assert driver.dump(MAT, grown)[("c",)] == doc("c", 3, city="Oslo")
    with pytest.raises(IncompatibleSchema, match="amount"):
        driver.validate(_validate(binding(types={"amount": "string"})))
    with pytest.raises(IncompatibleSchema, match="key"):
        driver.validate(_validate(binding(key_name="id")))
    with pytest.raises(IncompatibleSchema, match="mode"):
        driver.validate(_validate(binding(delta=True)))
    assert rt2.apply().action_description == "nothing to do"


def _validate(b):
    return Validate(MAT, {}, (b,))


def test_partition_by_a_column_and_keys_that_move_between_partitions(driver):
    """``partition_by: vip``: identity partitions of that column; a key whose value moves to
    another partition is in exactly one of them after the apply. Another partitioning of the
    existing table, or a non-scalar column, is refused."""
    import dataclasses

    b = dataclasses.replace(binding(), resource={"table": "customers", "partition_by": "vip"})
    rt = Runtime(driver, b)
    rt.apply()
    rt.batch(0, {0: [doc("a", 1), doc("b", 20), doc("c", 3)]})
    rt.batch(1, {0: [doc("a", 30), doc("b", 5)]})  # a: vip false -> true, b: true -> false
    assert driver.dump(MAT, b) == {("a",): doc("a", 30), ("b",): doc("b", 5), ("c",): doc("c", 3)}
    table = driver.open_table(driver.model(b).name)
    assert [f.name for f in table.spec().fields] == ["vip"]
    rows = sorted((k, str(v).lower()) for k, v in independent_rows(driver, b, ["customer", "vip"]))  # (hive paths)
    assert rows == [("a", "true"), ("b", "false"), ("c", "false")]
    assert {r["vip"] for r in table.inspect.partitions().column("partition").to_pylist()} == {True, False}
    other = dataclasses.replace(b, resource={"table": "customers", "partition_by": "amount"})
    with pytest.raises(IncompatibleSchema, match=r"partitioned by \['vip'\], the binding asks for \['amount'\]"):
        Runtime(driver, other).apply()
    with pytest.raises(SpecError, match="partition_by must name one of its scalar columns"):
        Runtime(driver, dataclasses.replace(b, resource={"table": "t2", "partition_by": "tags"})).apply()


def test_delta_updates_append(driver):
    b = binding("events", delta=True)
    rt = Runtime(driver, b)
    rt.apply()
    rt.batch(0, {0: [doc("a", 1), doc("b", 2)]})
    rt.batch(1, {0: [doc("a", 5)]}, deletes={0: [True]})
    rt.acknowledge()
    assert sorted(driver.dump(MAT, b), key=lambda d: d["amount"]) == [doc("a", 1), doc("b", 2), doc("a", 5)]
    assert sorted(independent_rows(driver, b, ["customer", "amount"])) == [("a", 1), ("a", 5), ("b", 2)]
    meta = metadata(driver, b)
    assert [s["summary"]["operation"] for s in meta["snapshots"]] == ["append", "append"]
    assert (
        next(s for s in meta["schemas"] if s["schema-id"] == meta["current-schema-id"])["identifier-field-ids"] == []
    )  # keys repeat in an append-only table


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
        deletes={2: [False, False]},
    )
    assert loaded == {
        0: {(2,): doc(2, 2, key_name="id")},
        1: {(True,): doc(True, 1, key_name="flag")},
        2: {("eu", 2): {"region": "eu", "id": 2, "amount": 1}},
    }
    assert set(driver.dump(MAT, pair)) == {("eu", 1), ("eu", 2), ("us", 1), ("us", 2), ("us", 3)}
    assert driver.dump(MAT, pair)[("eu", 2)]["amount"] == 7
    assert driver.dump(MAT, bools) == {(True,): doc(True, 2, key_name="flag"), (False,): doc(False, 2, key_name="flag")}


def test_keys_that_need_quoting(driver):
    b = binding("odd", key_name='k"ey', types={"Amo'unt": "integer", "select": "string"})
    rt = Runtime(driver, b)
    rt.apply()
    keys = ["it's", 'quo"te', "back\\slash", "ключ", "tab\tkey", "emoji🙂"]
    rt.batch(0, {0: [{'k"ey': k, "Amo'unt": i, "select": "from"} for i, k in enumerate(keys)]})
    loaded = rt.batch(1, {0: [{'k"ey': k, "Amo'unt": 10, "select": "where"} for k in keys[:3]]})
    assert sorted(k for (k,) in loaded[0]) == sorted(keys[:3])
    assert driver.dump(MAT, b)[("it's",)] == {'k"ey': "it's", "Amo'unt": 10, "select": "where"}


def test_a_replaced_table_is_detected_before_loads(driver):
    b = binding()
    rt = Runtime(driver, b)
    rt.apply()
    rt.batch(0, {0: [doc("a", 1)]})
    driver.drop(MAT, (b,))
    rt.apply()  # an empty table, without batch 0
    t = rt.open()
    t.acknowledge(Acknowledge(state=rt.state))
    with pytest.raises(RecoveryError, match="read-committed"):
        t.load(Load(0, (("a",),)))
    t.close()


def test_a_table_rolled_back_is_behind_the_recovery_log(driver):
    b = binding()
    rt = Owned(driver, b)
    rt.apply()
    rt.batch(0, {0: [doc("a", 1)]})
    rt.batch(1, {0: [doc("a", 2)]})
    table = driver.open_table(driver.model(b).name)
    first = min(table.snapshots(), key=lambda s: s.sequence_number)
    table.manage_snapshots().rollback_to_snapshot(first.snapshot_id).commit()  # the property still says 1
    assert json.loads(metadata(driver, b)["properties"][applied_property(MAT)])["batch"] == 1
    assert [p.batch_id for p in driver.positions(MAT, (b,))] == [0]  # so the coordinator refuses the table
    t = rt.open()
    t.acknowledge(Acknowledge(state=rt.state))
    with pytest.raises(RecoveryError, match="read-committed"):
        t.load(Load(0, (("a",),)))
    t.close()
    with pytest.raises(RecoveryError, match="staged files are gone"):  # re-applying batch 1 cannot skip it
        rt.acknowledge()


def test_pyiceberg_commit_retries_stay_off(driver):
    b = binding()
    rt = Runtime(driver, b)
    rt.apply()
    table = driver.open_table(driver.model(b).name)
    with table.transaction() as txn:  # someone turned pyiceberg's retries back on
        txn.set_properties({"commit.retry.num-retries": "4"})
    rt.batch(0, {0: [doc("a", 1)]})
    assert metadata(driver, b)["properties"]["commit.retry.num-retries"] == "0"
    assert batches(driver, b) == [0]


def test_drop_removes_tables_and_staged_files(driver):
    b = binding()
    rt = Runtime(driver, b)
    rt.apply()
    rt.batch(0, {0: [doc("a", 1)]})
    t = rt.open()
    rt.stage(t, 1, {0: [doc("b", 1)]})  # staged, never logged
    assert parquet_files(driver.settings.warehouse)
    assert driver.drop(MAT, (b,)) == ["dropped iceberg table views.customers", f"deleted staged files of {MAT!r}"]
    assert driver.positions(MAT, (b,)) == []
    assert parquet_files(driver.settings.warehouse) == []  # data files and staged files


def parquet_files(root) -> list[str]:
    return [os.path.join(d, f) for d, _, names in os.walk(root) for f in names if f.endswith(".parquet")]


# --------------------------------------------------------------------------- object storage


@pytest.fixture
def s3_endpoint():
    """A moto S3 server (a subprocess on a free port of 127.0.0.1) with the bucket ``warehouse``."""
    pytest.importorskip("moto")
    import socket
    import subprocess
    import sys
    import time
    import urllib.request

    import pyarrow.fs as pafs

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    proc = subprocess.Popen(
        [sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(port)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 30
        while True:
            try:
                urllib.request.urlopen(f"{url}/moto-api/", timeout=1).close()
                break
            except OSError:
                if proc.poll() is not None or time.monotonic() > deadline:
                    pytest.fail(f"moto server did not start: {proc.stderr.read().decode()[-2000:]}")
                time.sleep(0.1)
        pafs.S3FileSystem(
            endpoint_override=url,
            access_key="testing",
            secret_key="testing",
            region="us-east-1",
            scheme="http",
            allow_bucket_creation=True,
        ).create_dir("warehouse")
        yield url
    finally:
        proc.terminate()
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def test_round_trip_with_the_warehouse_on_s3(tmp_path, s3_endpoint):
    import pyarrow.fs as pafs

    d = IcebergDriver(
        {
            "catalog": {
                "uri": f"sqlite:///{tmp_path / 'catalog.db'}",
                "warehouse": "s3://warehouse/lake",
                "s3.endpoint": s3_endpoint,
                "s3.access-key-id": "testing",
                "s3.secret-access-key": "testing",
                "s3.region": "us-east-1",
            },
            "namespace": "views",
        }
    )
    try:
        assert d.staging == "s3://warehouse/lake/_tidemark_staging"
        b, events = binding(), binding("events", delta=True)
        rt = Runtime(d, b, events)
        rt.apply()
        rt.batch(0, {0: [doc("a", 1), doc("b", 2)], 1: [doc("a", 1)]})
        loaded = rt.batch(1, {0: [doc("a", 3), doc("b", 2)], 1: [doc("a", 3)]}, deletes={0: [False, True]})
        rt.acknowledge()
        assert loaded[0] == {("a",): doc("a", 1), ("b",): doc("b", 2)}
        assert d.dump(MAT, b) == {("a",): doc("a", 3)}
        assert sorted(x["amount"] for x in d.dump(MAT, events)) == [1, 3]
        assert [int(s["tidemark.batch"]) for s in d.snapshots(b)] == [0, 1]
        assert d.staged_files(MAT) == []
        s3 = pafs.S3FileSystem(
            endpoint_override=s3_endpoint, access_key="testing", secret_key="testing", region="us-east-1", scheme="http"
        )
        files = s3.get_file_info(pafs.FileSelector("warehouse/lake/views/customers", recursive=True))
        assert any(f.path.endswith(".parquet") for f in files) and any(f.path.endswith(".metadata.json") for f in files)
        assert not os.path.exists(tmp_path / "lake")  # nothing went to the local disk but the catalog
    finally:
        d.close()


def test_another_catalog_type_is_loaded_by_pyiceberg_with_its_properties(tmp_path):
    """``type: rest`` (untestable here: no REST server installs from the registries) goes to
    pyiceberg's ``load_catalog`` with the given properties; a missing ``uri`` is refused, and
    the SQL catalog stays the default."""
    from tidemark.drivers.iceberg.settings import IcebergSettings

    rest = IcebergSettings.from_config(
        {
            "catalog": {"type": "rest", "uri": "http://127.0.0.1:1", "warehouse": "s3://w/x", "token": "s3cr3t"},
            "namespace": "views",
        }
    )
    assert rest.kind == "rest" and rest.properties["uri"] == "http://127.0.0.1:1" and "s3cr3t" in rest.secrets
    with pytest.raises(SpecError, match="a rest catalog needs catalog.uri"):
        IcebergSettings.from_config({"catalog": {"type": "rest", "warehouse": "s3://w/x"}, "namespace": "views"})
    assert IcebergSettings.from_config({"catalog": {"warehouse": str(tmp_path)}, "namespace": "v"}).kind == "sql"
