"""The command driver's settings: the program, its environment, and the config it is given."""

from __future__ import annotations

from tidemark.drivers.common.settings import Setting

SETTINGS = (
    Setting(
        "command",
        "any",
        required=True,
        properties={"type": ["string", "array"], "items": {"type": "string"}},
        description="the program and its arguments: 'command:PROGRAM ARGS' as the endpoint, "
        "or {command: [PROGRAM, ARG, ...]}",
    ),
    Setting("env", "object", secret=True, description="environment variables of the program (never shown)"),
    Setting("cwd", description="the program's working directory"),
    Setting("config", "object", description="the config the program receives in its requests"),
    Setting("retry", "retry"),
    Setting("reuse_processes", "boolean", default=True, description="keep the program running between sessions"),
)
