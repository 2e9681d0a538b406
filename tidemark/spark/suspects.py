"""Native validation of a compiled plan: which documents Spark cannot prove valid.

Validation keywords checked natively: ``type``, ``required``, ``enum``, ``minimum`` /
``maximum`` (and exclusive forms), ``minLength`` / ``maxLength``,
``additionalProperties: false``, the ``format`` of a string property where it is one of
:data:`~tidemark.collection.plan.NATIVE_FORMATS` (``date-time``, ``date``, ``time``,
``uuid``, ``email``, ``ipv4``: :mod:`tidemark.spark.datetimes`), plus the key's presence and what
``from_json`` forgives (``null`` values, content after the document, a non-string read into
a string column, string array element or string map value, a lone surrogate escape): a
document is proved free of those by :func:`plain_document`, one scan of the text in the JVM
(``tidemark/spark/jvm``; a document it does not prove plain is a suspect).  Where that is
unavailable, two splits of the text and a look at the strings read prove flat documents
plain, and one regular expression checks the others.  Native validation is
*conservative*: it marks every document it cannot prove valid as a *suspect*; suspects
are re-validated with the Python validator, and if any of them is valid the batch takes
the Python fallback (so the compiled path never changes a result, it only makes the
common case fast).
"""

from __future__ import annotations

import re
from typing import Optional

from tidemark.collection.decimals import scale_of
from tidemark.collection.plan import NATIVE_FORMATS, CompiledPlan, checked_members, ordered_by_instant
from tidemark.spark.datetimes import FRACTION_DIGITS, date_time_parts, format_ok


def _present_count(plan: CompiledPlan, p):
    from pyspark.sql import functions as F

    out = F.lit(0)
    for f in plan.fields:
        out = out + F.when(p[f.name].isNotNull(), 1).otherwise(0)
    return out


def _undeclared(plan: CompiledPlan, value, p):
    """True where a document has more top-level properties than the declared ones it holds.

    Every property name is followed by exactly one ``:``, so a document with no more colons
    than declared properties present holds no other property (colons inside strings only
    over-count).  The others (nested values, colons in text) pay for a regular expression
    that finds a property name (at any depth) that is not a declared top-level one, and only
    those pay for ``json_object_keys``, which is exact.
    """
    from pyspark.sql import functions as F

    names = "|".join(re.escape(f.name) for f in plan.fields)
    other = f'[{{,]\\s*"(?!(?:{names})"\\s*:)(?:[^"\\\\]|\\\\.)*"\\s*:' if names else r'[{,]\s*"'
    present = _present_count(plan, p)
    exact = F.coalesce(F.size(F.json_object_keys(value)) > present, F.lit(True))
    return F.when(_count(value, ":") <= present, F.lit(False)).otherwise(value.rlike(other) & exact)


def suspect_regex(plan: CompiledPlan) -> str:
    """One regular expression for every textual check (one scan of the document, not one per check)."""
    alts = [
        r"[:\[,]\s*null\b",  # a null value: from_json reads it as absent
        r"\}\s*[^\s,\]\}]",  # after a closing brace only ",", "]" or "}" may follow (or the end)
        _LONE_SURROGATE,
    ]
    names: dict[str, list[str]] = {"string": [], "object": [], "array": []}
    for f in plan.fields:
        if f.kind == "scalar" and f.type == "string":
            names["string"].append(f.name)
        elif f.kind == "raw":
            names[f.type].append(f.name)
    for kind, first in (("string", '"'), ("object", "{"), ("array", r"\[")):
        if names[kind]:
            # from_json reads any JSON value into a string column: catch the wrong type textually
            alt = "|".join(re.escape(n) for n in names[kind])
            alts.append(f'"(?:{alt})"\\s*:\\s*[^{first}\\s]')
    string = r'"(?:[^"\\]|\\.)*"'
    arrays = [f.name for f in plan.fields if f.kind == "append" and f.type == "string"]
    if arrays:  # an element that is not a string, after any number of string elements
        alt = "|".join(re.escape(n) for n in arrays)
        alts.append(f'"(?:{alt})"\\s*:\\s*\\[(?:\\s*{string}\\s*,)*\\s*[^"\\s\\]]')
    maps = [f.name for f in plan.fields if f.kind == "map" and f.type == "string"]
    if maps:  # a map value that is not a string, after any number of string entries
        alt = "|".join(re.escape(n) for n in maps)
        alts.append(f'"(?:{alt})"\\s*:\\s*\\{{(?:\\s*{string}\\s*:\\s*{string}\\s*,)*\\s*{string}\\s*:\\s*[^"\\s]')
    if any(names.values()) or arrays or maps:
        alts.append(r'\\[^"]*"\s*:')  # an escaped property name would evade the checks above
    return "|".join(f"(?:{a})" for a in alts)


