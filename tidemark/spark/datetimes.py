"""Date-times and the asserted string formats as Spark expressions.

:func:`format_ok` is the grammar and ranges of :mod:`tidemark.collection.formats` (a leap
second is not proved: the document is a suspect); :func:`instant_order` orders date-time
strings by the instant they name, for ``minimize`` / ``maximize``.
"""

from __future__ import annotations

# Digits of a date-time's fraction that the Spark instant order compares (trailing zeros
# aside); a minimized / maximized date-time with more is a suspect.
FRACTION_DIGITS = 18

# The grammar of tidemark.collection.formats as Java regular expressions (``\z``: the very
# end; ``$`` would also match before a final line break).
_FORMAT_SHAPES = {
    "date-time": r"^[0-9]{4}-[0-9]{2}-[0-9]{2}[Tt][0-9]{2}:[0-9]{2}:[0-9]{2}(?:\.[0-9]+)?(?:[Zz]|[+-][0-9]{2}:[0-9]{2})\z",
    "date": r"^[0-9]{4}-[0-9]{2}-[0-9]{2}\z",
    "time": r"^[0-9]{2}:[0-9]{2}:[0-9]{2}(?:\.[0-9]+)?(?:[Zz]|[+-][0-9]{2}:[0-9]{2})\z",
    "uuid": r"^[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}\z",
    "ipv4": r"^(?:25[0-5]|2[0-4][0-9]|1[0-9][0-9]|[1-9]?[0-9])(?:\.(?:25[0-5]|2[0-4][0-9]|1[0-9][0-9]|[1-9]?[0-9])){3}\z",
    # a dot-atom local part and a host name (its length checked apart); a quoted local part or
    # an address literal is not proved here (a suspect: the Python validator decides)
    "email": r"^[A-Za-z0-9!#$%&'*+/=?^_`{|}~-]+(?:\.[A-Za-z0-9!#$%&'*+/=?^_`{|}~-]+)*"
    r"@[A-Za-z0-9](?:[A-Za-z0-9-]{0,61}[A-Za-z0-9])?(?:\.[A-Za-z0-9](?:[A-Za-z0-9-]{0,61}[A-Za-z0-9])?)*\z",
}


def _num(c, start: int, length: int):
    from pyspark.sql import functions as F

    return F.substring(c, start, length).try_cast("int")


def _date_ok(y, m, d):
    from pyspark.sql import functions as F

    leap = ((y % 4) == 0) & (((y % 100) != 0) | ((y % 400) == 0))
    days = (
        F.when(m == 2, F.when(leap, F.lit(29)).otherwise(F.lit(28)))
        .when(m.isin(4, 6, 9, 11), F.lit(30))
        .otherwise(F.lit(31))
    )
    return (m >= 1) & (m <= 12) & (d >= 1) & (d <= days)


def _time_parts(c, start: int):
    """Hour, minute, second, the offset's sign / hours / minutes (null for ``Z``) and the
    fraction's digits as written (trailing zeros too; empty if none) of a ``full-time`` that
    starts at ``start`` and runs to the end of ``c`` (whose shape was checked)."""
    from pyspark.sql import functions as F

    zulu = F.upper(F.substring(c, -1, 1)) == F.lit("Z")
    return {
        "hour": _num(c, start, 2),
        "minute": _num(c, start + 3, 2),
        "second": _num(c, start + 6, 2),
        "sign": F.when(~zulu, F.when(F.substring(c, -6, 1) == F.lit("-"), F.lit(-1)).otherwise(F.lit(1))),
        "offset_hour": F.when(~zulu, F.substring(c, -5, 2).try_cast("int")),
        "offset_minute": F.when(~zulu, F.substring(c, -2, 2).try_cast("int")),
        # the digits after the second's "." (none: ""), as written: substrings, no regular expression
        "fraction": F.when(
            F.substring(c, start + 8, 1) == F.lit("."),
            c.substr(F.lit(start + 9), F.length(c) - (start + 8) - F.when(zulu, F.lit(1)).otherwise(F.lit(6))),
        ).otherwise(F.lit("")),
    }


