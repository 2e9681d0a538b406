"""``tidemark rebuild`` into Delta, Iceberg and the store, without Spark.

The shadow (the table ``customers__tm_rebuild``; the store folder ``view__rebuild``) is built
by the plain runner while the live view keeps committing. The cut-over: one overwrite of the
live table (Iceberg: one transaction with its schema and properties; Delta: the rows and
schema in one commit, the properties in a second), or one exchange of the store's folders.
A reader polling the live view sees only whole old views or the whole new one, a table's
earlier versions stay readable (time travel), and the view equals an oracle over all the
input. The kill matrix SIGKILLs the rebuild at each point of the build and of the cut-over.
"""

from __future__ import annotations

import json
import os
import signal

import pytest

from tests.support import plain
from tests.support.harness import arm_in_sequence, fired
from tests.support.helpers import orders_spec, skip_unless_required, write_orders
from tests.support.rebuild_support import (
    assert_whole_readings,
    edit,
    oracle,
    rebuild_child,
    rebuild_while_live_commits,
    total,
)
from tidemark.runtime.rebuild import Rebuild, read_record
from tidemark.spec import load_spec

KILLED = -signal.SIGKILL


class Delta:
    name = "delta"

    def __init__(self, tmp):
        self.root = str(tmp / "lake")

    def endpoint(self) -> dict:
        return {"delta": {"path": self.root}}

    def view(self, key: str) -> dict:
        from deltalake import DeltaTable
        from deltalake.exceptions import TableNotFoundError

        try:
            return documents(DeltaTable(os.path.join(self.root, "customers")).to_pyarrow_table(), key)
        except TableNotFoundError:
            return {}

    def versions(self) -> int:
        from deltalake import DeltaTable

        return DeltaTable(os.path.join(self.root, "customers")).version()

    def tables(self) -> set[str]:
        return {n for n in os.listdir(self.root) if not n.startswith("_")}


class Iceberg:
    name = "iceberg"

    def __init__(self, tmp):
        self.catalog = {"uri": f"sqlite:///{tmp / 'catalog.db'}", "warehouse": str(tmp / "warehouse")}

    def endpoint(self) -> dict:
        return {"iceberg": {"catalog": self.catalog, "namespace": "views"}}

    def _catalog(self):
        from pyiceberg.catalog.sql import SqlCatalog

        return SqlCatalog("tidemark", **self.catalog)

    def view(self, key: str) -> dict:
        from pyiceberg.exceptions import NoSuchTableError

        try:
            return documents(self._catalog().load_table(("views", "customers")).scan().to_arrow(), key)
        except NoSuchTableError:
            return {}

    def versions(self) -> int:
        return len(self._catalog().load_table(("views", "customers")).snapshots())

    def tables(self) -> set[str]:
        return {t[-1] for t in self._catalog().list_tables("views")}


class Store:
    """The store's folders; its views read as users read them (``tidemark.open_view``)."""

    name = "store"

    def __init__(self, tmp):
        self.root, self.spec = str(tmp / "store"), str(tmp / "spec.yaml")

    def endpoint(self) -> dict:
        return {"store": {"path": self.root}}

    def view(self, key: str) -> dict:
        import tidemark
        from tidemark.store import Isolation

        if not os.path.isdir(os.path.join(self.root, "view")):
            return {}
        with tidemark.open_view(self.spec, "customers", isolation=Isolation.READ_COMMITTED) as view:
            return {k[0]: doc for k, doc in view.scan(ordered=False)}

    def versions(self) -> int:
        return 0

    def tables(self) -> set[str]:
        return set(os.listdir(self.root))


@pytest.fixture(params=[Delta, Iceberg, Store], ids=lambda c: c.name)
def lake(request, tmp_path):
    needs(request.param)
    return request.param(tmp_path)


def needs(endpoint) -> None:
    """The endpoint's library (an extra of the package): a skip here, a failure in CI."""
    import importlib

    module = {Delta: "deltalake", Iceberg: "pyiceberg", Store: "rocksdict"}[endpoint]
    try:
        importlib.import_module(module)
    except ImportError:
        skip_unless_required(f"{module} is not installed (pip install -e '.[dev]')")


def documents(rows, key: str) -> dict:
    """key -> document of a table's rows; fails on a key held twice."""
    keys = rows.column(key).to_pylist()
    assert len(keys) == len(set(keys)), "a key appears twice"
    return {k: json.loads(d) for k, d in zip(keys, rows.column("flow_document").to_pylist())}


def view_of(lake, key="customer") -> dict:
    return lake.view(key)


def setup(tmp_path, lake, *, deletes=0.03, shards=2):
    data = tmp_path / "data"
    write_orders(data, files=2, per_file=120, customers=30, seed=5, deletes=deletes)
    spec = orders_spec(tmp_path, data_dir=data, db_path=None, shards=shards, endpoint=lake.endpoint())
    old = str(tmp_path / "old.yaml")
    with open(spec) as a, open(old, "w") as b:
        b.write(a.read())
    assert plain.run(spec) == 0
    assert view_of(lake) == oracle(data)
    return data, spec, old


