"""The JVM plain-document proof (``tidemark/spark/jvm``): built, registered, and exact.

The combine tests (``test_combine.py``) run every case with it and without it; these tests
pin down the scanner's answers on the texts it must refuse, and check that it is in use.
"""

from __future__ import annotations

import json
import re
from types import SimpleNamespace

import pytest

from tidemark.collection.collection import Collection
from tidemark.collection.plan import FieldPlan, compile_collection
from tidemark.spark import jvm
from tidemark.spark.combine import combine_batch
from tidemark.spec import CollectionSpec

pytestmark = pytest.mark.spark


def plan_of(*fields: FieldPlan, closed: bool = True):
    """A plan of ``fields`` as the scan's spec reads it: a merged root, undeclared properties
    not plain unless ``closed`` is False (see the open cases)."""
    return SimpleNamespace(fields=fields, order="", closed=closed, root_strategy="merge")


SPEC = jvm.spec(
    plan_of(
        FieldPlan("k", "scalar", "string", "lastWriteWins", {}),
        FieldPlan("n", "scalar", "integer", "sum", {}),
        FieldPlan("x", "scalar", "number", "maximize", {}),
        FieldPlan("b", "scalar", "boolean", "lastWriteWins", {}),
        FieldPlan("tags", "append", "string", "append", {}),
        FieldPlan("ns", "append", "integer", "append", {}),
        FieldPlan("m", "map", "integer", "merge", {}),
        FieldPlan("o", "raw", "object", "lastWriteWins", {}),
        FieldPlan("r", "raw", "array", "lastWriteWins", {}),
    )
)
# a date-time last written (``d``) and one maximized (``D``: its fraction bounded too)
DATE_TIME_SPEC = jvm.spec(
    plan_of(
        FieldPlan("t", "scalar", "string", "lastWriteWins", {"format": "date-time"}),
        FieldPlan("m", "scalar", "string", "maximize", {"format": "date-time"}),
    )
)

CASES = [
    # provably plain: the count of top-level properties
    ('{"k":"a","n":1}', 2),
    ("{}", 0),
    (' { "k" : "a" ,\n\t"n" : -0 }', 2),
    ('{"x":1.5e-3,"b":false,"n":0}', 3),
    ('{"tags":["a","5","true"],"ns":[1,2],"m":{"p":1,"q":2}}', 3),
    ('{"o":{"x":[1,{"y":"z"}],"k":"nested names are free"},"r":[true,"a",[],{}]}', 2),
    ('{"k":"\\ud83d\\ude00 \\u0041 \\" \\\\ \\/ \\b\\f\\n\\r\\t"}', 1),
    ('{"k":"\u00e9\U0001f600 ? : } {"}', 1),
    # refused: every one of these is something from_json forgives or Python reads otherwise
    ('{"k":5}', -1),  # a number where a string is declared
    ('{"k":true}', -1),
    ('{"k":["a"]}', -1),
    ('{"k":{"a":1}}', -1),
    ('{"n":"1"}', -1),  # a string where a number is declared
    ('{"b":"true"}', -1),
    ('{"k":null}', -1),  # null anywhere
    ('{"o":{"x":null}}', -1),
    ('{"o":{"x":1e400}}', -1),  # a raw value's number must be finite to Python (Spark wrote "Infinity")
    ('{"o":{"x":2.5e-3},"r":[12345678901234567890]}', 2),
    ('{"r":[null]}', -1),
    ('{"tags":["a",null]}', -1),
    ('{"m":{"p":null}}', -1),
    ('{"tags":["a",5]}', -1),  # wrong element kinds
    ('{"ns":[1,"2"]}', -1),
    ('{"m":{"p":"1"}}', -1),
    ('{"m":{"p":1,"p":2}}', -1),  # a repeated map key
    ('{"k":"a","k":"b"}', -1),  # a repeated property
    ('{"z":1}', -1),  # an undeclared property
    ('{"nz":[1]}', -1),  # as long as a declared name, or a prefix of one
    ('{"tag":["a"]}', -1),
    ('{"tagss":["a"]}', -1),
    ('{"":1}', -1),
    ('{"ns":[1],"n":2,"m":{}}', 3),
    ('{"k\\u0061":"a"}', -1),  # an escaped name
    ('{"o":[1]}', -1),  # raw kinds
    ('{"r":{"a":1}}', -1),
    ('{"k":"a"} \t', 1),  # whitespace may follow, as JSON allows
    ('{"k":"a"} x', -1),  # nothing else may
    ('{"k":"a"}}', -1),
    ('{"k":"a"}{"k":"b"}', -1),
    ('{"k":"a",}', -1),  # not JSON
    ("{'k':'a'}", -1),
    ('{"n":01}', -1),
    ('{"n":+1}', -1),
    ('{"x":NaN}', -1),
    ('{"x":1.}', -1),
    ('{"x":.5}', -1),
    ('{"x":1e}', -1),
    ('{"k":"\\ud800"}', -1),  # unpaired surrogate escapes
    ('{"k":"\\udc00x"}', -1),
    ('{"k":"\\ud800\\u0041"}', -1),
    ('{"k":"\\u00g1"}', -1),
    ('{"k":"\\u\uff10\uff10\uff14\uff11"}', -1),  # fullwidth digits are not hex
    ('{"k":"\\x"}', -1),
    ('{"k":"a\u0001"}', -1),  # a raw control character
    ('{"k":"a"', -1),  # cut short
    ('{"k":"a', -1),
    ("", -1),
    ('[{"k":"a"}]', -1),
    ('{"o":' + "[" * 70 + "]" * 70 + "}", -1),  # nested deeper than the scanner follows
]


