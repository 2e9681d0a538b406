"""combine_batch on Spark: compiled vs fallback vs pure Python, keys, invalid documents."""

from __future__ import annotations

import json
import random
import re
import zlib

import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from tidemark.collection.collection import Collection
from tidemark.collection.keys import key_json
from tidemark.collection.plan import compile_collection
from tidemark.errors import DocumentError, ReductionError
from tidemark.spark.combine import combine_batch
from tidemark.spark.combined import MAX_REPORTED_INVALID
from tidemark.spec import CollectionSpec

pytestmark = pytest.mark.spark


@pytest.fixture(autouse=True, params=["jvm", pytest.param("expressions", marks=pytest.mark.slow)])
def plain_proof(request, monkeypatch):
    """Every test here runs with both forms of the plain-document proof: the JVM scanner
    (``tidemark/spark/jvm``) and the Spark expressions used where it is unavailable (those
    after the default run, with ``-m slow``: the JVM scanner is what runs wherever the jar loads)."""
    import pyspark

    from tidemark.spark import jvm

    monkeypatch.setenv("TIDEMARK_JVM_CHECKS", "1" if request.param == "jvm" else "0")
    # on a Spark the jar is not built for (the smoke run on the oldest supported one) the
    # expressions run in its place, and the tests expect what they give
    return request.param if jvm.shipped_jar(pyspark.__version__) is not None else "expressions"


SCHEMA = "value string, _file string, _block long, _row long"

DATE_TIMES = st.builds(
    "2024-05-{:02d}T{:02d}:{:02d}:00{}{}".format,
    st.integers(1, 2),
    st.integers(0, 23),
    st.sampled_from([0, 30]),
    st.sampled_from(["", ".0", ".5", ".000000000000000001", ".1234567890123456789"]),
    st.sampled_from(["Z", "z", "+00:00", "-05:00", "+05:30", "-00:30"]),
)

# the values of properties a schema does not declare (a producer's new field): any JSON
UNDECLARED_VALUES = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(-(10**20), 10**20)
    | st.text(max_size=3)
    | st.floats(allow_nan=False, allow_infinity=False),
    lambda inner: st.lists(inner, max_size=2) | st.dictionaries(st.text(max_size=2), inner, max_size=2),
    max_leaves=4,
)

FIELD_KINDS = {
    "string": [
        ({"type": "string"}, st.text(max_size=4)),
        ({"type": "string", "reduce": {"strategy": "firstWriteWins"}}, st.text(max_size=4)),
        ({"type": "string", "reduce": {"strategy": "maximize"}}, st.text(max_size=4)),
    ],
    "integer": [
        ({"type": "integer", "reduce": {"strategy": "sum"}}, st.integers(-1000, 1000)),
        ({"type": "integer", "reduce": {"strategy": "minimize"}}, st.integers(-1000, 1000)),
        ({"type": "integer"}, st.integers(-(2**62), 2**62)),
    ],
    "number": [
        ({"type": "number", "reduce": {"strategy": "sum"}}, st.integers(-400, 400).map(lambda i: i / 8)),
        ({"type": "number", "reduce": {"strategy": "maximize"}}, st.floats(-1e6, 1e6, allow_nan=False)),
    ],
    "boolean": [
        ({"type": "boolean", "reduce": {"strategy": "maximize"}}, st.booleans()),
        ({"type": "boolean"}, st.booleans()),
    ],
    "append": [
        (
            {"type": "array", "items": {"type": "integer"}, "reduce": {"strategy": "append"}},
            st.lists(st.integers(0, 9), max_size=3),
        ),
        (
            {"type": "array", "items": {"type": "string"}, "reduce": {"strategy": "union"}},
            st.lists(st.sampled_from(["a", "b", "é"]), max_size=3),
        ),
    ],
    # arrays of objects (and of any values) appended as their texts
    "appended objects": [
        (
            {
                "type": "array",
                "reduce": {"strategy": "append"},
                "items": {"type": "object", "properties": {"sku": {"type": "string"}, "qty": {"type": "integer"}}},
            },
            st.lists(
                st.fixed_dictionaries({}, optional={"sku": st.sampled_from(["a", "é"]), "qty": st.integers(0, 9)}),
                max_size=2,
            ),
        ),
        ({"type": "array", "reduce": {"strategy": "append"}}, st.lists(UNDECLARED_VALUES, max_size=2)),
    ],
    "map": [
        (
            {"type": "object", "additionalProperties": {"type": "integer"}, "reduce": {"strategy": "merge"}},
            st.dictionaries(st.sampled_from("abc"), st.integers(0, 9), max_size=2),
        )
    ],
    "raw": [({"type": "object"}, st.dictionaries(st.sampled_from("xy"), st.integers(0, 3), max_size=2))],
    # an object with declared properties of one scalar type, merged (compiled as a map)
    "object": [
        (
            {
                "type": "object",
                "reduce": {"strategy": "merge"},
                "properties": {"city": {"type": "string"}, "zip": {"type": "string"}},
            },
            st.fixed_dictionaries({}, optional={"city": st.text(max_size=3), "zip": st.sampled_from(["1", "2"])}),
        )
    ],
    # an object of declared members of several types, each with a strategy of its own
    "members": [
        (
            {
                "type": "object",
                "reduce": {"strategy": "merge"},
                "properties": {
                    "city": {"type": "string"},
                    "floor": {"type": "integer", "reduce": {"strategy": "firstWriteWins"}},
                    "visits": {"type": "integer", "reduce": {"strategy": "sum"}},
                    "paid": {"type": "number", "reduce": {"strategy": "sum"}},
                    "top": {"type": "number", "reduce": {"strategy": "maximize"}},
                    "low": {"type": "string", "reduce": {"strategy": "minimize"}},
                    "vip": {"type": "boolean"},
                },
            },
            st.fixed_dictionaries(
                {},
                optional={
                    "city": st.text(max_size=3),
                    "floor": st.integers(-3, 30),
                    "visits": st.integers(0, 9),
                    "paid": st.integers(-400, 400).map(lambda i: i / 8),
                    "top": st.floats(-1e6, 1e6, allow_nan=False),
                    "low": st.sampled_from(["a", "b", "é"]),
                    "vip": st.booleans(),
                },
            ),
        )
    ],
    # arrays of scalars appended and unioned among an object's members
    "array members": [
        (
            {
                "type": "object",
                "reduce": {"strategy": "merge"},
                "properties": {
                    "tags": {"type": "array", "items": {"type": "string"}, "reduce": {"strategy": "union"}},
                    "seen": {"type": "array", "items": {"type": "integer"}, "reduce": {"strategy": "append"}},
                    "n": {"type": "integer", "reduce": {"strategy": "sum"}},
                },
            },
            st.fixed_dictionaries(
                {},
                optional={
                    "tags": st.lists(st.sampled_from(["a", "b", "é"]), max_size=3),
                    "seen": st.lists(st.integers(0, 9), max_size=3),
                    "n": st.integers(0, 9),
                },
            ),
        )
    ],
    # a merged object inside a merged object, its members by their own strategies
    "nested members": [
        (
            {
                "type": "object",
                "reduce": {"strategy": "merge"},
                "properties": {
                    "city": {"type": "string"},
                    "geo": {
                        "type": "object",
                        "reduce": {"strategy": "merge"},
                        "properties": {
                            "lat": {"type": "number", "reduce": {"strategy": "maximize"}},
                            "hits": {"type": "integer", "reduce": {"strategy": "sum"}},
                            "zones": {"type": "array", "items": {"type": "string"}, "reduce": {"strategy": "union"}},
                            "first": {"type": "string", "reduce": {"strategy": "firstWriteWins"}},
                        },
                    },
                },
            },
            st.fixed_dictionaries(
                {},
                optional={
                    "city": st.sampled_from(["a", "é"]),
                    "geo": st.fixed_dictionaries(
                        {},
                        optional={
                            "lat": st.floats(-90, 90, allow_nan=False),
                            "hits": st.integers(0, 9),
                            "zones": st.lists(st.sampled_from(["x", "y"]), max_size=2),
                            "first": st.sampled_from(["p", "q"]),
                        },
                    ),
                },
            ),
        )
    ],
    # members with formats and exact decimals (the scan proves date-times; the combine the others)
    "members of formats": [
        (
            {
                "type": "object",
                "reduce": {"strategy": "merge"},
                "properties": {
                    "at": {"type": "string", "format": "date-time"},
                    "day": {"type": "string", "format": "date", "reduce": {"strategy": "firstWriteWins"}},
                    "amount": {"type": "number", "multipleOf": 0.01, "reduce": {"strategy": "sum"}},
                    "fee": {"type": "number", "multipleOf": 0.01, "reduce": {"strategy": "maximize"}},
                    "ref": {"type": "string", "format": "uuid", "title": "a reference"},
                    "mail": {"type": "string", "format": "email"},
                },
            },
            st.fixed_dictionaries(
                {},
                optional={
                    "at": DATE_TIMES,
                    "day": st.sampled_from(["2024-05-01", "2023-12-31"]),
                    "amount": st.one_of(st.integers(-(10**6), 10**6).map(lambda i: i / 100), st.integers(-50, 50)),
                    "fee": st.integers(-999, 999).map(lambda i: i / 100),
                    "ref": st.sampled_from(
                        ["123e4567-e89b-12d3-a456-426614174000", "00000000-0000-0000-0000-000000000000"]
                    ),
                    "mail": st.sampled_from(["a@b.org", '"a b"@x.org', "o'n@x-y.io", "a@[192.0.2.1]"]),
                },
            ),
        )
    ],
    # members carried as written, each last written: nullable, objects and arrays picked whole
    "members carried": [
        (
            {
                "type": "object",
                "reduce": {"strategy": "merge"},
                "properties": {
                    "email": {"type": ["string", "null"]},
                    "n": {"type": ["null", "integer"], "reduce": {"strategy": "lastWriteWins"}},
                    "at": {"type": ["string", "null"], "format": "date-time"},
                    "geo": {"type": "object"},
                    "tags": {"type": "array", "items": {"type": "string"}},
                    "any": {"type": "array"},
                    "visits": {"type": "integer", "reduce": {"strategy": "sum"}},
                    "addr": {"type": "object", "properties": {"city": {"type": "string"}, "n": {"type": "integer"}}},
                    "lines": {
                        "type": "array",
                        "items": {"type": "object", "required": ["sku"], "properties": {"sku": {"type": "string"}}},
                    },
                },
            },
            st.fixed_dictionaries(
                {},
                optional={
                    "email": st.one_of(st.none(), st.text(max_size=2)),
                    "n": st.one_of(st.none(), st.integers(-(10**20), 10**20)),
                    "at": st.one_of(st.none(), DATE_TIMES),
                    "geo": st.dictionaries(st.sampled_from(["lat", "lon"]), UNDECLARED_VALUES, max_size=2),
                    "tags": st.lists(st.sampled_from(["a", "é", "}"]), max_size=2),
                    "any": st.lists(UNDECLARED_VALUES, max_size=2),
                    "visits": st.integers(0, 9),
                    "addr": st.fixed_dictionaries(
                        {}, optional={"city": st.text(max_size=2), "n": st.integers(-3, 3), "x": UNDECLARED_VALUES}
                    ),
                    "lines": st.lists(st.fixed_dictionaries({"sku": st.sampled_from(["a", "b"])}), max_size=2),
                },
            ),
        ),
        (  # carried members only, one required, the object closed
            {
                "type": "object",
                "reduce": {"strategy": "merge"},
                "required": ["email"],
                "additionalProperties": False,
                "properties": {"email": {"type": ["string", "null"]}, "geo": {"type": "object"}},
            },
            st.fixed_dictionaries(
                {"email": st.one_of(st.none(), st.sampled_from(["x", "y"]))},
                optional={"geo": st.dictionaries(st.sampled_from(["lat"]), st.integers(0, 3), max_size=1)},
            ),
        ),
    ],
    # picked whole: an object of declared members, an array of such objects (a member required)
    "whole": [
        (
            {"type": "object", "properties": {"city": {"type": "string"}, "floor": {"type": "integer"}}},
            st.fixed_dictionaries({}, optional={"city": st.text(max_size=2), "floor": st.integers(0, 3)}),
        ),
        (
            {
                "type": "array",
                "reduce": {"strategy": "firstWriteWins"},
                "items": {
                    "type": "object",
                    "required": ["sku"],
                    "properties": {
                        "sku": {"type": "string"},
                        "qty": {"type": "integer"},
                        "at": {"type": "string", "format": "date-time"},
                    },
                },
            },
            st.lists(
                st.fixed_dictionaries(
                    {"sku": st.sampled_from("ab")}, optional={"qty": st.integers(1, 3), "at": DATE_TIMES}
                ),
                max_size=2,
            ),
        ),
    ],
    # an exact decimal (multipleOf 0.01) summed: whole numbers and cents
    "decimal": [
        (
            {"type": "number", "multipleOf": 0.01, "reduce": {"strategy": "sum"}},
            st.one_of(st.integers(-(10**6), 10**6).map(lambda i: i / 100), st.integers(-50, 50)),
        )
    ],
    # nullable (null kept apart from absent), last or first written by the source order
    "nullable": [
        ({"type": ["string", "null"]}, st.one_of(st.none(), st.text(max_size=3))),
        (
            {"type": ["null", "integer"], "reduce": {"strategy": "firstWriteWins"}},
            st.one_of(st.none(), st.integers(-9, 9)),
        ),
        (
            {"type": ["number", "null"], "multipleOf": 0.01},
            st.one_of(st.none(), st.integers(-999, 999).map(lambda i: i / 100)),
        ),
        ({"type": ["boolean", "null"], "reduce": {"strategy": "lastWriteWins"}}, st.one_of(st.none(), st.booleans())),
        ({"type": ["string", "null"], "format": "date-time"}, st.one_of(st.none(), DATE_TIMES)),
        ({"type": ["integer", "null"], "reduce": {"strategy": "maximize"}}, st.one_of(st.none(), st.integers(-9, 9))),
        ({"type": ["null", "string"], "reduce": {"strategy": "minimize"}}, st.one_of(st.none(), st.text(max_size=2))),
        (
            {"type": ["string", "null"], "format": "date-time", "reduce": {"strategy": "maximize"}},
            st.one_of(st.none(), DATE_TIMES),
        ),
        (
            {"type": ["string", "null"], "format": "date-time", "reduce": {"strategy": "minimize"}},
            st.one_of(st.none(), DATE_TIMES),
        ),
    ],
    # compared as instants: mixed offsets, equal instants written differently, long fractions
    "date-time": [
        ({"type": "string", "format": "date-time", "reduce": {"strategy": s}}, DATE_TIMES)
        for s in ("maximize", "minimize")
    ],
}
ALL_KINDS = [kv for kinds in FIELD_KINDS.values() for kv in kinds]


