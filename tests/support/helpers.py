"""Test helpers: generated input files and an oracle computed without tidemark.

The oracle reads the JSON-lines files in the order tidemark promises (file name, then
line) and reduces them with plain Python that knows the test schema's meaning — it does
not import tidemark, so a bug in tidemark's reductions cannot hide in the oracle.
"""

from __future__ import annotations

import datetime as dt
import json
import os
import random
import re
import sqlite3
from decimal import Decimal

from tidemark.drivers.common.datetimes import canonical_date_time, from_sortable_text


def skip_unless_required(reason: str) -> None:
    """Skip a test whose server binary is missing here; fail instead where
    ``TIDEMARK_REQUIRE_ALL`` is set (``.ci/run`` sets it), so CI never skips one silently."""
    import pytest

    if os.environ.get("TIDEMARK_REQUIRE_ALL", "").strip() not in ("", "0"):
        pytest.fail(f"{reason} (TIDEMARK_REQUIRE_ALL is set)")
    pytest.skip(reason)


def free_port() -> int:
    """A TCP port on 127.0.0.1 that nothing listens on (for a private server)."""
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def server_user(program: str):
    """``(command prefix, pwd entry or None)`` to run a private server: PostgreSQL and
    PgBouncer refuse to run as root, so as root they run as the ``postgres`` user."""
    import pwd

    if os.geteuid() != 0:
        return [], None
    try:
        owner = pwd.getpwnam("postgres")
    except KeyError:
        skip_unless_required(f"running as root and there is no 'postgres' user to run {program} as")
    return ["runuser", "-u", "postgres", "--"], owner


ORDERS_SCHEMA = {
    "type": "object",
    "required": ["customer", "amount"],
    "reduce": {"strategy": "merge"},
    "properties": {
        "customer": {"type": "string"},
        "amount": {"type": "integer", "reduce": {"strategy": "sum"}},
        "orders": {"type": "integer", "reduce": {"strategy": "sum"}},
        "largest": {"type": "integer", "reduce": {"strategy": "maximize"}},
        "city": {"type": "string"},
        "items": {"type": "array", "items": {"type": "string"}, "reduce": {"strategy": "append"}},
        "flags": {"type": "object", "reduce": {"strategy": "merge"}, "additionalProperties": {"type": "boolean"}},
        "_meta": {"type": "object", "properties": {"op": {"type": "string"}}},
    },
    "if": {"properties": {"_meta": {"properties": {"op": {"const": "d"}}, "required": ["op"]}}, "required": ["_meta"]},
    "then": {"reduce": {"delete": True}},
}

CITIES = ["Lisbon", "Oslo", "Quito", "Hanoi"]


def write_input(directory, index: int, lines) -> str:
    """Put ``orders-NNNN.json`` (NNNN = ``index``) into ``directory`` whole, modified at
    1_700_000_000 + 10 × index (Spark's file source takes files in modification order: make
    it follow the names). Written under a hidden name (the file source skips names starting
    with "."), then renamed: a live run never lists it half-written or with today's mtime,
    which would make every older file look stale to it (``maxFileAge``)."""
    path = os.path.join(directory, f"orders-{index:04d}.json")
    tmp = os.path.join(directory, f".orders-{index:04d}.json.tmp")
    with open(tmp, "w") as out:
        out.writelines(line + "\n" for line in lines)
    stamp = 1_700_000_000 + index * 10
    os.utime(tmp, (stamp, stamp))
    os.replace(tmp, path)
    return path


