"""Date-times in the lakes' lean rows (Delta, Iceberg): a new lean table's date-time is a
timestamp column (UTC, microseconds: Delta ``timestamp``, Iceberg ``timestamptz``) that sorts
as instants, ``flow_document`` keeps the text only where the instant does not give it back,
and every path reads the documents exactly as written; a lean table made before keeps its
string column, a full table and a date-time key keep their text; a rebuild's cut-over makes
an older table's column anew; any date-time round-trips through a lean row (generated)."""

from __future__ import annotations

import json
from types import SimpleNamespace
from unittest import mock

import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.support.driver_protocol import MAT
from tests.support.helpers import lake_documents
from tests.support.lake_support import Lake, apply, commit
from tidemark.collection.collection import Collection
from tidemark.collection.formats import instant
from tidemark.drivers.base import ReplaceContents
from tidemark.drivers.common.columns import DOCUMENT_COLUMN, INSTANT, TEXT, column
from tidemark.drivers.lake import model as lake_model
from tidemark.drivers.lake.lean import documents_of, holds, lean_values
from tidemark.spec import CollectionSpec

pytest.importorskip("deltalake")
pytest.importorskip("pyiceberg")

SCHEMA = {
    "type": "object",
    "required": ["customer"],
    "properties": {"customer": {"type": "string"}, "at": {"type": "string", "format": "date-time"}},
}
#: (the text, whether flow_document keeps it: the instant gives back another spelling)
TEXTS = [
    ("2024-05-01T10:00:00Z", False),
    ("2024-05-01T10:00:00+05:30", True),
    ("2024-05-01T10:00:00-04:00", True),
    ("2024-05-01t09:00:00.5z", True),
    ("2024-05-01T10:00:00.250Z", True),
    ("2024-05-01T10:00:00.123456Z", False),
    ("2024-05-01T10:00:00.123456789Z", True),
    ("1999-12-31T23:59:59.999999999Z", True),
    ("2016-12-31T23:59:60Z", True),
    ("2024-05-01T10:00:00.5Z", False),
]
DOCS = [{"customer": f"c{i}", "at": text} for i, (text, _) in enumerate(TEXTS)]


@pytest.fixture(params=["delta", "iceberg"])
def lake(request, tmp_path):
    e = Lake(request.param, tmp_path)
    yield e
    e.driver.close()


def bind(schema=SCHEMA, key="/customer", table="customers", **resource):
    coll = Collection(CollectionSpec("orders", (key,), schema))
    return coll.binding_spec(SimpleNamespace(resource={"table": table, **resource}, delta_updates=False))


def column_type(lake, b, name="at") -> str:
    """The table's type of column ``name``, as its format names it."""
    if lake.name == "delta":
        from deltalake import DeltaTable

        field = next(f for f in DeltaTable(lake.driver.model(b).name).schema().fields if f.name == name)
        return str(field.type.type)
    table = lake.driver.catalog.load_table(lake.driver.model(b).identifier)
    return str(table.schema().find_field(name).field_type)


def ordered_by_column(lake, b) -> list[str]:
    """The customers whose ``at`` is not NULL, ordered by the column (the format's own query)."""
    if lake.name == "delta":
        from deltalake import DeltaTable, QueryBuilder

        sql = "SELECT customer FROM t WHERE at IS NOT NULL ORDER BY at"
        rows = QueryBuilder().register("t", DeltaTable(lake.driver.model(b).name)).execute(sql).read_all()
        return pa.table(rows).column("customer").to_pylist()
    from pyiceberg.expressions import NotNull

    table = lake.driver.catalog.load_table(lake.driver.model(b).identifier)
    rows = table.scan(row_filter=NotNull("at"), selected_fields=("customer", "at")).to_arrow()
    return rows.sort_by("at").column("customer").to_pylist()


def remainders(lake, b) -> dict:
    rows, _ = lake.rows(b)
    return dict(zip(rows.column("customer").to_pylist(), rows.column(DOCUMENT_COLUMN).to_pylist()))