@st.composite
def schema_and_docs(draw):
    n = draw(st.integers(1, 4))
    picks = [draw(st.sampled_from(ALL_KINDS)) for _ in range(n)]
    props = {"k": {"type": draw(st.sampled_from(["string", "integer"]))}}
    gens = {}
    for i, (schema, gen) in enumerate(picks):
        props[f"f{i}"] = schema
        gens[f"f{i}"] = gen
    root = draw(st.sampled_from(["merge", "merge", "lastWriteWins", "ordered"]))
    reduce_ = {"strategy": root}
    if root == "ordered":  # event-time order by a scalar property (ties: source order)
        scalars = [
            f"f{i}" for i, (sub, _) in enumerate(picks) if sub["type"] in ("string", "integer", "number", "boolean")
        ]
        reduce_ = {"strategy": draw(st.sampled_from(["lastWriteWins", "firstWriteWins"]))}
        if scalars:
            reduce_["order"] = "/" + draw(st.sampled_from(scalars))
    required = ["k"]
    fixed: dict = {}
    if root == "merge" and draw(st.booleans()):  # a property last written by a maximized date-time
        props["ts"] = {"type": "string", "format": "date-time", "reduce": {"strategy": "maximize"}}
        props["st"] = {"type": "string", "reduce": {"strategy": "lastWriteWins", "order": "/ts"}}
        required += ["ts", "st"]
        fixed = {"ts": DATE_TIMES, "st": st.sampled_from(["a", "b", "c"])}
    schema = {"type": "object", "required": required, "reduce": reduce_, "properties": props}
    key_gen = st.integers(0, 3) if props["k"]["type"] == "integer" else st.sampled_from(["a", "b", 'é"', "\x1f"])
    if draw(st.booleans()):  # properties the schema does not declare, in some documents
        gens = {**gens, "xu": UNDECLARED_VALUES, "yu": UNDECLARED_VALUES}
    docs = draw(st.lists(st.fixed_dictionaries({"k": key_gen, **fixed}, optional=gens), min_size=1, max_size=25))
    return schema, docs


def folded(spark, coll, docs, path: str) -> dict:
    """``docs`` combined in one file's batch: asserted equal to the Python fold's, on ``path``."""
    res = combine_batch(frame(spark, docs, files=1), coll)
    try:
        got = collect(res)
        assert got == expected(coll, docs, files=1)
        assert res.path == path
        return got
    finally:
        res.unpersist()


def assert_quarantined(spark, coll, docs, bad) -> None:
    """``docs`` with each of ``bad`` (``(document, the rule the Python validator names)``) after
    them, quarantined: the view is ``docs``' fold, and each bad document is named by its rule."""
    res = combine_batch(frame(spark, docs + [d for d, _ in bad], files=1), coll, on_invalid="quarantine")
    try:
        assert collect(res) == expected(coll, docs, files=1)
        reasons = {int(r["location"].rsplit(":", 1)[1]): r["reason"] for r in res.invalid.collect()}
        assert sorted(reasons) == list(range(len(docs) + 1, len(docs) + len(bad) + 1))
        for line, (_doc, rule) in enumerate(bad, start=len(docs) + 1):
            assert rule in reasons[line], (rule, reasons[line])
    finally:
        res.unpersist()


def merged(**properties) -> dict:
    """A schema (or a property's) of ``properties`` reduced by ``merge``."""
    return {"type": "object", "reduce": {"strategy": "merge"}, "properties": properties}


def frame(spark, docs, files=2):
    rows = [(json.dumps(d), f"file:///data/part-{i % files}.json", 0, i) for i, d in enumerate(docs)]
    return spark.createDataFrame(rows, SCHEMA)


def expected(coll, docs, files=2):
    order = sorted(range(len(docs)), key=lambda i: (f"file:///data/part-{i % files}.json", i))
    out: dict = {}
    for i in order:
        d = docs[i]
        kj = key_json(coll.extract_key(d))
        out[kj] = d if kj not in out else coll.reduce(out[kj], d)
    return out


def collect(result):
    rows = result.combined.collect()
    for r in rows:
        assert r.key_hash == zlib.crc32(r.key_json.encode("utf-8"))
    return {r.key_json: json.loads(r.doc) for r in rows}


@pytest.mark.slow  # the property tests of both combine implementations run after the default suite
@settings(
    max_examples=6,  # each example two Spark combines; hypothesis draws new ones every run
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture, HealthCheck.filter_too_much],
)
@given(schema_and_docs())
def test_differential_compiled_fallback_python(spark, case):
    schema, docs = case
    coll = Collection(CollectionSpec("t", ("/k",), schema))
    assert compile_collection(coll) is not None
    df = frame(spark, docs)
    want = expected(coll, docs)
    try:
        compiled = combine_batch(df, coll, force_path="compiled")
    except ValueError as exc:  # native validation was unsure of a valid document (e.g. '}"' in a string)
        assert "cannot take the compiled path" in str(exc)
        assume(False)
    fallback = combine_batch(df, coll, force_path="fallback")
    try:
        assert compiled.path == "compiled" and fallback.path == "fallback"
        assert compiled.documents == fallback.documents == len(docs)
        got_c, got_f = collect(compiled), collect(fallback)
        assert got_f == want
        assert got_c == want
        for kj, doc in got_c.items():  # ints stay ints
            for name, sub in schema["properties"].items():
                if sub.get("type") == "integer" and name in doc:
                    assert isinstance(doc[name], int)
    finally:
        compiled.unpersist()
        fallback.unpersist()


key_parts = st.one_of(st.text(max_size=6), st.integers(-(2**63), 2**63 - 1), st.booleans())


@settings(max_examples=5, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    st.lists(st.tuples(st.text(max_size=6), st.integers(-(2**63), 2**63 - 1), st.booleans()), min_size=1, max_size=40)
)
def test_native_key_json_is_byte_identical(spark, keys):
    from pyspark.sql import functions as F

    from tidemark.spark.compile import key_json_expr

    df = spark.createDataFrame(
        [(i, s, n, b) for i, (s, n, b) in enumerate(keys)], "i long, s string, n long, b boolean"
    )
    got = df.select(
        "i",
        key_json_expr([F.col("s"), F.col("n"), F.col("b")], ["string", "integer", "boolean"]).alias("kj"),
        F.crc32(key_json_expr([F.col("s"), F.col("n"), F.col("b")], ["string", "integer", "boolean"])).alias("h"),
    ).collect()
    for row in got:
        key = keys[row.i]
        assert row.kj == key_json(key)
        assert row.h == zlib.crc32(key_json(key).encode("utf-8"))


def test_control_characters_in_keys(spark):
    from pyspark.sql import functions as F

    from tidemark.spark.compile import key_json_expr

    text = "".join(chr(c) for c in range(0x20)) + '"\\/é\u2028\U0001f600'
    df = spark.createDataFrame([(text,)], "s string")
    assert df.select(key_json_expr([F.col("s")], ["string"]).alias("k")).first().k == key_json([text])


ORDERS = {
    "type": "object",
    "required": ["customer"],
    "reduce": {"strategy": "merge"},
    "properties": {
        "customer": {"type": "string"},
        "total": {"type": "number", "reduce": {"strategy": "sum"}},
        "n": {"type": "integer", "reduce": {"strategy": "sum"}},
    },
}


@pytest.mark.parametrize("path", ["compiled", "fallback"])
def test_invalid_document_fails_with_location_key_and_rule(spark, path):
    coll = Collection(CollectionSpec("orders", ("/customer",), ORDERS))
    rows = [
        ('{"customer": "a", "total": 1}', "file:///data/orders/a.json", 0, 0),
        ('{"customer": "b", "total": 2}', "file:///data/orders/a.json", 0, 1),
        ('{"customer": "c", "total": "x"}', "file:///data/orders/a.json", 0, 2),
        ('{"customer": "d", "total": "y"}', "file:///data/orders/b.json", 0, 0),
    ]
    with pytest.raises(DocumentError) as exc:
        combine_batch(spark.createDataFrame(rows, SCHEMA), coll, force_path=path)
    lines = str(exc.value).splitlines()
    assert (
        lines[0]
        == "/data/orders/a.json:3 key ('c',): document violates its schema: /total: 'x' is not of type 'number'"
    )
    # every invalid document of the batch, in source order, then the count and the way on
    assert (
        lines[1]
        == "  /data/orders/b.json:1 key ('d',): document violates its schema: /total: 'y' is not of type 'number'"
    )
    assert lines[2].startswith("  2 invalid document(s) in this batch") and "on_invalid: quarantine" in lines[2]
    assert exc.value.location == "/data/orders/a.json:3" and exc.value.key == ("c",) and exc.value.total == 2


