"""Bad input: one clear error naming where and what; nothing of the failing batch commits;
after the input is fixed, a restart continues exactly. ``on_invalid: quarantine`` instead
commits the dead letters with the rest of the batch.

The document cases run two files: file 0 is good (batch 0 commits), file 1 holds every bad
line, each at its own line (batch 1 fails). The view, the endpoint's checkpoints and the recovery log must be
exactly as batch 0 left them; then file 1 is repaired and a restart re-runs batch 1.
"""

from __future__ import annotations

import json
import os
import sqlite3
import subprocess
import sys

import pytest
import yaml

from tests.support.helpers import ORDERS_SCHEMA, normalize, oracle_orders, orders_spec, sqlite_view, write_orders
from tests.support.input_files import _replace_line
from tidemark.errors import DocumentError, SpecError

pytestmark = pytest.mark.spark


def run(spark, spec_path):
    from tidemark.spark.runner import run_spec

    reports = []
    run_spec(spec_path, spark=spark, on_batch=reports.append)
    return reports


def endpoint_state(db, checkpoints_dir):
    """Everything a failed batch must not touch: the view, the fenced checkpoints (minus
    the fence, which every Open bumps by design), the recovery log's entries."""
    con = sqlite3.connect(db)
    try:
        cps = con.execute(
            "SELECT materialization, key_begin, key_end, checkpoint FROM tidemark_checkpoints ORDER BY 1, 2, 3"
        ).fetchall()
    finally:
        con.close()
    log_dir = os.path.join(checkpoints_dir, "view", "tidemark", "log")
    return sqlite_view(db), cps, sorted(os.listdir(log_dir))


BAD_LINES = [
    # (the bad line, words the error must contain)
    ('{"customer": "c0001", "amount": 5,', ["unparseable JSON"]),
    (
        '{"customer": "c0001", "amount": "ten", "orders": 1, "largest": 1, "city": "Oslo", "items": [], "flags": {}}',
        ["/amount", "integer", "key"],
    ),
    ('{"amount": 5, "orders": 1, "largest": 5, "city": "Oslo", "items": [], "flags": {}}', ["customer"]),
    (
        '{"customer": "c0001", "amount": NaN, "orders": 1, "largest": 1, "city": "Oslo", "items": [], "flags": {}}',
        ["NaN"],
    ),
    (
        '{"customer": "c0001", "amount": Infinity, "orders": 1, "largest": 1, "city": "Oslo", "items": [], "flags": {}}',
        ["Infinity"],
    ),
    (
        '{"customer": "c0001", "amount": 1, "orders": 1, "largest": 1, "city": "'
        + "x" * 5000
        + '", "items": [], "flags": {}}',
        ["bytes", "maximum"],
    ),
    (
        '\ufeff{"customer": "c0001", "amount": 1, "orders": 1, "largest": 1, "city": "Oslo", "items": [], "flags": {}}',
        ["byte order mark", "U+FEFF"],
    ),
]


def test_bad_documents_fail_the_batch_and_commit_nothing(spark, tmp_path):
    """Every kind of bad line, each at its own line of file 1: the batch fails naming each one
    (file, line, rule), batch 0 stays exactly as it committed, and once the lines are repaired a
    restart re-runs batch 1 and the view is exact."""
    data, db, chk = tmp_path / "data", tmp_path / "views.db", tmp_path / "checkpoints"
    files = write_orders(data, files=2, per_file=50, customers=10, seed=9)
    spec = orders_spec(
        tmp_path, data_dir=data, db_path=db, shards=2, max_files=1, extra_mat={"max_document_bytes": 4096}
    )
    lines = {7 + 6 * i: case for i, case in enumerate(BAD_LINES)}  # line number -> (bad line, words)
    good = {n: _replace_line(files[1], n, bad) for n, (bad, _) in lines.items()}

    with pytest.raises(DocumentError) as err:
        run(spark, spec)
    msg = str(err.value)
    assert err.value.total == len(BAD_LINES), msg
    named = {e.location.rsplit("/", 1)[-1]: str(e) for e in err.value.documents}  # file:line -> its error
    assert set(named) == {f"orders-0001.json:{n}" for n in lines}, msg
    for n, (_, words) in lines.items():
        text = named[f"orders-0001.json:{n}"]
        for w in words:
            assert w in text, text
    assert msg.splitlines()[0] == str(err.value.documents[0])  # the first bad line is the first thing read
    # Batch 0 committed; nothing of batch 1 did.
    view, cps, log = endpoint_state(db, chk)
    os.rename(files[1], files[1] + ".hidden")
    assert normalize(view) == oracle_orders(data)
    os.rename(files[1] + ".hidden", files[1])
    assert [json.loads(c[3])["batch_id"] for c in cps] == [0, 0]
    assert log == ["0.json"]

    # Repair the lines: a restart re-runs batch 1 and the view is exact.
    for n, line in good.items():
        _replace_line(files[1], n, line)
    reports = run(spark, spec)
    assert [r.batch_id for r in reports] == [1]
    assert normalize(sqlite_view(db)) == oracle_orders(data)