def test_a_reduce_change_is_rebuilt_while_the_live_view_commits_and_readers_see_old_or_new(tmp_path, lake):
    data, spec, old = setup(tmp_path, lake)
    edit(spec, amount="maximize")
    before = lake.versions()
    said, readings, _ = rebuild_while_live_commits(spec, old, data, lambda: total(view_of(lake)), seed=6)
    assert "now holds the view of the edited spec" in said
    new = oracle(data, amount="maximize")
    assert view_of(lake) == new
    # a lake table's batch is one commit for all shards: every old reading is a whole old view
    assert_whole_readings(readings, data, new)
    assert lake.tables() == ({"view"} if lake.name == "store" else {"customers"})  # the shadow is gone
    assert lake.versions() > before or lake.name == "store"  # a table's old versions stay (time travel)
    # the live view goes on from the rebuilt spec
    write_orders(data, files=1, per_file=120, customers=30, seed=7, start=3, deletes=0.03)
    assert plain.run(spec) == 0
    assert view_of(lake) == oracle(data, amount="maximize")
    assert read_record(str(tmp_path / "checkpoints" / "view")) is None


def test_a_key_change_is_rebuilt(tmp_path, lake):
    data, spec, _old = setup(tmp_path, lake, deletes=0.0)
    edit(spec, key="city")
    Rebuild(load_spec(spec), "view", plain.run, say=lambda s: None).run()
    assert view_of(lake, key="city") == oracle(data, key="city")
    write_orders(data, files=1, per_file=50, customers=30, seed=8, start=2)
    assert plain.run(spec) == 0
    assert view_of(lake, key="city") == oracle(data, key="city")


POINTS = ["mid_store", "after_recovery_log", "before_cutover", "replace_contents", "after_cutover"]
EXTRA = {"store": ["after_store_exchange"]}  # between the folders' exchange and the manifest's identities


@pytest.mark.chaos
@pytest.mark.chaos_full  # (SQLite's matrix, tests/runtime/test_rebuild.py, runs in the default suite)
def test_kill_at_every_point_of_build_and_cut_over_leaves_old_or_new(tmp_path, lake):
    data, spec, old = setup(tmp_path, lake)
    write_orders(data, files=1, per_file=120, customers=30, seed=6, start=2, deletes=0.03)
    assert plain.run(old) == 0
    before, after = oracle(data), oracle(data, amount="maximize")
    edit(spec, amount="maximize")
    markers = tmp_path / "markers"
    markers.mkdir()
    points = POINTS + EXTRA.get(lake.name, [])
    faults = arm_in_sequence(points, markers)
    seen = []
    for _attempt in range(len(points) + 2):
        proc = rebuild_child(spec, faults)
        view = view_of(lake)
        assert view in (before, after), proc.stderr[-2000:]
        seen.append("new" if view == after else "old")
        if proc.returncode == 0:
            break
        assert proc.returncode == KILLED, proc.stderr[-3000:]
    assert proc.returncode == 0, proc.stderr[-3000:]
    # Delta's kill at replace_contents falls between its two commits, the store's after_store_exchange
    # between its exchange and its manifest: the next attempt finishes that cut-over and never
    # reaches after_cutover
    assert fired(markers) == set(points) - ({"after_cutover"} if lake.name in ("delta", "store") else set())
    first = seen.index("new")  # old until the replacing commit, new from then on
    assert view_of(lake) == after and seen == ["old"] * first + ["new"] * (len(seen) - first), seen
    assert first >= 3, seen
    assert lake.tables() == ({"view"} if lake.name == "store" else {"customers"})
    write_orders(data, files=1, per_file=60, customers=30, seed=10, start=3, deletes=0.03)
    assert plain.run(spec) == 0
    assert view_of(lake) == oracle(data, amount="maximize")


def test_iceberg_refuses_a_type_it_cannot_change_in_place_before_anything_is_built(tmp_path):
    import yaml

    from tidemark.errors import IncompatibleSchema

    needs(Iceberg)
    lake = Iceberg(tmp_path)
    _data, spec, _old = setup(tmp_path, lake, deletes=0.0, shards=1)
    obj = yaml.safe_load(open(spec))
    obj["collections"]["orders"]["schema"]["properties"]["largest"]["type"] = "string"  # long -> string
    with open(spec, "w") as f:
        yaml.safe_dump(obj, f)
    with pytest.raises(IncompatibleSchema, match=r"column largest from long to string.*Nothing was changed"):
        Rebuild(load_spec(spec), "view", plain.run, say=lambda s: None).run()
    assert read_record(str(tmp_path / "checkpoints" / "view")) is None
    assert lake.tables() == {"customers"}