def write_orders(
    directory, files: int, per_file: int, customers: int, seed: int, start: int = 0, deletes: float = 0.0, pad: int = 0
):
    """Write ``files`` JSON-lines files named orders-NNNN.json; return their paths.
    ``pad`` lengthens each city name by that many characters (big documents)."""
    draw = random.Random(seed)
    os.makedirs(directory, exist_ok=True)

    def docs():
        for _ in range(per_file):
            cust = f"c{draw.randrange(customers):04d}"
            if deletes and draw.random() < deletes:
                yield json.dumps({"customer": cust, "amount": 0, "_meta": {"op": "d"}})
                continue
            amount = draw.randrange(1, 1000)
            yield json.dumps(
                {
                    "customer": cust,
                    "amount": amount,
                    "orders": 1,
                    "largest": amount,
                    "city": draw.choice(CITIES) + "." * pad,
                    "items": [draw.choice("abcdef")],
                    "flags": {"big": True} if amount > 900 else {},
                }
            )

    return [write_input(directory, f, list(docs())) for f in range(start, start + files)]


def oracle_orders(directory) -> dict:
    """customer -> expected document, reducing files in name order, lines in order."""

    def docs():
        for name in sorted(os.listdir(directory)):
            if name.endswith(".json"):
                with open(os.path.join(directory, name)) as f:
                    yield from (json.loads(line) for line in f)

    return reduce_orders(docs())


def reduce_orders(docs) -> dict:
    """customer -> expected document of the orders ``docs`` (dicts, in source order)."""
    view: dict = {}
    for doc in docs:
        key = doc["customer"]
        if doc.get("_meta", {}).get("op") == "d":
            view.pop(key, None)
            continue
        cur = view.get(key)
        if cur is None:
            view[key] = {
                k: (list(v) if isinstance(v, list) else dict(v) if isinstance(v, dict) else v) for k, v in doc.items()
            }
            continue
        cur["amount"] += doc["amount"]
        cur["orders"] += doc["orders"]
        cur["largest"] = max(cur["largest"], doc["largest"])
        cur["city"] = doc["city"]
        cur["items"] = cur["items"] + doc["items"]
        cur["flags"] = {**cur["flags"], **doc["flags"]}
    return view


def orders_spec(
    tmp, *, data_dir, db_path, shards=1, max_files=1, endpoint=None, name="view", extra_mat=None, schema=None
):
    """Write a spec file for the orders collection (``schema``: another than
    :data:`ORDERS_SCHEMA`); return its path."""
    import yaml

    spec = {
        "collections": {
            "orders": {
                "key": ["/customer"],
                "schema": schema or ORDERS_SCHEMA,
                "source": {"format": "json", "path": str(data_dir), "options": {"maxFilesPerTrigger": max_files}},
            }
        },
        "materializations": {
            name: {
                "endpoint": endpoint or {"sqlite": {"path": str(db_path)}},
                "shards": shards,
                "bindings": [{"source": "orders", "resource": {"table": "customers"}}],
                **(extra_mat or {}),
            }
        },
        "checkpoint": str(os.path.join(tmp, "checkpoints")),
    }
    path = os.path.join(tmp, "spec.yaml")
    with open(path, "w") as f:
        yaml.safe_dump(spec, f)
    return path


def postgres_spec(tmp, *, data_dir, url, schema, shards=1, max_files=1, name="view", **mat) -> str:
    """A spec file: the orders collection materialized into PostgreSQL ``schema.customers``
    (``mat``: more materialization settings)."""
    return orders_spec(
        tmp,
        data_dir=data_dir,
        db_path=None,
        shards=shards,
        max_files=max_files,
        name=name,
        endpoint={"postgres": {"url": url, "schema": schema}},
        extra_mat=mat,
    )


def table_documents(cur, key: str, json_columns=()) -> dict:
    """A view table's rows (a cursor of ``SELECT *``) as ``{key: document}`` (:func:`table_rows`)."""
    return {doc[key]: doc for doc in table_rows(cur, json_columns)}


