"""Event-time order on Spark: both combine paths agree with the Python fold whatever the
source order, and a view end to end (SQLite) is the same whichever order its files are read
in."""

from __future__ import annotations

import copy
import json
import os
import random
import sqlite3

import pytest
import yaml

from tidemark.collection.collection import Collection
from tidemark.collection.formats import instant
from tidemark.collection.plan import compile_collection
from tidemark.spark.combine import combine_batch
from tidemark.spec import CollectionSpec

pytestmark = pytest.mark.spark

SCHEMA = "value string, _file string, _block long, _row long"
ORDERED = {
    "type": "object",
    "required": ["id"],
    "reduce": {"strategy": "lastWriteWins", "order": "/updated_at"},
    "properties": {
        "id": {"type": "string"},
        "updated_at": {"type": "string", "format": "date-time"},
        "status": {"type": "string"},
        "n": {"type": "integer"},
    },
}
OFFSETS = ["Z", "+02:00", "-05:00", "+00:30"]


def events(keys: int, per_key: int, seed: int) -> list[dict]:
    """Documents with distinct instants per key, written with assorted offsets (so text order
    is not time order); some keys have one document without ``updated_at``."""
    draw = random.Random(seed)
    out = []
    for k in range(keys):
        minutes = draw.sample(range(0, 600), per_key)
        for i, m in enumerate(minutes):
            doc = {"id": f"k{k}", "status": f"s{i}", "n": m}
            off = draw.choice(OFFSETS)
            if i > 0 or draw.random() > 0.3:
                sign = -1 if off.startswith("-") else 1
                shift = 0 if off == "Z" else sign * (int(off[1:3]) * 60 + int(off[4:]))
                local = m + shift + 600  # the local time that names minute m (UTC) at this offset
                doc["updated_at"] = f"2024-05-01T{local // 60:02d}:{local % 60:02d}:00{off}"
            out.append(doc)
    return out


def latest(docs: list[dict], first: bool = False) -> dict:
    """The oracle: per key, the document with the latest (earliest) instant; one without
    ``updated_at`` orders first (distinct instants: no ties)."""
    out: dict = {}
    for d in docs:
        t = instant(d["updated_at"]) if "updated_at" in d else None
        have = out.get(d["id"])
        if have is None:
            out[d["id"]] = (t, d)
            continue
        ht = have[0]
        later = ht is None and t is not None or (t is not None and ht is not None and t > ht)
        earlier = t is None and ht is not None or (t is not None and ht is not None and t < ht)
        if earlier if first else later:
            out[d["id"]] = (t, d)
    return {k: d for k, (_t, d) in out.items()}


def _rows(docs, files: int):
    return [(json.dumps(d), f"file:///data/{i % files}.json", 0, i) for i, d in enumerate(docs)]


@pytest.mark.parametrize("strategy", ["lastWriteWins", "firstWriteWins"])
@pytest.mark.parametrize("path", ["compiled", "fallback"])
def test_both_paths_agree_with_the_python_fold_in_any_source_order(spark, path, strategy):
    schema = copy.deepcopy(ORDERED)
    schema["reduce"]["strategy"] = strategy
    coll = Collection(CollectionSpec("events", ("/id",), schema))
    assert compile_collection(coll) is not None
    docs = events(keys=12, per_key=5, seed=7)
    want = latest(docs, first=strategy == "firstWriteWins")
    for seed in (1, 2):
        shuffled = list(docs)
        random.Random(seed).shuffle(shuffled)
        res = combine_batch(spark.createDataFrame(_rows(shuffled, files=3), SCHEMA), coll, force_path=path)
        try:
            assert res.path == path
            got = {json.loads(r.key_json)[0]: json.loads(r.doc) for r in res.combined.collect()}
        finally:
            res.unpersist()
        assert got == want
        # the Python fold (what reduces a batch into the endpoint's stored document) agrees
        by_key: dict = {}
        for d in shuffled:
            by_key.setdefault(d["id"], []).append(d)
        assert {k: coll.combine(v) for k, v in by_key.items()} == want


def _write_files(directory, docs: list[dict], files: int, reverse: bool) -> list[dict]:
    """The documents spread over ``files`` files; returns them in the order Spark reads them
    (one file per batch, oldest modification time first)."""
    directory.mkdir()
    chunks = [docs[i::files] for i in range(files)]
    if reverse:
        chunks = [list(reversed(c)) for c in reversed(chunks)]
    read = []
    for i, chunk in enumerate(chunks):
        p = directory / f"part-{i}.json"
        p.write_text("".join(json.dumps(d) + "\n" for d in chunk))
        os.utime(p, (1_700_000_000 + i, 1_700_000_000 + i))
        read += chunk
    return read


