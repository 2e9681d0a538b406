"""Apache Iceberg endpoint (pyiceberg, SQL catalog, no JVM); see :mod:`tidemark.drivers.iceberg.driver`.

Modules: ``driver`` (:class:`IcebergFormat`, the lake driver's table format for Iceberg, and
:class:`IcebergDriver`, the lake driver over it), ``apply`` (one batch into one table's
transaction), ``tables`` (types, schema, partitioning, the batch applied), ``settings`` (the
config: catalog, warehouse, staging).
"""

from tidemark.drivers.iceberg.driver import CAPABILITIES, IcebergDriver, IcebergFormat
from tidemark.drivers.iceberg.tables import applied_batch, applied_property, table_batch

__all__ = ["CAPABILITIES", "IcebergDriver", "IcebergFormat", "applied_batch", "applied_property", "table_batch"]
