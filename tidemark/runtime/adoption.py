"""Adopting an existing table as a view's starting state (``tidemark adopt``), without Spark.

A view normally starts empty and reduces its source from the beginning.  Adopting starts it
from the rows of a table that already exists (a hand-written ``foreachBatch`` upsert's):

1. :func:`read_documents` reads the rows through the endpoint's driver
   (:meth:`~tidemark.drivers.base.Driver.read_rows`), turns each into a document (a
   ``flow_document`` column as it is, else one property per column), and checks every one
   against the collection's schema and key, one row per key.  The first bad rows are named
   and nothing is written.
2. The documents go to ``<checkpoint>/adopt/rows-<binding>.jsonl`` and the intent to
   ``<checkpoint>/adopt/adopt.json`` (:class:`AdoptRecord`), with ``since``: the source
   files modified up to then are what the table already holds.
3. Batch 0 of the view is the adopted documents, with whatever the source holds beyond
   ``since`` reduced on top (Spark's batch 0 reads every file there is, once: its file-source
   log records them as read, so later runs read only newer files).  Batch 0 goes through the
   commit path like any other: exactly once, and a kill anywhere leaves either nothing or
   the whole batch in the endpoint.
4. When Spark has recorded batch 0, the record says ``done``.

While a record is not ``done``, ``run`` (and ``check``) refuse the view, naming ``tidemark
adopt``: a run would read batch 0 as a plain batch, without the table's rows.  ``adopt`` again
with the same ``--from`` finishes it from the recorded rows.
"""

from __future__ import annotations

import base64
import datetime as _dt
import decimal
import json
import os
import time
import uuid
from dataclasses import asdict, dataclass, field
from typing import Any, Iterable, Optional

from tidemark.collection.collection import Collection
from tidemark.collection.keys import compact_json, key_json
from tidemark.errors import DocumentError, RecoveryError, SpecError, reset_hint
from tidemark.files import write_atomically
from tidemark.protocol.messages import Doc, JsonObject

ADOPT_DIR = "adopt"
RECORD = "adopt.json"
DOCUMENT_COLUMN = "flow_document"
TIDEMARK_COLUMNS = frozenset((DOCUMENT_COLUMN, "flow_row_id"))  # not properties, in a table tidemark made
MAX_REPORTED = 5  # bad rows named in a refusal


@dataclass
class AdoptedBinding:
    binding: int  # its index in the materialization
    resource: str  # the binding's resource, as the spec names it
    source: str  # --from: the table or query the rows came from
    rows: int = 0
    file: str = ""  # the documents, one JSON text a line (relative to the adopt folder)


@dataclass
class AdoptRecord:
    materialization: str
    since: float  # source files modified up to then are what the adopted table holds
    bindings: list[AdoptedBinding] = field(default_factory=list)
    started: float = 0.0
    done: bool = False
    token: str = ""

    def describe(self) -> str:
        src = ", ".join(f"{b.resource} from {b.source!r} ({b.rows} rows)" for b in self.bindings)
        return f"{src}; input up to {stamp(self.since)}"


def stamp(t: float) -> str:
    return _dt.datetime.fromtimestamp(t, _dt.timezone.utc).isoformat(timespec="seconds").replace("+00:00", "Z")


def folder(checkpoint_location: str) -> str:
    return os.path.join(checkpoint_location, ADOPT_DIR)


def read_record(checkpoint_location: str) -> Optional[AdoptRecord]:
    if "://" in checkpoint_location:
        return None
    path = os.path.join(folder(checkpoint_location), RECORD)
    try:
        with open(path, encoding="utf-8") as f:
            raw = json.load(f)
    except FileNotFoundError:
        return None
    return AdoptRecord(
        raw["materialization"],
        float(raw["since"]),
        [AdoptedBinding(**b) for b in raw.get("bindings", [])],
        float(raw.get("started", 0)),
        bool(raw.get("done")),
        raw.get("token", ""),
    )


def write_record(checkpoint_location: str, record: AdoptRecord) -> None:
    d = folder(checkpoint_location)
    os.makedirs(d, exist_ok=True)
    write_atomically(os.path.join(d, RECORD), (json.dumps(asdict(record), indent=1) + "\n").encode("utf-8"))