def _count(value, char: str):
    """How many times the text holds ``char`` (ASCII; ``replace`` searches bytes, which is
    several times faster than ``translate`` or a regular expression)."""
    from pyspark.sql import functions as F

    return F.octet_length(value) - F.octet_length(F.replace(value, F.lit(char), F.lit("")))


# A JSON number, as ``from_json`` writes a number it read into a string column.
_NUMBER = r"-?[0-9]+(?:\.[0-9]+)?(?:[eE][-+]?[0-9]+)?"
# In ``\x01``-joined array elements (nulls as ``\x02``): an element that was not a JSON string.
_TOKEN_ELEMENT = r"\x01(?:" + _NUMBER + r"|true|false|\[[^\x01]*\]|\{[^\x01]*\})\x01|\x02|\?"
# Half of a surrogate pair escaped alone: Spark's parser reads it as "?", Python keeps it
# (and it is not Unicode), so such a document is checked in Python.
_LONE_SURROGATE = (
    r"\\u[dD][89abAB][0-9a-fA-F]{2}(?!\\u[dD][c-fC-F][0-9a-fA-F]{2})"
    r"|(?<!\\u[dD][89abAB][0-9a-fA-F]{2})\\u[dD][c-fC-F][0-9a-fA-F]{2}"
)


def _token_like(c):
    """True where a string read by ``from_json`` may have been a number, boolean, array or
    object in the text (``from_json`` reads those into a string column as their JSON text,
    so such a value *is* that text: a whole JSON number, ``true``/``false``, or ``[...]`` /
    ``{...}``).  Only the first character is looked at unless it could start one."""
    from pyspark.sql import functions as F

    a = F.ascii(c)
    return (
        F.when(((a >= 48) & (a <= 57)) | (a == 45), c.rlike("^" + _NUMBER + "$"))
        .when(a == 91, c.endswith("]"))
        .when(a == 123, c.endswith("}"))
        .otherwise(c.isin("true", "false"))
    )


def _enum_excludes_tokens(schema: dict) -> bool:
    """True if the field's ``enum`` (checked in :func:`suspect_expr` for every document)
    already rejects whatever ``from_json`` could have made of a non-string or of a lone
    surrogate: no allowed value is a number's text, ``true`` / ``false``, ``[...]`` / ``{...}``
    or holds a ``?``."""
    if "enum" not in schema:
        return False
    return all(
        isinstance(v, str)
        and "?" not in v
        and not re.fullmatch(_NUMBER, v)
        and v not in ("true", "false")
        and not v.startswith(("[", "{"))
        for v in schema["enum"]
    )


def _occurrences_plus_one(value, char: str):
    """How many pieces ``char`` cuts the text into (its count + 1).  ``split`` by one
    character that is not special in a regular expression takes Java's fast path, which
    is cheaper than ``replace`` (a byte comparison call per position) or ``translate``."""
    from pyspark.sql import functions as F

    return F.size(F.split(value, char, -1))


def plain_document(plan: CompiledPlan, value, p, jvm_spec: Optional[str] = None):
    """True only where the text provably holds nothing that ``from_json`` forgave.

    Two splits of the text and a look at the strings that were read decide this for the
    common case (a flat document) at a fraction of the cost of a regular expression:

    * the text ends with its only ``}``: nothing after the document, no nested object;
    * as many ``:`` as declared properties were read: every property name in the text is
      a declared property that was read (so no ``null`` value, no undeclared or repeated
      property, escaped names included; a value ``from_json`` could not read as its
      declared type is read as null, so it shows here too);
    * no string that was read looks like what ``from_json`` makes of a number, boolean,
      array or object in a string column (:func:`_token_like`): every string value and
      string array element was a JSON string in the text (skipped for a field whose
      ``enum`` rejects all such values anyway: :func:`_enum_excludes_tokens`);
    * no ``null`` element in an array; raw objects and arrays start as such;
    * no ``?`` in a string read (what Spark makes of a lone surrogate escape).

    (Single quotes, comments, leading zeros and other non-JSON are rejected by the parser
    itself: :data:`JSON_OPTIONS`.)  Documents this cannot prove plain take the regular
    expression (:func:`suspect_regex`).

    With ``jvm_spec`` (:func:`tidemark.spark.jvm.spec`, in a session where
    :func:`tidemark.spark.jvm.available`), the same is proved by one scan of the text in the
    JVM (``PlainDocument.java``), which also proves documents with nested values plain: it
    counts the top-level properties of a document that holds only declared properties, each
    once, as tokens of their declared kinds, no ``null`` and no unpaired surrogate, and that
    count must equal the number of properties read.
    """
    from pyspark.sql import functions as F

    present = _present_count(plan, p)
    if jvm_spec is not None:
        from tidemark.spark import jvm

        scan = jvm_scan(value, jvm_spec)
        counted = scan.bitwiseAND(F.lit((1 << jvm.COUNT_BITS) - 1))
        return F.coalesce((scan >= F.lit(0)) & (counted == present), F.lit(False))
    ok = [
        value.endswith("}"),
        _occurrences_plus_one(value, "}") == F.lit(2),
        _occurrences_plus_one(value, ":") == present + F.lit(1),
    ]
    for f in plan.fields:
        c = p[f.name]
        if f.kind == "scalar" and f.type == "string":
            if not _enum_excludes_tokens(f.schema):
                ok.append(F.coalesce(~_token_like(c) & ~F.contains(c, F.lit("?")), F.lit(True)))
        elif f.kind == "raw":
            first = "[" if f.type == "array" else "{"
            ok.append(F.coalesce(c.startswith(first) & ~F.contains(c, F.lit("?")), F.lit(True)))
        elif f.kind == "append" and f.type == "string":
            joined = F.concat(F.lit("\u0001"), F.array_join(c, "\u0001", "\u0002"), F.lit("\u0001"))
            ok.append(F.coalesce(~joined.rlike(_TOKEN_ELEMENT), F.lit(True)))
        elif f.kind == "append":
            ok.append(F.coalesce(F.size(F.array_compact(c)) == F.size(c), F.lit(True)))
    out = ok[0]
    for c in ok[1:]:
        out = out & F.coalesce(c, F.lit(False))
    return F.coalesce(out, F.lit(False))