SORTABLE_DATE_TIME = re.compile(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{6}Z")  # sortable_text's shape


def table_rows(cur, json_columns=()) -> list[dict]:
    """A view table's rows (a cursor of ``SELECT *``) as documents, in either form:
    the non-NULL columns (``json_columns`` parsed where read as text; by default a text that
    starts as a JSON array or object and is one; a date-time column as its instant's text:
    UTC, ``Z``), with the members of
    ``flow_document`` on top (the whole document, or a lean row's remainder).  A text of the
    fixed-width shape SQLite's lean date-time columns hold is read as the instant's text."""
    names = [d[0] for d in cur.description]
    out = []

    def value(k, v):
        if isinstance(v, dt.datetime):  # a date-time column: its instant's text (flow_document keeps another)
            return canonical_date_time(v if v.tzinfo else v.replace(tzinfo=dt.timezone.utc))
        if isinstance(v, str) and SORTABLE_DATE_TIME.fullmatch(v):  # SQLite's lean date-time column (and, in
            return from_sortable_text(v)  # a full row, text the document's own member then replaces)
        if isinstance(v, str) and (k in json_columns or json_columns == () and v[:1] in ("[", "{")):
            try:
                return json.loads(v)  # a JSON column read as text (SQLite)
            except ValueError:
                return v
        return v

    for r in cur.fetchall():
        row = dict(zip(names, r))
        doc = {k: value(k, v) for k, v in row.items() if v is not None and k not in ("flow_document", "flow_row_id")}
        rest = row.get("flow_document")
        if rest is not None:
            doc.update(json.loads(rest) if isinstance(rest, str) else rest)
        out.append(doc)
    return out


def lake_rows(rows, properties: dict) -> list[dict]:
    """A lake table's rows (an Arrow table of every column) as documents, read as a user
    would: the non-NULL columns (decimals as numbers, date-times as their instants' texts:
    UTC, ``Z``, the JSON columns the table's
    ``tidemark.leanColumns`` property names parsed), with the members of ``flow_document``
    on top (the whole document, or a lean row's remainder)."""
    from decimal import Decimal

    kinds = json.loads((properties or {}).get("tidemark.leanColumns") or "{}")
    json_columns = {n for n, k in kinds.items() if k == "json"}
    skip = ("flow_document", "flow_row_id", "_tidemark_delete")
    out = []
    for row in rows.to_pylist():
        doc = {}
        for k, v in row.items():
            if v is None or k in skip:
                continue
            if isinstance(v, Decimal):
                v = int(v) if v == v.to_integral_value() else float(v)
            elif isinstance(v, dt.datetime):  # a date-time column: its instant's text (flow_document keeps another)
                v = canonical_date_time(v)
            doc[k] = json.loads(v) if k in json_columns else v
        rest = row.get("flow_document")
        if rest is not None:
            doc.update(json.loads(rest))
        out.append(doc)
    return out


def lake_documents(rows, key: str, properties: dict) -> dict:
    """:func:`lake_rows` as ``{key: document}``; fails on a key held twice."""
    out: dict = {}
    for doc in lake_rows(rows, properties):
        assert doc[key] not in out, f"key {doc[key]!r} appears twice"
        out[doc[key]] = doc
    return out


def postgres_view(url, schema, table="customers", key="customer") -> dict:
    import psycopg

    with psycopg.connect(url) as con:
        return table_documents(con.execute(f'SELECT * FROM "{schema}"."{table}"'), key)


def sqlite_view(db_path, table="customers", key="customer", json_columns=()) -> dict:
    con = sqlite3.connect(db_path)
    try:
        return table_documents(con.execute(f'SELECT * FROM "{table}"'), key, json_columns)
    finally:
        con.close()


def normalize(view: dict) -> dict:
    """Drop bookkeeping fields the oracle does not model (e.g. _meta)."""
    out = {}
    for k, doc in view.items():
        d = {f: v for f, v in doc.items() if f != "_meta"}
        out[k] = d
    return out


def store_spec(tmp_path, data, shards: int, **config) -> str:
    """The orders spec with a store endpoint and ``resource: {name: customers}``."""
    import yaml

    path = orders_spec(
        tmp_path,
        data_dir=data,
        db_path=None,
        shards=shards,
        max_files=1,
        endpoint={"store": {"path": str(tmp_path / "store"), **config}},
    )
    with open(path) as f:
        spec = yaml.safe_load(f)
    spec["materializations"]["view"]["bindings"][0]["resource"] = {"name": "customers"}
    with open(path, "w") as f:
        yaml.safe_dump(spec, f)
    return path


def store_view(spec: str) -> dict:
    """A store view's documents by customer (read-committed)."""
    import tidemark

    with tidemark.open_view(spec, "customers") as view:
        return {key[0]: doc for key, doc in view.scan(ordered=False)}


def kafka_spec(tmp_path, data, shards: int, bootstrap: str, *, topic: str = "customers", **config) -> str:
    """The orders spec with a kafka endpoint and ``resource: {topic: TOPIC}``."""
    import yaml

    endpoint = {"kafka": {"bootstrap_servers": bootstrap, "state": str(tmp_path / "state"), **config}}
    path = orders_spec(tmp_path, data_dir=data, db_path=None, shards=shards, max_files=1, endpoint=endpoint)
    with open(path) as f:
        spec = yaml.safe_load(f)
    spec["materializations"]["view"]["bindings"][0]["resource"] = {"topic": topic, "partitions": 3}
    with open(path, "w") as f:
        yaml.safe_dump(spec, f)
    return path


def set_shards(spec_path: str, shards: int) -> None:
    """Change the shard count of the spec's one materialization."""
    import yaml

    with open(spec_path) as f:
        spec = yaml.safe_load(f)
    (mat,) = spec["materializations"].values()
    mat["shards"] = shards
    with open(spec_path, "w") as f:
        yaml.safe_dump(spec, f)


def kafka_view(bootstrap: str, topic: str = "customers") -> dict:
    """What a read_committed consumer ends with: the last document per customer (tombstones
    delete), read with a plain confluent-kafka consumer, not tidemark's reader."""
    from confluent_kafka import Consumer, TopicPartition
    from confluent_kafka.admin import AdminClient

    admin = AdminClient({"bootstrap.servers": bootstrap})
    parts = admin.list_topics(topic, timeout=10).topics[topic].partitions
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": f"oracle-{os.getpid()}-{random.random()}",
            "isolation.level": "read_committed",
            "enable.auto.commit": False,
            "enable.partition.eof": True,
            "fetch.wait.max.ms": 10,
        }
    )
    view, records = {}, []
    try:
        consumer.assign([TopicPartition(topic, p, 0) for p in parts])
        pending = set(parts)
        import time as _time

        deadline = _time.monotonic() + 30
        while pending and _time.monotonic() < deadline:
            for msg in consumer.consume(500, 0.05):
                if msg.error():
                    pending.discard(msg.partition())
                    continue
                key = tuple(json.loads(msg.key()))[0]
                headers = dict(msg.headers() or [])
                records.append((headers.get("tidemark-range"), headers.get("tidemark-sequence"), key))
                if msg.value() is None:
                    view.pop(key, None)
                else:
                    view[key] = json.loads(msg.value())
        assert not pending, f"read_committed did not reach the end of {sorted(pending)} (an open transaction?)"
    finally:
        consumer.close()
    from collections import Counter

    dupes = [r for r, n in Counter(records).items() if n > 1]
    assert not dupes, f"records of one committed transaction appear twice: {sorted(dupes)[:5]}"
    return view