BAD_DOCUMENTS = [  # (the line, the rule its error names)
    ('{"customer": "a", "total": ', "unparseable JSON"),
    ('{"customer": "a", "total": NaN}', "NaN is not valid JSON"),
    ('{"total": 1}', "'customer' is a required property"),
    ('{"customer": "a", "total": 1, "pad": "' + "x" * 200 + '"}', "more than the maximum of 100 bytes"),
]


@pytest.mark.parametrize("path", ["compiled", "fallback"])
def test_bad_documents(spark, path):
    """Each bad line of one batch is named at its own line with its own rule."""
    coll = Collection(CollectionSpec("orders", ("/customer",), ORDERS), max_document_bytes=100)
    _rejects_each(
        spark, coll, path, '{"customer": "a", "total": 1}', [(line, re.escape(m)) for line, m in BAD_DOCUMENTS]
    )


@pytest.mark.parametrize("path", ["compiled", "fallback"])
def test_quarantine_returns_invalid_and_combines_the_rest(spark, path):
    coll = Collection(CollectionSpec("orders", ("/customer",), ORDERS))
    rows = [
        ('{"customer": "a", "total": 1}', "f.json", 0, 0),
        ('{"customer": "a", "total": "x"}', "f.json", 0, 1),
        ("not json", "f.json", 0, 2),
        ('{"customer": "a", "total": 2.5, "n": 1}', "f.json", 0, 3),
    ]
    res = combine_batch(spark.createDataFrame(rows, SCHEMA), coll, on_invalid="quarantine", force_path=path)
    try:
        assert res.documents == 2
        assert collect(res) == {'["a"]': {"customer": "a", "total": 3.5, "n": 1}}
        invalid = [r.asDict() for r in res.invalid.collect()]
        assert [(r["location"], r["key_json"]) for r in invalid] == [("f.json:2", '["a"]'), ("f.json:3", None)]
        assert "/total: 'x' is not of type 'number'" in invalid[0]["reason"]
        assert invalid[1]["value"] == "not json"
    finally:
        res.unpersist()


def test_only_the_keys_of_odd_documents_take_the_python_fold(spark, plain_proof):
    """A valid document native validation is unsure of (``1.0`` for an integer), or one with an
    undeclared property where the plan cannot carry it (without the JVM scan), sends its key's
    documents -- all of them, in source order -- to the Python fold; every other key keeps the
    compiled result; an invalid document is quarantined with its line as before."""
    coll = Collection(CollectionSpec("orders", ("/customer",), ORDERS))
    docs = [{"customer": f"c{i % 12}", "total": i / 4, "n": 1} for i in range(60)]
    lines = [json.dumps(d) for d in docs]
    lines[13] = '{"customer": "c1", "total": 0.5, "n": 1.0}'  # valid, unsure
    lines[30] = '{"customer": "c6", "total": 1, "n": 1, "extra": {"a": [null]}}'  # undeclared
    lines[41] = '{"customer": "c5", "total": "lots"}'  # invalid
    rows = [(line, "file:///data/part-0.json", 0, i) for i, line in enumerate(lines)]
    res = combine_batch(spark.createDataFrame(rows, SCHEMA), coll, on_invalid="quarantine")
    try:
        kept = [json.loads(line) for i, line in enumerate(lines) if i != 41]
        assert collect(res) == expected(coll, kept, files=1)
        assert res.path == "mixed" and res.documents == 59
        (bad,) = [r.asDict() for r in res.invalid.collect()]
        assert (bad["location"], bad["key_json"]) == ("/data/part-0.json:42", '["c5"]')
    finally:
        res.unpersist()


@pytest.mark.parametrize("path", ["compiled", "fallback"])
def test_sum_overflow_is_a_reduction_error(spark, path):
    coll = Collection(CollectionSpec("orders", ("/customer",), ORDERS))
    rows = [('{"customer": "a", "n": %d}' % (2**63 - 1), "f", 0, 0), ('{"customer": "a", "n": 1}', "f", 0, 1)]
    with pytest.raises(ReductionError, match=r"""key \["a"\]: .*/n: 'sum' overflowed"""):
        combine_batch(spark.createDataFrame(rows, SCHEMA), coll, force_path=path)


def test_uncompilable_schema_and_surprising_batches_fall_back(spark, plain_proof):
    from tests.support.helpers import ORDERS_SCHEMA

    coll = Collection(CollectionSpec("orders", ("/customer",), ORDERS_SCHEMA))
    assert compile_collection(coll) is None
    docs = [
        {"customer": "a", "amount": 1, "items": ["x"]},
        {"customer": "a", "amount": 0, "_meta": {"op": "d"}},
        {"customer": "a", "amount": 2, "items": ["y"]},
    ]
    res = combine_batch(frame(spark, docs, files=1), coll)
    try:
        assert res.path == "fallback"
        (doc,) = collect(res).values()
        assert doc == {"customer": "a", "amount": 2, "items": ["y"], "_meta": {"reset": True}}
    finally:
        res.unpersist()
    # a compilable schema, a batch with an undeclared property: kept (by the JVM scan and the
    # compiled combine; without the scan, by the fallback)
    coll = Collection(CollectionSpec("orders", ("/customer",), ORDERS))
    res = combine_batch(
        frame(spark, [{"customer": "a", "total": 1, "extra": [1]}, {"customer": "a", "total": 1}]), coll
    )
    try:
        assert res.path == ("compiled" if plain_proof == "jvm" else "fallback")
        assert collect(res) == {'["a"]': {"customer": "a", "total": 2, "extra": [1]}}
    finally:
        res.unpersist()
    # a document native validation is unsure of (integer 1.0) but that is valid
    schema = {**ORDERS, "properties": {**ORDERS["properties"], "n": {"type": "integer"}}}
    coll = Collection(CollectionSpec("orders", ("/customer",), schema))
    rows = [('{"customer": "a", "n": 1.0}', "f", 0, 0)]
    res = combine_batch(spark.createDataFrame(rows, SCHEMA), coll)
    try:
        assert res.path == "fallback" and collect(res) == {'["a"]': {"customer": "a", "n": 1.0}}
    finally:
        res.unpersist()


OPEN_KEY = {  # the key is not listed in `required`: a document without it is still an error
    "type": "object",
    "reduce": {"strategy": "merge"},
    "properties": {
        "k": {"type": "string"},
        "t": {"type": "number", "reduce": {"strategy": "sum"}},
        "s": {"type": "string"},
    },
}


FORGIVEN = [  # (the line, the rule its error names)
    ('{"t": 1}', "document has no key component at /k"),
    ("", "unparseable JSON: Expecting value"),
    ('{"k": "a", "t": 1} xyz', "unparseable JSON: Extra data"),
    ('{"k": "a", "t": 1}{"k": "b", "t": 2}', "unparseable JSON: Extra data"),
    ('{"k": "a", "\\u0073": 5}', "/s: 5 is not of type 'string'"),
    ('[{"k": "a"}]', "is not of type 'object'"),
    # the substring prechecks in front of the regular expression: compact, spaced, repeated
    ('{"k":"a","s":5}', "/s: 5 is not of type 'string'"),
    ('{"k":"a","s" :true}', "/s: True is not of type 'string'"),
    ('{"k":"a","s":"x","s":[1]}', "/s: [1] is not of type 'string'"),
    ('{"k":"a","t":1,"s":null}', "/s: None is not of type 'string'"),
    ('{"k":"a","t":1}\t{"k":"b"}', "unparseable JSON: Extra data"),
    ('{"k":"a","t":1}}', "unparseable JSON: Extra data"),
    ('{"k": "a", "t": 1} ]}', "unparseable JSON: Extra data"),
    ('{"k": "a", "t": 1}true}', "unparseable JSON: Extra data"),
    # what the plain-document proof must not take for a string: whole numbers, booleans, arrays
    ('{"k":"a","s":1e2}', "/s: 100.0 is not of type 'string'"),
    ('{"k":"a","s":-3}', "/s: -3 is not of type 'string'"),
    ('{"k":"a","s":false}', "/s: False is not of type 'string'"),
    ('{"k":"a","s":[1]}', "/s: [1] is not of type 'string'"),
    ('{"k":"a","t":"1"}', "/t: '1' is not of type 'number'"),
    # non-JSON that Spark's parser would accept unless told not to
    ("{'k':'a','t':1}", "unparseable JSON"),
    ('{"k":"a","t":1,}', "unparseable JSON"),
    ('{"k":"a","t":+1}', "unparseable JSON"),
    # half a surrogate pair: Spark's parser reads "?", which is not what the text says
    ('{"k":"a","s":"\\ud800"}', "unparseable JSON: a lone surrogate .ud800 is not valid Unicode"),
    ('{"k":"a","s":"x\\udc00y"}', "unparseable JSON: a lone surrogate .udc00 is not valid Unicode"),
]


def test_compiled_path_catches_what_from_json_forgives(spark):
    """from_json reads a missing key as null, ignores trailing content and coerces values to strings."""
    cases = [(line, m.replace("(", r"\(").replace("[", r"\[")) for line, m in FORGIVEN]
    _compiled_rejects_each(spark, OPEN_KEY, '{"k": "a", "t": 1}', cases)


def _compiled_rejects_each(spark, schema, first, cases):
    """The compiled path fails a batch of ``first`` and each case's line and names every case."""
    _rejects_each(spark, Collection(CollectionSpec("t", ("/k",), schema)), "compiled", first, cases)


def _rejects_each(spark, coll, path, first, cases):
    """A batch of ``first`` then each ``(line, pattern)`` of ``cases`` (in batches of as many as
    one error names) fails on ``path``, and its error names each case at its own line
    (``src:2``, ``src:3``, ...) with a rule matching its pattern: each line is judged on its own."""
    for begin in range(0, len(cases), MAX_REPORTED_INVALID):
        chunk = cases[begin : begin + MAX_REPORTED_INVALID]
        rows = [(first, "src", 0, 0)] + [(line, "src", 0, i + 1) for i, (line, _) in enumerate(chunk)]
        with pytest.raises(DocumentError) as exc:
            combine_batch(spark.createDataFrame(rows, SCHEMA), coll, force_path=path)
        assert exc.value.total == len(chunk), str(exc.value)
        for i, ((line, pattern), error) in enumerate(zip(chunk, exc.value.documents, strict=True)):
            assert re.match(f"^src:{i + 2}(:| key ).*" + pattern, str(error)), (line, str(error))


def test_compiled_path_is_taken_for_clean_batches(spark):
    coll = Collection(CollectionSpec("orders", ("/customer",), ORDERS))
    docs = [{"customer": "a", "total": 1.5, "n": 1}, {"customer": "b", "n": 2}, {"customer": "a", "total": 2, "n": 3}]
    res = combine_batch(frame(spark, docs), coll)
    try:
        assert res.path == "compiled" and res.documents == 3
        assert collect(res) == {'["a"]': {"customer": "a", "total": 3.5, "n": 4}, '["b"]': {"customer": "b", "n": 2}}
    finally:
        res.unpersist()


NULLABLE = {
    "type": "object",
    "reduce": {"strategy": "merge"},
    "required": ["k", "state"],
    "properties": {
        "k": {"type": "string"},
        "state": {"type": ["string", "null"], "enum": ["open", "shut", None]},
        "note": {"type": ["null", "string"]},
        "first": {"type": ["integer", "null"], "reduce": {"strategy": "firstWriteWins"}},
        "at": {"type": ["string", "null"], "format": "date-time"},
        "n": {"type": "integer", "reduce": {"strategy": "sum"}},
        "top": {"type": ["integer", "null"], "reduce": {"strategy": "maximize"}},
        "low": {"type": ["string", "null"], "format": "date-time", "reduce": {"strategy": "minimize"}},
    },
}


