"""Small batches: a batch that combines to at most ``small_batch_keys`` keys (counted once its
combine's map side has run) has its combined rows collected to the driver, which runs the
shard sessions (tidemark/spark/small.py)."""

from __future__ import annotations

import os

import pytest

from tests.support.endpoint_reduce import events_schema
from tests.support.helpers import compiled_oracle as oracle
from tests.support.helpers import compiled_spec as write_spec
from tests.support.helpers import sqlite_view
from tests.support.helpers import write_compiled_orders as write_stream
from tests.support.mysql_support import mysql_db, mysql_url

#: the path of a batch whose sessions run in the driver on typed values (a lean view the endpoint reduces)
TYPED = "driver (typed rows)"

pytestmark = pytest.mark.spark


def _run(spark, spec):
    from tidemark.spark.runner import run_spec

    reports = []
    run_spec(spec, spark=spark, on_batch=reports.append)
    return reports


def _small_large_small(data) -> list:
    """One batch of 10 keys, two of ~60, two of 10."""
    files = write_stream(data, files=1, per_file=40, customers=10, seed=62)
    files += write_stream(data, files=2, per_file=200, customers=60, seed=63, start=1)
    return files + write_stream(data, files=2, per_file=40, customers=10, seed=64, start=3)


def test_small_batches_run_their_shards_in_the_driver_exactly(spark, tmp_path):
    data, db = tmp_path / "data", tmp_path / "views.db"
    files = write_stream(data, files=4, per_file=120, customers=30, seed=61)
    spec = write_spec(tmp_path, data, db, shards=3)

    reports = _run(spark, spec)
    assert [r.path for r in reports] == [TYPED] * 4  # the first batch too: no batch before it is needed
    assert sum(r.documents for r in reports) == 480
    assert all(r.keys <= 30 and r.shards == 3 for r in reports)
    assert sqlite_view(db) == oracle(files)


def test_a_batch_over_the_limit_runs_on_spark_and_small_ones_come_back(spark, tmp_path):
    data, db = tmp_path / "data", tmp_path / "views.db"
    files = _small_large_small(data)
    spec = write_spec(tmp_path, data, db, options={"small_batch_keys": 25, "reduced_batch_keys": 25})

    reports = _run(spark, spec)
    # each batch by its own keys: ~60 on Spark, 10 in the driver (right after a batch of ~60 too)
    assert [r.path for r in reports] == [TYPED, "one job", "one job", TYPED, TYPED]
    assert [r.keys > 25 for r in reports] == [False, True, True, False, False]
    assert sqlite_view(db) == oracle(files)


@pytest.mark.parametrize(
    "options,paths",
    [
        # SQLite reduces the view itself: batches up to reduced_batch_keys stay in the driver
        ({"small_batch_keys": 25}, [TYPED] * 5),
        # Load + Python: small_batch_keys is the limit
        ({"small_batch_keys": 25, "endpoint_reduce": False}, ["driver", "one job", "one job", "driver", "driver"]),
        # small_batch_keys: 0 keeps every batch on Spark's executors, whatever the path
        ({"small_batch_keys": 0}, ["one job"] * 5),
    ],
    ids=["reduced", "loaded", "never"],
)
def test_the_driver_limit_follows_the_reduce_path(spark, tmp_path, options, paths):
    data, db = tmp_path / "data", tmp_path / "views.db"
    files = _small_large_small(data)
    spec = write_spec(tmp_path, data, db, options=options)

    reports = _run(spark, spec)
    assert [r.path for r in reports] == paths
    assert sqlite_view(db) == oracle(files)


def test_an_invalid_document_in_a_small_batch_takes_the_checked_plan_in_the_driver(spark, tmp_path):
    data, db = tmp_path / "data", tmp_path / "views.db"
    files = write_stream(data, files=3, per_file=50, customers=12, seed=65)
    spec = write_spec(tmp_path, data, db, on_invalid="quarantine")
    stat = os.stat(files[1])
    with open(files[1]) as f:
        lines = f.readlines()
    lines[9] = '{"customer": "c0002", "amount": 1.5}\n'
    with open(files[1], "w") as f:
        f.writelines(lines)
    os.utime(files[1], ns=(stat.st_atime_ns, stat.st_mtime_ns))  # still the second batch

    reports = _run(spark, spec)
    assert [(r.path, r.invalid) for r in reports] == [(TYPED, 0), ("checked in driver", 1), (TYPED, 0)]
    assert sqlite_view(db) == oracle(files, skip={(1, 9)})


