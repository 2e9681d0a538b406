"""The ``kafka`` endpoint (see :mod:`.driver`)."""

from tidemark.drivers.kafka.driver import KafkaDriver

__all__ = ["KafkaDriver"]
