"""SQLite settings: the database file, its durability, the retry of a busy database."""

from __future__ import annotations

from dataclasses import dataclass

from tidemark.drivers.common.settings import Setting, read
from tidemark.policy import RetryPolicy

SETTINGS = (
    Setting("path", default="views.db", description="the database file (relative: the spec's folder), or a file: URI"),
    Setting(
        "synchronous",
        default="FULL",
        choices=("FULL", "NORMAL", "EXTRA"),
        description="PRAGMA synchronous of the connection (FULL: a committed batch survives a power loss)",
    ),
    Setting("retry", "retry", description="retries of a busy or locked database"),
)


@dataclass(frozen=True)
class SqliteSettings:
    path: str
    synchronous: str
    policy: RetryPolicy

    @classmethod
    def from_config(cls, config: dict) -> "SqliteSettings":
        v = read("sqlite", config, SETTINGS)
        return cls(path=v["path"], synchronous=v["synchronous"], policy=v["retry"])
