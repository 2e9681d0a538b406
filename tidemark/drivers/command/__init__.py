"""External driver programs speaking the JSON-lines wire form; see
:mod:`tidemark.drivers.command.driver` (the driver and its sessions) and
:mod:`tidemark.drivers.command.program` (a program's process and the idle pool)."""

from tidemark.drivers.command.driver import CommandDriver, CommandTransactor, capabilities_from_wire
from tidemark.drivers.command.program import (
    MAX_IDLE_PROGRAMS,
    Program,
    close_idle_programs,
    error_from_wire,
    program_name,
)

__all__ = [
    "CommandDriver",
    "CommandTransactor",
    "MAX_IDLE_PROGRAMS",
    "Program",
    "capabilities_from_wire",
    "close_idle_programs",
    "error_from_wire",
    "program_name",
]
