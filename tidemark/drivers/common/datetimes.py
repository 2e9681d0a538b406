"""A date-time held as its instant: the column of a lean row where the endpoint keeps
date-times as instants (PostgreSQL's ``timestamptz``, MariaDB's ``datetime(6)``, Delta's
``timestamp``, Iceberg's ``timestamptz``, SQLite's fixed-width UTC text: :func:`sortable_text`), and the row's remainder keeping the document's text where that instant
does not give it back.

The text an instant gives back (:func:`canonical_text`): UTC, ``Z``, the fraction's digits
(microseconds) without trailing zeros -- ``2024-05-01T12:00:00.5Z``.  Any other spelling
(another offset, ``.500``, more than six fraction digits, a leap second, ``t`` or ``z``) is
kept (:func:`keeps_text`).  Pure Python (no Spark).
"""

from __future__ import annotations

import datetime as dt
from typing import Any, Optional

from tidemark.collection.formats import civil_from_days, instant

EPOCH = dt.datetime(1970, 1, 1, tzinfo=dt.timezone.utc)
MICROSECONDS = 1_000_000  # in a second
_ONE_MICROSECOND = dt.timedelta(microseconds=1)


def micros(text: Any) -> Optional[int]:
    """The instant an RFC 3339 date-time names, in microseconds since 1970-01-01T00:00:00Z,
    as PostgreSQL reads it: rounded to the nearest microsecond (half to even), a leap second
    ``:60`` as the next minute's first second; None if ``text`` is not a date-time."""
    key = instant(text)
    if key is None:
        return None
    seconds, leap, fraction = key
    micro = int(fraction[:6].ljust(6, "0"))
    beyond = fraction[6:]  # no trailing zeros: "5" alone is exactly half a microsecond
    if beyond and (beyond[0] > "5" or (beyond[0] == "5" and (len(beyond) > 1 or micro % 2 == 1))):
        micro += 1
    return (seconds + 1 if leap else seconds) * MICROSECONDS + micro


def canonical_text(at: int) -> str:
    """The text of the instant ``at`` (microseconds since 1970-01-01T00:00:00Z) as a lean row
    gives it back: UTC, ``Z``, the fraction's digits without trailing zeros."""
    seconds, micro = divmod(at, MICROSECONDS)
    days, second_of_day = divmod(seconds, 86400)
    year, month, day = civil_from_days(days)
    hour, rest = divmod(second_of_day, 3600)
    minute, second = divmod(rest, 60)
    fraction = f"{micro:06d}".rstrip("0")
    return (
        f"{year:04d}-{month:02d}-{day:02d}T{hour:02d}:{minute:02d}:{second:02d}"
        + (f".{fraction}" if fraction else "")
        + "Z"
    )


def canonical_date_time(v: dt.datetime) -> str:
    """:func:`canonical_text` of a ``datetime`` (a naive one is UTC)."""
    aware = v if v.tzinfo is not None else v.replace(tzinfo=dt.timezone.utc)
    return canonical_text((aware - EPOCH) // _ONE_MICROSECOND)


def date_time_value(text: Any) -> tuple[Optional[int], bool]:
    """A date-time column's value for ``text``: its instant in microseconds (None: not a
    date-time), and whether the remainder keeps the text (the instant gives back another)."""
    moment = micros(text)
    return moment, moment is None or canonical_text(moment) != text


def sortable_text(text: Any) -> Optional[str]:
    """A date-time's instant as fixed-width UTC text, ``YYYY-MM-DDTHH:MM:SS.ffffffZ`` (the
    fraction cut to microseconds, a leap second as ``:59``): text that sorts as the instants
    do (SQLite's date-time column in a lean row); None if ``text`` is not a date-time."""
    key = instant(text)
    if key is None:
        return None
    seconds, _, fraction = key
    return canonical_text(seconds * MICROSECONDS)[:19] + "." + fraction[:6].ljust(6, "0") + "Z"


def from_sortable_text(column: str) -> str:
    """The text a :func:`sortable_text` value gives back: its instant's :func:`canonical_text`."""
    fraction = column[20:26].rstrip("0")
    return column[:19] + ("." + fraction if fraction else "") + "Z"


def readable_text(text: Any) -> Any:
    """A date-time's text as PostgreSQL reads it into its instant: a leap second (which it refuses
    with a fraction) as the text of the instant :func:`micros` gives it (the next minute's first
    second); any other text as it is."""
    if isinstance(text, str) and text[17:19] == "60":
        moment = micros(text)
        if moment is not None:
            return canonical_text(moment)
    return text


def keeps_text(text: Any) -> bool:
    """Whether a date-time's text is not the one its instant gives back (:func:`canonical_text`):
    another offset, trailing zeros, more than six fraction digits, a leap second, ``t`` or ``z``;
    or not a date-time at all."""
    return date_time_value(text)[1]


__all__ = [
    "EPOCH",
    "micros",
    "canonical_text",
    "canonical_date_time",
    "date_time_value",
    "sortable_text",
    "from_sortable_text",
    "keeps_text",
    "readable_text",
]
