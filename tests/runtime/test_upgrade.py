"""Upgrading tidemark continues every view.

An older release of this repository (a pinned commit: the release of 2026-11-26, before the
identity records on Delta tables and the decimal columns of the lakes) is installed into its
own venv and runs one view per endpoint over the first files; then this checkout's code runs
the same spec over more files, and every view equals the answer computed from all the files.
(The trial that found the Delta case: "Error parsing property 'tidemark.identity'", every
later run refused.)"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import uuid

import pytest
import yaml

from tests.support.helpers import ORDERS_SCHEMA, oracle_orders, skip_unless_required, write_input, write_orders
from tests.support.kafka_broker import kafka_bootstrap, kafka_broker
from tests.support.mysql_support import mysql_db, mysql_url
from tests.support.nats_server import nats_server, nats_url
from tests.support.operator_endpoints import endpoint_of, read
from tests.support.paths import REPO, SUPPORT

pytestmark = [pytest.mark.spark, pytest.mark.slow]

ROOT = REPO
KINDS = ["sqlite", "postgres", "mysql", "delta", "iceberg", "store", "redis", "kafka", "nats", "webhook"]
# the releases upgraded from, and the endpoints each had
RELEASES = {
    "a12e99b": [k for k in KINDS if k != "iceberg"],  # 2026-11-26: Delta tables without identity records
    # 2026-11-28: the one Iceberg had (the others are the same formats as a12e99b's plus what
    # this release reads the same way; one view keeps the CI run short)
    "af8d414": ["iceberg"],
}


# 2026-12-06: lean views whose date-times were text in Delta and Iceberg and made MariaDB's
# view full, whose unions and exact decimals MariaDB left to Load
LEAN_RELEASE = "637ffde"
LEAN_KINDS = ["sqlite", "postgres", "mysql", "delta", "iceberg"]


def unavailable(why: str):
    skip_unless_required(why)  # (CI sets TIDEMARK_REQUIRE_ALL: a clone without the history fails there)


@pytest.fixture(scope="module", params=sorted(RELEASES))
def old_release(request, tmp_path_factory) -> tuple[str, str]:
    """(the release, the Python of a venv holding it and this machine's libraries)."""
    return request.param, installed(request.param, tmp_path_factory)


@pytest.fixture(scope="module")
def lean_release(tmp_path_factory) -> tuple[str, str]:
    """The release before lean views changed form: :data:`LEAN_RELEASE` and its venv's Python."""
    return LEAN_RELEASE, installed(LEAN_RELEASE, tmp_path_factory)


def installed(release: str, tmp_path_factory) -> str:
    """The Python of a venv holding ``release`` (this repository at that commit) and this
    machine's libraries."""
    home = tmp_path_factory.mktemp(f"release-{release}")
    tree = home / "tidemark"
    tree.mkdir()
    archive = subprocess.run(["git", "-C", ROOT, "archive", "--format=tar", release], capture_output=True, timeout=120)
    if archive.returncode != 0:
        unavailable(f"the old release {release} is not in this clone's history: {archive.stderr.decode()[:200]}")
    subprocess.run(["tar", "-x", "-C", str(tree)], input=archive.stdout, check=True, timeout=120)
    venv = home / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--system-site-packages", str(venv)], check=True, timeout=300)
    python = str(venv / "bin" / "python")
    # the release's package on the venv's path (its libraries: this machine's, through
    # --system-site-packages); a .pth, as an editable install makes, with no build step
    site = subprocess.run(
        [python, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    with open(os.path.join(site, "tidemark-old-release.pth"), "w") as f:
        f.write(str(tree) + "\n")
    where = subprocess.run(
        [python, "-c", "import tidemark, os; print(os.path.dirname(tidemark.__file__))"],
        capture_output=True,
        text=True,
        check=True,
        cwd=str(home),
    ).stdout.strip()
    assert where.startswith(str(tree)), f"the old release's venv imports tidemark from {where}"
    return python


def endpoint(kind: str, request, tmp, tag: str) -> tuple[dict, dict]:
    if kind == "sqlite":
        return {"sqlite": {"path": str(tmp / "views.db")}}, {"table": f"{tag}_sqlite"}
    if kind == "postgres":
        return {
            "postgres": {"url": request.getfixturevalue("postgres_url"), "schema": request.getfixturevalue("pg_schema")}
        }, {"table": "customers"}
    if kind == "delta":
        return {"delta": {"path": str(tmp / "lake")}}, {"table": "customers"}
    config, key = endpoint_of(kind, request, tmp / kind, f"{tag}{kind}")
    return config, {key: f"{tag}_{kind}_customers"}


def write_spec(request, tmp_path, tag: str, kinds, name: str, key: list, schema: dict, data) -> str:
    """A spec of one collection ``name`` read from ``data`` (a file a batch) and one view per
    endpoint of ``kinds``; its path."""
    materializations = {}
    for kind in kinds:
        (tmp_path / kind).mkdir()
        config, resource = endpoint(kind, request, tmp_path, tag)
        materializations[kind] = {"endpoint": config, "shards": 2, "bindings": [{"source": name, "resource": resource}]}
    source = {"format": "json", "path": str(data), "options": {"maxFilesPerTrigger": 1}}
    spec = tmp_path / "spec.yaml"
    spec.write_text(
        yaml.safe_dump(
            {
                "collections": {name: {"key": key, "schema": schema, "source": source}},
                "materializations": materializations,
                "checkpoint": str(tmp_path / "checkpoints"),
            }
        )
    )
    return str(spec)


def run(python: str, spec: str, cwd) -> None:
    done = subprocess.run(
        [python, "-m", "tidemark", "run", spec, "--available-now", "--no-spark-ui"],
        capture_output=True,
        text=True,
        timeout=900,
        cwd=str(cwd),
        env={**os.environ, "PYSPARK_PYTHON": python, "PYSPARK_DRIVER_PYTHON": python},
    )
    assert done.returncode == 0, f"{python} run failed:\n{done.stdout[-3000:]}\n{done.stderr[-5000:]}"


def test_every_view_of_an_older_release_continues_exactly(old_release, tmp_path, request):
    release, old_python = old_release
    kinds = RELEASES[release]
    tag = f"up{uuid.uuid4().hex[:6]}"
    data = tmp_path / "data"
    write_orders(data, files=2, per_file=60, customers=30, seed=51)
    spec = write_spec(request, tmp_path, tag, kinds, "orders", ["/customer"], ORDERS_SCHEMA, data)
    run(old_python, str(spec), tmp_path)
    write_orders(data, files=2, per_file=60, customers=30, seed=52, start=2)
    run(sys.executable, str(spec), tmp_path)
    want = oracle_orders(data)
    wrong = {}
    for kind in kinds:
        view, records = read(str(spec), kind)
        if view != want:
            wrong[kind] = (len(view), len(want))
        assert records and all(records), f"{kind}: the view's identity record is kept after the upgrade"
    assert not wrong, f"views that differ from the answer after the upgrade: {wrong}"


EVENTS = {  # date-times in several spellings (a lean row's remainder), a union, an exact decimal
    "type": "object",
    "required": ["id", "ts", "status"],
    "reduce": {"strategy": "merge"},
    "properties": {
        "id": {"type": "string"},
        "ts": {"type": "string", "format": "date-time", "reduce": {"strategy": "maximize"}},
        "first": {"type": "string", "format": "date-time", "reduce": {"strategy": "minimize"}},
        "status": {"type": "string", "reduce": {"strategy": "lastWriteWins", "order": "/ts"}},
        "amount": {"type": "number", "multipleOf": 0.01, "reduce": {"strategy": "sum"}},
        "tags": {"type": "array", "items": {"type": "string"}, "reduce": {"strategy": "union"}},
        "note": {"type": "string"},
        # what this release reduces in the endpoint where the last one Loaded: nullable
        # properties, an object of members with strategies of their own (and, in the documents,
        # a property and a member the schema does not declare)
        "seen": {"type": ["string", "null"]},
        "best": {"type": ["integer", "null"], "reduce": {"strategy": "maximize"}},
        "place": {
            "type": "object",
            "reduce": {"strategy": "merge"},
            "properties": {"door": {"type": "string"}, "visits": {"type": "integer", "reduce": {"strategy": "sum"}}},
        },
    },
}


def write_events(directory, files: int, per_file: int, seed: int, start: int = 0) -> None:
    """Order events: mixed offsets and fractions, optional tags and notes."""
    import random

    draw = random.Random(seed)
    os.makedirs(directory, exist_ok=True)
    for n in range(start, start + files):
        lines = []
        for _ in range(per_file):
            minute = draw.randrange(600)
            offset = draw.choice(["Z", "+05:30", "-04:00"])
            hour = 8 + minute // 60 + {"Z": 0, "+05:30": 5, "-04:00": -4}[offset]
            at = f"2026-12-0{1 + n % 5}T{hour:02d}:{minute % 60:02d}:{draw.randrange(60):02d}"
            at += draw.choice(["", ".5", f".{draw.randrange(10**6):06d}", ".250"]) + offset
            doc = {
                "id": f"o{draw.randrange(25)}",
                "ts": at,
                "first": at,
                "status": draw.choice(["new", "paid", "sent"]),
            }
            doc["amount"] = draw.randrange(1, 100000) / 100
            if draw.random() < 0.6:
                doc["tags"] = draw.sample(["a", "b", "c", "é"], draw.randrange(1, 3))
            if draw.random() < 0.3:
                doc["note"] = draw.choice(["x", "ring twice", ""])
            if draw.random() < 0.4:
                doc["seen"] = draw.choice([None, "yes"])
            if draw.random() < 0.4:
                doc["best"] = draw.choice([None, draw.randrange(9)])
            if draw.random() < 0.4:
                doc["place"] = {"door": draw.choice("AB"), "visits": 1}
                if draw.random() < 0.3:
                    doc["place"]["wing"] = draw.choice(["east", None])
            if draw.random() < 0.1:
                doc["channel"] = draw.choice(["web", {"app": "ios"}])
            lines.append(json.dumps(doc))
        write_input(directory, n, lines)  # modified in name order: Spark's file source reads in that order


def oracle_events(directory) -> dict:
    """id -> the expected document: every file in name order, lines in order, folded in Python."""
    from tidemark.collection.collection import Collection
    from tidemark.spec import CollectionSpec

    coll = Collection(CollectionSpec("events", ("/id",), EVENTS))
    view: dict = {}
    for name in sorted(os.listdir(directory)):
        with open(os.path.join(directory, name)) as f:
            for doc in map(json.loads, f):
                view[doc["id"]] = coll.reduce(view[doc["id"]], doc) if doc["id"] in view else doc
    return view


def test_every_lean_view_of_the_last_release_continues_exactly(lean_release, tmp_path, request):
    """Lean views with date-times, a union and exact decimals, made by the release before this
    one's changes of form (Delta and Iceberg date-times as text, MariaDB's view full and Loaded),
    and with nullable properties and an object of members (which that release Loaded and
    folded in Python, and this one reduces in the endpoint), continue under this checkout:
    every view equals the Python fold of all the files."""
    from tests.support.endpoint_reduce import canonical

    release, old_python = lean_release
    tag = f"ul{uuid.uuid4().hex[:6]}"
    data = tmp_path / "data"
    write_events(data, files=2, per_file=80, seed=61)
    spec = write_spec(request, tmp_path, tag, LEAN_KINDS, "events", ["/id"], EVENTS, data)
    run(old_python, str(spec), tmp_path)
    write_events(data, files=2, per_file=80, seed=62, start=2)
    run(sys.executable, str(spec), tmp_path)
    want = {k: canonical(d) for k, d in oracle_events(data).items()}
    wrong = {}
    for kind in LEAN_KINDS:
        view, records = read(str(spec), kind)
        got = {k: canonical(d) for k, d in view.items()}
        if got != want:
            wrong[kind] = sorted(k for k in set(got) | set(want) if got.get(k) != want.get(k))[:5]
        assert records and all(records), f"{kind}: the view's identity record is kept after the upgrade"
    assert not wrong, f"{release} -> this checkout: views that differ from the Python fold: {wrong}"