def test_nullable_properties_keep_null_apart_from_absent_on_the_compiled_path(spark, plain_proof):
    """A later null replaces a value, a document without the property keeps the earlier one,
    firstWriteWins keeps a first null, a required property may be null: on the compiled
    path (with the JVM scan; without it, the key of a document that writes null takes the
    Python fold, and the others the compiled path)."""
    coll = Collection(CollectionSpec("t", ("/k",), NULLABLE))
    assert compile_collection(coll) is not None
    docs = [
        {"k": "a", "state": "open", "note": "x", "first": None, "at": "2024-05-01T00:00:00+01:00", "n": 1},
        {"k": "a", "state": None, "n": 1},  # null replaces, absent keeps
        {"k": "b", "state": "open", "n": 1},
        {"k": "b", "state": "shut", "note": None, "first": 7, "at": None, "n": 1},
        {"k": "c", "state": None, "note": None, "n": 1},
        {"k": "c", "state": "shut", "first": 3, "n": 1},
        {"k": "d", "state": "open", "n": 1},  # never null, never absent-then-present
        # maximize: null is the least (kept only where no value came); minimize: any null wins
        {"k": "e", "state": "open", "top": None, "low": "2024-05-01T00:00:00Z", "n": 1},
        {"k": "e", "state": "open", "top": 4, "low": None, "n": 1},
        {"k": "e", "state": "open", "top": None, "low": "2024-04-01T00:00:00Z", "n": 1},
        {"k": "f", "state": "open", "top": None, "n": 1},
    ]
    res = combine_batch(frame(spark, docs, files=1), coll)
    try:
        got = collect(res)
        assert got == expected(coll, docs, files=1)
        assert got['["a"]'] == {
            "k": "a",
            "state": None,
            "note": "x",
            "first": None,
            "at": "2024-05-01T00:00:00+01:00",
            "n": 2,
        }
        assert got['["c"]'] == {"k": "c", "state": "shut", "note": None, "first": 3, "n": 2}
        assert "note" not in got['["d"]'] and "first" not in got['["d"]']
        assert (got['["e"]']["top"], got['["e"]']["low"], got['["f"]']["top"]) == (4, None, None)
        assert res.path == ("compiled" if plain_proof == "jvm" else "mixed")
    finally:
        res.unpersist()


MEMBERS = {
    "type": "object",
    "reduce": {"strategy": "merge"},
    "properties": {
        "k": {"type": "string"},
        "address": {
            "type": "object",
            "reduce": {"strategy": "merge"},
            "properties": {
                "city": {"type": "string"},
                "floor": {"type": "integer", "reduce": {"strategy": "firstWriteWins"}},
                "visits": {"type": "integer", "reduce": {"strategy": "sum"}},
                "vip": {"type": "boolean", "reduce": {"strategy": "maximize"}},
            },
        },
    },
}


def test_an_object_whose_members_have_strategies_of_their_own_compiles(spark, plain_proof):
    """Each member reduced by its own strategy, an empty object kept, a member of another type
    a suspect (invalid), an undeclared member last written (carried by the compiled combine
    where the JVM scan proves it; else the Python fold takes its key), a sum past 64 bits an
    error naming the member."""
    coll = Collection(CollectionSpec("t", ("/k",), MEMBERS))
    plan = compile_collection(coll)
    assert plan is not None and plan.fields[1].kind == "object"
    docs = [
        {"k": "a", "address": {"city": "Oslo", "floor": 3, "visits": 1}},
        {"k": "a", "address": {"city": "Rome", "floor": 5, "visits": 2, "vip": False}},
        {"k": "a", "address": {"vip": True}},
        {"k": "b", "address": {}},
        {"k": "c"},
        {"k": "c", "address": {"visits": 4}},
    ]
    res = combine_batch(frame(spark, docs, files=1), coll)
    try:
        got = collect(res)
        assert got == expected(coll, docs, files=1)
        assert got['["a"]'] == {"k": "a", "address": {"city": "Rome", "floor": 3, "visits": 3, "vip": True}}
        assert got['["b"]'] == {"k": "b", "address": {}} and got['["c"]'] == {"k": "c", "address": {"visits": 4}}
        assert res.path == ("compiled" if plain_proof == "jvm" else "fallback")  # nested colons: see _undeclared
    finally:
        res.unpersist()
    for odd in ({"k": "a", "address": {"city": 5}}, {"k": "a", "address": {"zip": "0150"}}):
        res = combine_batch(frame(spark, docs + [odd], files=1), coll, on_invalid="quarantine")
        try:
            assert collect(res) == expected(coll, docs + ([odd] if "zip" in odd["address"] else []), files=1)
        finally:
            res.unpersist()
    undeclared = [  # undeclared members, each last written whatever it holds; and an undeclared property
        {"k": "a", "address": {"zip": "0150", "wing": {"n": [1]}}, "src": 1},
        {"k": "b", "address": {"wing": None}},
        {"k": "a", "address": {"city": "Bern", "zip": None}},
        {"k": "a", "address": {"zip": 7}, "src": {"x": None}},
    ]
    res = combine_batch(frame(spark, docs + undeclared, files=2), coll)
    try:
        got = collect(res)
        assert got == expected(coll, docs + undeclared, files=2)
        assert res.path == ("compiled" if plain_proof == "jvm" else "fallback")
    finally:
        res.unpersist()
    closed = {**MEMBERS, "properties": {**MEMBERS["properties"]}}
    closed["properties"]["address"] = {**MEMBERS["properties"]["address"], "additionalProperties": False}
    coll = Collection(CollectionSpec("t", ("/k",), closed))
    with pytest.raises(DocumentError, match="Additional properties are not allowed"):
        combine_batch(frame(spark, undeclared[:1], files=1), coll)
    big = [{"k": "a", "address": {"visits": 2**62}}, {"k": "a", "address": {"visits": 2**62}}]
    with pytest.raises(ReductionError, match="/address/visits"):
        combine_batch(frame(spark, big, files=1), coll)


ARRAY_MEMBERS = merged(
    k={"type": "string"},
    customer=merged(
        name={"type": "string"},
        tags={"type": "array", "items": {"type": "string"}, "reduce": {"strategy": "union"}},
        scores={"type": "array", "items": {"type": "number"}, "reduce": {"strategy": "union"}},
        seen={"type": "array", "items": {"type": "integer"}, "reduce": {"strategy": "append"}},
        flags={"type": "array", "items": {"type": "boolean"}, "reduce": {"strategy": "append"}},
    ),
)


def test_an_objects_array_members_appended_and_unioned_compile(spark, plain_proof):
    """An object's members that are arrays of one scalar type, appended or unioned (each value
    once, first seen first; a lone document's array as it is), compile; an item of another type
    is the rule the Python validator names (quarantined)."""
    coll = Collection(CollectionSpec("t", ("/k",), ARRAY_MEMBERS))
    plan = compile_collection(coll)
    assert plan is not None and [m.kind for m in plan.fields[1].members] == ["scalar"] + ["append"] * 4
    docs = [
        {"k": "a", "customer": {"name": "x", "tags": ["b", "a", "b"], "seen": [1, 1], "scores": [1.5, 2]}},
        {"k": "a", "customer": {"tags": ["c", "a"], "seen": [2], "flags": [True]}},
        {"k": "a", "customer": {"scores": [2.0, 3, 1.5], "flags": [False, True]}},
        {"k": "b", "customer": {"tags": ["z", "z"], "seen": []}},  # a lone document's array: as it is
        {"k": "c", "customer": {"tags": []}},
        {"k": "c", "customer": {"name": "y"}},
        {"k": "d"},
    ]
    # without the JVM scan the documents holding the object are suspects: their keys take the fold
    got = folded(spark, coll, docs, "compiled" if plain_proof == "jvm" else "mixed")
    assert got['["a"]']["customer"] == {
        "name": "x",
        "tags": ["b", "a", "c"],
        "seen": [1, 1, 2],
        "scores": [1.5, 2, 3],
        "flags": [True, False, True],
    }
    assert got['["b"]']["customer"] == {"tags": ["z", "z"], "seen": []}
    assert_quarantined(
        spark,
        coll,
        docs,
        [
            ({"k": "a", "customer": {"tags": ["a", 1]}}, "1 is not of type 'string'"),
            ({"k": "a", "customer": {"seen": 3}}, "3 is not of type 'array'"),
            ({"k": "a", "customer": {"seen": [1.5]}}, "1.5 is not of type 'integer'"),
            ({"k": "a", "customer": {"tags": None}}, "None is not of type 'array'"),
        ],
    )


APPENDED_LINES = merged(
    k={"type": "string"},
    lines={
        "type": "array",
        "reduce": {"strategy": "append"},
        "items": {"type": "object", "properties": {"sku": {"type": "string"}, "qty": {"type": "integer"}}},
    },
    log={"type": "array", "reduce": {"strategy": "append"}},
)


def test_arrays_of_objects_and_of_any_values_appended_compile(spark, plain_proof):
    """``append`` of an array of objects of declared members (the JVM scan proves them; an
    undeclared member kept as written) and of an array without ``items``: each document's
    array text, in source order, joined; an item of another type is the rule the Python
    validator names."""
    coll = Collection(CollectionSpec("t", ("/k",), APPENDED_LINES))
    plan = compile_collection(coll)
    assert plan is not None and [(f.kind, f.strategy) for f in plan.fields[1:]] == [("raw", "append")] * 2
    docs = [
        {"k": "a", "lines": [{"sku": "x", "qty": 1}], "log": [1, "é", True]},
        {"k": "a", "lines": [], "log": [{"z": [1.5, "w"]}]},
        {"k": "a", "lines": [{"qty": 2, "gift": {"w": None}}, {}], "log": []},
        {"k": "b", "lines": [{"sku": "y"}, {"sku": "y"}]},
        {"k": "c", "log": [1e300, -0.0, 12345678901234567890]},
        {"k": "c", "log": ["end"]},
    ]
    got = folded(spark, coll, docs, "compiled" if plain_proof == "jvm" else "mixed")
    assert got['["a"]']["lines"] == [{"sku": "x", "qty": 1}, {"qty": 2, "gift": {"w": None}}, {}]
    assert got['["a"]']["log"] == [1, "é", True, {"z": [1.5, "w"]}]
    # a null inside an array without items: the scan leaves that document to the Python fold
    nulls = docs + [{"k": "c", "log": [None, {"v": None}]}]
    res = combine_batch(frame(spark, nulls, files=1), coll)
    try:
        assert collect(res) == expected(coll, nulls, files=1)
    finally:
        res.unpersist()
    assert_quarantined(
        spark,
        coll,
        docs,
        [
            ({"k": "a", "lines": [{"qty": "two"}]}, "'two' is not of type 'integer'"),
            ({"k": "a", "lines": {"sku": "x"}}, "is not of type 'array'"),
            ({"k": "a", "log": 5}, "5 is not of type 'array'"),
        ],
    )


NESTED_MEMBERS = merged(
    k={"type": "string"},
    address=merged(
        city={"type": "string"},
        geo={
            **merged(
                lat={"type": "number", "reduce": {"strategy": "maximize"}},
                hits={"type": "integer", "reduce": {"strategy": "sum"}},
                zones={"type": "array", "items": {"type": "string"}, "reduce": {"strategy": "union"}},
                seen_at={"type": "string", "format": "date-time", "reduce": {"strategy": "minimize"}},
                fee={"type": "number", "multipleOf": 0.01, "reduce": {"strategy": "sum"}},
            ),
            "required": ["lat"],
        },
    ),
)