def _time_ok(t):
    """A full-time's ranges; a leap second (``:60``) is not proved (a suspect)."""
    from pyspark.sql import functions as F

    offset_ok = F.coalesce((t["offset_hour"] <= 23) & (t["offset_minute"] <= 59), F.lit(True))
    return (t["hour"] <= 23) & (t["minute"] <= 59) & (t["second"] <= 59) & offset_ok


def date_time_parts(c):
    parts = _time_parts(c, 12)
    parts.update(year=_num(c, 1, 4), month=_num(c, 6, 2), day=_num(c, 9, 2))
    return parts


def format_ok(c, fmt: str):
    """True where the string ``c`` provably has the format (:mod:`tidemark.collection.formats`);
    false or null where it may not (the document is then a suspect)."""
    from pyspark.sql import functions as F

    shape = c.rlike(_FORMAT_SHAPES[fmt])
    if fmt == "date":
        return shape & _date_ok(_num(c, 1, 4), _num(c, 6, 2), _num(c, 9, 2))
    if fmt == "time":
        return shape & _time_ok(_time_parts(c, 1))
    if fmt == "date-time":
        p = date_time_parts(c)
        return shape & _date_ok(p["year"], p["month"], p["day"]) & _time_ok(p)
    if fmt == "email":  # the local part at most 64 characters, the host name 253
        return (
            shape
            & (F.length(F.substring_index(c, "@", 1)) <= F.lit(64))
            & (F.length(F.substring_index(c, "@", -1)) <= F.lit(253))
        )
    return shape


def _days_from_civil(y, m, d):
    """:func:`tidemark.collection.formats.days_from_civil` as a Spark expression (long)."""
    from pyspark.sql import functions as F

    def fdiv(a, b: int):
        return F.floor(a / F.lit(b)).cast("long")

    y2 = (y - F.when(m <= 2, F.lit(1)).otherwise(F.lit(0))).cast("long")
    era = fdiv(y2, 400)
    yoe = y2 - era * 400
    doy = fdiv(F.lit(153) * (m + F.when(m > 2, F.lit(-3)).otherwise(F.lit(9))) + 2, 5) + d - 1
    doe = yoe * 365 + fdiv(yoe, 4) - fdiv(yoe, 100) + doy
    return era * 146097 + doe - 719468


def instant_parts(c):
    """The instant a valid date-time string ``c`` names, as two longs: the seconds since the
    epoch with the offset applied, and the fraction's digits padded to
    :data:`FRACTION_DIGITS` (trailing zeros order as the padding does).  Computed once per
    row where the combine stages its columns (:func:`tidemark.spark.combine._build_columns`):
    inside an aggregate the same arithmetic ran per aggregate, outside generated code."""
    from pyspark.sql import functions as F

    p = date_time_parts(c)
    offset = F.coalesce(p["sign"] * (p["offset_hour"] * 60 + p["offset_minute"]), F.lit(0))
    seconds = (
        _days_from_civil(p["year"], p["month"], p["day"]) * 86400
        + p["hour"] * 3600
        + p["minute"] * 60
        + p["second"]
        - offset * 60
    )
    fraction = F.rpad(p["fraction"], FRACTION_DIGITS, "0").try_cast("long")
    return seconds, fraction


def order_of_instant(seconds, fraction, maximize: bool):
    """The struct that orders instants (:func:`instant_parts`) ascending for ``maximize`` and
    descending for ``minimize``."""
    from pyspark.sql import functions as F

    if maximize:
        return F.struct(seconds.alias("s"), fraction.alias("f"))
    return F.struct((-seconds).alias("s"), (-fraction).alias("f"))


def instant_order(c, maximize: bool):
    """A struct that orders valid date-times (no leap second, at most
    :data:`FRACTION_DIGITS` fraction digits: the others are suspects) by the instant they name,
    ascending for ``maximize`` and descending for ``minimize`` (so that ``max_by`` over it and
    the source order picks the rightmost of the extreme values, as the Python reducer does)."""
    seconds, fraction = instant_parts(c)
    return order_of_instant(seconds, fraction, maximize)
