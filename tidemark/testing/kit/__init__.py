"""The conformance kit's parts: the runtime it plays (:mod:`.runtime`, on tidemark's own
coordinator), what it checks (:mod:`.checks`), its scenarios (:mod:`.scenarios`), killing a
driver inside a request (:mod:`.kill`), racing sessions (:mod:`.race`) and the report
(:mod:`.report`).  Run it with :func:`tidemark.testing.conformance.run_conformance`."""

from tidemark.testing.kit.report import HINTS, PROPERTIES, ConformanceReport, PropertyResult, Recorder
from tidemark.testing.kit.runtime import PHASES, KitCrash, KitRuntime, ScenarioAbort, Shard, Tracker

__all__ = [
    "KitRuntime",
    "KitCrash",
    "ScenarioAbort",
    "Recorder",
    "PROPERTIES",
    "HINTS",
    "PHASES",
    "Shard",
    "Tracker",
    "ConformanceReport",
    "PropertyResult",
]