def _built_for_this_spark() -> bool:
    import pyspark

    return jvm.manifest().get(jvm.SPARK_VERSION, "").split(".")[:2] == pyspark.__version__.split(".")[:2]


# The jar is built against the Spark CI runs (pyproject's newest); on another Spark (the smoke
# run on the oldest supported one) the expression form is used and these have nothing to test.
needs_jar = pytest.mark.skipif(not _built_for_this_spark(), reason="tidemark's jar is built for another Spark")


@pytest.fixture(scope="module")
def scan(spark):
    assert jvm.available(spark), "the shipped jar is built for this Spark: the JVM proof must be available"
    from pyspark.sql import functions as F

    def run(texts, spec=SPEC):
        df = spark.createDataFrame([(i, t) for i, t in enumerate(texts)], "i int, v string")
        rows = df.select("i", F.call_udf(jvm.FUNCTION, "v", F.lit(spec)).alias("n")).collect()
        return [r.n for r in sorted(rows, key=lambda r: r.i)]

    return run


@needs_jar
def test_scanner_answers(scan):
    got = scan([text for text, _ in CASES])
    wrong = [(text, want, n) for (text, want), n in zip(CASES, got) if n != want]
    assert not wrong


# nullable properties (``z``): a null is not counted, and sets the property's bit above the count
NULLABLE_SPEC = jvm.spec(
    plan_of(
        FieldPlan("k", "scalar", "string", "lastWriteWins", {}),
        FieldPlan("a", "scalar", "string", "lastWriteWins", {}, nullable=True),
        FieldPlan("n", "scalar", "integer", "firstWriteWins", {}, nullable=True),
        FieldPlan("t", "scalar", "string", "lastWriteWins", {"format": "date-time"}, nullable=True),
    )
)
NULL_BIT = 1 << jvm.COUNT_BITS
NULLABLE_CASES = [
    ('{"k":"x","a":"y","n":1,"t":"2024-01-01T00:00:00Z"}', 4),
    ('{"k":"x","a":null}', 1 | NULL_BIT),
    ('{"a":null,"n":null,"t":null}', 0 | NULL_BIT | NULL_BIT << 1 | NULL_BIT << 2),
    ('{"k":"x","n" : null ,"t":"2024-01-01T00:00:00Z"}', 2 | NULL_BIT << 1),
    ('{"k":null}', -1),  # not nullable
    ('{"a":nul}', -1),
    ('{"a":nullx}', -1),
    ('{"n":"1"}', -1),  # a nullable integer is still an integer
    ('{"t":"not a date"}', -1),
    ('{"a":null,"a":null}', -1),  # repeated
]


