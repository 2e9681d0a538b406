"""``tidemark rebuild`` into Delta, Iceberg and the store (and, for a key change and a bug-fix replay, every
endpoint that rebuilds: SQLite, PostgreSQL and MariaDB too), without Spark.

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
from tests.support.helpers import (
    lake_documents,
    lake_rows,
    normalize,
    orders_spec,
    skip_unless_required,
    table_rows,
    write_orders,
)
from tests.support.mysql_support import mysql_db, mysql_url
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
            dt = DeltaTable(os.path.join(self.root, "customers"))
            return lake_documents(dt.to_pyarrow_table(), key, dt.metadata().configuration)
        except TableNotFoundError:
            return {}

    def rows(self, table: str = "customers") -> list[dict]:
        from deltalake import DeltaTable
        from deltalake.exceptions import TableNotFoundError

        try:
            dt = DeltaTable(os.path.join(self.root, table))
        except TableNotFoundError:
            return []
        return lake_rows(dt.to_pyarrow_table(), dt.metadata().configuration)

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
            t = self._catalog().load_table(("views", "customers"))
            return lake_documents(t.scan().to_arrow(), key, t.properties)
        except NoSuchTableError:
            return {}

    def rows(self, table: str = "customers") -> list[dict]:
        from pyiceberg.exceptions import NoSuchTableError

        try:
            t = self._catalog().load_table(("views", table))
        except NoSuchTableError:
            return []
        return lake_rows(t.scan().to_arrow(), t.properties)

    def versions(self) -> int:
        return len(self._catalog().load_table(("views", "customers")).snapshots())

    def tables(self) -> set[str]:
        return {t[-1] for t in self._catalog().list_tables("views")}


class Sql:
    """A SQL endpoint's table, read as users read it (either form of row)."""

    def view(self, key: str) -> dict:
        return {d[key]: d for d in self.rows()}

    def rows(self, table: str = "customers") -> list[dict]:
        try:
            with self.connect() as con:
                return [normalize({0: d})[0] for d in table_rows(self.cursor(con, self.table(table)))]
        except self.missing:
            return []

    def cursor(self, con, table: str):
        return con.execute(f"SELECT * FROM {table}")


class Sqlite(Sql):
    name = "sqlite"

    def __init__(self, tmp, request):
        import sqlite3

        self.db, self.missing = str(tmp / "views.db"), sqlite3.OperationalError

    def endpoint(self) -> dict:
        return {"sqlite": {"path": self.db}}

    def connect(self):
        import contextlib
        import sqlite3

        return contextlib.closing(sqlite3.connect(self.db))

    def table(self, name="customers") -> str:
        return f'"{name}"'


class Postgres(Sql):
    name = "postgres"

    def __init__(self, tmp, request):
        import psycopg

        self.url, self.schema = request.getfixturevalue("postgres_url"), request.getfixturevalue("pg_schema")
        self.missing = psycopg.errors.UndefinedTable

    def endpoint(self) -> dict:
        return {"postgres": {"url": self.url, "schema": self.schema}}

    def connect(self):
        import psycopg

        return psycopg.connect(self.url)

    def table(self, name="customers") -> str:
        return f'"{self.schema}"."{name}"'


class Mariadb(Sql):
    name = "mysql"

    def __init__(self, tmp, request):
        import pymysql

        self.url, self.schema = request.getfixturevalue("mysql_url"), request.getfixturevalue("mysql_db")
        self.missing = pymysql.err.ProgrammingError

    def endpoint(self) -> dict:
        return {"mysql": {"url": self.url, "schema": self.schema}}

    def connect(self):
        import contextlib

        from tests.support.mysql_support import connect

        return contextlib.closing(connect(self.url))

    def cursor(self, con, table):
        cur = con.cursor()
        cur.execute(f"SELECT * FROM {table}")
        return cur

    def table(self, name="customers") -> str:
        return f"`{self.schema}`.`{name}`"


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

    def rows(self, table: str = "customers") -> list[dict]:
        import tidemark
        from tidemark.store import Isolation

        if not os.path.isdir(os.path.join(self.root, "view")):
            return []
        with tidemark.open_view(self.spec, table, isolation=Isolation.READ_COMMITTED) as view:
            return [doc for _k, doc in view.scan(ordered=False)]

    def versions(self) -> int:
        return 0

    def tables(self) -> set[str]:
        return set(os.listdir(self.root))


@pytest.fixture(params=[Delta, Iceberg, Store], ids=lambda c: c.name)
def lake(request, tmp_path):
    needs(request.param)
    return request.param(tmp_path)


@pytest.fixture(params=[Sqlite, Postgres, Mariadb, Delta, Iceberg, Store], ids=lambda c: c.name)
def endpoint(request, tmp_path):
    """Every endpoint that rebuilds a view in place."""
    needs(request.param)
    return request.param(tmp_path, request) if issubclass(request.param, Sql) else request.param(tmp_path)


