"""How a view's table holds each key's document: the two forms every table endpoint
shares (SQL, Delta, Iceberg).

* **lean** (new views, by default): a column per top-level property, and ``flow_document``
  holds only what no column holds -- NULL when nothing.  The column is nullable, which is
  how an existing table says its form.
* **full**: ``flow_document`` (NOT NULL) holds the whole document; the columns are a
  projection of it.  Every view made before the lean form, delta-updates tables, and
  ``resource: {document: full}``.
"""

from __future__ import annotations

from typing import Any

from tidemark.errors import SpecError

FULL, LEAN = "full", "lean"


def requested_form(resource: Any) -> str:
    """The form a binding's resource asks for (``document: lean | full``; lean by default)."""
    form = resource.get("document", LEAN) if isinstance(resource, dict) else LEAN
    if form not in (LEAN, FULL):
        raise SpecError(f"resource {resource!r}: document must be 'lean' or 'full', got {form!r}")
    return form


__all__ = ["FULL", "LEAN", "requested_form"]