def seed(record: AdoptRecord, location: str, to: str, materialization: str) -> AdoptRecord:
    """A rebuild of an adopted view (:mod:`tidemark.runtime.rebuild`): the adopted rows, copied
    into the shadow's checkpoint folder ``to`` as an adopt of ``materialization`` that has not
    run yet -- the shadow's batch 0 is those rows with the input after ``since`` on top, as the
    live view's was."""
    import shutil

    os.makedirs(folder(to), exist_ok=True)
    for b in record.bindings:
        shutil.copyfile(os.path.join(folder(location), b.file), os.path.join(folder(to), b.file))
    new = AdoptRecord(materialization, record.since, list(record.bindings), time.time(), False, uuid.uuid4().hex)
    write_record(to, new)
    return new


def refuse_unfinished(materialization: str, checkpoint_location: str) -> None:
    """A view whose adopt did not finish is not run: its batch 0 must be the adopted rows."""
    record = read_record(checkpoint_location)
    if record is not None and not record.done:
        sources = " ".join(
            f"--from {b.source!r}" if len(record.bindings) == 1 else f"--from {b.resource}={b.source!r}"
            for b in record.bindings
        )
        raise RecoveryError(
            f"materialization {materialization!r}: its adopt ({record.describe()}) did not finish, so the view does "
            f"not hold the adopted rows yet. Finish it with `tidemark adopt SPEC -m {materialization} {sources}` "
            f"(it goes on from the recorded rows), or start over with {reset_hint(materialization)}. Nothing was "
            "changed"
        )


# ----------------------------------------------------------------------------- rows -> documents
def _property_schemas(schema: Any) -> dict[str, Any]:
    props = schema.get("properties") if isinstance(schema, dict) else None
    return props if isinstance(props, dict) else {}


def _types(node: Any) -> set[str]:
    t = node.get("type") if isinstance(node, dict) else None
    return {t} if isinstance(t, str) else set(t or ())


