"""Hand-made tables and file times for the adopt and rebuild tests."""

from __future__ import annotations

import json
import os
import sqlite3

from tests.support.helpers import oracle_orders


def first_files(data, n: int, tmp_path) -> dict:
    """The oracle's view of the first ``n`` files of ``data``: what a correct hand-written job holds."""
    part = tmp_path / "first"
    part.mkdir()
    for name in sorted(os.listdir(data))[:n]:
        (part / name).write_text((data / name).read_text())
    return oracle_orders(part)


def hand_table_sqlite(db, table: str, view: dict) -> None:
    con = sqlite3.connect(db)
    con.execute(
        f'CREATE TABLE "{table}" (customer TEXT PRIMARY KEY, amount INTEGER, orders INTEGER, '
        "largest INTEGER, city TEXT, items TEXT, flags TEXT)"
    )
    con.executemany(
        f'INSERT INTO "{table}" VALUES (?, ?, ?, ?, ?, ?, ?)',
        [
            (
                d["customer"],
                d["amount"],
                d["orders"],
                d["largest"],
                d["city"],
                json.dumps(d["items"]),
                json.dumps(d["flags"]),
            )
            for d in view.values()
        ],
    )
    con.commit()
    con.close()


def mtime(data, index: int) -> float:
    return os.path.getmtime(data / f"orders-{index:04d}.json")