def open_transactions(bootstrap: str) -> dict:
    """Partitions whose last stable offset is below the high watermark: an open transaction
    holds them ({(topic, partition): (lso, hw)}); empty when none lingers."""
    from confluent_kafka import IsolationLevel, TopicPartition
    from confluent_kafka.admin import AdminClient, OffsetSpec

    admin = AdminClient({"bootstrap.servers": bootstrap})
    md = admin.list_topics(timeout=10)
    parts = [TopicPartition(t, p) for t, info in md.topics.items() if not t.startswith("__") for p in info.partitions]
    out = {}
    if not parts:
        return out

    def offsets(level):
        futures = admin.list_offsets({tp: OffsetSpec.latest() for tp in parts}, isolation_level=level)
        return {(tp.topic, tp.partition): f.result(15).offset for tp, f in futures.items()}

    lso, hw = offsets(IsolationLevel.READ_COMMITTED), offsets(IsolationLevel.READ_UNCOMMITTED)
    for k in hw:
        if lso[k] < hw[k]:
            out[k] = (lso[k], hw[k])
    return out


# Every reduction compiles (no conditionals, no deletes): batches take the one-job plan.
COMPILED_SCHEMA = {
    "type": "object",
    "required": ["customer", "amount"],
    "reduce": {"strategy": "merge"},
    "properties": {
        "customer": {"type": "string"},
        "amount": {"type": "integer", "reduce": {"strategy": "sum"}},
        "largest": {"type": "integer", "reduce": {"strategy": "maximize"}},
        "city": {"type": "string", "reduce": {"strategy": "lastWriteWins"}},
        "items": {"type": "array", "items": {"type": "string"}, "reduce": {"strategy": "append"}},
    },
}
#: :data:`COMPILED_SCHEMA` with what real streams hold too: a nullable property (absent, null or
#: a string), an object of members of several types (each present or not, one summed, a date-time,
#: an exact decimal summed), and (in
#: the documents, see :func:`write_compiled_orders`) a property and a member the schema does not declare; still
#: compiled, reduced by SQL endpoints, lean (no typed rows: a typed row has no place for a null)
COMPILED_NULLABLE_SCHEMA = {
    **COMPILED_SCHEMA,
    "properties": {
        **COMPILED_SCHEMA["properties"],
        "note": {"type": ["string", "null"]},
        # order lines appended, objects of declared members (an undeclared one kept as written)
        "lines": {
            "type": "array",
            "reduce": {"strategy": "append"},
            "items": {"type": "object", "properties": {"sku": {"type": "string"}, "qty": {"type": "integer"}}},
        },
        "place": {
            "type": "object",
            "reduce": {"strategy": "merge"},
            "properties": {
                "door": {"type": "string"},
                "floor": {"type": "integer"},
                "visits": {"type": "integer", "reduce": {"strategy": "sum"}},
                "since": {"type": "string", "format": "date-time"},
                "fee": {"type": "number", "multipleOf": 0.01, "reduce": {"strategy": "sum"}},
                # carried as written, last written: a nullable member, a nested object
                "contact": {"type": ["string", "null"]},
                "geo": {"type": "object"},
                # an array member: each tag once, first seen first
                "tags": {"type": "array", "items": {"type": "string"}, "reduce": {"strategy": "union"}},
                # a merged object inside: its hits summed, its tier the greatest
                "spot": {
                    "type": "object",
                    "reduce": {"strategy": "merge"},
                    "properties": {
                        "hits": {"type": "integer", "reduce": {"strategy": "sum"}},
                        "tier": {"type": "integer", "reduce": {"strategy": "maximize"}},
                    },
                },
            },
        },
    },
}


