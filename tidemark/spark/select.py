"""A source's ``select:``: Spark SQL expressions over its documents, in the spec.

``source: {path: data, select: ["*", "1 AS n", "struct(ts, status) AS last"]}`` derives fields
without a change upstream (a count needs a field that is 1 in every document; a ``{ts,
status}`` pair needs reshaping).  Each document is parsed into one column per top-level
property of the collection's schema (typed as the schema types it: strings, integers as
``bigint``, numbers as ``double``, booleans; objects, arrays and untyped properties as
``VARIANT``), the expressions run over those columns (``*``: all of them), and each row's
result is the document the collection validates, reduces and materializes.  A line that
is not JSON stays as it is (the run names it, its file and line).  Properties the schema does
not declare are not seen by the expressions (and are not in the result).

:func:`check_select` analyzes the expressions without reading a file (``tidemark check``,
and every run before its query starts); an error names the expression and Spark's reason.
"""

from __future__ import annotations

from typing import Any, Sequence

from tidemark.errors import SpecError

CORRUPT = "__tidemark_corrupt"
ORIGINAL = "__tidemark_line"
SCALAR_TYPES = {"string": "STRING", "integer": "BIGINT", "number": "DOUBLE", "boolean": "BOOLEAN"}
TO_JSON_OPTIONS = {
    "timestampFormat": "yyyy-MM-dd'T'HH:mm:ss.SSSSSSXXX",
    "timestampNTZFormat": "yyyy-MM-dd'T'HH:mm:ss.SSSSSS",
}


def properties(schema: Any) -> list[tuple[str, str]]:
    """(name, Spark SQL type) of each top-level property; ``VARIANT`` for JSON values."""
    props = (schema or {}).get("properties") if isinstance(schema, dict) else None
    out = []
    for name, sub in (props or {}).items():
        t = sub.get("type") if isinstance(sub, dict) else None
        if isinstance(t, list):
            rest = [x for x in t if x != "null"]
            t = rest[0] if len(rest) == 1 else None
        out.append((name, SCALAR_TYPES.get(t, "VARIANT") if isinstance(t, str) else "VARIANT"))
    return out


def _quote(name: str) -> str:
    return "`" + name.replace("`", "``") + "`"


def expressions(select: Sequence[str], names: Sequence[str]) -> list[str]:
    """The expressions, ``*`` standing for every property's column."""
    out: list[str] = []
    for expr in select:
        if expr.strip() == "*":
            out.extend(_quote(n) for n in names)
        else:
            out.append(expr)
    return out


def parsed(df, schema: Any, keep: Sequence[str] = ()):
    """``df``'s ``value`` parsed into one column per property (plus ``keep`` and the line)."""
    from pyspark.sql import functions as F

    props = properties(schema)
    ddl = ", ".join(f"{_quote(n)} {'STRING' if t == 'VARIANT' else t}" for n, t in props)
    ddl = (ddl + ", " if ddl else "") + f"{_quote(CORRUPT)} STRING"
    doc = F.from_json(F.col("value"), ddl, {"mode": "PERMISSIVE", "columnNameOfCorruptRecord": CORRUPT})
    staged = df.select(F.col("value").alias(ORIGINAL), doc.alias("__tidemark_doc"), *keep)
    cols = [
        (F.try_parse_json(F.col("__tidemark_doc")[n]) if t == "VARIANT" else F.col("__tidemark_doc")[n]).alias(n)
        for n, t in props
    ]
    return staged.select(ORIGINAL, (F.col("__tidemark_doc")[CORRUPT].isNotNull()).alias(CORRUPT), *cols, *keep), [
        n for n, _ in props
    ]


def apply_select(df, collection_spec, select: Sequence[str]):
    """``df`` (``value`` and the source's order columns) with each document replaced by the
    result of ``select`` over it."""
    from pyspark.sql import functions as F

    keep = [c for c in df.columns if c != "value"]
    columns, names = parsed(df, collection_spec.schema, keep)
    exprs = expressions(select, names)
    out = columns.selectExpr(*exprs, ORIGINAL, CORRUPT, *keep)
    names_out = out.columns
    n = len(names_out) - 2 - len(keep)
    # a name given twice (``*, 1 AS n`` where the schema has n): the later one, as in a JSON
    # object; by position, since Spark keeps both
    last = {name: i for i, name in enumerate(names_out[:n])}
    out = out.toDF(*[f"__tidemark_c{i}" for i in range(n)], *names_out[n:])
    value = F.when(F.col(CORRUPT), F.col(ORIGINAL)).otherwise(
        F.to_json(F.struct(*[F.col(f"__tidemark_c{i}").alias(name) for name, i in last.items()]), TO_JSON_OPTIONS)
    )
    return out.select(value.alias("value"), *keep)


def check_select(spark, collection_spec, select: Sequence[str], *, file=None, path: str = "") -> None:
    """Analyze each expression over an empty frame of the collection's columns; raise a
    :class:`SpecError` naming the first that Spark refuses, and why."""
    from pyspark.sql.types import StringType, StructField, StructType

    empty = spark.createDataFrame([], StructType([StructField("value", StringType())]))
    columns, names = parsed(empty, collection_spec.schema)
    for i, expr in enumerate(select):
        if not isinstance(expr, str) or not expr.strip():
            raise SpecError("must be a Spark SQL expression, e.g. '1 AS n'", file=file, path=f"{path}[{i}]")
        try:
            columns.selectExpr(*expressions([expr], names))
        except Exception as exc:  # noqa: BLE001 - Spark's parse and analysis errors, named to the user
            reason = next((line.strip() for line in str(exc).splitlines() if line.strip()), type(exc).__name__)
            reason = reason.split("; line ")[0].split(" SQLSTATE")[0]
            raise SpecError(
                f"{expr!r} is not an expression over the collection's properties: {reason}",
                file=file,
                path=f"{path}[{i}]",
            ) from None