def test_a_merged_object_inside_a_merged_object_compiles(spark, plain_proof):
    """``address.geo`` merged within ``address``, each of its members by its own strategy; a
    member ``geo`` does not declare, a missing required one or one of another type: the rule the
    Python validator names, or the key's Python fold (an undeclared member: last written)."""
    coll = Collection(CollectionSpec("t", ("/k",), NESTED_MEMBERS))
    plan = compile_collection(coll)
    assert plan is not None and [m.kind for m in plan.fields[1].members] == ["scalar", "object"]
    docs = [
        {"k": "a", "address": {"city": "x", "geo": {"lat": 1.5, "hits": 1, "zones": ["b", "a"], "fee": 0.1}}},
        {
            "k": "a",
            "address": {"geo": {"lat": -2, "hits": 2, "zones": ["a", "c"], "seen_at": "2024-05-01T10:00:00+05:30"}},
        },
        {"k": "a", "address": {"city": "y", "geo": {"lat": 0, "seen_at": "2024-05-01T04:30:00Z", "fee": 0.2}}},
        {"k": "b", "address": {"geo": {"lat": 3}}},
        {"k": "b", "address": {"city": "z"}},
        {"k": "c", "address": {}},
    ]
    got = folded(spark, coll, docs, "compiled" if plain_proof == "jvm" else "fallback")  # each document a suspect
    assert got['["a"]']["address"] == {
        "city": "y",
        # one instant twice: the later text (the fold's ties go to the later document)
        "geo": {"lat": 1.5, "hits": 3, "zones": ["b", "a", "c"], "seen_at": "2024-05-01T04:30:00Z", "fee": 0.3},
    }
    assert got['["b"]']["address"] == {"geo": {"lat": 3}, "city": "z"}
    assert_quarantined(
        spark,
        coll,
        docs,
        [
            ({"k": "a", "address": {"geo": {"lat": "north"}}}, "'north' is not of type 'number'"),
            ({"k": "a", "address": {"geo": {"hits": 1}}}, "'lat' is a required property"),
            ({"k": "a", "address": {"geo": None}}, "None is not of type 'object'"),
            ({"k": "a", "address": {"geo": {"lat": 1, "fee": 0.001}}}, "is not a multiple of 0.01"),
        ],
    )
    undeclared = docs + [{"k": "a", "address": {"geo": {"lat": 9, "alt": 100}}}]
    res = combine_batch(frame(spark, undeclared, files=1), coll)
    try:  # the key's Python fold: the undeclared member last written, the others as before
        assert collect(res) == expected(coll, undeclared, files=1)
        assert res.path == ("mixed" if plain_proof == "jvm" else "fallback")
    finally:
        res.unpersist()
    big = [{"k": "a", "address": {"geo": {"lat": 1, "hits": 2**62}}}] * 2
    with pytest.raises(ReductionError, match="/address/geo/hits"):
        combine_batch(frame(spark, big, files=1), coll)
    # two levels deep: address.geo.cell (the scan's spec marks each level apart)
    geo = NESTED_MEMBERS["properties"]["address"]["properties"]["geo"]
    deeper = merged(k={"type": "string"}, address=merged(geo={**geo, "properties": {**geo["properties"], "cell": geo}}))
    coll = Collection(CollectionSpec("t", ("/k",), deeper))
    cells = [
        {"k": "a", "address": {"geo": {"lat": 1, "cell": {"lat": 5, "hits": 1, "zones": ["q"]}}}},
        {"k": "a", "address": {"geo": {"lat": 2, "hits": 4, "cell": {"lat": 3, "hits": 2, "zones": ["r", "q"]}}}},
        {"k": "b", "address": {"geo": {"lat": 0, "cell": {"lat": 1}}}},
    ]
    got = folded(spark, coll, cells, "compiled" if plain_proof == "jvm" else "fallback")
    assert got['["a"]']["address"]["geo"] == {"lat": 2, "hits": 4, "cell": {"lat": 5, "hits": 3, "zones": ["q", "r"]}}
    assert_quarantined(
        spark,
        coll,
        cells,
        [
            (
                {"k": "a", "address": {"geo": {"lat": 1, "cell": {"lat": 1, "hits": "x"}}}},
                "'x' is not of type 'integer'",
            ),
            ({"k": "a", "address": {"geo": {"lat": 1, "cell": {"hits": 1}}}}, "'lat' is a required property"),
        ],
    )


FORMATTED_MEMBERS = {
    "type": "object",
    "reduce": {"strategy": "merge"},
    "properties": {
        "k": {"type": "string"},
        "payment": {
            "type": "object",
            "reduce": {"strategy": "merge"},
            "properties": {
                "paid_at": {"type": "string", "format": "date-time"},
                "amount": {"type": "number", "multipleOf": 0.01, "reduce": {"strategy": "sum"}},
                "ref": {"type": "string", "format": "uuid"},
                "mail": {"type": "string", "format": "email"},
            },
        },
    },
}


def test_an_object_whose_members_are_date_times_and_exact_decimals_compiles(spark, plain_proof):
    """A real event's nested payment: a date-time member last written as written, an exact
    decimal member summed exactly (0.1 + 0.2 is 0.3), a uuid member; a member that breaks
    its format or places is an invalid document, named by the Python validator's rule."""
    coll = Collection(CollectionSpec("t", ("/k",), FORMATTED_MEMBERS))
    plan = compile_collection(coll)
    assert plan is not None and plan.fields[1].kind == "object"
    assert [m.scale for m in plan.fields[1].members] == [None, 2, None, None]
    docs = [
        {"k": "a", "payment": {"paid_at": "2024-05-01T10:00:00+05:30", "amount": 0.1}},
        {"k": "a", "payment": {"amount": 0.2, "ref": "123e4567-e89b-12d3-a456-426614174000", "mail": "a@b.org"}},
        {"k": "a", "payment": {"paid_at": "2024-05-01T09:00:00.25Z", "amount": 3}},
        {"k": "b", "payment": {"amount": 1}},
        {"k": "b", "payment": {"amount": 2}},
    ]
    res = combine_batch(frame(spark, docs, files=1), coll)
    try:
        got = collect(res)
        assert got == expected(coll, docs, files=1)
        assert got['["a"]']["payment"] == {
            "paid_at": "2024-05-01T09:00:00.25Z",
            "amount": 3.3,
            "ref": "123e4567-e89b-12d3-a456-426614174000",
            "mail": "a@b.org",
        }
        assert res.path == ("compiled" if plain_proof == "jvm" else "fallback")
    finally:
        res.unpersist()
    bad = [  # (document, the rule the Python validator names)
        ({"k": "a", "payment": {"paid_at": "2024-05-01 10:00"}}, "is not a 'date-time'"),
        ({"k": "a", "payment": {"amount": 0.125}}, "multiple"),
        ({"k": "a", "payment": {"ref": "12"}}, "is not a 'uuid'"),
        ({"k": "a", "payment": {"mail": "a@b@c"}}, "is not a 'email'"),
    ]
    with pytest.raises(DocumentError, match=bad[0][1]):
        combine_batch(frame(spark, docs + [bad[0][0]], files=1), coll)
    res = combine_batch(frame(spark, docs + [d for d, _ in bad], files=1), coll, on_invalid="quarantine")
    try:
        assert collect(res) == expected(coll, docs, files=1)
        reasons = sorted(r["reason"] for r in res.invalid.collect())
        assert len(reasons) == len(bad) and all(any(rule in r for r in reasons) for _, rule in bad), reasons
    finally:
        res.unpersist()


SEEN_MEMBERS = merged(
    k={"type": "string"},
    customer=merged(
        id={"type": "string"},
        last_seen={"type": "string", "format": "date-time", "reduce": {"strategy": "maximize"}},
        first_seen={"type": "string", "format": "date-time", "reduce": {"strategy": "minimize"}},
    ),
)


def test_a_date_time_member_maximized_or_minimized_is_ordered_by_its_instant(spark, plain_proof):
    """A customer's last and first seen: by instant (offsets applied), kept as written, equal
    instants going to the later document, as the Python fold orders them; a fraction past the
    instant order's digits is a suspect the Python validator checks."""
    coll = Collection(CollectionSpec("t", ("/k",), SEEN_MEMBERS))
    plan = compile_collection(coll)
    assert plan is not None and [m.strategy for m in plan.fields[1].members] == [
        "lastWriteWins",
        "maximize",
        "minimize",
    ]
    docs = [
        {
            "k": "a",
            "customer": {"id": "x", "last_seen": "2024-05-01T12:00:00+02:00", "first_seen": "2024-05-01T10:00:00Z"},
        },
        {"k": "a", "customer": {"last_seen": "2024-05-01T09:59:59.5Z", "first_seen": "2024-05-01T05:30:00.000-04:30"}},
        {"k": "a", "customer": {"last_seen": "2024-05-01T10:00:00.000z"}},  # the same instant: the later
        {"k": "b", "customer": {"first_seen": "2024-05-01T15:30:00.25+05:30"}},
        {"k": "b", "customer": {"id": "y", "first_seen": "2024-05-01T10:00:00.250000001Z"}},
        {"k": "c", "customer": {"last_seen": "2024-05-01T10:00:00.1234567890123456789Z"}},  # 19 digits: a suspect
        {"k": "c", "customer": {"last_seen": "2024-05-01T10:00:00.1234567890123456788Z"}},
    ]
    got = folded(spark, coll, docs, "mixed" if plain_proof == "jvm" else "fallback")  # key c: the Python fold
    assert got['["a"]']["customer"] == {
        "id": "x",
        "last_seen": "2024-05-01T10:00:00.000z",
        "first_seen": "2024-05-01T05:30:00.000-04:30",
    }
    assert got['["b"]']["customer"]["first_seen"] == "2024-05-01T15:30:00.25+05:30"
    folded(spark, coll, docs[:5], "compiled" if plain_proof == "jvm" else "fallback")


CARRIED_MEMBERS = {
    "type": "object",
    "reduce": {"strategy": "merge"},
    "properties": {
        "k": {"type": "string"},
        "customer": {
            "type": "object",
            "reduce": {"strategy": "merge"},
            "properties": {
                "id": {"type": "string"},
                "email": {"type": ["string", "null"]},
                "geo": {"type": "object"},
                "tags": {"type": "array", "items": {"type": "string"}},
                "orders": {"type": "integer", "reduce": {"strategy": "sum"}},
                "address": {  # declared members, picked whole
                    "type": "object",
                    "required": ["city"],
                    "properties": {"city": {"type": "string"}, "since": {"type": "string", "format": "date-time"}},
                },
            },
        },
    },
}


def test_an_objects_nullable_object_and_array_members_are_carried_each_last_written(spark, plain_proof):
    """A real event's customer: a nullable email (a later ``null`` replaces it), a nested object
    and an array picked whole, beside a member summed: each last written as written, as the
    Python fold does; a member of another type is an invalid document."""
    coll = Collection(CollectionSpec("t", ("/k",), CARRIED_MEMBERS))
    plan = compile_collection(coll)
    assert plan is not None
    customer = plan.fields[1]
    assert [m.member for m in customer.members] == ["id", "orders"]
    assert [(m.member, m.type) for m in customer.carried] == [
        ("email", "s"),
        ("geo", "o"),
        ("tags", "S"),
        ("address", "O"),
    ]
    docs = [
        {"k": "a", "customer": {"id": "c1", "email": "x@y", "geo": {"lat": 1.5, "n": [None]}, "orders": 1}},
        {"k": "a", "customer": {"email": None, "tags": ["vip"], "orders": 2, "address": {"city": "Oslo"}}},
        {"k": "a", "customer": {"address": {"city": "Lima", "since": "2024-05-01T10:00:00+05:30", "floor": 2}}},
        {"k": "a", "customer": {"geo": {"lon": 2}, "tags": []}},
        {"k": "b", "customer": {"email": "b@c"}},
        {"k": "c", "customer": {"orders": 4}},
    ]
    res = combine_batch(frame(spark, docs, files=1), coll)
    try:
        got = collect(res)
        assert got == expected(coll, docs, files=1)
        assert got['["a"]']["customer"] == {
            "id": "c1",
            "email": None,
            "geo": {"lon": 2},
            "tags": [],
            "orders": 3,
            "address": {"city": "Lima", "since": "2024-05-01T10:00:00+05:30", "floor": 2},
        }
        assert res.path == ("compiled" if plain_proof == "jvm" else "fallback")
    finally:
        res.unpersist()
    bad = [
        {"k": "a", "customer": {"address": {"since": "2024-05-01T10:00:00Z"}}},  # its required member missing
        {"k": "a", "customer": {"address": {"city": "x", "since": "soon"}}},
        {"k": "a", "customer": {"email": 5}},
        {"k": "a", "customer": {"tags": [1]}},
        {"k": "a", "customer": {"geo": []}},
    ]
    with pytest.raises(DocumentError, match="/customer/email"):
        combine_batch(frame(spark, docs + bad[2:3], files=1), coll)
    res = combine_batch(frame(spark, docs + bad, files=1), coll, on_invalid="quarantine")
    try:
        assert collect(res) == expected(coll, docs, files=1)
        lines = [int(r["location"].rsplit(":", 1)[1]) for r in res.invalid.collect()]
        assert lines == list(range(len(docs) + 1, len(docs) + len(bad) + 1))
    finally:
        res.unpersist()


