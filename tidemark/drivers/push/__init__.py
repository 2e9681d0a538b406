"""The base of the push endpoints (Kafka, NATS, the webhook): a shard session that sends each
batch to a system that cannot answer a Load, with the local store endpoint answering the Loads
(:mod:`.transactor`)."""

from tidemark.drivers.push.transactor import PushTransactor

__all__ = ["PushTransactor"]
