"""Runtime options: the knobs of a running materialization, typed and frozen.

They come, in this order (later wins), from

1. the defaults below;
2. a materialization's ``options:`` block in the spec, or the ``options=`` argument of
   :func:`tidemark.materialize` (a :class:`RuntimeOptions`, or a mapping that overrides the
   named fields of the spec's);
3. environment variables (:data:`ENV`), as overrides of a deployment -- applied once, by
   :meth:`RuntimeOptions.with_env`, where a run starts.

None of them changes what a view holds, only how a batch is processed: they are not part
of a materialization's version.
"""

from __future__ import annotations

import dataclasses
import os
from dataclasses import dataclass
from typing import Any, Mapping, Optional

from tidemark.errors import SpecError


@dataclass(frozen=True)
class RuntimeOptions:
    """Runtime knobs (positive integers; ``small_batch_keys`` and ``reduced_batch_keys`` may
    be 0; ``endpoint_reduce`` true or false)."""

    #: Bytes of a shard session's combined documents (held from Load to Store) kept in
    #: memory before they spill to local disk.
    memory_budget_bytes: int = 64 << 20
    #: Documents a shard session loaded from the endpoint kept in memory before they spill.
    max_loaded_in_memory: int = 200_000
    #: Invalid documents one batch may quarantine (``on_invalid: quarantine``); more fail it.
    max_quarantine: int = 100_000
    #: A batch whose batch before combined to at most this many keys runs its shard
    #: sessions in the driver, on its combined rows collected there (when they are at most
    #: this many; else on Spark as usual): no second shuffle and no Python tasks, which
    #: is most of a small batch's cost.  0: every batch on Spark's executors.
    small_batch_keys: int = 5_000
    #: ``small_batch_keys`` for a materialization whose every binding its endpoint reduces
    #: (``endpoint_reduce``): such a shard session does a few microseconds of Python per key
    #: (no Load, no reduce in Python), so collecting the combined rows into the driver beats
    #: the second shuffle and the Python tasks up to large batches.  0: on Spark's
    #: executors; ``small_batch_keys: 0`` keeps every batch there too.
    reduced_batch_keys: int = 250_000
    #: Let an endpoint that can (PostgreSQL) reduce a binding's batches itself, in SQL in the
    #: commit's transaction, instead of Loading the stored documents and reducing in Python
    #: (``tidemark check`` says which bindings do, and why the others do not).  Either way
    #: the view is the same; false: always Load.
    endpoint_reduce: bool = True
    #: A batch that fails on a transient endpoint error (a lost connection, a terminated
    #: session, a server restart, a broker's leader change) runs again, with backoff, for up
    #: to this many seconds from its first failure; then the run fails.  0: fail at once.
    #: (Start-up is not retried: it fails fast.)
    transient_retry_seconds: int = 600

    def __post_init__(self):
        for f in dataclasses.fields(self):
            value = getattr(self, f.name)
            if not _allowed(f.name, value):
                raise SpecError(f"runtime option {f.name} must be a {_kind(f.name)}, got {value!r}")

    @classmethod
    def from_mapping(
        cls,
        obj: Optional[Mapping[str, Any]],
        *,
        base: Optional["RuntimeOptions"] = None,
        file: Optional[str] = None,
        path: Optional[str] = None,
    ) -> "RuntimeOptions":
        """``base`` (default: the defaults) with the fields ``obj`` names; a
        :class:`~tidemark.errors.SpecError` naming ``path`` for an unknown field or a bad value."""
        base = base or cls()
        if obj is None:
            return base
        if not isinstance(obj, Mapping):
            raise SpecError(f"must be a mapping of option to value, got {type(obj).__name__}", file=file, path=path)
        names = [f.name for f in dataclasses.fields(cls)]
        for k, v in obj.items():
            where = f"{path}.{k}" if path else str(k)
            if k not in names:
                raise SpecError(f"unknown runtime option {k!r} (known: {', '.join(names)})", file=file, path=where)
            if not _allowed(k, v):
                raise SpecError(f"must be a {_kind(k)}, got {v!r}", file=file, path=where)
        return dataclasses.replace(base, **dict(obj))

    def with_env(self, environ: Optional[Mapping[str, str]] = None) -> "RuntimeOptions":
        """These options with the environment's overrides (:data:`ENV`) applied."""
        environ = os.environ if environ is None else environ
        changes: dict[str, Any] = {}
        for name, var in ENV.items():
            text = environ.get(var)
            if text is None or not text.strip():
                continue
            try:
                value = int(text)
            except ValueError:
                value = -1
            if name in BOOLEANS:
                value = {0: False, 1: True}.get(value, value)
            if not _allowed(name, value):
                raise SpecError(f"environment variable {var} must be a {_kind(name)}, got {text!r}")
            changes[name] = value
        return dataclasses.replace(self, **changes) if changes else self

    def as_dict(self) -> dict:
        return dataclasses.asdict(self)


#: Option name -> the environment variable that overrides it.
ENV: dict[str, str] = {
    "memory_budget_bytes": "TIDEMARK_SHARD_MEMORY_BYTES",
    "max_loaded_in_memory": "TIDEMARK_SHARD_MAX_LOADED",
    "max_quarantine": "TIDEMARK_MAX_QUARANTINE",
    "small_batch_keys": "TIDEMARK_SMALL_BATCH_KEYS",
    "reduced_batch_keys": "TIDEMARK_REDUCED_BATCH_KEYS",
    "endpoint_reduce": "TIDEMARK_ENDPOINT_REDUCE",
    "transient_retry_seconds": "TIDEMARK_TRANSIENT_RETRY_SECONDS",
}