def test_a_new_lean_table_holds_date_times_as_instants_and_reads_them_as_written(lake):
    b = bind()
    apply(lake.driver, b)
    assert column_type(lake, b) == ("timestamp" if lake.name == "delta" else "timestamptz")
    _, state = commit(lake.driver, b, DOCS, 1, None)
    rows, props = lake.rows(b)
    assert rows.schema.field("at").type == pa.timestamp("us", tz="UTC")
    assert json.loads(props["tidemark.leanColumns"]) == {"at": INSTANT}
    rest = remainders(lake, b)
    for doc, (text, kept) in zip(DOCS, TEXTS):
        assert rest[doc["customer"]] == (json.dumps({"at": text}, separators=(",", ":")) if kept else None), text
    instants = dict(zip(rows.column("customer").to_pylist(), rows.column("at").cast(pa.int64()).to_pylist()))
    assert instants["c1"] == instants["c0"] - (5 * 3600 + 30 * 60) * 10**6  # +05:30: the instant in UTC
    assert instants["c6"] == instants["c0"] + 123457  # nine digits: rounded to the microsecond
    assert instants["c7"] == 946684800 * 10**6  # ...59.999999999Z: 2000-01-01T00:00:00Z
    assert instants["c8"] == 1483228800 * 10**6  # the leap second: the next minute's first second
    # sorted as instants, not as texts
    assert ordered_by_column(lake, b) == [d["customer"] for d in sorted(DOCS, key=lambda d: instant(d["at"]))]
    assert ordered_by_column(lake, b) != [d["customer"] for d in sorted(DOCS, key=lambda d: d["at"])]
    # dump, a reader that knows only the table, and Load give back the documents as written
    want = {(d["customer"],): d for d in DOCS}
    assert lake.make().dump(MAT, b) == want
    assert {(k,): d for k, d in lake_documents(rows, "customer", props).items()} == want
    loaded, _ = commit(lake.make(), b, DOCS[:4], 2, state)
    assert loaded == {k: want[k] for k in [("c0",), ("c1",), ("c2",), ("c3",)]}
    assert lake.make().dump(MAT, b) == want


def test_what_no_timestamp_column_holds_stays_in_flow_document(lake):
    """A string that is not a date-time (a document an older schema let through), and an
    instant outside the years 1 to 9999 that readers' datetimes hold: the column NULL, the
    remainder the text."""
    b = bind()
    apply(lake.driver, b)
    docs = [
        {"customer": "a", "at": "yesterday"},
        {"customer": "b", "at": "0000-01-01T00:00:00Z"},
        {"customer": "c", "at": "9999-12-31T23:00:00-02:00"},
        {"customer": "d", "at": 17},
        {"customer": "e"},
    ]
    commit(lake.driver, b, docs, 1, None)
    rows, _ = lake.rows(b)
    assert rows.column("at").null_count == len(docs)
    rest = remainders(lake, b)
    assert [json.loads(rest[d["customer"]]) if "at" in d else rest["e"] for d in docs] == [
        {"at": "yesterday"},
        {"at": "0000-01-01T00:00:00Z"},
        {"at": "9999-12-31T23:00:00-02:00"},
        {"at": 17},
        None,
    ]
    assert lake.make().dump(MAT, b) == {(d["customer"],): d for d in docs}


def made_as_before(lake, b) -> str:
    """Apply as tidemark did before date-times were timestamp columns: a lean table whose
    date-time is a string column."""
    with mock.patch.object(lake_model, "as_stored", lambda c, timestamps: c):
        action = apply(lake.driver, b)
    lake.driver = lake.make()
    return action


def test_an_older_lean_table_keeps_its_string_date_time_column(lake):
    b = bind()
    made_as_before(lake, b)
    assert column_type(lake, b) == "string"
    _, props = lake.rows(b)
    before = json.loads(props["tidemark.leanColumns"])
    assert before == {"at": "timestamp"}
    assert apply(lake.driver, b) == "nothing to do"  # no column added, no type changed, no property rewritten
    _, state = commit(lake.driver, b, DOCS, 1, None)
    rows, props = lake.rows(b)
    assert column_type(lake, b) == "string" and json.loads(props["tidemark.leanColumns"]) == before
    assert rows.column("at").to_pylist() == [d["at"] for d in DOCS]  # the texts as written, in the column
    assert set(remainders(lake, b).values()) == {None}
    want = {(d["customer"],): d for d in DOCS}
    assert lake.make().dump(MAT, b) == want
    loaded, _ = commit(lake.make(), b, DOCS[:3], 2, state)
    assert loaded == {k: want[k] for k in [("c0",), ("c1",), ("c2",)]}
    assert lake.make().dump(MAT, b) == want and column_type(lake, b) == "string"


def test_a_date_time_added_to_an_older_lean_table_is_a_timestamp_column(lake):
    plain = {"type": "object", "required": ["customer"], "properties": {"customer": {"type": "string"}}}
    made_as_before(lake, bind(plain))
    b = bind()
    assert "add column at" in apply(lake.driver, b)
    assert column_type(lake, b) == ("timestamp" if lake.name == "delta" else "timestamptz")
    commit(lake.make(), b, DOCS, 1, None)
    assert lake.make().dump(MAT, b) == {(d["customer"],): d for d in DOCS}


def test_a_full_table_and_a_date_time_key_keep_the_text(lake):
    full = bind(document="full")
    apply(lake.driver, full)
    commit(lake.driver, full, DOCS, 1, None)
    assert column_type(lake, full) == "string"
    assert lake.make().dump(MAT, full) == {(d["customer"],): d for d in DOCS}
    keyed_schema = {**SCHEMA, "required": ["at"]}
    keyed = bind(keyed_schema, key="/at", table="by_time")
    apply(lake.driver, keyed)
    assert column_type(lake, keyed) == "string"  # two spellings of one instant are two keys
    docs = [{"customer": "x", "at": "2024-05-01T10:00:00Z"}, {"customer": "y", "at": "2024-05-01T12:00:00+02:00"}]
    commit(lake.make(), keyed, docs, 1, None, key="at")
    assert lake.make().dump(MAT, keyed) == {(d["at"],): d for d in docs}


