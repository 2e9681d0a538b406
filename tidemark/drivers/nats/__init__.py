"""The ``nats`` endpoint (NATS JetStream): see :mod:`tidemark.drivers.nats.driver`.

Reading a view from a URL in one call: :func:`read_view` and :func:`read_committed`
(:mod:`.api`).  The write path: :mod:`.wire` (what is written), :mod:`.channel` (how a batch
is committed and fenced), :mod:`.reader` (the read-committed reader).
"""

from tidemark.drivers.nats.api import committed_view as read_view
from tidemark.drivers.nats.api import read_committed
from tidemark.drivers.nats.driver import NatsDriver

__all__ = ["NatsDriver", "read_committed", "read_view"]
