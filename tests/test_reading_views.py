"""docs/reading-views.md, run: every SQL and Python block of the page, read from the page
itself (``<!-- run: NAME -->`` before a fenced block), against views that Spark made, with
the results compared with the oracle of ``tests/support/helpers.py``.

The input is ``write_orders``'s (integer amounts), with the quickstart's flag name (``big_spender``) so that
the page can use the quickstart's names: materialization ``customer_view``, table
``customers``.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import sqlite3
import threading
import time
import zlib
from collections import Counter
from pathlib import Path

import pytest

from tests.support.helpers import (
    ORDERS_SCHEMA,
    oracle_orders,
    orders_spec,
    postgres_spec,
    table_documents,
    write_orders,
)
from tests.support.paths import REPO, SUPPORT

DOC = Path(REPO) / "docs" / "reading-views.md"
MARKED = re.compile(r"<!-- run: (\S+) -->\n```(\w+)\n(.*?)\n```", re.S)
FENCE = re.compile(r"^```(\w*)$", re.M)
MAT = "customer_view"
HALF = 0x7FFFFFFF


def blocks() -> dict[str, str]:
    out = {}
    for name, _lang, code in MARKED.findall(DOC.read_text()):
        assert name not in out, f"two blocks named {name!r}"
        out[name] = code
    return out


def block(name: str) -> str:
    return blocks()[name]


def run_python(name: str, ns: dict | None = None) -> dict:
    ns = dict(ns or {})
    exec(compile(block(name), f"{DOC}:{name}", "exec"), ns)
    return ns


def quickstart_orders(directory, files: int, seed: int, start: int = 0):
    """``write_orders`` with the quickstart's flag name; file times kept (they order the files)."""
    for path in write_orders(directory, files=files, per_file=150, customers=40, seed=seed, start=start):
        st = os.stat(path)
        text = Path(path).read_text().replace('"big": true', '"big_spender": true')
        Path(path).write_text(text)
        os.utime(path, (st.st_atime, st.st_mtime))


def oracle_of(data, files: int) -> dict:
    """The oracle of the first ``files`` input files."""
    part = Path(str(data) + f"-first{files}")
    shutil.rmtree(part, ignore_errors=True)
    part.mkdir()
    for name in sorted(os.listdir(data))[:files]:
        shutil.copy(os.path.join(data, name), part / name)
    return oracle_orders(part)


def in_first_half(customer: str) -> bool:
    """The range of a key with 2 shards: crc32 of its compact JSON array (computed here, not by tidemark)."""
    return zlib.crc32(json.dumps([customer], separators=(",", ":")).encode()) <= HALF


def run(spark, spec):
    from tidemark.spark.runner import run_spec

    reports = []
    run_spec(spec, spark=spark, on_batch=reports.append)
    return [r.batch_id for r in reports]


def expected_columns(view: dict):
    return [(c, d["orders"], d["amount"], d["largest"], d["city"]) for c, d in sorted(view.items())]


def check_top(rows, view: dict) -> None:
    """The five largest amounts, each row as the oracle has it (ties in any order)."""
    rows = [tuple(r) for r in rows]
    assert [r[2] for r in rows] == sorted((d["amount"] for d in view.values()), reverse=True)[:5]
    for c, orders, amount, largest, city in rows:
        d = view[c]
        assert (orders, amount, largest, city) == (d["orders"], d["amount"], d["largest"], d["city"])


def item_counts(view: dict) -> list:
    return sorted(Counter(i for d in view.values() for i in d["items"]).items())


def big_spenders(view: dict) -> list:
    return sorted(c for c, d in view.items() if d["flags"].get("big_spender"))


# ------------------------------------------------------------------- the page


def test_every_query_on_the_page_is_marked_and_run_here():
    text = DOC.read_text()
    opening = FENCE.findall(text)[::2]
    shown = sum(lang in ("sql", "python") for lang in opening)
    named = blocks()
    assert shown == len(named), "a SQL or Python block of the page has no <!-- run: NAME --> marker"
    source = Path(__file__).read_text()
    assert [n for n in named if f'"{n}"' not in source] == []  # each marked block is run by a test below


VIEW_BATCH_CASES = [
    # (rows as (key_begin, key_end, batch or None)), (min_batch, max_batch)
    ([(0, HALF, 3), (HALF + 1, 0xFFFFFFFF, 3)], (3, 3)),
    ([(0, HALF, 3), (HALF + 1, 0xFFFFFFFF, 2)], (2, 3)),  # a shard is committing
    ([(0, 0xFFFFFFFF, 1), (0, HALF, 3), (HALF + 1, 0xFFFFFFFF, 3)], (3, 3)),  # 1 -> 2 shards: old row at 1
    (
        [
            (0, 0x3FFFFFFF, 1),
            (0x40000000, HALF, 1),
            (HALF + 1, 0xBFFFFFFF, 1),
            (0xC0000000, 0xFFFFFFFF, 1),
            (0, HALF, 4),
            (HALF + 1, 0xFFFFFFFF, 3),
        ],
        (3, 4),
    ),  # 4 -> 2 shards, mid-commit
    ([(0, 0xFFFFFFFF, 2), (0, HALF, 3)], (2, 3)),  # 1 -> 2 shards: one new range committed, one never opened
    ([(0, HALF, None), (HALF + 1, 0xFFFFFFFF, None)], (-1, -1)),  # opened, nothing committed
]


