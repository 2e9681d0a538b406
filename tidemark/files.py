"""Paths and URIs as pyarrow file systems: the recovery log, the lease and the store's
changelog all live beside Spark's checkpoint, on whatever file system it is on."""

from __future__ import annotations

import os
import uuid

import pyarrow.fs as pafs


def filesystem(uri: str) -> tuple[pafs.FileSystem, str]:
    """The pyarrow file system of a path or URI, and the path inside it."""
    if "://" not in uri:
        return pafs.LocalFileSystem(), os.path.abspath(uri)
    if uri.startswith("file://"):
        return pafs.LocalFileSystem(), uri[len("file://") :]
    return pafs.FileSystem.from_uri(uri)


def write_atomically(path: str, data: bytes) -> None:
    """Replace the local file ``path`` with ``data`` whole: a temporary file, fsync'd, renamed
    over it, and the folder fsync'd (a crash leaves the old file or the new one)."""
    tmp = f"{path}.tmp-{uuid.uuid4().hex}"
    with open(tmp, "wb") as f:
        f.write(data)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)
    dir_fd = os.open(os.path.dirname(path) or ".", os.O_RDONLY)
    try:
        os.fsync(dir_fd)
    finally:
        os.close(dir_fd)
