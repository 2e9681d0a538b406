"""The values the kit's value scenarios draw (:mod:`.values`), and how it compares them.

``EDGES`` holds one value of each edge of JSON; :func:`key_of` makes texts of a given size in
bytes of one- to four-byte characters; :func:`canonical` and :func:`first_difference`
compare a stored value with what came back as JSON does (numbers as the exact decimals
their texts spell), naming the first place they differ and the fix that fits.
"""

from __future__ import annotations

import json
import math
import random
from decimal import Decimal
from typing import Any, Optional

# ------------------------------------------------------------------ canonical JSON


def canonical(value: Any) -> Any:
    """A value as the comparison sees it: objects with sorted members, a number by the exact
    decimal its JSON text spells (``1.0`` is ``1``, ``1e21`` is ``1000000000000000000000``,
    ``-0.0`` is ``0``: JSON does not tell them apart; ``0.1`` is not ``0.10000000149011612``
    and ``2**63`` is not ``9.223372036854776e18``)."""
    if isinstance(value, bool) or value is None or isinstance(value, str):
        return value
    if isinstance(value, (int, float)):
        return ("number", decimal_text(value))
    if isinstance(value, dict):
        return {k: canonical(v) for k, v in sorted(value.items())}
    if isinstance(value, (list, tuple)):
        return [canonical(v) for v in value]
    return ("unexpected", f"{type(value).__name__} {value!r}")


def decimal_text(number: int | float) -> str:
    """The exact decimal of a JSON number's shortest text, as ``digits e exponent`` without
    trailing zeros (zero, of either sign, is ``0``)."""
    if not math.isfinite(number):
        return repr(number)
    sign, digits, exponent = Decimal(repr(number) if isinstance(number, float) else number).as_tuple()
    text = "".join(map(str, digits)).rstrip("0")
    if not text:
        return "0"
    exponent = int(exponent) + len(digits) - len(text)
    return f"{'-' if sign else ''}{text}e{exponent}"


def show(value: Any, limit: int = 80) -> str:
    """A value as a message shows it (JSON, cut to ``limit`` characters)."""
    try:
        text = json.dumps(value, ensure_ascii=True)
    except (TypeError, ValueError):
        text = repr(value)
    return text if len(text) <= limit else f"{text[: limit - 20]}… ({len(text)} characters)"


def first_difference(stored: Any, got: Any, path: str = "") -> Optional[tuple[str, Optional[str]]]:
    """Where ``got`` differs from ``stored``: ``(/path: stored X, read back Y, the fix that
    fits)``, or None when equal."""
    if isinstance(stored, dict) and isinstance(got, dict):
        for name in sorted(set(stored) | set(got)):
            here = f"{path}/{name}"
            if name not in got:
                why = NULL_HINT if stored[name] is None else None
                return f"{here}: stored {show(stored[name])}, absent when read back", why
            if name not in stored:
                return f"{here}: not stored, read back {show(got[name])}", None
            diff = first_difference(stored[name], got[name], here)
            if diff:
                return diff
        return None
    if isinstance(stored, list) and isinstance(got, list) and len(stored) == len(got):
        for i, (a, b) in enumerate(zip(stored, got)):
            diff = first_difference(a, b, f"{path}/{i}")
            if diff:
                return diff
        return None
    if canonical(stored) == canonical(got):
        return None
    text = f"{path or '(the document)'}: stored {show(stored)}, read back {show(got)}"
    if stored == "" and got is None:
        return text, EMPTY_HINT
    if isinstance(stored, float) and isinstance(got, (int, float)) and not isinstance(got, bool):
        return text, FLOAT_HINT
    if isinstance(stored, int) and isinstance(got, (int, float)) and not isinstance(got, bool):
        return text, INTEGER_HINT
    return text, None


NULL_HINT = "keep members whose value is null: a null member is not an absent one (do not drop nulls when storing)"
EMPTY_HINT = "keep empty strings: an empty string is not null (an endpoint that stores '' as NULL must escape it)"
FLOAT_HINT = "keep numbers as 64-bit floats or as the JSON text (a 4-byte REAL turns 0.1 into 0.10000000149011612)"
INTEGER_HINT = "keep integers of any size exactly (as the JSON text or an exact numeric, not a double or a BIGINT)"