def write_compiled_orders(
    directory,
    files: int,
    per_file: int,
    customers: int,
    seed: int,
    start: int = 0,
    nullable: bool = False,
    top_level: bool = True,
) -> list[str]:
    """Write ``files`` JSON-lines files of :data:`COMPILED_SCHEMA` documents (``nullable``: of
    :data:`COMPILED_NULLABLE_SCHEMA`; without ``top_level``, no ``note`` and no undeclared
    top-level property: only ``place`` added), named orders-NNNN.json from ``start`` on,
    modified in name order; return their paths."""
    draw = random.Random(seed)
    os.makedirs(directory, exist_ok=True)

    def docs():
        for _ in range(per_file):
            amount = draw.randrange(1, 500)
            doc = {
                "customer": f"c{draw.randrange(customers):04d}",
                "amount": amount,
                "largest": amount,
                "city": draw.choice(["Oslo", "Lima", "Accra"]),
                "items": [f"sku-{draw.randrange(9)}"],
            }
            if not nullable:
                yield json.dumps(doc)
                continue
            if draw.random() < 0.4:
                lines = [{"sku": "s1", "qty": 1}, {"sku": "ß", "qty": 2, "wrap": {"paper": "red"}}, {"qty": 3}]
                doc["lines"] = draw.sample(lines, draw.randrange(3))
            note = draw.choice(["absent", None, "gift"]) if top_level else "absent"
            if note != "absent":
                doc["note"] = note
            if draw.random() < 0.5:
                members = (
                    ("door", draw.choice("AB")),
                    ("floor", draw.randrange(4)),
                    ("visits", draw.randrange(1, 3)),
                    ("since", f"2024-05-01T{draw.randrange(24):02d}:00:00{draw.choice(['Z', '+05:30', '.25-04:00'])}"),
                    ("fee", draw.choice([draw.randrange(-999, 999) / 100, draw.randrange(9)])),
                    ("contact", draw.choice([None, "a@b", "c@d"])),
                    ("geo", draw.choice([{}, {"lat": 1.5, "tags": [None, "x"]}, {"lon": -2}])),
                    ("tags", [draw.choice(["x", "y", "é"]) for _ in range(draw.randrange(3))]),
                    ("spot", {m: draw.randrange(1, 5) for m in ("hits", "tier") if draw.random() < 0.6}),
                )
                doc["place"] = {k: v for k, v in members if draw.random() < 0.7}
                if draw.random() < 0.2:  # a member the schema does not declare: last written
                    doc["place"]["wing"] = draw.choice(["east", None, [1, 2]])
            if top_level and draw.random() < 0.2:  # undeclared (a field a producer added): last written
                doc["channel"] = draw.choice(["web", None, {"app": "ios", "v": [1, None]}])
            yield json.dumps(doc)

    return [write_input(directory, f, list(docs())) for f in range(start, start + files)]


