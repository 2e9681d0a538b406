"""Lazy registry of drivers by short name.

``load_driver("sqlite", {...})`` imports ``tidemark.drivers.sqlite`` only when used; a
missing client library fails with the command that fixes it.  ``command:PROGRAM ARGS``
runs an external driver speaking the JSON-lines wire form.
"""

from __future__ import annotations

import importlib
import shlex

from tidemark.errors import SpecError

DRIVERS: dict[str, str] = {
    "memory": "tidemark.drivers.memory:MemoryDriver",
    "sqlite": "tidemark.drivers.sqlite:SQLiteDriver",
    "postgres": "tidemark.drivers.postgres:PostgresDriver",
    "mysql": "tidemark.drivers.mysql:MySqlDriver",
    "delta": "tidemark.drivers.delta:DeltaDriver",
    "iceberg": "tidemark.drivers.iceberg:IcebergDriver",
    "store": "tidemark.drivers.store:StoreDriver",
    "kafka": "tidemark.drivers.kafka:KafkaDriver",
    "redis": "tidemark.drivers.redis:RedisDriver",
    "webhook": "tidemark.drivers.webhook:WebhookDriver",
    "nats": "tidemark.drivers.nats:NatsDriver",
}

# driver name -> pip extra that installs its client library
EXTRAS: dict[str, str] = {
    "postgres": "postgres",
    "mysql": "mysql",
    "delta": "delta",
    "iceberg": "iceberg",
    "kafka": "kafka",
    "redis": "redis",
    "webhook": "webhook",
    "nats": "nats",
}


def driver_class(name: str):
    if name.startswith("command:") or name == "command":
        module = importlib.import_module("tidemark.drivers.command")
        return module.CommandDriver
    target = DRIVERS.get(name)
    if target is None:
        known = ", ".join(sorted(DRIVERS) + ["command:PROGRAM"])
        raise SpecError(f"unknown endpoint driver {name!r} (known: {known})")
    module_name, _, attr = target.partition(":")
    try:
        module = importlib.import_module(module_name)
    except ImportError as exc:  # a client library is missing
        extra = EXTRAS.get(name, name)
        raise SpecError(
            f"driver {name!r} needs a library that is not installed ({exc.name or exc}); "
            f"fix: pip install 'tidemark[{extra}]'"
        ) from exc
    return getattr(module, attr)


def load_driver(name: str, config: dict | None = None):
    """Construct a driver by short name (or ``command:PROGRAM ARGS``)."""
    config = dict(config or {})
    if name.startswith("command:"):
        config.setdefault("command", shlex.split(name[len("command:") :]))
        name = "command"
    return driver_class(name)(config)


def resolve_config(name: str, config: dict, base_dir: str) -> dict:
    """The config of driver ``name`` as it resolves it against the spec's folder
    (:meth:`tidemark.drivers.base.Driver.resolve_config`): what the spec stores."""
    return driver_class(name).resolve_config(dict(config or {}), base_dir)


def endpoint_of(endpoint: dict) -> tuple[str, dict]:
    """Split a spec ``endpoint: {sqlite: {path: ...}}`` into ``("sqlite", {...})``."""
    if not isinstance(endpoint, dict) or len(endpoint) != 1:
        raise SpecError("endpoint must be a mapping with exactly one driver name, e.g. {sqlite: {path: views.db}}")
    ((name, config),) = endpoint.items()
    if config is None:
        config = {}
    if not isinstance(config, dict):
        raise SpecError(f"endpoint {name!r}: config must be a mapping")
    return str(name), config
