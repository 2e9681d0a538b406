"""The ``kafka`` endpoint (see :mod:`.driver`)."""

from tidemark.drivers.kafka.driver import CAPABILITIES, KafkaDriver

__all__ = ["KafkaDriver", "CAPABILITIES"]