def compiled_oracle(paths, skip=()) -> dict:
    """The view of :data:`COMPILED_SCHEMA` (or :data:`COMPILED_NULLABLE_SCHEMA`) folded here in
    Python, file by file and line by line, leaving out the (file index, line index) pairs in ``skip``."""
    view: dict = {}
    for i, path in enumerate(paths):
        with open(path) as f:
            for j, line in enumerate(f):
                if (i, j) in skip:
                    continue
                d = json.loads(line)
                cur = view.get(d["customer"])
                if cur is None:
                    view[d["customer"]] = d
                    continue
                cur["amount"] += d["amount"]
                cur["largest"] = max(cur["largest"], d["largest"])
                cur["city"] = d["city"]
                cur["items"] = cur["items"] + d["items"]
                if "note" in d:
                    cur["note"] = d["note"]
                if "lines" in d:  # appended
                    cur["lines"] = cur["lines"] + d["lines"] if "lines" in cur else d["lines"]
                if "place" in d:  # merged: each member last written, visits and fee summed (fee exactly)
                    place = {**cur.get("place", {}), **d["place"]}
                    if "visits" in d["place"] and "visits" in cur.get("place", {}):
                        place["visits"] = cur["place"]["visits"] + d["place"]["visits"]
                    if "fee" in d["place"] and "fee" in cur.get("place", {}):
                        place["fee"] = float(Decimal(repr(cur["place"]["fee"])) + Decimal(repr(d["place"]["fee"])))
                    if "tags" in d["place"] and "tags" in cur.get("place", {}):  # each once, first seen first
                        place["tags"] = list(dict.fromkeys(cur["place"]["tags"] + d["place"]["tags"]))
                    if "spot" in d["place"] and "spot" in cur.get(
                        "place", {}
                    ):  # merged: hits summed, tier the greatest
                        old, new = cur["place"]["spot"], d["place"]["spot"]
                        spot = {**old, **new}
                        if "hits" in old and "hits" in new:
                            spot["hits"] = old["hits"] + new["hits"]
                        if "tier" in old and "tier" in new:
                            spot["tier"] = max(old["tier"], new["tier"])
                        place["spot"] = spot
                    cur["place"] = place
                if "channel" in d:  # undeclared: last written
                    cur["channel"] = d["channel"]
    return view