def undeclared_members(plan: CompiledPlan, value, plain, jvm_spec: Optional[str]):
    """The undeclared top-level properties of a plain document whose root carries them
    (:func:`tidemark.spark.jvm.carries_undeclared`), and the undeclared members of its merged
    objects that carry them (:func:`tidemark.spark.jvm.carries_members`): ``"name"`` U+0000
    value text (a member's name led by its object's index and U+0002), separated by U+0001
    (``UndeclaredMembers.java``, called only where the scan saw some); null elsewhere.  None where the plan does not carry them (without the JVM scan such a
    document is odd: :func:`extras_expr`)."""
    from pyspark.sql import functions as F

    from tidemark.spark import jvm

    if jvm_spec is None or not jvm.carries_any(plan):
        return None
    scan = jvm_scan(value, jvm_spec)
    some = plain & (F.shiftright(scan, jvm.UNDECLARED_BIT).bitwiseAND(F.lit(1)) == F.lit(1))
    return F.when(some, F.call_udf(jvm.UNDECLARED_FUNCTION, value, F.lit(jvm_spec)))


def jvm_scan(value, jvm_spec: str):
    """The JVM scan of a document (``PlainDocument``): a long, -1 where not plain, else the
    count of properties read and a bit per nullable property written ``null``
    (:data:`tidemark.spark.jvm.COUNT_BITS`)."""
    from pyspark.sql import functions as F

    from tidemark.spark import jvm

    return F.call_udf(jvm.FUNCTION, value, F.lit(jvm_spec))


def null_flags(plan: CompiledPlan, value, plain, jvm_spec: Optional[str]) -> dict:
    """{nullable property: a column true where the document is plain and writes it ``null``}
    (``from_json`` reads ``null`` as absent).  Without the JVM scan a document that writes
    ``null`` is never plain (:func:`suspect_regex` makes it a suspect, which the Python fold
    takes), so the flags are false."""
    from pyspark.sql import functions as F

    from tidemark.spark import jvm

    names = jvm.nullable_fields(plan)
    if jvm_spec is None:
        return {name: F.lit(False) for name in names}
    scan = jvm_scan(value, jvm_spec)
    return {
        name: plain & (F.shiftright(scan, jvm.COUNT_BITS + bit).bitwiseAND(F.lit(1)) == F.lit(1))
        for bit, name in enumerate(names)
    }