def test_two_bindings_in_the_driver_on_typed_values_each_of_its_own_types_exactly(spark, tmp_path):
    import copy

    from tests.support.helpers import COMPILED_SCHEMA, compiled_two_bindings_spec

    a = write_stream(tmp_path / "a", files=3, per_file=60, customers=20, seed=66)
    b = write_stream(tmp_path / "b", files=3, per_file=60, customers=20, seed=67)
    db = tmp_path / "views.db"
    returns = copy.deepcopy(COMPILED_SCHEMA)
    returns["properties"]["largest"]["type"] = "number"  # the second binding's row: another struct type
    path = compiled_two_bindings_spec(tmp_path, db, returns)

    reports = _run(spark, str(path))
    assert [r.path for r in reports] == [TYPED] * 3
    assert sqlite_view(db, "customers") == oracle(a)
    assert sqlite_view(db, "returns") == oracle(b)
    import sqlite3

    con = sqlite3.connect(db)
    try:  # each table as its own binding's schema types it
        assert {r[0] for r in con.execute("SELECT typeof(largest) FROM returns")} == {"real"}
        assert {r[0] for r in con.execute("SELECT typeof(largest) FROM customers")} == {"integer"}
    finally:
        con.close()


def _server(request, name: str):
    """(url, schema, view reader) of the PostgreSQL or MariaDB server a test writes to."""
    from tests.support.helpers import postgres_view
    from tests.support.mysql_support import mysql_view

    if name == "postgres":
        return request.getfixturevalue("postgres_url"), request.getfixturevalue("pg_schema"), postgres_view
    return request.getfixturevalue("mysql_url"), request.getfixturevalue("mysql_db"), mysql_view


@pytest.mark.parametrize("name", [pytest.param("postgres", marks=pytest.mark.postgres), "mysql"])
def test_four_shard_sessions_in_the_driver_into_a_sql_server_exactly(spark, tmp_path, request, name):
    """A lean view PostgreSQL or MariaDB reduces: the sessions get the documents as typed
    values (PostgreSQL COPYs them, MariaDB LOADs them)."""
    from tests.support.helpers import COMPILED_SCHEMA, orders_spec

    url, schema, view = _server(request, name)
    data = tmp_path / "data"
    files = write_stream(data, files=4, per_file=150, customers=60, seed=68 if name == "postgres" else 69)
    spec = orders_spec(
        tmp_path,
        data_dir=data,
        db_path=None,
        shards=4,
        schema=COMPILED_SCHEMA,
        endpoint={name: {"url": url, "schema": schema}},
    )

    reports = _run(spark, spec)
    assert [r.path for r in reports] == [TYPED] * 4
    assert view(url, schema) == oracle(files)


@pytest.mark.parametrize(
    "name", [pytest.param("postgres", marks=pytest.mark.postgres), pytest.param("mysql", marks=pytest.mark.slow)]
)
def test_an_object_with_carried_and_undeclared_members_stays_on_typed_rows(spark, tmp_path, request, name):
    """An object whose members are carried as written (nullable, a nested object, undeclared
    ones): its typed value is its text, members and all, so the batch stays on typed rows (no
    checked rerun) and the view is exact."""
    import copy

    from tests.support.helpers import COMPILED_NULLABLE_SCHEMA, orders_spec

    url, schema, view = _server(request, name)
    members_only = copy.deepcopy(COMPILED_NULLABLE_SCHEMA)
    del members_only["properties"]["note"]  # a typed row has no place for a top-level null
    data = tmp_path / "data"
    files = write_stream(data, files=4, per_file=150, customers=60, seed=70, nullable=True, top_level=False)
    spec = orders_spec(
        tmp_path,
        data_dir=data,
        db_path=None,
        shards=2,
        schema=members_only,
        endpoint={name: {"url": url, "schema": schema}},
    )

    reports = _run(spark, spec)
    assert [r.path for r in reports] == [TYPED] * 4
    assert view(url, schema) == oracle(files)


def test_a_schema_that_does_not_compile_runs_small_batches_in_the_driver_too(spark, tmp_path):
    from tests.support.helpers import normalize, oracle_orders, orders_spec, write_orders

    data, db = tmp_path / "data", tmp_path / "views.db"
    write_orders(data, files=3, per_file=80, customers=25, seed=69, deletes=0.05)
    spec = orders_spec(tmp_path, data_dir=data, db_path=db, shards=2)  # if/then deletes: the checked plan

    reports = _run(spark, spec)
    assert [r.path for r in reports] == ["checked in driver"] * 3
    assert normalize(sqlite_view(db)) == oracle_orders(data)