def test_a_nullable_member_of_a_format_or_places_is_carried_and_checked(spark, plain_proof):
    """A customer's ``email: [string, null]`` of ``format: email`` (a uuid, a date, an exact
    decimal too): carried as written, last written (a ``null`` too), its format or places checked
    by the combine on the parsed value; a value that breaks them is an invalid document named by
    the Python validator's rule."""
    schema = merged(
        k={"type": "string"},
        customer=merged(
            id={"type": "string"},
            email={"type": ["string", "null"], "format": "email"},
            ref={"type": ["null", "string"], "format": "uuid"},
            born={"type": ["string", "null"], "format": "date"},
            discount={"type": ["number", "null"], "multipleOf": 0.01},
        ),
    )
    coll = Collection(CollectionSpec("t", ("/k",), schema))
    plan = compile_collection(coll)
    assert plan is not None and [(m.member, m.type) for m in plan.fields[1].carried] == [
        ("email", "s"),
        ("ref", "s"),
        ("born", "s"),
        ("discount", "n"),
    ]
    docs = [
        {"k": "a", "customer": {"id": "c1", "email": "a@b.org", "ref": "123e4567-e89b-12d3-a456-426614174000"}},
        {"k": "a", "customer": {"email": None, "born": "1990-02-28", "discount": 2.5}},
        {"k": "a", "customer": {"discount": None}},
        {"k": "b", "customer": {"email": "x.y@b.org", "ref": None}},
        {"k": "b", "customer": {"born": None}},
    ]
    got = folded(spark, coll, docs, "compiled" if plain_proof == "jvm" else "fallback")
    assert got['["a"]']["customer"] == {
        "id": "c1",
        "email": None,
        "ref": "123e4567-e89b-12d3-a456-426614174000",
        "born": "1990-02-28",
        "discount": None,
    }
    assert got['["b"]']["customer"] == {"email": "x.y@b.org", "ref": None, "born": None}
    bad = [
        ({"k": "a", "customer": {"email": "a@b@c"}}, "is not a 'email'"),
        ({"k": "a", "customer": {"ref": "12"}}, "is not a 'uuid'"),
        ({"k": "a", "customer": {"born": "1990-02-30"}}, "is not a 'date'"),
        ({"k": "a", "customer": {"discount": 0.125}}, "multiple"),
    ]
    assert_quarantined(spark, coll, docs, bad)


NULLABLE_SUMS = merged(
    k={"type": "string"},
    refunds={"type": ["number", "null"], "multipleOf": 0.01, "reduce": {"strategy": "sum"}},
    visits={"type": ["null", "integer"], "reduce": {"strategy": "sum"}},
    weight={"type": ["number", "null"], "reduce": {"strategy": "sum"}},
)


def test_a_nullable_sum_compiles_and_a_null_that_meets_a_value_fails_as_the_fold_fails(spark, plain_proof):
    """``type: [number, "null"]`` summed (what a schema made from a table's columns says): the
    values summed; a key whose only document writes ``null`` keeps it; a ``null`` that meets
    another document's value (or ``null``) fails the batch with the Python fold's error."""
    coll = Collection(CollectionSpec("t", ("/k",), NULLABLE_SUMS))
    plan = compile_collection(coll)
    assert plan is not None and [f.nullable for f in plan.fields[1:]] == [True, True, True]
    docs = [
        {"k": "a", "refunds": 0.1, "visits": 1, "weight": 0.5},
        {"k": "a", "refunds": 0.2, "visits": 2},
        {"k": "b", "refunds": None, "visits": None, "weight": None},
        {"k": "c", "visits": 3},
        {"k": "c", "refunds": None, "weight": 1.25},
    ]
    # without the scan a null is a suspect: those keys take the Python fold
    got = folded(spark, coll, docs, "compiled" if plain_proof == "jvm" else "mixed")
    assert got['["a"]'] == {"k": "a", "refunds": 0.3, "visits": 3, "weight": 0.5}
    assert got['["b"]'] == {"k": "b", "refunds": None, "visits": None, "weight": None}
    assert got['["c"]'] == {"k": "c", "visits": 3, "refunds": None, "weight": 1.25}
    for doc, message in (
        ({"k": "a", "visits": None}, "/visits: 'sum' expects numbers (left 3, right null)"),
        ({"k": "b", "weight": None}, "/weight: 'sum' expects numbers (left null, right null)"),
    ):
        with pytest.raises(ReductionError, match=re.escape(message)):
            combine_batch(frame(spark, docs + [doc], files=1), coll)


NULLABLE_WHOLE = merged(
    k={"type": "string"},
    tags={"type": "array", "items": {"type": "string"}},
    ids={"type": ["array", "null"], "items": {"type": "integer"}, "reduce": {"strategy": "firstWriteWins"}},
    context={"type": ["object", "null"]},
    extra={"type": ["null", "array"]},
)


def test_arrays_of_scalars_and_nullable_objects_and_arrays_are_picked_whole(spark, plain_proof):
    """A CDC stream's shapes: an array of strings last written, nullable arrays and objects
    (``type: [array, "null"]``) picked whole -- ``null`` a value of its own, apart from absent,
    as the Python fold keeps it; an item or a value of another type is an invalid document."""
    coll = Collection(CollectionSpec("t", ("/k",), NULLABLE_WHOLE))
    plan = compile_collection(coll)
    assert plan is not None and [(f.kind, f.nullable) for f in plan.fields[1:]] == [
        ("append", False),
        ("append", True),
        ("raw", True),
        ("raw", True),
    ]
    docs = [
        {"k": "a", "tags": ["x"], "ids": None, "context": {"ip": "1.2.3.4", "n": [1, 2.5]}, "extra": [1, "b"]},
        {"k": "a", "tags": [], "ids": [1, 2], "context": None},
        {"k": "a", "extra": None},
        {"k": "b", "ids": [3], "context": {}},
        {"k": "b", "tags": ["y", "z"], "ids": None, "extra": []},
        {"k": "c", "context": None},
    ]
    got = folded(spark, coll, docs, "compiled" if plain_proof == "jvm" else "fallback")
    assert got['["a"]'] == {"k": "a", "tags": [], "ids": None, "context": None, "extra": None}
    assert got['["b"]'] == {"k": "b", "tags": ["y", "z"], "ids": [3], "context": {}, "extra": []}
    assert got['["c"]'] == {"k": "c", "context": None}
    bad = [
        ({"k": "a", "tags": [1]}, "is not of type 'string'"),
        ({"k": "a", "ids": ["1"]}, "is not of type 'integer'"),
        ({"k": "a", "context": [1]}, "is not of type 'object', 'null'"),
        ({"k": "a", "tags": None}, "is not of type 'array'"),
    ]
    assert_quarantined(spark, coll, docs, bad)


WHOLE = {
    "type": "object",
    "reduce": {"strategy": "merge"},
    "properties": {
        "k": {"type": "string"},
        "customer": {
            "type": "object",
            "required": ["id"],
            "properties": {"id": {"type": "integer"}, "name": {"type": "string"}, "vip": {"type": "boolean"}},
        },
        "items": {
            "type": "array",
            "items": {"type": "object", "properties": {"sku": {"type": "string"}, "qty": {"type": "integer"}}},
        },
    },
}


def test_objects_and_arrays_of_objects_picked_whole_compile(spark, plain_proof):
    """An object of declared properties, or an array of such objects, last written as a whole
    (no reduce: lastWriteWins): compiled, its members proved by the JVM scan and undeclared
    members kept as written (the schema is open); a member of another type or a missing
    required one makes the document a suspect (invalid ones are named; a valid one, e.g. a
    member name written with an escape, sends its key to the Python fold)."""
    coll = Collection(CollectionSpec("t", ("/k",), WHOLE))
    plan = compile_collection(coll)
    assert plan is not None and [(f.kind, len(f.members)) for f in plan.fields[1:]] == [("raw", 3), ("raw", 2)]
    docs = [
        {"k": "a", "customer": {"id": 1, "name": "Ann"}, "items": [{"sku": "x", "qty": 1}]},
        {"k": "a", "customer": {"id": 2, "vip": True, "extra": {"y": [1, None]}}},
        {"k": "b", "items": []},
        {"k": "b", "items": [{"sku": "y"}, {}]},
    ]
    res = combine_batch(frame(spark, docs, files=1), coll)
    try:
        got = collect(res)
        assert got == expected(coll, docs, files=1)
        assert got['["a"]']["customer"] == {"id": 2, "vip": True, "extra": {"y": [1, None]}}
        assert got['["b"]']["items"] == [{"sku": "y"}, {}]
        assert res.path == ("compiled" if plain_proof == "jvm" else "fallback")
    finally:
        res.unpersist()
    valid_odd = {"k": "a", "customer": {"id": 3, "é": [1]}}  # a name written with an escape: valid, not proved
    res = combine_batch(frame(spark, docs + [valid_odd], files=1), coll)
    try:
        assert collect(res) == expected(coll, docs + [valid_odd], files=1)
        assert res.path == ("mixed" if plain_proof == "jvm" else "fallback")  # key "a" folded in Python, "b" compiled
    finally:
        res.unpersist()
    _rejects_each(
        spark,
        coll,
        "compiled" if plain_proof == "jvm" else None,
        '{"k": "a"}',
        [
            ('{"k": "a", "customer": {"name": "no id"}}', "required"),
            ('{"k": "a", "customer": {"id": "1"}}', "is not of type 'integer'"),
            ('{"k": "a", "items": [{"qty": 1.5}]}', "is not of type 'integer'"),
        ],
    )


def test_expressions_are_built_once_and_serve_every_batch(spark, monkeypatch):
    """The compiled combine builds its expressions once per context and plan; later batches
    (other documents, the same schema) reuse them with exact results, and a session setting
    that changes the expressions gets its own."""
    from tidemark.spark import combine as combine_module

    spark.sparkContext.__dict__.pop("_tidemark_columns", None)  # built by earlier tests (the other proof's form too)
    builds = []
    real = combine_module._build_columns
    monkeypatch.setattr(combine_module, "_build_columns", lambda *a: builds.append(a) or real(*a))
    schema = {**ORDERS, "properties": {**ORDERS["properties"], "note": {"type": "string"}}}  # a plan of its own
    coll = Collection(CollectionSpec("orders", ("/customer",), schema))
    batches = [
        [{"customer": "a", "total": 1.5, "n": 1}, {"customer": "a", "n": 2, "note": "x"}],
        [{"customer": "b", "total": 2, "n": 5}, {"customer": "c", "note": "y", "n": 1}],
    ]
    for docs in batches:
        res = combine_batch(frame(spark, docs), coll, force_path="compiled")
        try:
            assert collect(res) == expected(coll, docs)
        finally:
            res.unpersist()
    assert len(builds) == 1
    spark.conf.set("spark.sql.subexpressionElimination.enabled", "false")
    try:
        res = combine_batch(frame(spark, batches[0]), coll, force_path="compiled")
        try:
            assert collect(res) == expected(coll, batches[0])
        finally:
            res.unpersist()
    finally:
        spark.conf.unset("spark.sql.subexpressionElimination.enabled")
    assert len(builds) == 2 and builds[1][2] is True  # subexpression elimination off: a parsed column


