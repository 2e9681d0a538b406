"""MySQL/MariaDB for the tests: the server's URL (``TIDEMARK_MYSQL_URL``), a database per
test (dropped afterwards), a spec that materializes the orders into it, and its view."""

from __future__ import annotations

import os
import uuid

import pytest

MYSQL_URL = os.environ.get("TIDEMARK_MYSQL_URL", "mysql://root@127.0.0.1:3306/test")


def connect(url: str = MYSQL_URL, database: str | None = None):
    import pymysql

    from tidemark.drivers.mysql import MySqlSettings

    s = MySqlSettings.from_config({"url": url})
    return pymysql.connect(
        host=s.host,
        port=s.port,
        user=s.user,
        password=s.password,
        database=database or s.database,
        autocommit=True,
        charset="utf8mb4",
    )


def sql(url: str, query: str, params=None) -> list:
    con = connect(url)
    try:
        with con.cursor() as cur:
            cur.execute(query, params)
            return list(cur.fetchall())
    finally:
        con.close()


def drop_database(url: str, name: str) -> None:
    sql(url, f"DROP DATABASE IF EXISTS `{name}`")


@pytest.fixture(scope="session")
def mysql_url():
    try:
        import pymysql
    except ImportError:  # pragma: no cover
        pytest.fail("PyMySQL is not installed: pip install -e '.[dev]'")
    try:
        connect(MYSQL_URL).close()
    except pymysql.Error as exc:  # pragma: no cover
        pytest.fail(f"MySQL is not reachable at TIDEMARK_MYSQL_URL: {exc}")
    return MYSQL_URL


@pytest.fixture
def mysql_db(mysql_url):
    """A fresh database name (the views and tidemark's tables of one test), dropped afterwards."""
    name = f"tm_test_{uuid.uuid4().hex[:10]}"
    yield name
    drop_database(mysql_url, name)


def mysql_spec(tmp, *, data_dir, url, schema, shards=1, max_files=1, name="view") -> str:
    """A spec file: the orders collection materialized into MySQL ``schema.customers``."""
    from tests.support.helpers import orders_spec

    return orders_spec(
        tmp,
        data_dir=data_dir,
        db_path=None,
        shards=shards,
        max_files=max_files,
        name=name,
        endpoint={"mysql": {"url": url, "schema": schema}},
    )


def mysql_view(url, schema, table="customers", key="customer") -> dict:
    """The view as a reader sees it: ``{key: document}`` (either form)."""
    from tests.support.helpers import table_documents

    con = connect(url)
    try:
        with con.cursor() as cur:
            cur.execute(f"SELECT * FROM `{schema}`.`{table}`")
            return table_documents(cur, key)
    finally:
        con.close()
