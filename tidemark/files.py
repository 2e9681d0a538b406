"""Paths and URIs as pyarrow file systems: the recovery log, the lease and the store's
changelog all live beside Spark's checkpoint, on whatever file system it is on."""

from __future__ import annotations

import os

import pyarrow.fs as pafs


def filesystem(uri: str) -> tuple[pafs.FileSystem, str]:
    """The pyarrow file system of a path or URI, and the path inside it."""
    if "://" not in uri:
        return pafs.LocalFileSystem(), os.path.abspath(uri)
    if uri.startswith("file://"):
        return pafs.LocalFileSystem(), uri[len("file://"):]
    return pafs.FileSystem.from_uri(uri)
