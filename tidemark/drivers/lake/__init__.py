"""The lake endpoints' one driver (Delta, Iceberg) over a table format; see :mod:`tidemark.drivers.lake.driver`.

Modules: ``format`` (:class:`TableFormat`: what a table format implements), ``driver``
(:class:`LakeDriver`: Apply, the coordinator's apply loop, inspection, drop, the cut-over),
``transactor`` (:class:`StagedFilesTransactor`: one shard session; :class:`StagingArea`: the
staging folder), ``model`` (:class:`LakeTable`, the properties tidemark keeps on a table),
``lean`` (lean rows), ``quarantine`` (staged invalid documents).
"""

from tidemark.drivers.lake.driver import LakeDriver
from tidemark.drivers.lake.format import TableFormat
from tidemark.drivers.lake.model import LakeTable, owner_of
from tidemark.drivers.lake.transactor import StagedFilesTransactor

__all__ = ["LakeDriver", "LakeTable", "StagedFilesTransactor", "TableFormat", "owner_of"]