def test_quarantine_commits_dead_letters_with_the_batch(spark, tmp_path):
    data, db = tmp_path / "data", tmp_path / "views.db"
    files = write_orders(data, files=1, per_file=60, customers=10, seed=10)
    spec = orders_spec(tmp_path, data_dir=data, db_path=db, shards=2, extra_mat={"on_invalid": "quarantine"})
    _replace_line(files[0], 3, '{"customer": "c0002", "amount": "lots"}')
    _replace_line(files[0], 9, "not json at all")
    reports = run(spark, spec)
    assert reports[0].invalid == 2

    # The oracle of the valid lines only.
    valid_dir = tmp_path / "valid"
    valid_dir.mkdir()
    with open(files[0]) as f:
        lines = [ln for i, ln in enumerate(f, 1) if i not in (3, 9)]
    (valid_dir / "orders-0000.json").write_text("".join(lines))
    assert normalize(sqlite_view(db)) == oracle_orders(valid_dir)

    con = sqlite3.connect(db)
    rows = con.execute("SELECT batch_id, location, reason, value FROM tidemark_quarantine ORDER BY location").fetchall()
    con.close()
    assert [(r[0], r[1].rsplit("/", 1)[-1]) for r in rows] == [(0, "orders-0000.json:3"), (0, "orders-0000.json:9")]
    assert "/amount" in rows[0][2] and "unparseable JSON" in rows[1][2]
    assert rows[1][3] == "not json at all"


def _spec_dict(tmp_path):
    return {
        "collections": {
            "orders": {
                "key": ["/customer"],
                "schema": ORDERS_SCHEMA,
                "source": {"format": "json", "path": str(tmp_path / "data")},
            }
        },
        "materializations": {
            "view": {
                "endpoint": {"sqlite": {"path": str(tmp_path / "v.db")}},
                "bindings": [{"source": "orders", "resource": {"table": "customers"}}],
            }
        },
        "checkpoint": str(tmp_path / "chk"),
    }


@pytest.mark.parametrize(
    "mutate,where",
    [
        (
            lambda s: s["materializations"]["view"]["bindings"][0].update(source="orderz"),
            "materializations.view.bindings[0].source",
        ),
        (lambda s: s["collections"]["orders"].update(key=["customer"]), "collections.orders.key"),
        (lambda s: s["materializations"]["view"].update(endpoint={"oracle": {}}), "oracle"),
        (lambda s: s["materializations"]["view"].update(shards=0), "materializations.view.shards"),
    ],
    ids=["unknown-collection", "bad-key-pointer", "unknown-endpoint", "zero-shards"],
)
def test_spec_errors_name_file_and_path_before_spark_starts(tmp_path, mutate, where):
    spec = _spec_dict(tmp_path)
    mutate(spec)
    path = tmp_path / "spec.yaml"
    path.write_text(yaml.safe_dump(spec))
    proc = subprocess.run(
        [sys.executable, "-m", "tidemark", "check", str(path)], capture_output=True, text=True, timeout=120
    )
    assert proc.returncode == 1
    out = " ".join(proc.stderr.split())
    assert "spec.yaml" in out and where in out, out
    assert "Traceback" not in proc.stderr
    assert not (tmp_path / "chk").exists()  # nothing started


def test_identifiers_that_try_sql_injection_are_quoted(spark, tmp_path):
    data, db = tmp_path / "data", tmp_path / "views.db"
    write_orders(data, files=1, per_file=40, customers=8, seed=12)
    table = 'x"; DROP TABLE tidemark_checkpoints; --'
    spec = orders_spec(tmp_path, data_dir=data, db_path=db)
    obj = yaml.safe_load(open(spec))
    obj["materializations"]["view"]["bindings"][0]["resource"]["table"] = table
    with open(spec, "w") as f:
        yaml.safe_dump(obj, f)
    run(spark, spec)
    con = sqlite3.connect(db)
    tables = {r[0] for r in con.execute("SELECT name FROM sqlite_master WHERE type='table'")}
    con.close()
    assert {table, "tidemark_checkpoints"} <= tables
    assert normalize(sqlite_view(db, table=table.replace('"', '""'))) == oracle_orders(data)


@pytest.mark.parametrize(
    "url,words",
    [
        ("postgresql://tm_user:s3cret-pw@127.0.0.1:1/test", ["127.0.0.1", "1"]),  # nothing listens on port 1
        ("postgresql://no_such_role_tm:s3cret-pw@127.0.0.1:5432/test", ["no_such_role_tm"]),
    ],
    ids=["unreachable", "wrong-credentials"],
)
def test_endpoint_connection_errors_are_clear_and_never_print_passwords(tmp_path, url, words):
    data = tmp_path / "data"
    write_orders(data, files=1, per_file=10, customers=3, seed=13)
    spec = orders_spec(
        tmp_path,
        data_dir=data,
        db_path=None,
        endpoint={"postgres": {"url": url, "schema": "tm_bad", "retry": {"attempts": 2}}},
    )
    env = {**os.environ, "PYSPARK_PYTHON": sys.executable, "SPARK_LOCAL_IP": "127.0.0.1"}
    for cmd in (["check", spec], ["run", spec, "--available-now", "--master", "local[1]"]):
        proc = subprocess.run(
            [sys.executable, "-m", "tidemark", *cmd], capture_output=True, text=True, env=env, timeout=300
        )
        out = proc.stdout + proc.stderr
        assert proc.returncode == 1, out[-2000:]
        assert "s3cret-pw" not in out
        assert "error:" in out and "Traceback" not in out, out[-2000:]
        for w in words:
            assert w in out, out[-2000:]