def needs(endpoint) -> None:
    """The endpoint's library (an extra of the package): a skip here, a failure in CI."""
    import importlib

    module = {Delta: "deltalake", Iceberg: "pyiceberg", Store: "rocksdict"}.get(endpoint)
    if module is None:
        return
    try:
        importlib.import_module(module)
    except ImportError:
        skip_unless_required(f"{module} is not installed (pip install -e '.[dev]')")


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


def shape(rows: list[dict]) -> tuple[int, int]:
    """What a reader polls: (rows, total of the ``sum`` column) -- the old view's and the new
    one's differ."""
    return len(rows), sum(d["amount"] for d in rows)


# one shard: a SQL view's shards commit one by one, so with two a reader may see one's batch before the
# other's (the cut-over replaces every shard's rows in one transaction)
def test_a_key_change_is_rebuilt_while_the_live_view_commits(tmp_path, endpoint):
    data, spec, old = setup(tmp_path, endpoint, deletes=0.0, shards=1)
    edit(spec, key="city")
    _, readings, _ = rebuild_while_live_commits(spec, old, data, lambda: shape(endpoint.rows()), seed=8, deletes=0.0)
    new = oracle(data, key="city")
    assert view_of(endpoint, key="city") == new
    olds = {shape(list(oracle(data, files=n).values())) for n in (2, 3)}
    assert readings and set(readings) <= olds | {shape(list(new.values()))}, (set(readings), olds)
    write_orders(data, files=1, per_file=60, customers=30, seed=9, start=3)
    assert plain.run(spec) == 0
    assert view_of(endpoint, key="city") == oracle(data, key="city")


def test_a_bug_fix_replay_is_rebuilt_while_the_live_view_commits(tmp_path, endpoint):
    # a file of the source was wrong and is corrected in place; the spec is unchanged
    data, spec, old = setup(tmp_path, endpoint, deletes=0.0, shards=1)
    wrong_two = shape(list(oracle(data).values()))
    path = data / "orders-0000.json"
    lines = [json.loads(line) for line in path.read_text().splitlines()]
    path.write_text("".join(json.dumps({**d, "amount": d["amount"] + 1}) + "\n" for d in lines))  # the fix
    _, readings, _ = rebuild_while_live_commits(spec, old, data, lambda: shape(endpoint.rows()), seed=10, deletes=0.0)
    fixed = oracle(data)
    assert view_of(endpoint) == fixed
    count, fixed_total = shape(list(fixed.values()))
    wrong_three = (count, fixed_total - len(lines))  # the live view took the third file before the cut-over
    assert readings and set(readings) <= {wrong_two, wrong_three, (count, fixed_total)}, set(readings)
    write_orders(data, files=1, per_file=60, customers=30, seed=11, start=3)
    assert plain.run(spec) == 0
    assert view_of(endpoint) == oracle(data)


def add_binding(spec: str) -> None:
    """The spec with a second binding: the same source, keyed by city, into table ``cities``."""
    import copy

    import yaml

    obj = yaml.safe_load(open(spec))
    by_city = copy.deepcopy(obj["collections"]["orders"])
    by_city["key"] = ["/city"]
    by_city["schema"]["required"] = sorted({*by_city["schema"]["required"], "city"})
    obj["collections"]["by_city"] = by_city
    obj["materializations"]["view"]["bindings"].append({"source": "by_city", "resource": {"table": "cities"}})
    with open(spec, "w") as f:
        yaml.safe_dump(obj, f)


def test_a_binding_added_is_refused_by_run_and_built_from_the_sources_start_by_rebuild(tmp_path, endpoint):
    from tidemark.errors import RecoveryError

    data, spec, old = setup(tmp_path, endpoint, deletes=0.0, shards=1)
    edit(spec, amount="maximize")  # the existing binding changes too (and the new one reduces so)
    add_binding(spec)
    with pytest.raises(
        RecoveryError, match=r"the view has 1 binding\(s\), the spec 2 \(new: 'cities' \(by_city\)\).*tidemark rebuild"
    ):
        plain.run(spec)  # refused before anything changes: no table cities
    assert endpoint.rows("cities") == [] and view_of(endpoint) == oracle(data)
    _, readings, _ = rebuild_while_live_commits(spec, old, data, lambda: shape(endpoint.rows()), seed=12, deletes=0.0)
    new = oracle(data, amount="maximize")
    assert view_of(endpoint) == new
    assert {d["city"]: d for d in endpoint.rows("cities")} == oracle(data, key="city", amount="maximize")
    olds = {shape(list(oracle(data, files=n).values())) for n in (2, 3)}
    assert readings and set(readings) <= olds | {shape(list(new.values()))}, (set(readings), olds)
    write_orders(data, files=1, per_file=60, customers=30, seed=13, start=3)
    assert plain.run(spec) == 0
    assert view_of(endpoint) == oracle(data, amount="maximize")
    assert {d["city"]: d for d in endpoint.rows("cities")} == oracle(data, key="city", amount="maximize")


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