def test_a_date_time_that_loses_its_format_keeps_its_timestamp_column(lake):
    b = bind()
    apply(lake.driver, b)
    _, state = commit(lake.driver, b, DOCS[:2], 1, None)
    plain = json.loads(json.dumps(SCHEMA))
    del plain["properties"]["at"]["format"]
    p = bind(plain)
    assert apply(lake.make(), p) == "nothing to do"
    docs = [{"customer": "c0", "at": "not a date any more"}, {"customer": "c9", "at": "2024-05-01T10:00:00Z"}]
    commit(lake.make(), p, docs, 2, state)
    assert lake.make().dump(MAT, p) == {(d["customer"],): d for d in [docs[0], DOCS[1], docs[1]]}
    assert column_type(lake, p) == ("timestamp" if lake.name == "delta" else "timestamptz")


def test_a_rebuild_makes_an_older_tables_date_time_column_a_timestamp(lake):
    """The cut-over gives the live table the shadow's timestamp column (Iceberg: dropped and
    added anew, so that earlier snapshots read their own strings)."""
    live, shadow = bind(), bind(table="customers__rebuild")
    made_as_before(lake, live)
    commit(lake.driver, live, DOCS[:2], 1, None)
    apply(lake.driver, shadow)
    commit(lake.make(), shadow, DOCS, 0, None, materialization="shadow", checkpoint_id="chk-2")
    driver = lake.make()
    driver.check_rebuild((live,), [None])
    driver.replace_contents(ReplaceContents(MAT, "shadow", ((live, shadow),), "chk-2"))
    assert column_type(lake, live) == ("timestamp" if lake.name == "delta" else "timestamptz")
    assert lake.make().dump(MAT, live) == {(d["customer"],): d for d in DOCS}
    commit(lake.make(), live, [dict(DOCS[0], at="2030-01-01T00:00:00+01:00")], 1, None, checkpoint_id="chk-2")
    assert lake.make().dump(MAT, live)[("c0",)] == {"customer": "c0", "at": "2030-01-01T00:00:00+01:00"}
    if lake.name == "iceberg":
        table = lake.driver.catalog.load_table(lake.driver.model(live).identifier)
        first = table.snapshots()[0]
        assert table.scan(snapshot_id=first.snapshot_id).to_arrow().column("at").to_pylist() == [
            d["at"] for d in DOCS[:2]
        ]


# ---------------------------------------------------------------- the rule, generated

offsets = st.one_of(
    st.sampled_from(["Z", "z", "+00:00", "-00:00"]),
    st.builds(
        lambda sign, h, m: f"{sign}{h:02d}:{m:02d}",
        st.sampled_from("+-"),
        st.integers(0, 23),
        st.integers(0, 59),
    ),
)
date_times = st.builds(
    lambda y, mo, d, h, mi, s, fraction, t, offset: (
        f"{y:04d}-{mo:02d}-{d:02d}{t}{h:02d}:{mi:02d}:{s:02d}" + (f".{fraction}" if fraction else "") + offset
    ),
    st.integers(0, 9999),
    st.integers(1, 12),
    st.integers(1, 28),
    st.integers(0, 23),
    st.integers(0, 59),
    st.integers(0, 60),  # a leap second where the time is 23:59 in UTC (else not a date-time)
    st.text("0123456789", max_size=12),
    st.sampled_from("Tt"),
    offsets,
)


def test_holds_says_which_date_times_the_column_gives_back():
    assert holds(INSTANT, "2024-05-01T10:00:00.5Z") and not holds(INSTANT, "2024-05-01T10:00:00.50Z")
    assert not holds(INSTANT, "2024-05-01T10:00:00+01:00") and not holds(INSTANT, "0000-01-01T00:00:00Z")
    assert not holds(INSTANT, "yesterday") and not holds(INSTANT, None) and holds(TEXT, "yesterday")


@settings(max_examples=200, deadline=None)
@given(st.lists(st.one_of(date_times, st.text(max_size=4), st.none(), st.integers()), max_size=8))
def test_any_date_time_round_trips_through_a_lean_row(values):
    docs = [{"k": str(i), "at": v} for i, v in enumerate(values)]
    held = [("k", TEXT), ("at", INSTANT)]
    held_values, rests = lean_values(docs, held)
    arrays = [column(kind, vs) for (_, kind), vs in zip(held, held_values)]
    table = pa.table(arrays + [pa.array(rests, pa.string())], names=["k", "at", DOCUMENT_COLUMN])
    assert documents_of(table, held, True) == docs