def test_colons_in_text_and_undeclared_properties_in_compact_documents(spark, plain_proof):
    """The colon count decides only when it proves there is nothing undeclared."""
    coll = Collection(CollectionSpec("t", ("/k",), OPEN_KEY))
    docs = ['{"k":"a","s":"10:30","t":1}', '{"k":"a","s":"x:y:z"}']
    res = combine_batch(spark.createDataFrame([(d, "f", 0, i) for i, d in enumerate(docs)], SCHEMA), coll)
    try:
        assert res.path == "compiled" and collect(res) == {'["a"]': {"k": "a", "s": "x:y:z", "t": 1}}
    finally:
        res.unpersist()
    docs = ['{"k":"a","t":1}', '{"k":"a","x":2}']
    res = combine_batch(spark.createDataFrame([(d, "f", 0, i) for i, d in enumerate(docs)], SCHEMA), coll)
    try:
        assert res.path == ("compiled" if plain_proof == "jvm" else "fallback")
        assert collect(res) == {'["a"]': {"k": "a", "t": 1, "x": 2}}
    finally:
        res.unpersist()


def test_undeclared_properties_are_carried_each_last_written(spark, plain_proof):
    """A property the schema does not declare (the root open, merged) is last written, per
    name, whatever it holds (null, objects, arrays, numbers as written): the compiled combine
    carries it where the JVM scan proves the document (the fallback without the scan)."""
    coll = Collection(CollectionSpec("t", ("/k",), OPEN_KEY))
    lines = [
        '{"k":"a","t":1,"x":2}',
        '{"k":"b","t":1}',
        '{"k":"a","t":1, "y": {"p": [1, null, "}"]}, "x":null}',
        '{"k":"b","q":1.50e3,"t":2,"s":"q"}',
        '{"k":"a","t":1,"x":[3],"z":"\\u00e9\\"","s":"v"}',
        '{"k":"c","t":1,"w":true}',
        '{"k":"a","y":{}}',
    ]
    rows = [(line, f"file:///data/part-{i % 2}.json", 0, i) for i, line in enumerate(lines)]
    res = combine_batch(spark.createDataFrame(rows, SCHEMA), coll)
    try:
        assert res.path == ("compiled" if plain_proof == "jvm" else "fallback")
        assert collect(res) == expected(coll, [json.loads(line) for line in lines])
    finally:
        res.unpersist()
    closed = Collection(CollectionSpec("t", ("/k",), {**OPEN_KEY, "additionalProperties": False}))
    with pytest.raises(DocumentError, match="Additional properties are not allowed"):
        combine_batch(spark.createDataFrame(rows[:1], SCHEMA), closed)


TAGGED = {
    "type": "object",
    "required": ["k"],
    "reduce": {"strategy": "merge"},
    "properties": {
        "k": {"type": "string"},
        "s": {"type": "string"},
        "tags": {"type": "array", "items": {"type": "string"}, "reduce": {"strategy": "append"}},
        "m": {"type": "object", "additionalProperties": {"type": "string"}, "reduce": {"strategy": "merge"}},
    },
}


NON_STRINGS = [  # (the line, the rule its error names)
    ('{"k":"a","tags":["x",5]}', "/tags/1: 5 is not of type 'string'"),
    ('{"k":"a","tags":["x",null]}', "/tags/1: None is not of type 'string'"),
    ('{"k":"a","tags":[true]}', "/tags/0: True is not of type 'string'"),
    ('{"k":"a","tags":[[1],"y"]}', "/tags/0: [1] is not of type 'string'"),
    ('{"k":"a","tags":["x",-1.5e3]}', "/tags/1: -1500.0 is not of type 'string'"),
    ('{"k":"a","tags":["x", "y"],"m":{"p":"x", "q":5}}', "/m/q: 5 is not of type 'string'"),
    ('{"k":"a","m":{"p":[1]}}', "/m/p: [1] is not of type 'string'"),
]


def test_compiled_path_catches_non_strings_in_string_arrays_and_maps(spark):
    """from_json reads any JSON value into a string element or map value, as its JSON text."""
    cases = [(line, re.escape(m)) for line, m in NON_STRINGS]
    _compiled_rejects_each(spark, TAGGED, '{"k":"a","tags":["x"]}', cases)


ENUMS = {
    "type": "object",
    "reduce": {"strategy": "merge"},
    "properties": {
        "k": {"type": "string"},
        "city": {"type": "string", "enum": ["Oslo", "Lima"]},
        "flag": {"type": "string", "enum": ["true", "no"]},
    },
}


ENUM_CASES = [  # (the line, a pattern of the rule its error names)
    ('{"k":"a","city":5}', r"/city: 5 is not of type 'string'"),
    ('{"k":"a","city":["Oslo"]}', r"/city: \['Oslo'\] is not of type 'string'"),
    ('{"k":"a","city":"\\udc00"}', r"unparseable JSON: a lone surrogate .udc00"),
    # "true" is an allowed string here, so the boolean must still be caught by its shape
    ('{"k":"a","flag":true}', r"/flag: True is not of type 'string'"),
]


def test_enum_strings_reject_non_strings(spark):
    """An enum of plain words rejects what from_json makes of a non-string without the shape check."""
    _compiled_rejects_each(spark, ENUMS, '{"k":"a","city":"Oslo","flag":"no"}', ENUM_CASES)


def test_strings_that_look_like_numbers_stay_strings(spark):
    """Text that only looks like a number, boolean or array is a valid string: compiled path, exact result."""
    coll = Collection(CollectionSpec("t", ("/k",), TAGGED))
    docs = [
        {"k": "a", "s": "5", "tags": ["1", "true"]},
        {"k": "a", "s": "2024-01-05", "tags": ["[x]", "y", "-"]},
        {"k": "b", "s": "true", "tags": ["null", "1e5"], "m": {"p": "5"}},
        {"k": "b", "s": "[1]", "m": {"q": "[]"}},
        {"k": "c", "s": "2e5", "tags": ["-0", "?"]},
        {"k": "c", "s": "why? \U0001f600", "m": {"r": "?"}},
    ]
    res = combine_batch(frame(spark, docs, files=1), coll)
    try:
        assert res.path == "compiled"
        assert collect(res) == expected(coll, docs, files=1)
    finally:
        res.unpersist()


def test_lone_surrogate_is_a_clear_error_on_the_fallback_path_too(spark):
    coll = Collection(CollectionSpec("t", ("/k",), TAGGED))
    rows = [('{"k":"a","s":"\U0001f600"}', "src", 0, 0), ('{"k":"a","s":"\\ud83d"}', "src", 0, 1)]
    with pytest.raises(DocumentError, match=r"^src:2: unparseable JSON: a lone surrogate .ud83d is not valid Unicode"):
        combine_batch(spark.createDataFrame(rows, SCHEMA), coll, force_path="fallback")


MUTATED = {
    "type": "object",
    "required": ["k"],
    "reduce": {"strategy": "merge"},
    "properties": {
        "k": {"type": "string"},
        "s": {"type": "string"},
        "n": {"type": "integer", "reduce": {"strategy": "sum"}},
        "x": {"type": "number", "reduce": {"strategy": "maximize"}},
        "b": {"type": "boolean"},
        "tags": {"type": "array", "items": {"type": "string"}, "reduce": {"strategy": "append"}},
        "e": {"type": "string", "enum": ["Oslo", "Lima"]},
        "m": {"type": "object", "additionalProperties": {"type": "string"}, "reduce": {"strategy": "merge"}},
        "o": {"type": "object"},
        "r": {"type": "array"},
        # a merged object's members of formats and an exact decimal (the scan and the combine check them)
        "pay": {
            "type": "object",
            "reduce": {"strategy": "merge"},
            "properties": {
                "at": {"type": "string", "format": "date-time"},
                "amt": {"type": "number", "multipleOf": 0.01, "reduce": {"strategy": "sum"}},
                "id": {"type": "string", "format": "uuid"},
            },
        },
    },
}
_TEXTS = {  # per declared property: JSON texts of valid values, then of invalid ones
    "s": (
        ['"a"', '"5"', '"true"', '"[1]"', '"a:b"', '"}"', '"?"', '"\\u0041"', '"\\ud83d\\ude00"'],
        ["5", "-1.5e3", "true", "[1]", '{"z":1}', "null", '"\\ud800"'],
    ),
    "n": (["1", "-7", "0"], ['"1"', "1.5", "true", "null", "[1]"]),
    "x": (["1", "2.5", "-1e3"], ['"1"', "false", "null"]),
    "b": (["true", "false"], ['"true"', "1", "null"]),
    "tags": (['["a"]', "[]", '["a", "5"]', '["[x]","-"]'], ['["a",5]', "[null]", "[true]", '"a"', '[["a"]]']),
    "e": (['"Oslo"', '"Lima"', '"\\u004Cima"'], ["5", "true", '["Oslo"]', '"Rome"', "null", '"\\udc00"']),
    # nested values (the JVM proof can prove these plain): null and odd strings inside them
    "m": (
        ['{"p":"x"}', "{}", '{"p":"1","q":"true"}', '{ "p" : "\\ud83d\\ude00" }', '{"p\\u0041":"x"}'],
        ['{"p":5}', '{"p":null}', '{"p":["x"]}', '{"p":"\\ud800"}', '["x"]', "null", '{"p":{"q":"x"}}'],
    ),
    "o": (
        [
            '{"x":1}',
            '{"x":{"y":[1,"a",true]}}',
            "{}",
            '{"x":null}',
            '{"x":[null]}',
            '{"s":1,"k":"z"}',
            '{"x":"\\ud83d\\ude00"}',
            '{"x":-1e3}',
        ],
        ["[1]", '"x"', "5", "null", "true"],
    ),
    "r": (['[1,"a"]', "[]", '[{"x":null}]', "[[]]", '[{"k":"b"}]'], ['{"x":1}', '"a"', "null", "0"]),
    "pay": (
        [
            '{"at":"2024-05-01T10:00:00Z"}',
            '{"amt":1.25}',
            '{"amt":3}',
            "{}",
            '{"id":"123e4567-e89b-12d3-a456-426614174000","amt":-0.5}',
            '{"at":"2024-05-01T10:00:00.123456+05:30","amt":0.07}',
        ],
        [
            '{"at":"2024-13-01T10:00:00Z"}',
            '{"amt":1.255}',
            '{"id":"not-a-uuid"}',
            '{"at":"yesterday"}',
            '{"amt":"1"}',
            '{"at":null}',
        ],
    ),
}


@st.composite
def mutated_lines(draw):
    """Document texts: most valid, some with one thing from_json forgives or rejects."""
    lines = []
    for _ in range(draw(st.integers(1, 8))):
        sep, colon = draw(st.sampled_from([(",", ":")] * 3 + [(", ", ": "), (" ,", " : ")]))
        members = [("k", json.dumps(draw(st.sampled_from(["a", "b"]))))]
        for name, (good, _bad) in _TEXTS.items():
            if draw(st.booleans()):
                members.append((name, draw(st.sampled_from(good))))
        tail = ""
        mutation = draw(st.sampled_from(["none"] * 4 + ["value"] * 4 + ["extra", "tail", "quotes"]))
        if mutation == "value":
            name = draw(st.sampled_from(sorted(_TEXTS)))
            members = [m for m in members if m[0] != name] + [(name, draw(st.sampled_from(_TEXTS[name][1])))]
        elif mutation == "extra":
            members.append((draw(st.sampled_from(["s", "n", "zz"])), draw(st.sampled_from(['"r"', "3", "null"]))))
        elif mutation == "tail":
            tail = draw(st.sampled_from([" ", "}", "{}", " 5", '""}']))
        members = draw(st.permutations(members))
        body = "{" + sep.join(f"{json.dumps(n)}{colon}{v}" for n, v in members) + "}" + tail
        lines.append(body.replace('"', "'") if mutation == "quotes" else body)
    return lines


