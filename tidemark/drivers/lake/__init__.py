"""The staged-files base of the lake endpoints (Delta, Iceberg); see :mod:`tidemark.drivers.lake.driver`.

Modules: ``driver`` (:class:`StagedFilesDriver`: Apply, the coordinator's apply loop,
inspection, the hooks a table format fills in), ``transactor`` (:class:`StagedFilesTransactor`:
one shard session, staged Parquet), ``model`` (:class:`LakeTable`, the properties tidemark
keeps on a table), ``quarantine`` (staged invalid documents).
"""

from tidemark.drivers.lake.driver import StagedFilesDriver
from tidemark.drivers.lake.model import LakeTable, owner_of
from tidemark.drivers.lake.transactor import StagedFilesTransactor

__all__ = ["LakeTable", "StagedFilesDriver", "StagedFilesTransactor", "owner_of"]