# an object of declared members (``o``): only those, each once, each of its type
OBJECT_SPEC = jvm.spec(
    plan_of(
        FieldPlan("k", "scalar", "string", "lastWriteWins", {}),
        FieldPlan(
            "o",
            "object",
            "object",
            "merge",
            {},
            members=(
                FieldPlan("o/s", "scalar", "string", "lastWriteWins", {}),
                FieldPlan("o/i", "scalar", "integer", "sum", {}),
                FieldPlan("o/b", "scalar", "boolean", "maximize", {}),
            ),
        ),
    )
)
# an array of objects of declared members (``l``); ``q``: a member each object must hold
LIST_SPEC = jvm.spec(
    plan_of(
        FieldPlan(
            "items",
            "raw",
            "array",
            "lastWriteWins",
            {"type": "array", "items": {"type": "object", "required": ["sku"]}},
            members=(
                FieldPlan("items/sku", "scalar", "string", "lastWriteWins", {}),
                FieldPlan("items/qty", "scalar", "integer", "lastWriteWins", {}),
            ),
        )
    )
)
LIST_CASES = [
    ('{"items":[{"sku":"a","qty":2},{"sku":"b"}]}', 1),
    ('{"items":[]}', 1),
    ('{"items":[{"qty":2}]}', -1),  # a required member is missing
    ('{"items":[{"sku":"a","x":{"y":[null]}}]}', 1),  # undeclared, where the items' schema is open: kept whole
    ('{"items":[{"sku":"a","x":1,"x":2}]}', -1),  # repeated
    ('{"items":[{"sku":"a","x":1e400}]}', -1),  # not finite to Python
    ('{"items":[{"sku":1}]}', -1),
    ('{"items":["a"]}', -1),
    ('{"items":{"sku":"a"}}', -1),
    ('{"items":[{"sku":"a"},null]}', -1),
    ('{"items":[{"sku":"a","qty":1.5}]}', -1),  # a member's integer is an integer's text
    ('{"items":[{"sku":"a","qty":1e2}]}', -1),
    ('{"items":[{"sku":"a","qty":1234567890123456789}]}', -1),  # past 18 digits: the Python validator decides
    ('{"items":[{"sku":"a","qty":-123456789012345678}]}', 1),
]


@needs_jar
def test_arrays_of_objects_of_declared_members_are_proved_item_by_item(scan):
    got = scan([text for text, _ in LIST_CASES], LIST_SPEC)
    assert got == [want for _, want in LIST_CASES]
    closed = jvm.spec(
        plan_of(
            FieldPlan(
                "items",
                "raw",
                "array",
                "lastWriteWins",
                {"type": "array", "items": {"type": "object", "additionalProperties": False}},
                members=(FieldPlan("items/sku", "scalar", "string", "lastWriteWins", {}),),
            )
        )
    )
    assert scan(['{"items":[{"sku":"a","x":1}]}', '{"items":[{"sku":"a"}]}'], closed) == [-1, 1]


OBJECT_CASES = [
    ('{"k":"x","o":{"s":"a","i":1,"b":true}}', 2),
    ('{"o":{}}', 1),
    ('{"o" : { "i" : -5 } , "k":"x"}', 2),
    ('{"o":{"s":5}}', -1),  # a member of another type
    ('{"o":{"z":"a"}}', 1 | 1 << jvm.UNDECLARED_BIT),  # undeclared (its schema is open): carried, see below
    ('{"o":{"s":"a","s":"b"}}', -1),  # repeated
    ('{"o":{"i":null}}', -1),
    ('{"o":{"s":{"x":1}}}', -1),
    ('{"o":[]}', -1),
    ('{"s":"a"}', -1),  # a member's name is not a top-level property
]


