"""The base of the push endpoints (Kafka, NATS, the webhook): one driver over a local store
and the endpoint's log part (:mod:`.driver`, :mod:`.log`), and one shard session that sends
each batch to a system that cannot answer a Load, with the local store answering the Loads
(:mod:`.transactor`)."""

from tidemark.drivers.push.driver import PushDriver
from tidemark.drivers.push.log import LogSession, PushLog
from tidemark.drivers.push.transactor import PushTransactor

__all__ = ["LogSession", "PushDriver", "PushLog", "PushTransactor"]
