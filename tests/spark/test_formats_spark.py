"""Asserted formats and date-time instants on Spark: the compiled checks agree with
:mod:`tidemark.collection.formats`, both combine paths compare date-times as instants, and
a view end to end (SQLite) refuses ``"yesterday"``."""

from __future__ import annotations

import json
import sqlite3

import pytest
import yaml

from tests.support.format_cases import CASES, DATE_TIMES_IN_ORDER
from tests.support.helpers import sqlite_view
from tidemark.collection import formats
from tidemark.collection.collection import Collection
from tidemark.collection.plan import compile_collection
from tidemark.errors import DocumentError
from tidemark.spark.combine import combine_batch
from tidemark.spark.datetimes import FRACTION_DIGITS, format_ok, instant_order
from tidemark.spec import CollectionSpec

pytestmark = pytest.mark.spark

SCHEMA = "value string, _file string, _block long, _row long"
EVENTS = {
    "type": "object",
    "required": ["id"],
    "reduce": {"strategy": "merge"},
    "properties": {
        "id": {"type": "string"},
        "last": {"type": "string", "format": "date-time", "reduce": {"strategy": "maximize"}},
        "first": {"type": "string", "format": "date-time", "reduce": {"strategy": "minimize"}},
        "seen": {"type": "string", "format": "date-time"},
        "day": {"type": "string", "format": "date"},
    },
}


def test_compiled_format_checks_agree_with_python(spark):
    """Soundness: what Spark proves has the format, Python accepts.  Completeness: every
    value Python accepts is proved, except a leap second (a suspect by design)."""
    from pyspark.sql import functions as F

    rows = [(fmt, value) for fmt, values in CASES.items() if fmt in NATIVE for value, _ in values] + [
        ("email", value) for value in MORE_EMAILS
    ]
    df = spark.createDataFrame(rows, "fmt string, v string")
    checks = F.lit(None).cast("boolean")
    for fmt in NATIVE:
        checks = F.when(F.col("fmt") == fmt, F.coalesce(format_ok(F.col("v"), fmt), F.lit(False))).otherwise(checks)
    got = {(r.fmt, r.v): r.ok for r in df.select("fmt", "v", checks.alias("ok")).collect()}
    for (fmt, value), ok in got.items():
        python = formats.ASSERTED[fmt](value)
        leap = fmt in ("date-time", "time") and python and ":60" in value
        # an email's quoted local part or address literal: a suspect by design (Python decides)
        literal = fmt == "email" and (value.startswith('"') or value.endswith("]"))
        assert ok == (python and not leap and not literal), (fmt, value)


NATIVE = ("date-time", "date", "time", "uuid", "ipv4", "email")
MORE_EMAILS = [
    "o'neil/x{y}|z~!#$%&*+=?^_`-@example.com",
    "a@" + "x" * 63 + ".org",
    "a@" + "x" * 64 + ".org",
    "a@" + ".".join(["abcdefghi"] * 25) + ".org",  # 253 characters
    "a@" + ".".join(["abcdefghi"] * 26),  # 259
    "a@x-.org",
    "a@x.org.",
    "a@b@x.org",
    "x" * 64 + "@x.org",
    "a.@x.org",
    "a@x_y.org",
    "a@x.org\n",
    "A1@X9.ORG",
]


def test_instant_order_agrees_with_python(spark):
    from pyspark.sql import functions as F

    flat = [v for g in DATE_TIMES_IN_ORDER for v in (g if isinstance(g, list) else [g])]
    flat += [v for v, ok in CASES["date-time"] if ok]
    values = sorted({v for v in flat if ":60" not in v})
    df = spark.createDataFrame([(v,) for v in values], "v string")
    up = [r.v for r in df.orderBy(instant_order(F.col("v"), True), "v").collect()]
    down = [r.v for r in df.orderBy(instant_order(F.col("v"), False), "v").collect()]
    assert up == sorted(values, key=lambda v: (formats.instant(v), v))
    assert down == sorted(values, key=lambda v: (-formats.instant(v)[0], _desc(formats.instant(v)[2]), v))


def _desc(fraction: str) -> str:
    return fraction.ljust(FRACTION_DIGITS, "0").translate(str.maketrans("0123456789", "9876543210"))


def _rows(docs, file="file:///data/events.json"):
    return [(json.dumps(d) if not isinstance(d, str) else d, file, 0, i) for i, d in enumerate(docs)]


MIXED = [
    {"id": "a", "last": "2024-05-01T10:00:00Z", "first": "2024-05-01T10:00:00Z", "day": "2024-05-01"},
    # 09:30 at -05:00 is 14:30Z: later, though it sorts first as text
    {"id": "a", "last": "2024-05-01T09:30:00-05:00", "first": "2024-05-01T09:30:00-05:00"},
    # 11:00 at +02:00 is 09:00Z: earlier, though it sorts last as text
    {
        "id": "a",
        "last": "2024-05-01T11:00:00+02:00",
        "first": "2024-05-01T11:00:00+02:00",
        "seen": "2024-05-01t12:00:00z",
    },
    # the same instants written differently: ties take the later document
    {"id": "a", "last": "2024-05-01T14:30:00.000Z", "first": "2024-05-01T09:00:00.0Z"},
    {"id": "b", "last": "2024-05-01T23:59:59.999999999999999999Z", "first": "1999-12-31T23:59:59.5-00:30"},
    {"id": "b", "last": "2024-05-01T23:59:59.99999999999999999Z", "first": "2000-01-01T00:29:59.4+00:00"},
]
MIXED_WANT = {
    '["a"]': {
        "id": "a",
        "last": "2024-05-01T14:30:00.000Z",
        "first": "2024-05-01T09:00:00.0Z",
        "day": "2024-05-01",
        "seen": "2024-05-01t12:00:00z",
    },
    '["b"]': {"id": "b", "last": "2024-05-01T23:59:59.999999999999999999Z", "first": "2000-01-01T00:29:59.4+00:00"},
}


