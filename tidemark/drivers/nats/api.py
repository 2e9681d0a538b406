"""Reading a tidemark view from NATS JetStream, read-committed, in a few lines::

    import tidemark.drivers.nats

    for m in tidemark.drivers.nats.read_committed("nats://127.0.0.1:4222", "VIEWS", subjects=["views.customers"]):
        print(m.subject, m.key, "deleted" if m.delete else m.document)

    view = tidemark.drivers.nats.committed_view("nats://127.0.0.1:4222", "VIEWS", "views.customers")
    view[("c0042",)]                       # the key's last committed document

Only messages a progress record covers are returned — never part of a batch, never a
zombie's or a replay's second copy — in commit order.  Each call reads the stream from the
start up to its last message when the call began.
"""

from __future__ import annotations

from typing import Any, Optional, Sequence

from tidemark.drivers.nats.client import NatsClient
from tidemark.drivers.nats.reader import CommittedMessage
from tidemark.drivers.nats.reader import committed_view as fold_view


def read_committed(
    url: str,
    stream: str,
    *,
    subjects: Optional[Sequence[str]] = None,
    materialization: Optional[str] = None,
    prefix: str = "",
) -> list[CommittedMessage]:
    """Every committed message of ``stream`` (of ``subjects``; of ``materialization``), in commit order."""
    with NatsClient(url, name="tidemark-reader") as nc:
        return list(nc.read_committed(stream, prefix=prefix, materialization=materialization, subjects=subjects))


def committed_view(
    url: str, stream: str, subject: str, *, materialization: Optional[str] = None, prefix: str = ""
) -> dict[tuple, Any]:
    """The last committed document per key of ``subject`` (deleted keys are absent)."""
    return fold_view(
        read_committed(url, stream, subjects=[subject], materialization=materialization, prefix=prefix), subject
    )