def test_a_batch_of_one_file_read_in_a_split_per_core_folds_in_source_order(spark, tmp_path):
    """A batch of one file over 512 KiB is read in a split per core (``OPEN_COST``:
    test_materialize_api.py); the view keeps the source order across the splits (the last
    city, the items in order)."""
    data, db = tmp_path / "data", tmp_path / "views.db"
    files = write_stream(data, files=2, per_file=8000, customers=40, seed=65)
    assert all(os.path.getsize(f) > 600 * 1024 for f in files)
    reports = _run(spark, write_spec(tmp_path, data, db))
    assert sqlite_view(db) == oracle(files)
    assert sum(r.documents for r in reports) == 16000


#: date-times as producers spell them: offsets, ``Z``, lowercase, seven digits
SPELLINGS = (
    "2024-05-01T10:00:00Z",
    "2024-05-01T15:30:00.25+05:30",
    "2024-05-01t06:00:00.000001-04:00",
    "2016-12-31T23:59:59.9999999Z",
    "2017-01-01T00:00:00.500z",
    "2024-05-01T10:00:01.123456Z",
)

EVENT_SCHEMA = events_schema(
    "customer",
    note={"type": ["string", "null"]},
    n={"type": "integer", "reduce": {"strategy": "sum"}},
    done={"type": ["string", "null"], "format": "date-time", "reduce": {"strategy": "maximize"}},
    labels={"type": ["array", "null"], "items": {"type": "string"}},  # picked whole, null a value
    context={"type": ["object", "null"]},
)


@pytest.mark.parametrize(
    "name",
    [  # SQLite's and MariaDB's statements: the property tests; end to end here after the default suite
        pytest.param("sqlite", marks=pytest.mark.slow),
        pytest.param("postgres", marks=pytest.mark.postgres),
        pytest.param("mysql", marks=pytest.mark.slow),
    ],
)
def test_date_times_nulls_and_undeclared_properties_ride_in_typed_rows(spark, tmp_path, request, name):
    """The SQL endpoints stage a typed row's remainder (StoreRows' REMAINDER): a date-time's text its
    instant does not give back, a nullable property's null, a property the schema does not
    declare.  So an event stream's batches stay on typed rows, and the view is the fold's (a
    leap second with a fraction too, which PostgreSQL refuses to read as it is)."""
    import json
    import random
    from types import SimpleNamespace

    from tests.support.endpoint_reduce import canonical
    from tests.support.helpers import orders_spec, write_input
    from tidemark.collection.collection import Collection
    from tidemark.drivers.registry import load_driver
    from tidemark.spec import CollectionSpec

    settings = (
        {"path": str(tmp_path / "views.db")}
        if name == "sqlite"
        else dict(zip(("url", "schema"), _server(request, name)))
    )
    draw, data = random.Random(71), tmp_path / "data"
    data.mkdir()
    batches = []
    for f in range(4):
        docs = []
        for _ in range(60):
            at = draw.choice(SPELLINGS + (("2016-12-31T23:59:60.5Z",) if f == 3 else ()))  # a leap second last
            doc = {"customer": f"c{draw.randrange(30)}", "at": at, "status": draw.choice("abc")}
            optional = {"first": draw.choice(SPELLINGS), "note": draw.choice([None, "x", "y"])}
            optional["done"] = draw.choice([None, *SPELLINGS])  # null the least value
            optional["labels"] = draw.choice([None, [], ["x", "y"]])
            optional["context"] = draw.choice([None, {}, {"ip": "10.0.0.1", "hops": 2}])
            for prop, value in optional.items():
                if draw.random() < 0.6:
                    doc[prop] = value
            if draw.random() < 0.5:
                doc["n"] = draw.randrange(5)
            if draw.random() < 0.2:
                doc["channel"] = draw.choice(["web", {"app": 2}, None])  # the schema does not declare it
            docs.append(doc)
        write_input(data, f, [json.dumps(d) for d in docs])  # in this order (Spark's: modification times)
        batches.append(docs)
    spec = orders_spec(
        tmp_path,
        data_dir=data,
        db_path=None,
        shards=2,
        schema=EVENT_SCHEMA,
        endpoint={name: settings},
    )

    reports = _run(spark, spec)
    # a leap second is left to the Python validator: its batch goes on with the checks (texts)
    assert [r.path for r in reports] == [TYPED] * 3 + ["checked in driver"]
    coll = Collection(CollectionSpec("orders", ("/customer",), EVENT_SCHEMA))
    expected: dict = {}
    for doc in (d for docs in batches for d in docs):
        k = doc["customer"]
        expected[k] = coll.reduce(expected[k], doc) if k in expected else doc
    b = coll.binding_spec(SimpleNamespace(resource={"table": "customers"}, delta_updates=False))
    with load_driver(name, settings) as driver:
        view = {k[0]: canonical(v) for k, v in driver.dump("view", b).items()}
    assert view == {k: canonical(v) for k, v in expected.items()}