#: Options for which 0 is a value (it turns something off).
ZERO_OK = frozenset({"small_batch_keys", "reduced_batch_keys", "transient_retry_seconds"})
#: Options that are true or false (1 or 0 in the environment).
BOOLEANS = frozenset({"endpoint_reduce"})


def _allowed(name: str, value) -> bool:
    if name in BOOLEANS:
        return isinstance(value, bool)
    floor = 0 if name in ZERO_OK else 1
    return isinstance(value, int) and not isinstance(value, bool) and value >= floor


def _kind(name: str) -> str:
    if name in BOOLEANS:
        return "true or false (1 or 0 in the environment)"
    return "non-negative integer" if name in ZERO_OK else "positive integer"


# ----------------------------------------------------------------------------- the process
# Knobs of a process rather than of a view: how Spark is started and how a batch is planned.
# Environment variables only, each read here (when asked: a test may set one between runs).

_OFF = ("0", "false", "no", "off")


@dataclass(frozen=True)
class ProcessOptions:
    #: ``TIDEMARK_ONE_JOB=0``: plan every batch with the checked plan (benchmarks)
    one_job: bool = True
    #: ``TIDEMARK_PLAN_REBIND=0``: build every batch's plan anew instead of rebinding the first's
    plan_rebind: bool = True
    #: ``TIDEMARK_SPARK_INTERNALS=0``: PySpark's public API only (as on an untested Spark version)
    spark_internals: bool = True
    #: ``TIDEMARK_JVM_CHECKS=0``: the expression form of the document checks instead of the jar's
    jvm_checks: bool = True
    #: ``TIDEMARK_LEASE_TTL``: seconds a run's lease lives without renewal
    lease_ttl: float = 30.0
    #: ``TIDEMARK_DRIVER_MEMORY``: the local Spark driver's memory (``spark.driver.memory``)
    driver_memory: str = "2g"
    #: ``TIDEMARK_SPARK_LOG_DEFAULTS=1``: keep Spark's own logging (``tidemark run --verbose``)
    spark_log_defaults: bool = False


PROCESS_ENV = {
    "one_job": "TIDEMARK_ONE_JOB",
    "plan_rebind": "TIDEMARK_PLAN_REBIND",
    "spark_internals": "TIDEMARK_SPARK_INTERNALS",
    "jvm_checks": "TIDEMARK_JVM_CHECKS",
    "lease_ttl": "TIDEMARK_LEASE_TTL",
    "driver_memory": "TIDEMARK_DRIVER_MEMORY",
    "spark_log_defaults": "TIDEMARK_SPARK_LOG_DEFAULTS",
}


def process_options(environ: Optional[Mapping[str, str]] = None) -> ProcessOptions:
    """The process's knobs from the environment (:data:`PROCESS_ENV`); a bad value is a
    :class:`~tidemark.errors.SpecError` naming the variable."""
    environ = os.environ if environ is None else environ
    defaults = ProcessOptions()
    changes: dict[str, Any] = {}
    for name, var in PROCESS_ENV.items():
        text = (environ.get(var) or "").strip()
        if not text:
            continue
        default = getattr(defaults, name)
        if isinstance(default, bool):
            changes[name] = text.lower() not in _OFF
        elif isinstance(default, float):
            try:
                changes[name] = float(text)
            except ValueError:
                raise SpecError(f"environment variable {var} must be a number of seconds, got {text!r}") from None
        else:
            changes[name] = text
    return dataclasses.replace(defaults, **changes)


def set_process_option(name: str, value: Any) -> None:
    """Set a process knob for this process and the ones it starts (the CLI's ``--verbose``)."""
    var = PROCESS_ENV[name]
    os.environ[var] = ("1" if value else "0") if isinstance(value, bool) else str(value)


# ----------------------------------------------------------------------------- the rest of the environment
#: The fault points armed in a process (tests and the chaos suite; never set in production):
#: which points (``TIDEMARK_FAULTS``, "name[:action],…"), random kills (``TIDEMARK_FAULT_RANDOM``,
#: "seed:p"), the process group an executor-side kill takes down (``TIDEMARK_FAULT_PGID``) and
#: whether a kill takes the whole group (``TIDEMARK_FAULT_SCOPE=group``).  Read each time a
#: fault point is first asked (:mod:`tidemark.faults`), so a test may change them between runs.
FAULT_ENV = {
    "armed": "TIDEMARK_FAULTS",
    "random": "TIDEMARK_FAULT_RANDOM",
    "pgid": "TIDEMARK_FAULT_PGID",
    "scope": "TIDEMARK_FAULT_SCOPE",
}


@dataclass(frozen=True)
class FaultSettings:
    armed: str = ""
    random: str = ""
    pgid: str = ""
    scope: str = ""


def fault_settings(environ: Optional[Mapping[str, str]] = None) -> FaultSettings:
    environ = os.environ if environ is None else environ
    return FaultSettings(**{name: environ.get(var, "") for name, var in FAULT_ENV.items()})


def java_home(environ: Optional[Mapping[str, str]] = None) -> Optional[str]:
    """``JAVA_HOME``, where the jar's builder looks for ``javac`` first."""
    return (os.environ if environ is None else environ).get("JAVA_HOME") or None


def child_environment(extra: Mapping[str, Any]) -> dict[str, str]:
    """This process's environment with ``extra`` set: a driver program's (``command`` endpoint)."""
    return {**os.environ, **{str(k): str(v) for k, v in extra.items()}}
