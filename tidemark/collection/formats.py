"""The ``format`` values tidemark asserts, and ``date-time`` values as instants.

JSON Schema draft 2020-12 makes ``format`` an annotation by default.  tidemark asserts
the formats in :data:`ASSERTED` instead: a string that does not match is a schema
violation, reported like any other (``/ts: 'yesterday' is not a 'date-time'``).  Every
other ``format`` value stays an annotation.  A format applies to strings only; other
types pass it.

============ ===========================================================================
date-time    RFC 3339 ``date-time``: ``2024-05-01T10:00:00Z``, ``…T10:00:00.25+02:00``
             (``T`` / ``Z`` in either case; an offset is required; a leap second
             ``:60`` only where the time is 23:59 in UTC)
date         RFC 3339 ``full-date``: ``2024-05-01`` (a day that exists)
time         RFC 3339 ``full-time``: ``10:00:00Z``, ``23:59:60.5-01:00``
uuid         RFC 9562 string form: 8-4-4-4-12 hexadecimal digits, either case
email        ``local@domain``: a dot-atom or quoted-string local part (at most 64
             characters) and a host name (labels of letters, digits and hyphens) or an
             address literal (``[192.0.2.1]``, ``[IPv6:2001:db8::1]``); ASCII only
ipv4         dotted quad, no leading zeros: ``192.0.2.1``
ipv6         RFC 4291 text form (``::``, an embedded IPv4 address), no zone index
============ ===========================================================================

Digits are ASCII digits.  These functions are the only definition: the ``jsonschema``
and ``jsonschema-rs`` validators both call them (:func:`tidemark.collection.validate`),
and the Spark-compiled checks either prove a value matches the same grammar or hand the
document to them (:mod:`tidemark.spark.suspects`, :mod:`tidemark.spark.datetimes`).

:func:`instant` orders ``date-time`` values by the instant they name, which is what
``minimize`` / ``maximize`` compare on a ``date-time`` location.

Pure Python (no Spark): executors import it.
"""

from __future__ import annotations

import ipaddress
import re
from typing import Any, Callable, Optional

# RFC 3339 section 5.6 (digits are ASCII: ``\d`` would also match other scripts' digits).
_DATE = r"([0-9]{4})-([0-9]{2})-([0-9]{2})"
_TIME = r"([0-9]{2}):([0-9]{2}):([0-9]{2})(?:\.([0-9]+))?(?:([Zz])|([+-])([0-9]{2}):([0-9]{2}))"
DATE_RE = re.compile(_DATE)
TIME_RE = re.compile(_TIME)
DATE_TIME_RE = re.compile(_DATE + "[Tt]" + _TIME)
UUID_RE = re.compile(r"[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}")
_OCTET = r"(?:25[0-5]|2[0-4][0-9]|1[0-9][0-9]|[1-9]?[0-9])"
IPV4_RE = re.compile(rf"{_OCTET}(?:\.{_OCTET}){{3}}")
_ATEXT = r"[A-Za-z0-9!#$%&'*+/=?^_`{|}~-]"
_LOCAL_RE = re.compile(rf'{_ATEXT}+(?:\.{_ATEXT}+)*|"(?:[\x20\x21\x23-\x5b\x5d-\x7e]|\\[\x20-\x7e])*"')
_LABEL_RE = re.compile(r"[A-Za-z0-9](?:[A-Za-z0-9-]{0,61}[A-Za-z0-9])?")


def _days_in_month(year: int, month: int) -> int:
    if month == 2:
        return 29 if year % 4 == 0 and (year % 100 != 0 or year % 400 == 0) else 28
    return 30 if month in (4, 6, 9, 11) else 31


def days_from_civil(year: int, month: int, day: int) -> int:
    """Days since 1970-01-01 of a proleptic Gregorian date (H. Hinnant's algorithm)."""
    y = year - (month <= 2)
    era = y // 400
    yoe = y - era * 400
    doy = (153 * (month + (-3 if month > 2 else 9)) + 2) // 5 + day - 1
    doe = yoe * 365 + yoe // 4 - yoe // 100 + doy
    return era * 146097 + doe - 719468