def suspect_expr(plan: CompiledPlan, value, p, plain, whole: bool = False, nulls: Optional[dict] = None):
    """True for every document native validation cannot prove valid (``plain``: the column
    of :func:`plain_document`, computed once per row by the caller).

    ``whole``: ``plain`` is the JVM proof, which covers everything about the text (a
    malformed document, trailing content, undeclared properties are never plain), so a
    document it does not prove plain is a suspect, with no regular expression, and ``p``
    has no corrupt-record column.  ``nulls``: :func:`null_flags` (a required nullable
    property written ``null`` is present).
    """
    from pyspark.sql import functions as F

    if whole:
        conds = [~plain, F.octet_length(value) > F.lit(plan.max_bytes)]
    else:
        trimmed = F.rtrim(value)
        conds = [
            p["_corrupt"].isNotNull(),
            F.octet_length(value) > F.lit(plan.max_bytes),
            F.when(value.endswith("}"), F.lit(False)).otherwise(~trimmed.endswith("}")),
            F.when(plain, F.lit(False)).otherwise(value.rlike(suspect_regex(plan))),
            # an extra "}" or "]" after the document (from_json stops at the end of the
            # first value): brackets that do not balance (those inside strings only
            # make a document a suspect, which the Python validator then clears)
            F.when(plain, F.lit(False)).otherwise(
                (_count(value, "{") != _count(value, "}")) | (_count(value, "[") != _count(value, "]"))
            ),
        ]
        if plan.closed:
            conds.append(F.when(plain, F.lit(False)).otherwise(_undeclared(plan, value, p)))
    for k in plan.key:
        conds.append(p[k].isNull())
    for r in plan.required:
        if r not in plan.key:  # a nullable one may be written null (``nulls``: null_flags)
            conds.append(p[r].isNull() & ~nulls[r] if nulls and r in nulls else p[r].isNull())
    ordered = ordered_by_instant(plan)
    for f in plan.fields:
        c = p[f.name]
        s = f.schema
        if f.kind == "scalar":
            if f.type == "number":
                conds.append(F.isnan(c) | (F.abs(c) == F.lit(float("inf"))))
            if f.scale is not None:  # multipleOf 10^-s: a value with more places is not one (or is unsure)
                conds.append(F.round(c, f.scale) != c)
            if "enum" in s:
                conds.append(~c.isin(*s["enum"]))
            for kw, op in (("minimum", "<"), ("maximum", ">"), ("exclusiveMinimum", "<="), ("exclusiveMaximum", ">=")):
                if kw in s:
                    bound = F.lit(s[kw])
                    conds.append({"<": c < bound, ">": c > bound, "<=": c <= bound, ">=": c >= bound}[op])
            if "minLength" in s:
                conds.append(F.char_length(c) < F.lit(s["minLength"]))
            if "maxLength" in s:
                conds.append(F.char_length(c) > F.lit(s["maxLength"]))
            if f.type == "string" and s.get("format") in NATIVE_FORMATS:
                if whole and s["format"] == "date-time":
                    continue  # proved, with its fraction's length, by the JVM scan (PlainDocument's ``d`` / ``D``)
                conds.append(_breaks_format(c, s["format"]))
                if s["format"] == "date-time" and f.name in ordered:
                    conds.append(F.length(date_time_parts(c)["fraction"]) > F.lit(FRACTION_DIGITS))
        elif (f.members or f.carried) and not whole:  # its members' types and names: proved by the JVM scan only
            conds.append(c.isNotNull())
        elif f.kind == "object":  # what the scan does not prove of a merged object's members
            conds += _member_checks(f, c)
        elif f.kind in ("append", "map") and f.type == "number":
            pass  # element NaN: rejected by allowNonNumericNumbers unless quoted; quoted strings fail the type
    out = conds[0]
    for c in conds[1:]:
        out = out | F.coalesce(c, F.lit(False))
    return F.coalesce(out, F.lit(True))


def _breaks_format(value, fmt: str):
    """True where the string ``value`` is present and may not have the format ``fmt``."""
    from pyspark.sql import functions as F

    return value.isNotNull() & ~F.coalesce(format_ok(value, fmt), F.lit(False))


def _member_checks(f, c) -> list:
    """Of a merged object ``c`` (parsed) whose member types, names and date-times the JVM scan
    proved: each exact decimal member holds no more places than its ``multipleOf`` allows, each
    member of another native format matches it."""
    from pyspark.sql import functions as F

    conds = []
    for part in f.members:
        value = c[part.member]
        if part.kind == "object":  # a merged object member: its own members so
            conds += _member_checks(part, value)
            continue
        if part.scale is not None:
            conds.append(F.round(value, part.scale) != value)
        fmt = part.schema.get("format")
        if part.type == "string" and fmt in NATIVE_FORMATS and fmt != "date-time":
            conds.append(_breaks_format(value, fmt))
    for part in checked_members(f):  # carried as written (nullable), its format or places checked here
        value = c[part.member]
        if part.type == "n":
            conds.append(F.round(value, scale_of(part.schema["multipleOf"])) != value)
        else:
            conds.append(_breaks_format(value, part.schema["format"]))
    return conds


def extras_expr(plan: CompiledPlan, value, p, plain, whole: bool = False):
    """True where a document has top-level properties the plan does not carry (with
    ``whole``, such a document is not plain, hence a suspect, and this is never true)."""
    from pyspark.sql import functions as F

    if whole or plan.closed or plan.root_strategy != "merge":
        return F.lit(False)
    return F.when(plain, F.lit(False)).otherwise(_undeclared(plan, value, p))