def _cases(insert):
    for i, (rows, _) in enumerate(VIEW_BATCH_CASES):
        for b, e, batch in rows:
            cp = None if batch is None else json.dumps({"checkpoint_id": "c", "batch_id": batch})
            insert((f"case{i}", b, e, 1, cp))
    return {(f"case{i}",): want for i, (_, want) in enumerate(VIEW_BATCH_CASES)}


def test_view_batches_over_layout_changes_sqlite(tmp_path):
    """The page's view over checkpoint rows of several layouts (no Spark)."""
    from tidemark.drivers.sqlite import SQLiteDriver

    driver = SQLiteDriver({"path": str(tmp_path / "customers.db")})
    con = driver.con  # creates tidemark_checkpoints
    want = _cases(lambda row: con.execute("INSERT INTO tidemark_checkpoints VALUES (?, ?, ?, ?, ?)", row))
    con.execute(block("sqlite-view-batches"))
    for (mat,), expected in want.items():
        sql = block("view-batches-select").replace(f"'{MAT}'", f"'{mat}'")
        assert con.execute(sql).fetchone() == expected, mat
    driver.close()


@pytest.mark.postgres
def test_view_batches_over_layout_changes_postgres(postgres_url, pg_schema):
    import psycopg

    from tidemark.drivers.postgres import PostgresDriver

    driver = PostgresDriver({"url": postgres_url, "schema": pg_schema})
    driver.ensure_tables(driver.con)
    driver.close()
    with psycopg.connect(postgres_url, autocommit=True, options=f"-c search_path={pg_schema}") as con:
        want = _cases(lambda row: con.execute("INSERT INTO tidemark_checkpoints VALUES (%s, %s, %s, %s, %s)", row))
        con.execute(block("postgres-view-batches"))
        for (mat,), expected in want.items():
            sql = block("view-batches-select").replace(f"'{MAT}'", f"'{mat}'")
            assert con.execute(sql).fetchone() == expected, mat


# ------------------------------------------------------------------ endpoints


@pytest.mark.spark
def test_sqlite_queries_of_the_page(spark, tmp_path, monkeypatch):
    data = tmp_path / "data"
    quickstart_orders(data, files=2, seed=71)
    spec = orders_spec(tmp_path, data_dir=data, db_path=tmp_path / "customers.db", shards=2, name=MAT, max_files=2)
    assert run(spark, spec) == [0]
    view = oracle_orders(data)
    assert big_spenders(view)  # the input has some

    con = sqlite3.connect(tmp_path / "customers.db")
    cols = con.execute(block("sqlite-columns")).fetchall()
    assert sorted(n for n, _ in cols) == ["amount", "city", "customer", "flow_document", "largest", "orders"]
    assert dict(cols)["amount"] == "INTEGER" and dict(cols)["flow_document"] == "TEXT"
    check_top(con.execute(block("sqlite-top")).fetchall(), view)
    assert con.execute(block("sqlite-nested")).fetchall() == [
        (c, len(d["items"]), 1 if d["flags"].get("big_spender") else None) for c, d in sorted(view.items())
    ]
    assert con.execute(block("sqlite-unnest")).fetchall() == item_counts(view)
    con.execute(block("sqlite-view-batches"))
    assert con.execute(block("view-batches-select")).fetchone() == (0, 0)
    con.close()

    monkeypatch.chdir(tmp_path)
    ns = run_python("sqlite-read-consistent")
    assert ns["batch"] == 0
    assert ns["rows"] == [(c, d["amount"]) for c, d in sorted(view.items())]