@pytest.mark.slow
@settings(
    max_examples=20,
    deadline=None,
    derandomize=True,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)
@given(mutated_lines())
def test_mutated_documents_agree_with_python(spark, lines):
    """Whatever path a batch takes, it fails exactly when Python finds an invalid line (naming
    the first one), and otherwise gives Python's documents."""
    from tidemark.spark.combined import check_document

    coll = Collection(CollectionSpec("t", ("/k",), MUTATED))
    rows = [(line, "src", 0, i) for i, line in enumerate(lines)]
    checked = [check_document(coll, line) for line in lines]
    bad = [i for i, (reason, _kj, _doc) in enumerate(checked) if reason is not None]
    df = spark.createDataFrame(rows, SCHEMA)
    if bad:
        with pytest.raises(DocumentError, match=f"^src:{bad[0] + 1}[: ]") as err:
            combine_batch(df, coll)
        # all of them, in order, up to the limit
        assert err.value.total == len(bad)
        assert [d.location for d in err.value.documents] == [f"src:{i + 1}" for i in bad[:20]]
        return
    want: dict = {}
    for reason, kj, doc in checked:
        want[kj] = doc if kj not in want else coll.reduce(want[kj], doc)
    res = combine_batch(df, coll)
    try:
        assert collect(res) == want
    finally:
        res.unpersist()


# ----------------------------------------------------------------------------- generated code size

# HotSpot does not compile a method of more than 8,000 bytes of bytecode (HugeMethodLimit):
# it interprets it, and a combine whose per-row method is that large runs about twice as
# slowly.  The compiled plan must keep every generated method below that, whatever the width.
JIT_METHOD_LIMIT = 8000

WIDE_KINDS = [
    ({"type": "integer", "reduce": {"strategy": "sum"}}, 5),
    ({"type": "number", "reduce": {"strategy": "minimize"}}, 1.5),
    ({"type": "string", "enum": ["a", "b"]}, "a"),
    ({"type": "string", "reduce": {"strategy": "firstWriteWins"}}, "2024-01-05"),
    ({"type": "boolean"}, True),
    ({"type": "array", "items": {"type": "string"}, "reduce": {"strategy": "append"}}, ["sku-1"]),
    ({"type": "object", "additionalProperties": {"type": "integer"}, "reduce": {"strategy": "merge"}}, {"m": 1}),
    ({"type": "integer", "reduce": {"strategy": "maximize"}, "maximum": 1000}, 7),
]


def _generated_method_sizes(df) -> list[int]:
    """The largest method's bytecode size of each whole-stage generated class that runs
    ``df`` (cached relations included), compiled as Spark compiles them."""
    spark = df.sparkSession
    compile_code = spark._jvm.org.apache.spark.sql.catalyst.expressions.codegen.CodeGenerator.compile
    spark.conf.set("spark.sql.adaptive.enabled", "false")  # a plan with its codegen stages in place
    try:
        todo = [df._jdf.queryExecution().executedPlan()]
    finally:
        spark.conf.unset("spark.sql.adaptive.enabled")
    sizes = []
    while todo:
        node = todo.pop()
        kind = node.getClass().getSimpleName()
        if kind == "WholeStageCodegenExec":
            sizes.append(compile_code(node.doCodeGen()._2())._2().maxMethodCodeSize())
        elif kind == "InMemoryTableScanExec":
            todo.append(node.relation().cachedPlan())
        children = node.children().iterator()
        while children.hasNext():
            todo.append(children.next())
    return sizes


@pytest.mark.parametrize("width", [9, 48])
def test_compiled_plan_methods_stay_small_enough_for_the_jit(spark, width):
    props = {"k": {"type": "string"}}
    doc = {}
    for i in range(width):
        schema, value = WIDE_KINDS[i % len(WIDE_KINDS)]
        props[f"f{i}"] = schema
        doc[f"f{i}"] = value
    coll = Collection(
        CollectionSpec(
            "wide", ("/k",), {"type": "object", "required": ["k"], "reduce": {"strategy": "merge"}, "properties": props}
        )
    )
    docs = [{"k": f"k{j % 5}", **doc} for j in range(20)]
    res = combine_batch(frame(spark, docs), coll)
    try:
        assert res.path == "compiled"
        assert collect(res) == expected(coll, docs)
        cached = res._cached[0]
        cached.unpersist()  # size the plan that computes it, not a scan of the cache
        sizes = _generated_method_sizes(cached)
    finally:
        res.unpersist()
    assert sizes and max(sizes) <= JIT_METHOD_LIMIT, sizes


def test_compiled_path_without_subexpression_elimination(spark):
    """A session without subexpression elimination reads a parsed column (one parse per
    document), with the same results and the same rejections."""
    coll = Collection(CollectionSpec("t", ("/k",), ENUMS))
    docs = [{"k": "a", "city": "Oslo"}, {"k": "b", "flag": "no"}, {"k": "a", "city": "Lima", "flag": "true"}]
    spark.conf.set("spark.sql.subexpressionElimination.enabled", "false")
    try:
        res = combine_batch(frame(spark, docs), coll, force_path="compiled")
        try:
            assert collect(res) == expected(coll, docs)
        finally:
            res.unpersist()
        _compiled_rejects_each(spark, ENUMS, '{"k":"a","city":"Oslo"}', ENUM_CASES)
    finally:
        spark.conf.unset("spark.sql.subexpressionElimination.enabled")


def test_union_keeps_each_value_once_in_first_seen_order_on_both_paths(spark):
    """``union``: an array's values, each once, in the order first seen; a lone document's
    array as it is (as the fold leaves it)."""
    schema = {
        "type": "object",
        "required": ["k"],
        "reduce": {"strategy": "merge"},
        "properties": {
            "k": {"type": "string"},
            "tags": {"type": "array", "items": {"type": "string"}, "reduce": {"strategy": "union"}},
        },
    }
    docs = [
        {"k": "a", "tags": ["red", "blue"]},
        {"k": "b", "tags": ["x", "x"]},  # alone: kept as it is
        {"k": "a", "tags": ["blue", "green", "red"]},
        {"k": "a"},
        {"k": "a", "tags": ["green", "yellow"]},
    ]
    coll = Collection(CollectionSpec("t", ("/k",), schema))
    assert compile_collection(coll) is not None
    df = frame(spark, docs, files=1)
    want = {'["a"]': {"k": "a", "tags": ["red", "blue", "green", "yellow"]}, '["b"]': {"k": "b", "tags": ["x", "x"]}}
    assert expected(coll, docs) == want
    for path in ("compiled", "fallback"):
        result = combine_batch(df, coll, force_path=path)
        try:
            assert result.path == path and collect(result) == want
        finally:
            result.unpersist()


DECIMALS = {
    "type": "object",
    "required": ["k"],
    "reduce": {"strategy": "merge"},
    "properties": {
        "k": {"type": "string"},
        "amount": {"type": "number", "multipleOf": 0.01, "reduce": {"strategy": "sum"}},
    },
}


def test_exact_decimals_compile_and_a_sum_past_15_digits_is_refused_as_the_fold_refuses_it(spark):
    """A sum of exact decimals is compiled (a decimal sum: the double add_exact's rounding
    gives); a value with more places is invalid on the compiled path; where the values'
    sizes reach 15 significant digits the Python fold decides: it refuses a partial sum past
    them, whole numbers or not."""
    coll = Collection(CollectionSpec("t", ("/k",), DECIMALS))
    cents = [0.07, 0.1, 0.2, 19.99, -0.3, 1e-2, 5]
    docs = [{"k": "a", "amount": c} for c in cents]
    res = combine_batch(frame(spark, docs), coll)
    try:
        assert res.path == "compiled" and collect(res) == expected(coll, docs) == {'["a"]': {"k": "a", "amount": 25.07}}
    finally:
        res.unpersist()
    # many sums of cents, small and large (whole units of 0.01 in the combine): each the double the fold gives
    draw = random.Random(7)
    docs = [
        {
            "k": f"k{draw.randrange(25)}",
            "amount": draw.choice((draw.randrange(-(10**4), 10**4), draw.randrange(-(10**13), 10**13))) / 100,
        }
        for _ in range(2_000)
    ]
    res = combine_batch(frame(spark, docs), coll)
    try:
        assert res.path == "compiled" and collect(res) == expected(coll, docs)
    finally:
        res.unpersist()
    with pytest.raises(DocumentError, match=r"0\.005 is not a multiple of 0\.01"):
        combine_batch(frame(spark, [{"k": "a", "amount": 0.005}]), coll, force_path="compiled")
    for big in ([9 * 10**12, 9 * 10**12], [9e12 + 0.5, 9e12]):
        with pytest.raises(ReductionError, match="15 significant digits"):  # the Python fold decides
            combine_batch(frame(spark, [{"k": "a", "amount": a} for a in big]), coll)
        with pytest.raises(ValueError, match="cannot take the compiled path"):
            combine_batch(frame(spark, [{"k": "a", "amount": a} for a in big]), coll, force_path="compiled")
    # sizes past 15 digits, partial sums below: the Python fold sums them
    res = combine_batch(frame(spark, [{"k": "a", "amount": a} for a in (9e12, -9e12, 9e12 - 0.01)], files=1), coll)
    try:
        assert res.path == "fallback" and collect(res) == {'["a"]': {"k": "a", "amount": 9e12 - 0.01}}
    finally:
        res.unpersist()


OPTIONAL_ORDERS = {
    **merged(
        k={"type": "string"},
        at={"type": "string", "format": "date-time", "reduce": {"strategy": "maximize"}},
        status={"type": "string", "reduce": {"strategy": "lastWriteWins", "order": "/at"}},
        seq={"type": "integer", "reduce": {"strategy": "minimize"}},
        phase={"type": "string", "reduce": {"strategy": "firstWriteWins", "order": "/seq"}},
    ),
    "required": ["k"],
}


def test_a_property_ordered_by_another_that_some_documents_lack_compiles(spark, plain_proof):
    """``status`` last written by ``/at`` and ``phase`` first written by ``/seq``, where
    documents lack any of them: the combine takes each from the latest (earliest) document
    holding it, and keeps that document's order value in ``/_tidemark/order`` where it is not
    the combined document's own, as the Python fold does (a document naming ``_tidemark``
    itself takes the fold)."""
    coll = Collection(CollectionSpec("t", ("/k",), OPTIONAL_ORDERS))
    plan = compile_collection(coll)
    assert plan is not None and [f.kept_order for f in plan.fields] == [False, False, True, False, True]
    rng = random.Random(7)
    docs = []
    for i in range(300):
        d: dict = {"k": f"k{rng.randrange(40)}"}
        if rng.random() < 0.8:
            hour = rng.randrange(5)
            d["at"] = rng.choice([f"2024-05-01T1{hour}:00:00Z", f"2024-05-01T1{hour + 2}:00:00+02:00"])
        if rng.random() < 0.5:
            d["status"] = f"s{i}"
        if rng.random() < 0.7:
            d["seq"] = rng.randrange(6)
        if rng.random() < 0.5:
            d["phase"] = f"p{i}"
        docs.append(d)
    got = folded(spark, coll, docs, "compiled")
    assert any("_tidemark" in d for d in got.values()) and any("_tidemark" not in d for d in got.values())
    named = {"k": "k1", "status": "x", "_tidemark": {"order": {"status": "2024-05-01T23:00:00Z"}}}
    folded(spark, coll, docs + [named], "mixed")
