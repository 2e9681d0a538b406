"""Exact decimals: a ``number`` whose ``multipleOf`` is a power of ten (``0.01``) has that many
places, and reduces exactly (docs/reductions.md, "Exact decimals").

A document's numbers are parsed as doubles, and any decimal of up to 15 significant digits
is the double nearest to it and back (its shortest ``repr`` is its text).  So a ``sum`` at
``s`` places rounds the doubles' sum to ``s`` places: the exact decimal sum, while the
result stays within 15 significant digits (below ``10**(15 - s)``); beyond that it is
refused rather than rounded.  ``multipleOf`` itself is checked on the decimal text, not by
a division of doubles (``0.07 / 0.01`` is ``7.000000000000001``).
"""

from __future__ import annotations

from decimal import Decimal, InvalidOperation
from typing import Any, Optional

MAX_DIGITS = 15  # significant digits every double holds exactly
MAX_SCALE = 9


def scale_of(multiple: Any) -> Optional[int]:
    """The places of a ``multipleOf`` that is ``10**-s`` (``0.01`` -> 2), or None."""
    if isinstance(multiple, bool) or not isinstance(multiple, (int, float)) or multiple <= 0 or multiple >= 1:
        return None
    d = Decimal(repr(multiple)).normalize()
    sign, digits, exp = d.as_tuple()
    if digits != (1,) or not isinstance(exp, int) or not 1 <= -exp <= MAX_SCALE:
        return None
    return -exp


def decimal_scale(node: Any) -> Optional[int]:
    """The places of a schema node that declares an exact decimal (``type: number`` with a
    ``multipleOf`` of ``10**-s``), or None."""
    if not isinstance(node, dict):
        return None
    t = node.get("type")
    if t != "number" and not (isinstance(t, list) and "number" in t):
        return None
    return scale_of(node.get("multipleOf"))


def scale_in(schemas) -> Optional[int]:
    """The places declared by any of a location's applicable schemas."""
    for s in schemas:
        m = s.get("multipleOf") if isinstance(s, dict) else None
        if m is not None:
            scale = scale_of(m)
            if scale is not None:
                return scale
    return None


def exact_sum(lhs: Any, rhs: Any, scale: int) -> Any:
    """``lhs + rhs`` at ``scale`` places; None when the result would have more than 15
    significant digits at those places (beyond ``10**(15 - scale)``: it would not be exact),
    whole numbers or not."""
    out = lhs + rhs
    if isinstance(out, int):
        return out if abs(out) < 10 ** (MAX_DIGITS - scale) else None
    out = round(out, scale)
    return out if abs(out) < 10 ** (MAX_DIGITS - scale) else None


def is_multiple(instance: Any, multiple: Any) -> bool:
    """``multipleOf`` on the numbers' decimal text (what the document says)."""
    try:
        return Decimal(repr(instance)) % Decimal(repr(multiple)) == 0
    except (InvalidOperation, ValueError, TypeError):
        return False


__all__ = ["scale_of", "decimal_scale", "scale_in", "exact_sum", "is_multiple", "MAX_DIGITS"]
