"""Exactly-once writes to NATS JetStream without transactions (groundwork for the NATS sink).

Progress records + a document-counter channel per ``(stream, materialization, range)``:
see :mod:`tidemark.nats.wire` for what is written, :mod:`tidemark.nats.channel` for how a
batch is committed and fenced, :mod:`tidemark.nats.reader` for the read-committed reader,
and ``docs/dev/nats-server.md`` for the server behaviours this relies on.
:func:`read_committed` and :func:`read_view` (:mod:`tidemark.nats.api`) read a view
from a URL in one call.  Needs
``pip install tidemark[nats]`` (nats-py); no Spark, no driver contract here.
"""

from tidemark.nats.api import committed_view as read_view, read_committed
from tidemark.nats.channel import AsyncNats, Committed, NatsSettings, OutDoc, Session, StreamSetup
from tidemark.nats.client import NatsClient
from tidemark.nats.errors import RequestRefused
from tidemark.nats.reader import CommittedFold, CommittedMessage, committed_view, fold_committed
from tidemark.nats.wire import (
    BatchId,
    Channel,
    DataMessage,
    Frontier,
    InFlight,
    ProgressRecord,
    data_headers,
    msg_id,
    progress_subject,
)

__all__ = [
    "AsyncNats", "BatchId", "Channel", "Committed", "CommittedFold", "CommittedMessage", "DataMessage", "Frontier",
    "InFlight", "NatsClient", "NatsSettings", "OutDoc", "ProgressRecord", "RequestRefused", "Session", "StreamSetup",
    "committed_view", "data_headers", "fold_committed", "msg_id", "progress_subject", "read_committed", "read_view",
]