@needs_jar
def test_objects_of_declared_members_are_proved_member_by_member(scan, spark):
    from pyspark.sql import functions as F

    got = scan([text for text, _ in OBJECT_CASES], OBJECT_SPEC)
    assert got == [want for _, want in OBJECT_CASES]
    # a merged object's undeclared members come back led by its index (1) in the plan's fields
    texts = ['{"k":"x","o":{"z":{"w":[null]},"s":"a","y":null}}', '{"o":{"z":1,"z":2}}']
    assert scan(texts, OBJECT_SPEC) == [2 | 1 << jvm.UNDECLARED_BIT, -1]
    df = spark.createDataFrame(list(enumerate(texts)), "i int, v string")
    rows = df.select("i", F.call_udf(jvm.UNDECLARED_FUNCTION, "v", F.lit(OBJECT_SPEC)).alias("u")).collect()
    assert [r.u for r in sorted(rows, key=lambda r: r.i)] == [
        '1\u0002"z"\u0000{"w":[null]}\u00011\u0002"y"\u0000null',
        None,
    ]
    closed = OBJECT_SPEC.replace(jvm._CARRIED, "")  # additionalProperties: false
    assert scan(['{"o":{"z":"a"}}', '{"o":{"s":"a"}}'], closed) == [-1, 1]


@needs_jar
def test_a_date_time_member_is_proved_a_date_time(scan):
    """A member of ``format: date-time`` (``d``), in a merged object and in an array's object
    items picked whole, is proved as a top-level date-time is; other members as before."""
    at = FieldPlan("o/at", "scalar", "string", "lastWriteWins", {"type": "string", "format": "date-time"})
    merged = FieldPlan("o", "object", "object", "merge", {"type": "object"}, members=(at,))
    items = FieldPlan(
        "l", "raw", "array", "lastWriteWins", {"type": "array", "items": {"type": "object"}}, members=(at,)
    )
    spec = jvm.spec(plan_of(merged, items))
    assert "o\u0002\u0005sdat" in spec and "l\u0002\u0004sdat" in spec
    cases = [
        ('{"o":{"at":"2024-05-01T10:00:00.25+05:30"}}', 1),
        ('{"o":{"at":"2024-05-01t10:00:00z"}}', 1),
        ('{"o":{"at":"2024-05-01 10:00:00Z"}}', -1),
        ('{"o":{"at":"2024-02-30T10:00:00Z"}}', -1),
        ('{"o":{"at":5}}', -1),
        ('{"l":[{"at":"2024-05-01T10:00:00Z"},{}]}', 1),
        ('{"l":[{"at":"yesterday"}]}', -1),
    ]
    assert scan([text for text, _ in cases], spec) == [want for _, want in cases]


@needs_jar
def test_carried_members_are_proved_and_given_back_as_written(scan, spark):
    """A merged object's members carried as written (``c``; ``k`` required): ``null`` or the
    scalar, an object, an array, an array of one scalar type; given back as undeclared members
    are, so the combine carries each last written."""
    from pyspark.sql import functions as F

    carried = (
        FieldPlan("o/e", "carried", "s", "lastWriteWins", {"type": ["string", "null"]}),
        FieldPlan("o/g", "carried", "o", "lastWriteWins", {"type": "object"}),
        FieldPlan("o/t", "carried", "I", "lastWriteWins", {"type": "array", "items": {"type": "integer"}}),
    )
    merged = FieldPlan(
        "o",
        "object",
        "object",
        "merge",
        {"type": "object", "required": ["e"], "additionalProperties": False},
        members=(FieldPlan("o/n", "scalar", "integer", "sum", {"type": "integer"}),),
        carried=carried,
    )
    spec = jvm.spec(plan_of(FieldPlan("k", "scalar", "string", "lastWriteWins", {}), merged))
    seen = 1 << jvm.UNDECLARED_BIT
    cases = [
        ('{"k":"a","o":{"e":null,"n":1}}', 2 | seen),
        ('{"o":{"e":"x","g":{"p":[1,null]},"t":[1,-2]}}', 1 | seen),
        ('{"o":{"n":1}}', -1),  # the required member is missing
        ('{"o":{"e":5}}', -1),
        ('{"o":{"e":"x","g":[]}}', -1),
        ('{"o":{"e":"x","t":[1.5]}}', -1),
        ('{"o":{"e":"x","t":null}}', -1),  # not nullable
        ('{"o":{"e":"x","e":"y"}}', -1),
        ('{"o":{"e":"x","z":1}}', -1),  # closed
    ]
    assert scan([text for text, _ in cases], spec) == [want for _, want in cases]
    # an object and an array of objects of declared members, carried: proved as picked whole
    city = FieldPlan("a/city", "scalar", "string", "lastWriteWins", {"type": "string"})
    nested = (
        FieldPlan("o/a", "carried", "O", "lastWriteWins", {"type": "object", "required": ["city"]}, members=(city,)),
        FieldPlan(
            "o/l",
            "carried",
            "L",
            "lastWriteWins",
            {"type": "array", "items": {"type": "object", "additionalProperties": False}},
            members=(city,),
        ),
    )
    outer = FieldPlan("o", "object", "object", "merge", {"type": "object"}, carried=nested)
    spec2 = jvm.spec(plan_of(outer))
    more = [
        ('{"o":{"a":{"city":"x","floor":[1]}}}', 1 | seen),  # its undeclared member kept as written
        ('{"o":{"a":{"floor":1}}}', -1),  # its required member missing
        ('{"o":{"a":{"city":5}}}', -1),
        ('{"o":{"l":[{"city":"x"},{}]}}', 1 | seen),
        ('{"o":{"l":[{"city":"x","z":1}]}}', -1),  # closed
        ('{"o":{"l":{"city":"x"}}}', -1),
    ]
    assert scan([text for text, _ in more], spec2) == [want for _, want in more]
    df = spark.createDataFrame([(0, cases[1][0])], "i int, v string")
    [row] = df.select(F.call_udf(jvm.UNDECLARED_FUNCTION, "v", F.lit(spec)).alias("u")).collect()
    assert row.u == '1\u0002"e"\u0000"x"\u00011\u0002"g"\u0000{"p":[1,null]}\u00011\u0002"t"\u0000[1,-2]'


