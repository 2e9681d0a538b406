"""What a batch's combine returns (:class:`CombineResult`), and its invalid documents:
checked one by one in Python (:func:`check_document`), named by file and line
(:func:`locate`), and the batch's error that lists them (:func:`raise_invalid`).  Shared by
the compiled combine (:mod:`tidemark.spark.combine`) and the Python fold
(:mod:`tidemark.spark.fold`)."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any, Optional

from tidemark.collection.keys import key_json as py_key_json
from tidemark.errors import DocumentError


@dataclass
class CombineResult:
    combined: Any  # DataFrame[key_json string, key_hash long, doc string]
    invalid: Any = None  # DataFrame[location, key_json, reason, value] (quarantine) or None
    documents: int = 0
    path: str = "compiled"
    _cached: list = field(default_factory=list, repr=False)

    def unpersist(self) -> None:
        for df in self._cached:
            try:
                df.unpersist()
            except Exception:  # noqa: BLE001  # pragma: no cover - a stopped session
                pass
        self._cached.clear()


# ----------------------------------------------------------------------------- errors


MAX_REPORTED_INVALID = 20  # invalid documents named in one batch's error


def raise_invalid(df, bad, total: int) -> None:
    """Fail the batch with every invalid document (up to :data:`MAX_REPORTED_INVALID`), each
    as ``file:line key (...): rule``, the first one on the first line, then how many there
    are and the way to go on (``on_invalid: quarantine``).  ``bad``: rows (dicts) or a
    DataFrame of them (value, _file, _block, _row, reason, key_json), in source order."""
    spark = df.sparkSession
    schema = "value string, _file string, _block long, _row long, reason string, key_json string"
    if isinstance(bad, list):
        bad = spark.createDataFrame(bad[:MAX_REPORTED_INVALID], schema)
    else:
        bad = bad.orderBy("_file", "_block", "_row").limit(MAX_REPORTED_INVALID)
    located = locate(df, bad.select("value", "_file", "_block", "_row", "reason", "key_json")).collect()
    errors = []
    for r in located:
        key = tuple(json.loads(r["key_json"])) if r["key_json"] else None
        errors.append(DocumentError(r["reason"], location=r["location"], key=key))
    first = errors[0]
    shown = f" (the first {len(errors)} above)" if total > len(errors) else ""
    lines = (
        [str(errors[0])]
        + [f"  {e}" for e in errors[1:]]
        + [
            f"  {total} invalid document(s) in this batch{shown}; nothing of the batch was written. Fix them, or set "
            "`on_invalid: quarantine` on the materialization to set invalid documents aside and go on"
        ]
    )
    err = DocumentError("\n".join(lines), location=None)
    err.location, err.key, err.documents, err.total = first.location, first.key, errors, total
    raise err


def locate(df, bad):
    """Add ``location`` (``file:line``) to invalid rows (quarantine only: a window over the batch)."""
    from pyspark.sql import Window
    from pyspark.sql import functions as F

    lines = df.select(
        "_file",
        "_block",
        "_row",
        F.row_number().over(Window.partitionBy("_file").orderBy("_block", "_row")).alias("_line"),
    )
    joined = bad.join(lines, ["_file", "_block", "_row"], "left")
    path = F.regexp_replace(F.col("_file"), r"^file:(//)?", "")
    return (
        joined.select(
            F.concat(path, F.lit(":"), F.col("_line").cast("string")).alias("location"),
            "key_json",
            "reason",
            "value",
            "_file",
            "_block",
            "_row",
        )
        .orderBy("_file", "_block", "_row")
        .drop("_file", "_block", "_row")
    )


def check_document(collection, value: str) -> tuple[Optional[str], Optional[str], Any]:
    """(reason or None, key_json or None, doc) of one raw document, in Python."""
    try:
        doc = collection.parse(value, None)
    except DocumentError as exc:
        return str(exc), None, None
    key = None
    key_reason: Optional[str]
    try:
        key = py_key_json(collection.extract_key(doc))
    except DocumentError as exc:
        key_reason = str(exc)
    else:
        key_reason = None
    violations = collection.validate(doc)
    if violations:
        more = f" (and {len(violations) - 1} more)" if len(violations) > 1 else ""
        return f"document violates its schema: {violations[0]}{more}", key, doc
    if key_reason:
        return key_reason, None, doc
    return None, key, doc