@pytest.mark.parametrize("jvm", ["1", pytest.param("0", marks=pytest.mark.slow)])  # "0": after the default run
@pytest.mark.parametrize("path", ["compiled", "fallback"])
def test_maximize_and_minimize_compare_instants_on_both_paths(spark, monkeypatch, path, jvm):
    monkeypatch.setenv("TIDEMARK_JVM_CHECKS", jvm)
    coll = Collection(CollectionSpec("events", ("/id",), EVENTS))
    assert compile_collection(coll) is not None
    res = combine_batch(spark.createDataFrame(_rows(MIXED), SCHEMA), coll, force_path=path)
    try:
        assert res.path == path
        assert {r.key_json: json.loads(r.doc) for r in res.combined.collect()} == MIXED_WANT
    finally:
        res.unpersist()
    # the Python fold (what the runtime uses to reduce into the endpoint's document) agrees
    assert coll.combine(MIXED[:4]) == MIXED_WANT['["a"]']


def test_a_long_fraction_or_a_leap_second_is_checked_in_python(spark):
    """The compiled path does not prove these; valid ones send the batch to the fallback."""
    coll = Collection(CollectionSpec("events", ("/id",), EVENTS))
    digits = "1" * (FRACTION_DIGITS + 1)
    for doc in ({"id": "a", "last": f"2024-05-01T10:00:00.{digits}Z"}, {"id": "a", "seen": "2016-12-31T23:59:60Z"}):
        res = combine_batch(spark.createDataFrame(_rows([doc]), SCHEMA), coll)
        try:
            assert res.path == "fallback"
            assert [json.loads(r.doc) for r in res.combined.collect()] == [doc]
        finally:
            res.unpersist()


BAD_VALUES = [  # (the property, its value, the rule the error names)
    ("seen", "yesterday", "/seen: 'yesterday' is not a 'date-time'"),
    ("last", "2024-05-01 10:00:00Z", "/last: '2024-05-01 10:00:00Z' is not a 'date-time'"),
    ("first", "2024-02-30T10:00:00Z", "/first: '2024-02-30T10:00:00Z' is not a 'date-time'"),
    ("seen", "2024-05-01T10:59:60Z", "/seen: '2024-05-01T10:59:60Z' is not a 'date-time'"),
    ("day", "2023-02-29", "/day: '2023-02-29' is not a 'date'"),
]


@pytest.mark.parametrize("path", ["compiled", "fallback"])
def test_a_bad_value_is_a_document_error_with_location_key_and_rule(spark, path):
    """Each bad value of one batch, in a document of its own key, is named at its line."""
    coll = Collection(CollectionSpec("events", ("/id",), EVENTS))
    docs = [{"id": "a", "last": "2024-05-01T10:00:00Z"}] + [
        {"id": f"b{i}", f: v} for i, (f, v, _) in enumerate(BAD_VALUES)
    ]
    with pytest.raises(DocumentError) as err:
        combine_batch(spark.createDataFrame(_rows(docs), SCHEMA), coll, force_path=path)
    assert [str(e) for e in err.value.documents] == [
        f"/data/events.json:{i + 2} key ('b{i}',): document violates its schema: {rule}"
        for i, (_, _, rule) in enumerate(BAD_VALUES)
    ]
    assert str(err.value).splitlines()[0] == str(err.value.documents[0])


def test_end_to_end_sqlite_instants_and_a_refusal(spark, tmp_path):
    from tidemark.spark.runner import run_spec

    data, db = tmp_path / "data", tmp_path / "views.db"
    data.mkdir()
    spec = {
        "collections": {
            "events": {
                "key": ["/id"],
                "schema": EVENTS,
                "source": {"format": "json", "path": str(data), "options": {"maxFilesPerTrigger": 1}},
            }
        },
        "materializations": {
            "view": {
                "endpoint": {"sqlite": {"path": str(db)}},
                "shards": 1,
                "bindings": [{"source": "events", "resource": {"table": "events"}}],
            }
        },
        "checkpoint": str(tmp_path / "checkpoints"),
    }
    spec_path = tmp_path / "spec.yaml"
    spec_path.write_text(yaml.safe_dump(spec))
    (data / "1.json").write_text("".join(json.dumps(d) + "\n" for d in MIXED[:3]))
    (data / "2.json").write_text(json.dumps(MIXED[3]) + "\n")  # reduced into the stored document
    run_spec(str(spec_path), spark=spark)
    stored = sqlite_view(db, "events", "id")  # a lean row: each date-time's instant, its text where kept
    assert {k: {f: v for f, v in d.items() if f != "_meta"} for k, d in stored.items()} == {"a": MIXED_WANT['["a"]']}

    (data / "3.json").write_text(json.dumps({"id": "a", "last": "yesterday"}) + "\n")
    with pytest.raises(
        Exception,
        match=r"3.json:1 key \('a',\): document violates its schema: "
        r"/last: 'yesterday' is not a 'date-time'",
    ):
        run_spec(str(spec_path), spark=spark)