# the root of an open schema, merged: undeclared top-level properties are plain, not counted,
# and set the UNDECLARED bit; ``UndeclaredMembers`` gives their names and values' text
OPEN_SPEC = jvm.spec(
    plan_of(
        FieldPlan("k", "scalar", "string", "lastWriteWins", {}),
        FieldPlan("n", "scalar", "integer", "sum", {}),
        closed=False,
    )
)
UNDECLARED_SEEN = 1 << jvm.UNDECLARED_BIT  # the scan's bit: undeclared properties held
OPEN_CASES = [  # (text, the scan's result, the undeclared members' text)
    ('{"k":"a","n":1}', 2, None),
    ('{"k":"a","x":2}', 1 | UNDECLARED_SEEN, '"x"\u00002'),
    (
        '{"x" : null , "k":"a", "y":{"p": [1, null, "}"]}}',
        1 | UNDECLARED_SEEN,
        '"x"\u0000null\u0001"y"\u0000{"p": [1, null, "}"]}',
    ),
    ('{"x":1.5e3,"z":"\\u00e9"}', UNDECLARED_SEEN, '"x"\u00001.5e3\u0001"z"\u0000"\\u00e9"'),
    ('{"k":"a","x":1,"x":2}', -1, None),  # repeated
    ('{"k":"a","\\u0078":1}', -1, None),  # an escaped name: not proved
    ('{"k":"a","x":nul}', -1, None),
    ('{"k":"a","x":[1,]}', -1, None),
    ('{"k":null,"x":1}', -1, None),  # a declared property is still proved as before
    # numbers kept as written only where Python reads the same value
    ('{"x":123456789012345678901234567890}', UNDECLARED_SEEN, '"x"\u0000123456789012345678901234567890'),
    (
        '{"x":[0.00123,-1.5E+300,1e-300,100.000000000000000000]}',
        UNDECLARED_SEEN,
        '"x"\u0000[0.00123,-1.5E+300,1e-300,100.000000000000000000]',
    ),
    ('{"x":1e400}', -1, None),  # not finite to Python
    ('{"x":{"y":1e-301}}', -1, None),
    ('{"x":0.10000000000000000555}', -1, None),  # rounded to a double by Python
    ('{"x":1234567890.1234567}', -1, None),
]


