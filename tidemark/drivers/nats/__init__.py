"""The ``nats`` endpoint (NATS JetStream): see :mod:`tidemark.drivers.nats.driver`."""

from tidemark.drivers.nats.driver import CAPABILITIES, NatsDriver

__all__ = ["NatsDriver", "CAPABILITIES"]