def size_of(doc: Any) -> int:
    """A document's size as the limits count it: its compact JSON text in UTF-8."""
    return len(json.dumps(doc, ensure_ascii=False, separators=(",", ":")).encode("utf-8"))


def has_nul(value: Any) -> bool:
    if isinstance(value, str):
        return "\x00" in value
    if isinstance(value, dict):
        return any(has_nul(k) or has_nul(v) for k, v in value.items())
    if isinstance(value, list):
        return any(has_nul(v) for v in value)
    return False


# ------------------------------------------------------------------------ values

PLANES = "\u0001\u007f\u0080\u07ff\u0800\ud7ff\ue000\uffef\U00010000\U0001f600\U00020000\U00030000\U000e0001\U0010fffd"

#: one value of each edge, by name: strings, numbers, and what JSON has besides
EDGES: dict[str, Any] = {
    "empty string": "",
    "NUL": "a\x00b",
    "every plane": PLANES,
    "combining marks": "e\u0301\u0308 \u0915\u094d\u0937",
    "trailing spaces": "a  ",
    "leading space": " a",
    "controls": "\t\n\r\x08\x0c\x1f\x7f",
    "quotes": "\"'\\/`",
    "17 digits": 0.30000000000000004,
    "a tenth": 0.1,
    "a third": 1 / 3,
    "-0.0": -0.0,
    "smallest normal": 2.2250738585072014e-308,
    "subnormal": 5e-324,
    "largest float": 1.7976931348623157e308,
    "1e21": 1e21,
    "2^53": 2**53,
    "2^53+1": 2**53 + 1,
    "-2^53-1": -(2**53) - 1,
    "2^63-1": 2**63 - 1,
    "-2^63": -(2**63),
    "2^63": 2**63,
    "-2^63-1": -(2**63) - 1,
    "2^64": 2**64,
    "10^30": 10**30,
    "true": True,
    "false": False,
    "null": None,
    "empty array": [],
    "empty object": {},
    "mixed array": [None, 0, -1, 0.5, "", [], {}, [[None]], True],
}


def nested(levels: int) -> Any:
    """A value nested ``levels`` deep (objects around an array of scalars: 1 is the array)."""
    value: Any = [1, "x", None]
    for i in range(levels - 1):
        value = {f"d{i}": value}
    return value


def depth_of(value: Any) -> int:
    """Levels of nesting (a document's root object is 1; a scalar 0)."""
    if isinstance(value, dict):
        return 1 + max(map(depth_of, value.values()), default=0)
    if isinstance(value, list):
        return 1 + max(map(depth_of, value), default=0)
    return 0


#: characters of one to four UTF-8 bytes that texts of a given size are drawn from
POOL = (
    [chr(c) for c in range(0x21, 0x7F)]
    + [chr(c) for c in range(0xC0, 0x180)]
    + [chr(c) for c in range(0x4E00, 0x4F00)]
    + [chr(c) for c in range(0x1F300, 0x1F380)]
)


def key_of(prefix: str, size: int) -> str:
    """A text of ``size`` UTF-8 bytes that starts with ``prefix``, the rest drawn from
    characters of one to four bytes (so that a limit in characters or in bytes shows, and
    the text does not compress: an index that compresses its entries is still tried)."""
    if size - len(prefix.encode()) > 8192:  # a big document's text: a drawn block, repeated
        block = key_of("", 4096)
        head = prefix + block * ((size - len(prefix.encode())) // 4096 - 1)
        return key_of(head, size)
    draw = random.Random(f"{prefix}|{size}")
    parts, used = [prefix], len(prefix.encode())
    while used < size:
        c = draw.choice(POOL)
        n = len(c.encode())
        if used + n > size:
            c, n = "b", 1
        parts.append(c)
        used += n
    return "".join(parts)


__all__ = [
    "canonical",
    "first_difference",
    "show",
    "size_of",
    "has_nul",
    "depth_of",
    "nested",
    "key_of",
    "EDGES",
]