@needs_jar
def test_undeclared_properties_of_an_open_root_are_plain_and_given_back_as_written(scan, spark):
    from pyspark.sql import functions as F

    texts = [text for text, _, _ in OPEN_CASES]
    assert scan(texts, OPEN_SPEC) == [want for _, want, _ in OPEN_CASES]
    assert scan(['{"k":"a","zz":2}'], SPEC) == [-1]  # a closed spec: not plain
    df = spark.createDataFrame(list(enumerate(texts)), "i int, v string")
    rows = df.select("i", F.call_udf(jvm.UNDECLARED_FUNCTION, "v", F.lit(OPEN_SPEC)).alias("u")).collect()
    assert [r.u for r in sorted(rows, key=lambda r: r.i)] == [u for _, _, u in OPEN_CASES]


@needs_jar
def test_nullable_properties_are_proved_with_a_bit_for_each_null(scan):
    got = scan([text for text, _ in NULLABLE_CASES], NULLABLE_SPEC)
    assert got == [want for _, want in NULLABLE_CASES]


@needs_jar
def test_date_times_are_proved_as_python_reads_them(scan):
    """A date-time property is proved by the scan exactly where Python's format check accepts
    it (a leap second aside: never proved, so a suspect the Python validator decides), and a
    date-time the combine orders by instant only with at most 18 digits of fraction."""
    from tests.support.format_cases import CASES as FORMAT_CASES
    from tidemark.collection import formats

    values = [v for v, _ in FORMAT_CASES["date-time"]]
    values += [
        "2024-05-01T10:00:00." + "1" * 18 + "Z",
        "2024-05-01T10:00:00." + "1" * 19 + "Z",
        r"2024-05-01T10:00:00\u005a",  # escapes in the text: not proved
    ]
    values += [r"\uff12024-05-01T10:00:00Z", "2024-05-01T10:00:00Z ", "2024-13-01T10:00:00Z", "2024-05-01T24:00:00Z"]
    assert DATE_TIME_SPEC == "sdt\u0001sDm"  # the entries' codes

    def want(v, bounded):
        if "\\" in v or '"' in v or any(c < " " for c in v):  # an escape, or not a JSON string as written
            return -1
        key = formats.instant(v)
        if key is None or key[1]:  # not one; a leap second (not proved)
            return -1
        fraction = re.search(r"\.([0-9]+)", v)
        return -1 if bounded and fraction and len(fraction.group(1)) > 18 else 1

    for field, bounded in (("t", False), ("m", True)):
        got = scan([f'{{"{field}":"{v}"}}' for v in values], DATE_TIME_SPEC)
        wrong = [(v, want(v, bounded), n) for v, n in zip(values, got) if n != want(v, bounded)]
        assert not wrong, (field, wrong)


@needs_jar
def test_the_compiled_combine_uses_it(spark, monkeypatch):
    monkeypatch.setenv("TIDEMARK_JVM_CHECKS", "1")
    schema = {
        "type": "object",
        "reduce": {"strategy": "merge"},
        "properties": {
            "k": {"type": "string"},
            "n": {"type": "integer", "reduce": {"strategy": "sum"}},
            "o": {"type": "object"},
        },
    }
    coll = Collection(CollectionSpec("t", ("/k",), schema))
    assert jvm.spec(compile_collection(coll)) is not None
    rows = [('{"k":"a","n":1,"o":{"x":[1]}}', "f", 0, 0), ('{"k":"a","n":2}', "f", 0, 1)]
    res = combine_batch(spark.createDataFrame(rows, "value string, _file string, _block long, _row long"), coll)
    try:
        assert res.path == "compiled"
        plan = res.combined._jdf.queryExecution().toString()
        assert jvm.FUNCTION in plan
        assert {r.key_json: json.loads(r.doc) for r in res.combined.collect()} == {
            '["a"]': {"k": "a", "n": 3, "o": {"x": [1]}}
        }
    finally:
        res.unpersist()
    monkeypatch.setenv("TIDEMARK_JVM_CHECKS", "0")
    res = combine_batch(spark.createDataFrame(rows, "value string, _file string, _block long, _row long"), coll)
    try:
        assert jvm.FUNCTION not in res.combined._jdf.queryExecution().toString()
    finally:
        res.unpersist()


