"""Delta Lake endpoint (delta-rs, no JVM); see :mod:`tidemark.drivers.delta.driver`.

Modules: ``driver`` (:class:`DeltaDriver`: config, Apply, the coordinator apply, inspection),
``transactor`` (:class:`DeltaTransactor`: one shard session), ``tables`` (the table model,
types, identifiers, app transactions), ``quarantine`` (the dead-letter table).
"""

from tidemark.drivers.delta.driver import CAPABILITIES, DeltaDriver
from tidemark.drivers.delta.tables import TableModel, app_id, applied_batch, owner_of
from tidemark.drivers.delta.transactor import DeltaTransactor

__all__ = ["CAPABILITIES", "DeltaDriver", "DeltaTransactor", "TableModel", "app_id", "applied_batch", "owner_of"]