def test_files_read_in_different_orders_give_the_same_view(spark, tmp_path):
    from tidemark.spark.runner import run_spec

    docs = events(keys=25, per_key=6, seed=11)
    order_a = _write_files(tmp_path / "a", docs, files=3, reverse=False)
    order_b = _write_files(tmp_path / "b", docs, files=3, reverse=True)
    # without `order:`, the two views would differ (source order decides "last")
    plain = Collection(CollectionSpec("c", ("/id",), {**ORDERED, "reduce": {"strategy": "lastWriteWins"}}))
    assert {d["id"]: d for d in order_a} != {d["id"]: d for d in order_b}
    assert plain.combine(order_a[:2]) == order_a[1]

    db = tmp_path / "views.db"
    spec = {"collections": {}, "materializations": {}, "checkpoint": str(tmp_path / "checkpoints")}
    for name in ("a", "b"):
        spec["collections"][name] = {
            "key": ["/id"],
            "schema": ORDERED,
            "source": {"format": "json", "path": str(tmp_path / name), "options": {"maxFilesPerTrigger": 1}},
        }
        spec["materializations"][name] = {
            "endpoint": {"sqlite": {"path": str(db)}},
            "shards": 2,
            "bindings": [{"source": name, "resource": {"table": name, "document": "full"}}],
        }
    spec_path = tmp_path / "spec.yaml"
    spec_path.write_text(yaml.safe_dump(spec))
    reports = []
    run_spec(str(spec_path), spark=spark, on_batch=reports.append)
    assert len(reports) == 6  # three batches each: later batches reduce into stored documents
    con = sqlite3.connect(db)
    try:
        views = {
            t: {k: json.loads(d) for k, d in con.execute(f'SELECT "id", "flow_document" FROM "{t}"')}
            for t in ("a", "b")
        }
    finally:
        con.close()
    want = latest(docs)
    for t in ("a", "b"):
        assert {k: {f: v for f, v in d.items() if f != "_meta"} for k, d in views[t].items()} == want


FLAT = {  # "last status by event time" beside a sum: the order on a property
    "type": "object",
    "required": ["id", "ts", "status", "at", "origin"],
    "reduce": {"strategy": "merge"},
    "properties": {
        "id": {"type": "string"},
        "ts": {"type": "string", "format": "date-time", "reduce": {"strategy": "maximize"}},
        "status": {"type": "string", "reduce": {"strategy": "lastWriteWins", "order": "/ts"}},
        "at": {"type": "integer", "reduce": {"strategy": "minimize"}},  # few values: ties
        "origin": {"type": "string", "reduce": {"strategy": "firstWriteWins", "order": "/at"}},
        "amount": {"type": "integer", "reduce": {"strategy": "sum"}},
    },
}


@pytest.mark.parametrize("path", ["compiled", "fallback"])
def test_a_property_ordered_by_another_agrees_with_the_python_fold(spark, path):
    coll = Collection(CollectionSpec("events", ("/id",), FLAT))
    assert [f.order for f in compile_collection(coll).fields if f.order] == ["ts", "at"]
    docs = [
        {"status": f"s{d['n']}", "ts": d["updated_at"], "at": d["n"] % 3, "origin": f"o{d['n']}", "amount": 1}
        | {"id": d["id"]}
        for d in events(keys=10, per_key=6, seed=5)
        if "updated_at" in d
    ]
    rows = _rows(docs, files=3)  # the source order: (file, block, row)
    by_key: dict = {}
    for d, (_, f, _b, r) in sorted(zip(docs, rows), key=lambda x: (x[1][1], x[1][2], x[1][3])):
        by_key.setdefault(d["id"], []).append(d)
    want = {k: coll.combine(v) for k, v in by_key.items()}  # the Python fold, in the source order
    res = combine_batch(spark.createDataFrame(list(reversed(rows)), SCHEMA), coll, force_path=path)
    try:
        assert res.path == path
        got = {json.loads(r.key_json)[0]: json.loads(r.doc) for r in res.combined.collect()}
    finally:
        res.unpersist()
    assert got == want
    # ties at /at went to the earlier document: not every origin is its key's first by /at alone
    assert all(d["origin"] == min(by_key[k], key=lambda x: x["at"])["origin"] for k, d in want.items())
