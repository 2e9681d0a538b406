"""The ``sqlite`` endpoint, the embedded default: the SQL skeleton with SQLite's dialect
(:mod:`.driver`)."""

from tidemark.drivers.sqlite.driver import SQLiteDriver

__all__ = ["SQLiteDriver"]