def json_value(value: Any, node: Any = None) -> Any:
    """A client library's value as the JSON value of a document property (``node``: the
    property's schema, where the collection has one)."""
    types = _types(node)
    if value is None or isinstance(value, (bool, str)):
        if isinstance(value, str) and types & {"object", "array"} and not types & {"string"}:
            try:
                return json.loads(value)  # a JSON column read as text (MySQL, SQLite)
            except ValueError:
                return value
        return value
    if isinstance(value, int):
        if types == {"boolean"} and value in (0, 1):
            return bool(value)  # MySQL's BOOLEAN is TINYINT(1)
        return value
    if isinstance(value, float):
        return int(value) if value.is_integer() and "integer" in types and "number" not in types else value
    if isinstance(value, decimal.Decimal):
        if value == value.to_integral_value() and ("integer" in types or not types & {"number"}):
            return int(value)
        return float(value)
    if isinstance(value, _dt.datetime):
        if value.tzinfo is None:  # a timestamp without time zone: read as UTC
            value = value.replace(tzinfo=_dt.timezone.utc)
        return value.isoformat().replace("+00:00", "Z")
    if isinstance(value, (_dt.date, _dt.time)):
        return value.isoformat()
    if isinstance(value, (bytes, bytearray, memoryview)):
        return base64.b64encode(bytes(value)).decode("ascii")
    if isinstance(value, dict):
        props = _property_schemas(node)
        return {str(k): json_value(v, props.get(str(k))) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        items = node.get("items") if isinstance(node, dict) else None
        return [json_value(v, items) for v in value]
    return str(value)  # UUID, IP addresses, intervals: their text


def row_document(row: dict[str, Any], schema: JsonObject) -> Doc:
    """One row as a document: one property per non-NULL column (a column matches a property
    case-insensitively, as SQL folds unquoted names), with the members of its
    ``flow_document`` on top where it has one (a table tidemark wrote: the whole document,
    or in a lean row what no column holds)."""
    doc = row.get(DOCUMENT_COLUMN)
    if doc is not None:
        doc = json.loads(doc) if isinstance(doc, (str, bytes)) else json_value(doc)
        if DOCUMENT_COLUMN in row and not isinstance(doc, dict):
            return doc
    props = _property_schemas(schema)
    folded = {k.lower(): k for k in props}
    out = {}
    for col, value in row.items():
        if value is None or (doc is not None or DOCUMENT_COLUMN in row) and col in TIDEMARK_COLUMNS:
            continue
        name = col if col in props else folded.get(col.lower(), col)
        out[name] = json_value(value, props.get(name))
    if doc is not None:
        out.update(doc)
    return out


def names_hint(columns: list[str], schema: JsonObject, source: str) -> str:
    """Where the rows' columns and the schema's properties do not match by name: both lists,
    and the ``--from`` query that renames columns (empty when every column matches)."""
    if DOCUMENT_COLUMN in columns:
        return ""
    props = _property_schemas(schema)
    folded = {k.lower(): k for k in props}
    matched = {c if c in props else folded.get(c.lower()) for c in columns} - {None}
    unmatched = [c for c in columns if c not in props and c.lower() not in folded]
    missing = [p for p in props if p not in matched]
    if not unmatched or not missing:
        return ""
    example = ", ".join(f"{u} AS {m}" for u, m in zip(unmatched, missing))
    table = source if " " not in source.strip() else "..."
    return (
        f". Columns that match no property of the schema: {', '.join(unmatched)}; properties no column "
        f'gives: {", ".join(missing)}. Rename them in a query: --from "SELECT *, {example} FROM {table}"'
    )


def read_documents(rows: Iterable[dict[str, Any]], collection: Collection, source: str, resource: str) -> list[str]:
    """The rows as documents (compact JSON), checked: each valid under the collection's
    schema and one per key.  Raises :class:`DocumentError` naming the first bad rows."""
    texts: list[str] = []
    seen: dict[str, int] = {}
    bad: list[str] = []
    columns: list[str] = []  # the first row's columns (for a hint on names that do not match)
    n = 0
    for n, row in enumerate(rows, 1):
        if n == 1:
            columns = list(row)
        try:
            doc = row_document(row, collection.schema)
            key = key_json(collection.extract_key(doc, f"row {n}"))
        except (DocumentError, ValueError, TypeError) as exc:
            text = str(exc)
            bad.append(text if text.startswith(f"row {n}:") else f"row {n}: {text}")
            if len(bad) >= MAX_REPORTED:
                break
            continue
        violations = collection.validate(doc)
        if violations:
            bad.append(f"row {n} (key {key}): {violations[0]}")
        elif key in seen:
            bad.append(
                f"rows {seen[key]} and {n} both hold key {key}: a view has one document per key; "
                "reduce them in a --from query (GROUP BY the key)"
            )
        else:
            seen[key] = n
            texts.append(compact_json(doc))
        if len(bad) >= MAX_REPORTED:
            break
    if bad:
        more = " (and maybe more)" if len(bad) >= MAX_REPORTED else ""
        raise DocumentError(
            f"adopt {resource} from {source!r}: {len(bad)} row(s) do not fit collection {collection.name!r}{more}; "
            "nothing was written" + names_hint(columns, collection.schema, source) + ":\n  " + "\n  ".join(bad)
        )
    if n == 0:
        log_empty = f"adopt {resource} from {source!r}: it holds no rows"
        raise SpecError(f"{log_empty}; a view with nothing to adopt starts with `tidemark run`")
    return texts


def write_rows(checkpoint_location: str, binding: int, texts: list[str]) -> str:
    name = f"rows-{binding}.jsonl"
    d = folder(checkpoint_location)
    os.makedirs(d, exist_ok=True)
    write_atomically(os.path.join(d, name), "".join(t + "\n" for t in texts).encode("utf-8"))
    return name


def parse_since(text: Optional[str]) -> Optional[float]:
    """``--since``: an RFC 3339 time (``2026-11-27T08:00:00Z``; no offset: UTC) or seconds since
    the epoch; None: now."""
    if text is None or text == "":
        return None
    try:
        return float(text)
    except ValueError:
        pass
    try:
        t = _dt.datetime.fromisoformat(text.replace("Z", "+00:00").replace("z", "+00:00"))
    except ValueError:
        raise SpecError(
            f"--since {text!r} is not a time: give RFC 3339 (2026-11-27T08:00:00Z) or epoch seconds"
        ) from None
    if t.tzinfo is None:
        t = t.replace(tzinfo=_dt.timezone.utc)
    return t.timestamp()


def new_record(materialization: str, since: Optional[float]) -> AdoptRecord:
    now = time.time()
    return AdoptRecord(materialization, now if since is None else since, [], now, False, uuid.uuid4().hex)


__all__ = [
    "AdoptRecord",
    "AdoptedBinding",
    "read_record",
    "write_record",
    "refuse_unfinished",
    "read_documents",
    "row_document",
    "json_value",
    "write_rows",
    "parse_since",
    "new_record",
    "folder",
]