@pytest.mark.spark
@pytest.mark.postgres
def test_postgres_queries_of_the_page_and_a_batch_half_committed(spark, tmp_path, postgres_url, pg_schema):
    import psycopg

    data = tmp_path / "data"
    quickstart_orders(data, files=2, seed=72)
    # the quickstart's schema (no deletions): a lean view, as the page says
    lean = {k: v for k, v in ORDERS_SCHEMA.items() if k not in ("if", "then")}
    lean["properties"] = {k: v for k, v in ORDERS_SCHEMA["properties"].items() if k != "_meta"}
    endpoint = {"postgres": {"url": postgres_url, "schema": pg_schema}}
    spec = orders_spec(
        tmp_path, data_dir=data, db_path=None, shards=2, name=MAT, max_files=2, endpoint=endpoint, schema=lean
    )
    assert run(spark, spec) == [0]
    view = oracle_orders(data)
    url = postgres_url + ("&" if "?" in postgres_url else "?") + f"options=-csearch_path%3D{pg_schema}"

    with psycopg.connect(url, autocommit=True) as con:
        cols = con.execute(block("postgres-columns")).fetchall()
        assert [n for n, _ in cols] == [
            "customer",
            "amount",
            "city",
            "largest",
            "orders",
            "flags",
            "items",
            "flow_document",
        ]
        assert dict(cols)["amount"] == "bigint" and dict(cols)["items"] == "jsonb"
        assert con.execute("SELECT count(*) FROM customers WHERE flow_document IS NOT NULL").fetchone() == (0,)
        check_top(con.execute(block("postgres-top")).fetchall(), view)
        assert con.execute(block("postgres-nested")).fetchall() == [
            (c, len(d["items"]), True if d["flags"].get("big_spender") else None) for c, d in sorted(view.items())
        ]
        assert con.execute(block("postgres-unnest")).fetchall() == item_counts(view)
        con.execute(block("postgres-index"))
        assert [c for (c,) in con.execute(block("postgres-contains")).fetchall()] == big_spenders(view)
        con.execute(block("postgres-view-batches"))
        assert con.execute(block("view-batches-select")).fetchone() == (0, 0)
    ns = run_python("postgres-read-consistent", {"url": url})
    assert ns["batch"] == 0 and ns["rows"] == [(c, d["amount"]) for c, d in sorted(view.items())]
    read_consistent = ns["read_consistent"]

    # Batch 1 with one range's commit held back: a row lock on a key it updates.
    quickstart_orders(data, files=1, seed=73, start=2)
    new = oracle_orders(data)
    changed = sorted(c for c in new if new[c] != view.get(c))
    held = changed[0]
    lock = psycopg.connect(url)
    lock.execute("SELECT 1 FROM customers WHERE customer = %s FOR UPDATE", (held,))
    outcome: dict = {}
    runner = threading.Thread(target=lambda: outcome.update(batches=run(spark, spec)))
    runner.start()
    try:
        with psycopg.connect(url, autocommit=True) as con:
            deadline = time.monotonic() + 60
            while (got := con.execute(block("view-batches-select")).fetchone()) != (0, 1):
                assert got == (0, 0) and runner.is_alive() and time.monotonic() < deadline, got
                time.sleep(0.1)
            rows = table_documents(con.execute("SELECT * FROM customers"), "customer")
        # The held key's range is still at batch 0, the other range at batch 1.
        held_half = in_first_half(held)
        assert {c: d for c, d in rows.items() if in_first_half(c) == held_half} == {
            c: d for c, d in view.items() if in_first_half(c) == held_half
        }
        assert {c: d for c, d in rows.items() if in_first_half(c) != held_half} == {
            c: d for c, d in new.items() if in_first_half(c) != held_half
        }
        assert any(new[c] != view.get(c) for c in new if in_first_half(c) != held_half)
        with pytest.raises(TimeoutError, match="batches 0 to 1"):
            read_consistent(url, MAT, "SELECT customer FROM customers", timeout=0.3)
    finally:
        lock.rollback()
        lock.close()
        runner.join(120)
    assert outcome.get("batches") == [1]
    names = ["customer", "amount", "city", "largest", "orders", "flags", "items"]
    batch, rows = read_consistent(url, MAT, f"SELECT {', '.join(names)} FROM customers ORDER BY customer")
    got = {r[0]: {n: v for n, v in zip(names, r) if v is not None} for r in rows}
    assert batch == 1 and got == new


@pytest.mark.spark
def test_delta_queries_of_the_page(spark, tmp_path, monkeypatch):
    pytest.importorskip("deltalake")
    pytest.importorskip("duckdb")
    from tests.support.delta_specs import delta_spec

    data = tmp_path / "data"
    quickstart_orders(data, files=2, seed=74)
    spec = delta_spec(tmp_path, data_dir=data, lake=tmp_path / "lake", shards=2)
    assert run(spark, spec) == [0, 1]
    view = oracle_orders(data)

    monkeypatch.chdir(tmp_path)
    ns = run_python("delta-read")
    assert sorted(ns["columns"]) == [
        "_meta",
        "amount",
        "city",
        "customer",
        "flags",
        "flow_document",
        "items",
        "largest",
        "orders",
    ]  # a lean table
    assert sorted(tuple(r.values()) for r in ns["table"].to_pylist()) == expected_columns(view)
    check_top([tuple(r.values()) for r in ns["top"].to_pylist()], view)
    ns = run_python("delta-nested", {"dt": ns["dt"]})
    assert {c: {k: v for k, v in d.items() if k != "_meta"} for c, d in ns["docs"].items()} == view
    assert ns["big_spenders"] == big_spenders(view) != []
    assert ns["items"] == item_counts(view)

    ns = run_python("delta-batches")
    assert ns["latest"] == 1
    assert ns["version_of_batch"]("lake/customers", 1) == ns["dt"].version()
    assert ns["version_of_batch"]("lake/customers", 2) is None
    first = oracle_of(data, 1)
    assert sorted(ns["rows_0"], key=lambda r: r["customer"]) == [
        {"customer": c, "amount": d["amount"]} for c, d in sorted(first.items())
    ]
    assert first != view
    ops = [h["operation"] for h in sorted(ns["dt"].history(), key=lambda h: h["version"])]
    assert ops[-2:] == ["MERGE", "MERGE"]  # one commit per batch, every shard in it
