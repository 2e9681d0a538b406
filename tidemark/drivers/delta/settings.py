"""Delta Lake settings: the tables' root, the staging folder, object-store options."""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import Optional

import pyarrow.fs as pafs

from tidemark.drivers.common.settings import Setting, read
from tidemark.drivers.lake.model import is_uri, join_path
from tidemark.policy import RetryPolicy

SETTINGS = (
    Setting("path", required=True, description="the tables' root: a directory (relative: the spec's folder) or a URI"),
    Setting("staging", description="where batches are staged (default: PATH/_tidemark_staging)"),
    Setting("storage_options", "object", secret=True, description="object-store options for delta-rs and pyarrow"),
    Setting("retry", "retry"),
)


@dataclass(frozen=True)
class DeltaSettings:
    root: str
    staging: str
    storage_options: Optional[dict] = field(repr=False)  # may hold credentials
    policy: RetryPolicy

    @classmethod
    def from_config(cls, config: dict) -> "DeltaSettings":
        v = read("delta", config, SETTINGS)
        root = v["path"] if is_uri(v["path"]) else os.path.abspath(v["path"])
        staging = v["staging"] or join_path(root, "_tidemark_staging")
        return cls(
            root=root,
            staging=staging if is_uri(staging) else os.path.abspath(staging),
            storage_options={str(k): str(x) for k, x in (v["storage_options"] or {}).items()} or None,
            policy=v["retry"],
        )

    def staging_fs(self) -> tuple[pafs.FileSystem, str]:
        """The staging folder's file system and its base path (a local folder made if missing)."""
        if not is_uri(self.staging):
            os.makedirs(self.staging, exist_ok=True)
        return pafs.FileSystem.from_uri(self.staging)
