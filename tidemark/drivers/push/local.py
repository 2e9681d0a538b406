"""The local store a push endpoint keeps beside its system (each key's document as committed,
answering Loads): the store endpoint's parts the push endpoints use, in one place.  A push
endpoint imports them from here, never from :mod:`tidemark.drivers.store` itself."""

from tidemark.drivers.store import CAPABILITIES, StoreDriver
from tidemark.drivers.store.naming import QUARANTINE_ID, binding_id, resource_name
from tidemark.drivers.store.query import key_order
from tidemark.drivers.store.transactor import StoreTransactor

__all__ = [
    "CAPABILITIES",
    "QUARANTINE_ID",
    "StoreDriver",
    "StoreTransactor",
    "binding_id",
    "key_order",
    "resource_name",
]
