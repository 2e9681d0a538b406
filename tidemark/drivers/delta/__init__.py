"""Delta Lake endpoint (delta-rs, no JVM); see :mod:`tidemark.drivers.delta.driver`.

Modules: ``driver`` (:class:`DeltaFormat`, the lake driver's table format for Delta, and
:class:`DeltaDriver`, the lake driver over it), ``tables`` (types, identifiers, app
transactions), ``quarantine`` (the dead-letter table), ``settings``.
"""

from tidemark.drivers.delta.driver import CAPABILITIES, DeltaDriver, DeltaFormat
from tidemark.drivers.delta.tables import app_id, applied_batch

__all__ = ["CAPABILITIES", "DeltaDriver", "DeltaFormat", "app_id", "applied_batch"]
