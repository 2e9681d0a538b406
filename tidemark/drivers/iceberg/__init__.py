"""Apache Iceberg endpoint (pyiceberg, SQL catalog, no JVM); see :mod:`tidemark.drivers.iceberg.driver`.

Modules: ``driver`` (:class:`IcebergDriver`: the staged-files base of :mod:`tidemark.drivers.lake`
filled in for Iceberg), ``apply`` (one batch into one table's transaction), ``tables`` (types,
schema, partitioning, the batch applied), ``settings`` (the config: catalog, warehouse, staging).
"""

from tidemark.drivers.iceberg.driver import CAPABILITIES, IcebergDriver
from tidemark.drivers.iceberg.tables import applied_batch, applied_property, table_batch

__all__ = ["CAPABILITIES", "IcebergDriver", "applied_batch", "applied_property", "table_batch"]
