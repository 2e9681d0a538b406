"""Helpers for the PostgreSQL driver's tests."""

from __future__ import annotations

import dataclasses

from tests.support.driver_protocol import binding
from tidemark.protocol.messages import Field


def instant_binding(table="events"):
    """Keyed by a ``format: date-time`` string."""
    fields = (
        Field("at", "/at", "string", format="date-time", is_key=True, nullable=False),
        Field("n", "/n", "integer"),
    )
    return dataclasses.replace(binding(table), key=("/at",), fields=fields)
