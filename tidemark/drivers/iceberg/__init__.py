"""Apache Iceberg endpoint (pyiceberg, SQL catalog, no JVM); see :mod:`tidemark.drivers.iceberg.driver`.

Modules: ``driver`` (:class:`IcebergDriver`: Apply, the coordinator apply, inspection),
``transactor`` (:class:`IcebergTransactor`: one shard session), ``apply`` (one batch into
one table's transaction), ``tables`` (the table model, types, properties), ``settings``
(the config: catalog, warehouse, staging).
"""

from tidemark.drivers.iceberg.driver import CAPABILITIES, IcebergDriver
from tidemark.drivers.iceberg.tables import TableModel, applied_batch, applied_property, owner_of, table_batch
from tidemark.drivers.iceberg.transactor import IcebergTransactor

__all__ = [
    "CAPABILITIES",
    "IcebergDriver",
    "IcebergTransactor",
    "TableModel",
    "applied_batch",
    "applied_property",
    "owner_of",
    "table_batch",
]