def test_the_shipped_jar_is_built_from_the_sources_it_ships_with():
    """Nothing is compiled on a user's machine: the jar in the package must match its Java
    sources (after a change to them: ``python -m tidemark.spark.jvm``) and name its Spark."""
    import pyspark

    attrs = jvm.manifest()
    assert attrs.get(jvm.SOURCE_DIGEST) == jvm.source_digest(), "the jar is stale: run python -m tidemark.spark.jvm"
    if _built_for_this_spark():
        assert jvm.shipped_jar(pyspark.__version__) == str(jvm.JAR)
    else:  # another Spark than the jar's: the expression form, never the jar
        assert jvm.shipped_jar(pyspark.__version__) is None


def test_another_spark_or_a_stale_jar_means_expressions(tmp_path, monkeypatch, caplog):
    import pyspark

    assert jvm.shipped_jar("3.5.1") is None  # PlanRebind's internals differ between minor versions
    stale = tmp_path / "stale.jar"
    import zipfile

    with zipfile.ZipFile(stale, "w") as z:
        z.writestr("META-INF/MANIFEST.MF", f"{jvm.SOURCE_DIGEST}: 00\r\n{jvm.SPARK_VERSION}: {pyspark.__version__}\r\n")
    with caplog.at_level("INFO", logger=jvm.__name__):
        assert jvm.shipped_jar(pyspark.__version__, stale) is None
        assert jvm.shipped_jar(pyspark.__version__, tmp_path / "missing.jar") is None
    assert "older than its Java sources" in caplog.text and "missing" in caplog.text


def test_a_name_that_cannot_be_encoded_means_expressions():
    plan = plan_of(FieldPlan("a\u0001b", "scalar", "string", "lastWriteWins", {}))
    assert jvm.spec(plan) is None


LOCAL_CLUSTER_SCRIPT = r"""
import json, sys
from tidemark.collection.collection import Collection
from tidemark.spec import CollectionSpec
from tidemark.spark import jvm
from tidemark.spark.combine import combine_batch
from tidemark.spark.session import local_session

spark = local_session("jvm-local-cluster", master="local-cluster[2,1,1024]")
schema = {"type": "object", "reduce": {"strategy": "merge"},
          "properties": {"k": {"type": "string"}, "n": {"type": "integer", "reduce": {"strategy": "sum"}}}}
coll = Collection(CollectionSpec("t", ("/k",), schema))
rows = [(json.dumps({"k": f"k{i % 7}", "n": i}), f"f{i % 4}", 0, i) for i in range(400)]
df = spark.createDataFrame(rows, "value string, _file string, _block long, _row long").repartition(4)
res = combine_batch(df, coll)
got = {r.key_json: json.loads(r.doc) for r in res.combined.collect()}
executors = spark.sparkContext._jsc.sc().getExecutorMemoryStatus().size() - 1
print(json.dumps({"path": res.path, "jvm": jvm.FUNCTION in res.combined._jdf.queryExecution().toString(),
                  "docs": got, "executors": executors}))
spark.stop()
"""


@needs_jar
@pytest.mark.slow  # CI runs it after the default suite (-m slow)
def test_executors_in_other_processes_load_the_jar(tmp_path):
    """``ADD JAR`` ships the jar: a local-cluster combine (executor JVMs of their own) runs it."""
    import os
    import subprocess
    import sys

    env = {**os.environ, "PYSPARK_PYTHON": sys.executable, "SPARK_LOCAL_IP": "127.0.0.1", "TIDEMARK_JVM_CHECKS": "1"}
    proc = subprocess.run(
        [sys.executable, "-c", LOCAL_CLUSTER_SCRIPT], env=env, capture_output=True, text=True, timeout=600, cwd=tmp_path
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    want = {}
    for i in range(400):
        k = f"k{i % 7}"
        want[json.dumps([k], separators=(",", ":"))] = {
            "k": k,
            "n": want.get(json.dumps([k], separators=(",", ":")), {"n": 0})["n"] + i,
        }
    assert out == {"path": "compiled", "jvm": True, "docs": want, "executors": 2}
