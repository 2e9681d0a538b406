"""The Iceberg endpoint's config: the SQL catalog, the warehouse, the staging folder.

``{catalog: {uri: SQLALCHEMY_URL, warehouse: PATH_OR_URL, name: tidemark, ...}, namespace: NAME,
staging: PATH_OR_URL, retry: {...}}``.  Every ``catalog`` key but ``name`` is a pyiceberg
catalog property (``s3.endpoint``, ``s3.access-key-id``, ``pool_pre_ping``, ...).
"""

from __future__ import annotations

import os
import urllib.parse
from dataclasses import dataclass, field
from typing import Any, Optional, cast

from tidemark.drivers.base import resolve_local_path
from tidemark.drivers.common.redact import redact
from tidemark.drivers.common.settings import Setting, read
from tidemark.drivers.lake.model import is_uri, join_path
from tidemark.errors import SpecError
from tidemark.policy import RetryPolicy

DEFAULT_CATALOG_NAME = "tidemark"
SECRET_WORDS = ("secret", "password", "token", "credential", "key-id", "access-key")


def sqlalchemy_url(uri: str) -> str:
    """A PostgreSQL URL without a driver runs on psycopg 3 (what ``tidemark[iceberg]``
    installs); SQLAlchemy's default there would be psycopg2."""
    for prefix in ("postgresql://", "postgres://"):
        if uri.startswith(prefix):
            return "postgresql+psycopg://" + uri[len(prefix) :]
    return uri


def _sqlite_path(uri: str) -> Optional[str]:
    """The file of a ``sqlite:///PATH`` URL (None for another database or ``:memory:``)."""
    if not uri.startswith("sqlite:///"):
        return None
    path = urllib.parse.urlsplit(uri).path[1:]  # sqlite:///rel.db -> rel.db; sqlite:////abs -> /abs
    return None if not path or path == ":memory:" else path


SETTINGS = (
    Setting(
        "catalog",
        "object",
        required=True,
        description="{uri: SQLALCHEMY_URL, warehouse: PATH_OR_URL, name: NAME, type: sql, ...}",
        properties={
            "required": ["warehouse"],
            "properties": {
                "uri": {"type": "string", "secret": True},
                "warehouse": {"type": "string"},
                "name": {"type": "string"},
                "type": {"type": "string", "default": "sql"},
            },
        },
    ),
    Setting("namespace", required=True, description="NAME or A.B: where the view tables are"),
    Setting("staging", description="where batches are staged (default: WAREHOUSE/_tidemark_staging)"),
    Setting("retry", "retry"),
)


@dataclass(frozen=True)
class IcebergSettings:
    """The parsed config (no connection is made here)."""

    kind: str  # the catalog type: sql (tested), or another pyiceberg catalog type (rest, …)
    catalog_name: str
    properties: dict = field(repr=False)  # pyiceberg catalog properties (may hold credentials)
    warehouse: str
    namespace: tuple
    staging: str
    policy: RetryPolicy

    @classmethod
    def from_config(cls, config: dict) -> "IcebergSettings":
        v = read("iceberg", config, SETTINGS)
        cat = v["catalog"]
        props = {str(k): str(x) for k, x in cat.items() if k != "name" and x is not None}
        warehouse = props.get("warehouse")
        if not warehouse:
            raise SpecError("iceberg endpoint: catalog.warehouse is required (a folder or an object-store URL)")
        if not is_uri(warehouse):
            warehouse = os.path.abspath(warehouse)
        props["warehouse"] = warehouse
        kind = props.pop("type", "sql").lower()
        if kind == "sql":
            uri = props.get("uri") or (
                f"sqlite:///{os.path.join(warehouse, 'catalog.db')}" if not is_uri(warehouse) else None
            )
            if not uri:
                raise SpecError(
                    "iceberg endpoint: catalog.uri is required (a SQLAlchemy URL: sqlite:///catalog.db, "
                    "postgresql://user@host/db) when the warehouse is not a local folder"
                )
            props["uri"] = sqlalchemy_url(uri)
        elif not props.get("uri"):
            raise SpecError(f"iceberg endpoint: a {kind} catalog needs catalog.uri (e.g. https://catalog:8181)")
        namespace = v["namespace"]
        if any(not p for p in namespace.split(".")):
            raise SpecError(f"endpoint iceberg: namespace must be NAME or A.B (e.g. views), got {namespace!r}")
        staging = v["staging"] or join_path(warehouse, "_tidemark_staging")
        return cls(
            kind=kind,
            catalog_name=str(cat.get("name") or DEFAULT_CATALOG_NAME),
            properties=props,
            warehouse=warehouse,
            namespace=tuple(namespace.split(".")),
            staging=staging if is_uri(staging) else os.path.abspath(staging),
            policy=v["retry"],
        )

    @property
    def secrets(self) -> list[str]:
        """Values never to print: the catalog URL's password and secret-looking properties."""
        out = []
        pw = urllib.parse.urlsplit(self.properties.get("uri", "")).password
        if pw:
            out.append(urllib.parse.unquote(pw))
            out.append(pw)
        out += [v for k, v in self.properties.items() if any(w in k.lower() for w in SECRET_WORDS) and v]
        return out

    def shown(self, text: Any) -> str:
        return redact(text, self.secrets)

    def catalog(self):
        """A new pyiceberg catalog: the SQL catalog (creates its two tables in the database if
        missing), or another type pyiceberg knows (``type: rest``) with the given properties."""
        from pyiceberg.catalog.sql import SqlCatalog

        if self.kind != "sql":
            from pyiceberg.catalog import load_catalog

            return load_catalog(self.catalog_name, **{"type": self.kind, **self.properties})
        path = _sqlite_path(self.properties["uri"])
        if path is not None:  # SQLite creates the file, not its folder
            os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
        return SqlCatalog(self.catalog_name, **self.properties)

    def staging_fs(self):
        """(pyarrow file system, base path) of the staging folder, configured from the catalog
        properties (``s3.endpoint`` and credentials) the way pyiceberg's own FileIO is."""
        from pyiceberg.io.pyarrow import PyArrowFileIO

        io = PyArrowFileIO(self.properties)
        scheme, netloc, path = io.parse_location(self.staging)
        return io.fs_by_scheme(scheme, netloc), path.rstrip("/")


def resolve_config(config: dict, base_dir: str) -> dict:
    """``catalog.warehouse``, a ``sqlite:///`` catalog file and ``staging`` relative to the
    spec's folder (URLs stay as they are)."""
    out = resolve_local_path(dict(config), "staging", base_dir)
    cat = out.get("catalog")
    if isinstance(cat, dict):
        cat = resolve_local_path(dict(cat), "warehouse", base_dir)
        uri = cat.get("uri")
        path = _sqlite_path(uri) if isinstance(uri, str) else None
        if path is not None and not os.path.isabs(path):
            query = urllib.parse.urlsplit(cast(str, uri)).query  # a str: path is not None
            cat["uri"] = "sqlite:///" + os.path.abspath(os.path.join(base_dir, path)) + (f"?{query}" if query else "")
        out["catalog"] = cat
    return out
