"""The format of what tidemark keeps, and the one refusal of a newer one.

Every record tidemark keeps where it outlasts a run says the format it was written in
(``"format": FORMAT``): the checkpoint folder's ``meta.json``, each recovery-log entry and
layout intent, the runtime checkpoint an endpoint commits with its data (checkpoint rows,
Kafka progress records, the store's heads, lake table commits) and the view-identity record
kept with each resource (SQL identity rows, Delta and Iceberg table properties).  A record
without the number was written by a release before 2026-11-29: format 1.

A release reads every format from 1 to :data:`FORMAT` (the differences are read field by
field: a member an older format lacks is not compared) and refuses a newer one before it
changes anything, in one line that names the format found and what to run
(:func:`refuse_newer`).  Kafka progress records (``"v"``), NATS records and webhook keys carry
their own numbers under the same rule.

Format history: 1 -- numbered nowhere (releases up to 2026-11-28); 2 -- numbered.
"""

from __future__ import annotations

from typing import Any

from tidemark.errors import RecoveryError

FORMAT = 2


def refuse_newer(record: Any, what: str) -> None:
    """Refuse ``record`` (a dict read back) if its ``format`` is one this release does not read."""
    found = record.get("format") if isinstance(record, dict) else None
    if found is None:
        return  # format 1: an older release wrote it
    if isinstance(found, bool) or not isinstance(found, int) or not 1 <= found <= FORMAT:
        raise RecoveryError(
            f"{what} is in tidemark format {found!r}, and this release reads formats 1 to {FORMAT}: run the "
            "tidemark release that wrote it, or a newer one (downgrading is not supported); nothing was changed"
        )


__all__ = ["FORMAT", "refuse_newer"]
