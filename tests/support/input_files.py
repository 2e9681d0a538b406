"""Editing input files in place, for the bad-input tests."""

from __future__ import annotations

import os


def _replace_line(path, lineno: int, text: str) -> str:
    """Replace 1-based line ``lineno`` of ``path``; return the line it held."""
    with open(path) as f:
        lines = f.read().splitlines()
    old = lines[lineno - 1]
    lines[lineno - 1] = text
    st = os.stat(path)
    with open(path, "w") as f:
        f.write("\n".join(lines) + "\n")
    os.utime(path, (st.st_atime, st.st_mtime))  # Spark's file source orders by mtime
    return old