def civil_from_days(days: int) -> tuple[int, int, int]:
    """The proleptic Gregorian (year, month, day) ``days`` after 1970-01-01 (the inverse of
    :func:`days_from_civil`)."""
    since_0000_03_01 = days + 719468  # the algorithm's era starts on 1 March (yoe, doy, doe: as above)
    era = since_0000_03_01 // 146097
    doe = since_0000_03_01 - era * 146097
    yoe = (doe - doe // 1460 + doe // 36524 - doe // 146096) // 365
    doy = doe - (365 * yoe + yoe // 4 - yoe // 100)
    month_from_march = (5 * doy + 2) // 153
    day = doy - (153 * month_from_march + 2) // 5 + 1
    month = month_from_march + 3 if month_from_march < 10 else month_from_march - 9
    return yoe + era * 400 + (month <= 2), month, day


def _date_ok(y: str, m: str, d: str) -> bool:
    month = int(m)
    return 1 <= month <= 12 and 1 <= int(d) <= _days_in_month(int(y), month)


def _time_offset(g: tuple) -> Optional[int]:
    """The offset in minutes east of UTC of a matched ``full-time``, or None if a field is
    out of range (a leap second must fall on 23:59 UTC)."""
    h, mi, s, _frac, z, sign, oh, om = g
    hour, minute, second = int(h), int(mi), int(s)
    if hour > 23 or minute > 59 or second > 60:
        return None
    offset = 0
    if not z:
        if int(oh) > 23 or int(om) > 59:
            return None
        offset = (int(oh) * 60 + int(om)) * (-1 if sign == "-" else 1)
    if second == 60 and (hour * 60 + minute - offset) % 1440 != 1439:
        return None
    return offset


def is_date_time(s: str) -> bool:
    return instant(s) is not None


def is_date_time_field(f) -> bool:
    return f.kind == "scalar" and f.type == "string" and f.schema.get("format") == "date-time"


def instant(s: Any) -> Optional[tuple[int, bool, str]]:
    """A sort key of the instant an RFC 3339 ``date-time`` names, or None if ``s`` is not one.

    ``(seconds, leap, fraction)``: the seconds since 1970-01-01T00:00:00Z with the offset
    applied and a leap second counted as ``:59``; True for a leap second (it follows every
    other moment of its ``:59`` second); the fraction's digits without trailing zeros
    (compared as text, which orders them as numbers).  Equal keys name the same instant:
    ``…T10:00:00Z``, ``…T10:00:00.000Z`` and ``…T05:00:00-05:00``.
    """
    if not isinstance(s, str):
        return None
    m = DATE_TIME_RE.fullmatch(s)
    if m is None:
        return None
    y, mo, d = m.group(1, 2, 3)
    if not _date_ok(y, mo, d):
        return None
    g = m.groups()[3:]
    offset = _time_offset(g)
    if offset is None:
        return None
    second = int(g[2])
    seconds = (
        days_from_civil(int(y), int(mo), int(d)) * 86400
        + int(g[0]) * 3600
        + int(g[1]) * 60
        + min(second, 59)
        - offset * 60
    )
    return seconds, second == 60, (g[3] or "").rstrip("0")


def is_date(s: str) -> bool:
    m = DATE_RE.fullmatch(s)
    return m is not None and _date_ok(*m.groups())


def is_time(s: str) -> bool:
    m = TIME_RE.fullmatch(s)
    return m is not None and _time_offset(m.groups()) is not None


def is_uuid(s: str) -> bool:
    return UUID_RE.fullmatch(s) is not None


def is_ipv4(s: str) -> bool:
    return IPV4_RE.fullmatch(s) is not None


def is_ipv6(s: str) -> bool:
    if not s.isascii() or "%" in s or not re.fullmatch(r"[0-9A-Fa-f:.]+", s):
        return False
    try:
        ipaddress.IPv6Address(s)
    except ValueError:
        return False
    return True


def _hostname(s: str) -> bool:
    return len(s) <= 253 and all(_LABEL_RE.fullmatch(label) for label in s.split("."))


def is_email(s: str) -> bool:
    if not s.isascii() or "@" not in s:
        return False
    local, _, domain = s.rpartition("@")
    if len(local) > 64 or not _LOCAL_RE.fullmatch(local):
        return False
    if domain.startswith("[") and domain.endswith("]"):
        literal = domain[1:-1]
        if literal[:5].lower() == "ipv6:":
            return is_ipv6(literal[5:])
        return is_ipv4(literal)
    return _hostname(domain)


ASSERTED: dict[str, Callable[[str], bool]] = {
    "date-time": is_date_time,
    "date": is_date,
    "time": is_time,
    "uuid": is_uuid,
    "email": is_email,
    "ipv4": is_ipv4,
    "ipv6": is_ipv6,
}


def _strings_only(check: Callable[[str], bool]) -> Callable[[Any], bool]:
    return lambda v: not isinstance(v, str) or check(v)


def format_checker():
    """A ``jsonschema`` format checker that asserts :data:`ASSERTED` (and nothing else)."""
    from jsonschema import FormatChecker

    checker = FormatChecker(formats=())
    for name, check in ASSERTED.items():
        checker.checks(name)(_strings_only(check))
    return checker


def formats_used(schema: Any) -> set[str]:
    """Every ``format`` value (a string) anywhere in ``schema``."""
    out: set[str] = set()
    todo = [schema]
    while todo:
        node = todo.pop()
        if isinstance(node, dict):
            f = node.get("format")
            if isinstance(f, str):
                out.add(f)
            todo.extend(node.values())
        elif isinstance(node, list):
            todo.extend(node)
    return out


def rs_formats(schema: Any) -> dict[str, Callable[[str], bool]]:
    """``formats`` for a ``jsonschema-rs`` validator of ``schema`` built with
    ``validate_formats=True``: tidemark's checks for :data:`ASSERTED`, and every other format
    the schema names passes (stays an annotation, as in ``jsonschema``)."""
    out: dict[str, Callable[[str], bool]] = {name: _always for name in formats_used(schema)}
    out.update(ASSERTED)
    return out


def _always(_s: str) -> bool:
    return True
