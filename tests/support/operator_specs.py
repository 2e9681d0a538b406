"""Endpoints and specs for the operator-action, rescale and upgrade tests."""

from __future__ import annotations

import shutil
import sqlite3

import yaml

from tests.support.helpers import ORDERS_SCHEMA, normalize, postgres_view, sqlite_view


class SQLite:
    name = "sqlite"

    def __init__(self, tmp):
        self.db = tmp / "views.db"

    def endpoint(self) -> dict:
        return {"sqlite": {"path": str(self.db)}}

    def view(self, table="customers") -> dict:
        if not self.db.exists():
            return {}
        con = sqlite3.connect(self.db)
        try:
            if not con.execute("SELECT 1 FROM sqlite_master WHERE name=?", (table,)).fetchone():
                return {}
        finally:
            con.close()
        return normalize(sqlite_view(self.db, table))

    def positions(self) -> list:
        con = sqlite3.connect(self.db)
        try:
            return con.execute("SELECT * FROM tidemark_checkpoints ORDER BY 1, 2, 3").fetchall()
        finally:
            con.close()

    def backup(self):
        dest = self.db.with_suffix(".backup")
        with sqlite3.connect(self.db) as src, sqlite3.connect(dest) as dst:
            src.backup(dst)
        return dest

    def restore(self, backup) -> None:
        with sqlite3.connect(backup) as src, sqlite3.connect(self.db) as dst:
            src.backup(dst)

    def drop(self) -> None:
        con = sqlite3.connect(self.db)
        con.execute("DROP TABLE customers")
        con.execute("DROP TABLE tidemark_checkpoints")
        con.commit()
        con.close()


class Postgres:
    name = "postgres"

    def __init__(self, url, schema):
        self.url, self.schema = url, schema

    def endpoint(self) -> dict:
        return {"postgres": {"url": self.url, "schema": self.schema}}

    def _sql(self, *statements, fetch=False):
        import psycopg

        with psycopg.connect(self.url, autocommit=True) as con:
            out = None
            for st in statements:
                cur = con.execute(st)
                if fetch:
                    out = cur.fetchall()
            return out

    def view(self, table="customers") -> dict:
        exists = self._sql(f'SELECT to_regclass(\'"{self.schema}"."{table}"\')', fetch=True)[0][0]
        return normalize(postgres_view(self.url, self.schema, table)) if exists else {}

    def positions(self) -> list:
        return self._sql(
            f"SELECT materialization, key_begin, key_end, fence, checkpoint::text FROM "
            f'"{self.schema}".tidemark_checkpoints ORDER BY 1, 2, 3',
            fetch=True,
        )

    def backup(self):
        s = self.schema
        self._sql(
            f'CREATE TABLE "{s}".bk_customers AS SELECT * FROM "{s}".customers',
            f'CREATE TABLE "{s}".bk_checkpoints AS SELECT * FROM "{s}".tidemark_checkpoints',
        )
        return None

    def restore(self, _backup) -> None:
        s = self.schema
        self._sql(
            f'TRUNCATE "{s}".customers',
            f'INSERT INTO "{s}".customers SELECT * FROM "{s}".bk_customers',
            f'TRUNCATE "{s}".tidemark_checkpoints',
            f'INSERT INTO "{s}".tidemark_checkpoints SELECT * FROM "{s}".bk_checkpoints',
        )

    def drop(self) -> None:
        self._sql(f'DROP TABLE "{self.schema}".customers', f'DROP TABLE "{self.schema}".tidemark_checkpoints')


class Delta:
    name = "delta"

    def __init__(self, tmp):
        self.lake = tmp / "lake"

    def endpoint(self) -> dict:
        return {"delta": {"path": str(self.lake)}}

    def view(self, table="customers") -> dict:
        from tests.support.delta_support import independent_view

        if not (self.lake / table / "_delta_log").exists():
            return {}
        return normalize(independent_view(self.lake / table))

    def positions(self) -> list:
        import deltalake

        return [deltalake.DeltaTable(str(self.lake / "customers")).version()]

    def backup(self):
        dest = self.lake.parent / "backup-customers"
        shutil.copytree(self.lake / "customers", dest)
        return dest

    def restore(self, backup) -> None:
        shutil.rmtree(self.lake / "customers")
        shutil.copytree(backup, self.lake / "customers")

    def drop(self) -> None:
        shutil.rmtree(self.lake / "customers")


def endpoint(request, tmp_path, kind):
    if kind == "sqlite":
        return SQLite(tmp_path)
    if kind == "delta":
        return Delta(tmp_path)
    return Postgres(request.getfixturevalue("postgres_url"), request.getfixturevalue("pg_schema"))


def write_spec(tmp, data, ep, *, shards=2, max_files=1) -> str:
    spec = {
        "collections": {
            "orders": {
                "key": ["/customer"],
                "schema": ORDERS_SCHEMA,
                "source": {"format": "json", "path": str(data), "options": {"maxFilesPerTrigger": max_files}},
            }
        },
        "materializations": {
            "view": {
                "endpoint": ep.endpoint(),
                "shards": shards,
                "bindings": [{"source": "orders", "resource": {"table": "customers"}}],
            }
        },
        "checkpoint": str(tmp / "checkpoints"),
    }
    path = tmp / "spec.yaml"
    path.write_text(yaml.safe_dump(spec))
    return str(path)