def compiled_spec(tmp_path, data, db, shards: int = 2, nullable: bool = False, **mat) -> str:
    """A spec file: :data:`COMPILED_SCHEMA` (``nullable``: :data:`COMPILED_NULLABLE_SCHEMA`)
    from JSON files in ``data`` (one per batch) into SQLite ``db``; ``mat``: more
    materialization settings."""
    schema = COMPILED_NULLABLE_SCHEMA if nullable else COMPILED_SCHEMA
    return orders_spec(tmp_path, data_dir=data, db_path=db, shards=shards, extra_mat=mat, schema=schema)


def compiled_two_bindings_spec(tmp_path, db, returns_schema=None) -> str:
    """A spec file: two :data:`COMPILED_SCHEMA` collections (the second ``returns_schema``
    if given), from JSON files in ``tmp_path/a`` and ``tmp_path/b`` (one per batch), into
    SQLite ``db``'s tables ``customers`` and ``returns``, two shards."""
    import yaml

    source = lambda d: {"format": "json", "path": str(d), "options": {"maxFilesPerTrigger": 1}}
    spec = {
        "collections": {
            "orders": {"key": ["/customer"], "schema": COMPILED_SCHEMA, "source": source(tmp_path / "a")},
            "returns": {
                "key": ["/customer"],
                "schema": returns_schema or COMPILED_SCHEMA,
                "source": source(tmp_path / "b"),
            },
        },
        "materializations": {
            "view": {
                "endpoint": {"sqlite": {"path": str(db)}},
                "shards": 2,
                "bindings": [
                    {"source": "orders", "resource": {"table": "customers"}},
                    {"source": "returns", "resource": {"table": "returns"}},
                ],
            }
        },
        "checkpoint": str(tmp_path / "checkpoints"),
    }
    path = os.path.join(tmp_path, "spec.yaml")
    with open(path, "w") as f:
        yaml.safe_dump(spec, f)
    return path


def tiny_spec(folder, materialization: str = "m", checkpoint: str | None = None) -> str:
    """``folder/spec.yaml``: documents ``{id}`` from ``folder/data`` into SQLite ``v.db`` table
    ``t`` (the CLI tests that need a spec and no batch)."""
    import yaml

    os.makedirs(os.path.join(folder, "data"), exist_ok=True)
    spec: dict = {
        "collections": {
            "o": {
                "key": ["/id"],
                "schema": {"type": "object", "reduce": {"strategy": "merge"}, "properties": {"id": {"type": "string"}}},
                "source": {"path": "data"},
            }
        },
        "materializations": {
            materialization: {
                "endpoint": {"sqlite": {"path": "v.db"}},
                "bindings": [{"source": "o", "resource": {"table": "t"}}],
            }
        },
    }
    if checkpoint is not None:
        spec["checkpoint"] = checkpoint
    path = os.path.join(folder, "spec.yaml")
    with open(path, "w") as f:
        yaml.safe_dump(spec, f)
    return path


def assert_verified(spec_path: str, materialization: str = "view") -> None:
    """``tidemark verify`` of the view: equal to what its committed input reduces to."""
    from tidemark.runtime.verify import render, verify
    from tidemark.spec import load_spec

    result = verify(load_spec(spec_path), materialization)
    assert result.ok, "\n".join(render(result))
