"""Delta Lake endpoint (delta-rs, no JVM); see :mod:`tidemark.drivers.delta.driver`.

Modules: ``driver`` (:class:`DeltaDriver`: the staged-files base of :mod:`tidemark.drivers.lake`
filled in for Delta), ``tables`` (types, identifiers, app transactions), ``quarantine`` (the
dead-letter table).
"""

from tidemark.drivers.delta.driver import CAPABILITIES, DeltaDriver
from tidemark.drivers.delta.tables import app_id, applied_batch

__all__ = ["CAPABILITIES", "DeltaDriver", "app_id", "applied_batch"]
