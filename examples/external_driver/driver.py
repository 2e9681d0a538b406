#!/usr/bin/env python3
"""An external tidemark driver: the materialization protocol as JSON lines on stdin/stdout.

Standard library only, and it does not import tidemark: it is an example of what a driver
in any language has to do.  It keeps every view, delta-update row and checkpoint in one
SQLite file and commits *store-authoritative*: the data, the runtime checkpoint and the
fence check of a transaction go into one SQLite transaction.

    python driver.py --state /tmp/views.db          (or TIDEMARK_EXAMPLE_STATE=/tmp/views.db)
    tidemark conformance "command:python examples/external_driver/driver.py --state /tmp/x.db"

Each input line is one request ``{"name": {fields}}``; each reply is one line.  Log to
stderr: stdout carries only protocol lines.  One process serves requests one after the
other until stdin closes: setup and inspection requests, and sessions (``open`` starts
one and ends any previous one; the runtime reuses a process only between transactions).
"""

import argparse
import json
import os
import sqlite3
import sys
import time
import traceback

CAPABILITIES = {
    "commit_pattern": "store-authoritative",
    "delta_updates": True,
    "standard_updates": True,
    "max_load_keys": 1000,
    "max_store_docs": 1000,
    "quarantine": True,
    "identities": True,  # keeps each resource's view-identity record (apply, list_identities)
}

SCHEMA = """
CREATE TABLE IF NOT EXISTS checkpoints (
    materialization TEXT NOT NULL, key_begin INTEGER NOT NULL, key_end INTEGER NOT NULL,
    fence INTEGER NOT NULL, checkpoint TEXT, seq INTEGER NOT NULL DEFAULT 0,
    PRIMARY KEY (materialization, key_begin, key_end));
CREATE TABLE IF NOT EXISTS docs (
    materialization TEXT NOT NULL, resource TEXT NOT NULL, key TEXT NOT NULL, doc TEXT NOT NULL,
    PRIMARY KEY (materialization, resource, key));
CREATE TABLE IF NOT EXISTS deltas (
    id INTEGER PRIMARY KEY AUTOINCREMENT, materialization TEXT NOT NULL, resource TEXT NOT NULL,
    doc TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS counter (id INTEGER PRIMARY KEY CHECK (id = 0), seq INTEGER NOT NULL);
CREATE TABLE IF NOT EXISTS identities (
    materialization TEXT NOT NULL, resource TEXT NOT NULL, record TEXT NOT NULL, PRIMARY KEY (materialization, resource));
CREATE TABLE IF NOT EXISTS quarantine (
    id INTEGER PRIMARY KEY AUTOINCREMENT, materialization TEXT NOT NULL, batch_id INTEGER, row TEXT NOT NULL);
"""


class DriverError(Exception):
    """Reported to the runtime as {"error": {"type": TYPE, "message": ...}}."""

    def __init__(self, type_, message):
        super().__init__(message)
        self.type = type_


def log(*args):
    print("[example driver]", *args, file=sys.stderr, flush=True)


def key_text(key):
    return json.dumps(list(key), separators=(",", ":"), ensure_ascii=False)


def resource_of(binding):
    return json.dumps(binding["resource"], sort_keys=True, separators=(",", ":"))


def overlaps(a_begin, a_end, b_begin, b_end):
    return a_begin <= b_end and b_begin <= a_end


class Store:
    """The SQLite file: views, delta rows, per-range checkpoints with their fence."""

    def __init__(self, path):
        self.db = sqlite3.connect(path, timeout=60, isolation_level=None)
        self.db.execute("PRAGMA journal_mode=WAL")
        self.db.execute("PRAGMA synchronous=FULL")
        self.db.executescript(SCHEMA)

    def transaction(self):
        return _Tx(self.db)

    def open_range(self, mat, begin, end):
        """Bump the fence of every overlapping range, inherit a checkpoint, return (fence, checkpoint)."""
        with self.transaction():
            rows = [
                r
                for r in self.db.execute(
                    "SELECT key_begin, key_end, fence, checkpoint, seq FROM checkpoints WHERE materialization = ?",
                    (mat,),
                )
                if overlaps(r[0], r[1], begin, end)
            ]
            self.db.executemany(
                "UPDATE checkpoints SET fence = fence + 1 WHERE materialization = ? AND key_begin = ? AND key_end = ?",
                [(mat, r[0], r[1]) for r in rows],
            )
            # The narrowest covering range (a split), or a more recently committed overlapping one (a merge).
            covering = sorted((r for r in rows if r[0] <= begin and end <= r[1]), key=lambda r: r[1] - r[0])
            source = covering[0] if covering else None
            latest = max(rows, key=lambda r: r[4], default=None)
            if latest is not None and latest[3] is not None and (source is None or latest[4] > source[4]):
                source = latest
            exact = next((r for r in rows if r[0] == begin and r[1] == end), None)
            if exact is None:
                fence = 1 + max((r[2] + 1 for r in rows), default=0)
                self.db.execute("INSERT INTO checkpoints VALUES (?, ?, ?, ?, NULL, 0)", (mat, begin, end, fence))
            else:
                fence = exact[2] + 1
            checkpoint = None
            if source is not None:
                checkpoint = source[3]
                self.db.execute(
                    "UPDATE checkpoints SET checkpoint = ?, seq = ? WHERE materialization = ? AND key_begin = ? "
                    "AND key_end = ?",
                    (source[3], source[4], mat, begin, end),
                )
            return fence, (json.loads(checkpoint) if checkpoint else None)

    def read(self, mat, resource, keys):
        found = []
        for key in keys:
            row = self.db.execute(
                "SELECT doc FROM docs WHERE materialization = ? AND resource = ? AND key = ?",
                (mat, resource, key_text(key)),
            ).fetchone()
            if row is not None:
                found.append((list(key), json.loads(row[0])))
        return found

    def commit(self, mat, begin, end, fence, ops, checkpoint, quarantined=()):
        """Step 1 verify the fence, step 2 write the data and invalid documents, step 3 the checkpoint:
        one SQLite transaction."""
        with self.transaction():
            row = self.db.execute(
                "SELECT fence FROM checkpoints WHERE materialization = ? AND key_begin = ? AND key_end = ?",
                (mat, begin, end),
            ).fetchone()
            if row is None or row[0] != fence:
                raise DriverError(
                    "FencedOff",
                    f"a newer session opened range [{begin:#x}, {end:#x}] of {mat!r} (fence {fence} is stale)",
                )
            for resource, delta, key, doc, delete in ops:
                if delta:
                    self.db.execute(
                        "INSERT INTO deltas (materialization, resource, doc) VALUES (?, ?, ?)",
                        (mat, resource, json.dumps(doc)),
                    )
                elif delete:
                    self.db.execute(
                        "DELETE FROM docs WHERE materialization = ? AND resource = ? AND key = ?", (mat, resource, key)
                    )
                else:
                    self.db.execute(
                        "INSERT OR REPLACE INTO docs VALUES (?, ?, ?, ?)", (mat, resource, key, json.dumps(doc))
                    )
            self.db.executemany(
                "INSERT INTO quarantine (materialization, batch_id, row) VALUES (?, ?, ?)",
                [(mat, checkpoint.get("batch_id"), json.dumps(r)) for r in quarantined],
            )
            self.db.execute("INSERT INTO counter VALUES (0, 1) ON CONFLICT (id) DO UPDATE SET seq = seq + 1")
            seq = self.db.execute("SELECT seq FROM counter").fetchone()[0]
            self.db.execute(
                "UPDATE checkpoints SET checkpoint = ?, seq = ? WHERE materialization = ? AND key_begin = ? "
                "AND key_end = ?",
                (json.dumps(checkpoint), seq, mat, begin, end),
            )


class _Tx:
    """BEGIN IMMEDIATE ... COMMIT, or ROLLBACK on an exception."""

    def __init__(self, db):
        self.db = db

    def __enter__(self):
        self.db.execute("BEGIN IMMEDIATE")

    def __exit__(self, exc_type, exc, tb):
        self.db.execute("ROLLBACK" if exc_type else "COMMIT")
        return False


class Session:
    """One shard session, with its own check of the protocol's order."""

    def __init__(self, store, req):
        self.store = store
        self.mat = req["materialization"]
        self.begin, self.end = req["range"]["key_begin"], req["range"]["key_end"]
        self.bindings = req.get("bindings") or []
        self.fence, self.checkpoint = store.open_range(self.mat, self.begin, self.end)
        self.phase = "acknowledge"  # acknowledge -> load -> store -> (start_commit) -> acknowledge
        self.acknowledged = False
        self.deferred = []  # Loads that arrived before our Acknowledged: evaluated at Flush
        self.ops = []
        self.quarantined = []  # invalid documents, committed with the transaction

    def expect(self, name, *phases):
        if self.phase not in phases:
            raise DriverError("ProtocolViolation", f"{name} in phase {self.phase}")

    def acknowledge(self, req):
        self.expect("acknowledge", "acknowledge")
        self.acknowledged = True  # store-authoritative: nothing staged to apply
        self.phase = "load"
        return [{"acknowledged": {"state": None}}]

    def evaluate(self, load):
        resource = resource_of(self.bindings[load["binding"]])
        found = self.store.read(self.mat, resource, load["keys"])
        if not found:
            return []
        return [{"loaded": {"binding": load["binding"], "keys": [k for k, _ in found], "docs": [d for _, d in found]}}]

    def load(self, req):
        self.expect("load", "acknowledge", "load")
        if self.bindings[req["binding"]].get("delta_updates"):
            raise DriverError("ProtocolViolation", f"load for delta-updates binding {req['binding']}")
        if not self.acknowledged:  # read-committed: never evaluate before our own Acknowledged
            self.deferred.append(req)
            return []
        return self.evaluate(req)

    def flush(self, req):
        self.expect("flush", "load")
        out = []
        for load in self.deferred:
            out += self.evaluate(load)
        self.deferred = []
        self.phase = "store"
        return out + [{"flushed": {"state": None}}]

    def store_docs(self, req):
        self.expect("store", "store")
        binding = self.bindings[req["binding"]]
        resource, delta = resource_of(binding), bool(binding.get("delta_updates"))
        for key, doc, delete in zip(req["keys"], req["docs"], req["deletes"]):
            self.ops.append((resource, delta, key_text(key), doc, bool(delete)))
        return []  # Store has no reply

    def quarantine(self, req):
        self.expect("quarantine", "store")
        self.quarantined += req.get("rows") or []
        return []  # no reply

    def start_commit(self, req):
        self.expect("start_commit", "store")
        ops, self.ops = self.ops, []
        quarantined, self.quarantined = self.quarantined, []
        self.store.commit(self.mat, self.begin, self.end, self.fence, ops, req["runtime_checkpoint"], quarantined)
        self.phase, self.acknowledged = "acknowledge", False
        return [{"started_commit": {"state": None}}]


class Driver:
    def __init__(self, state_path):
        self.store = Store(state_path)
        self.session = None

    def handle(self, name, req):
        """The reply lines for one request."""
        if name in ("acknowledge", "load", "flush", "store", "quarantine", "start_commit"):
            if self.session is None:
                raise DriverError("ProtocolViolation", f"{name} before open")
            return {
                "acknowledge": self.session.acknowledge,
                "load": self.session.load,
                "flush": self.session.flush,
                "store": self.session.store_docs,
                "quarantine": self.session.quarantine,
                "start_commit": self.session.start_commit,
            }[name](req)
        if name == "describe":
            return [{"described": {"capabilities": CAPABILITIES}}]
        if name == "spec":
            return [
                {
                    "spec_response": {
                        "config_schema": {"type": "object"},
                        "resource_schema": {"type": "object"},
                        "documentation_url": "examples/external_driver/README.md",
                    }
                }
            ]
        if name == "validate":
            return [
                {
                    "validated": {
                        "bindings": [
                            {
                                "resource_path": list(b["resource"].values())[:1],
                                "delta_updates": b.get("delta_updates", False),
                                "constraints": {},
                            }
                            for b in req["bindings"]
                        ]
                    }
                }
            ]
        if name == "apply":  # keep each resource's view-identity record where it has none
            if not req.get("dry_run") and req.get("checkpoint_id"):
                for binding, record in zip(req["bindings"], req.get("identities") or []):
                    resource = resource_of(binding)
                    self.store.db.execute(
                        "INSERT OR IGNORE INTO identities (materialization, resource, record) VALUES (?, ?, ?)",
                        (req["materialization"], resource, json.dumps({**record, "resolved": resource})),
                    )
            return [{"applied": {"action_description": "nothing to create: one SQLite file holds every resource"}}]
        if name == "list_identities":
            records = []
            for binding in req["bindings"]:
                row = self.store.db.execute(
                    "SELECT record FROM identities WHERE materialization = ? AND resource = ?",
                    (req["materialization"], resource_of(binding)),
                ).fetchone()
                records.append(json.loads(row[0]) if row else None)
            return [{"identities_listed": {"records": records}}]
        if name == "open":  # a new session; the runtime reuses processes, so forget any previous one
            self.session = None
            self.session = Session(self.store, req)
            return [{"opened": {"runtime_checkpoint": self.session.checkpoint}}]
        if name == "dump":
            return [{"dumped": self.dump(req["materialization"], req["binding"])}]
        if name == "list_checkpoints":
            rows = [
                {"key_begin": b, "key_end": e, "fence": f, "runtime_checkpoint": json.loads(c) if c else None}
                for b, e, f, c in self.store.db.execute(
                    "SELECT key_begin, key_end, fence, checkpoint FROM checkpoints WHERE materialization = ? "
                    "ORDER BY key_begin, key_end",
                    (req["materialization"],),
                )
            ]
            return [{"checkpoints_listed": {"rows": rows}}]
        if name == "coordinator_acknowledge":
            return [{"coordinator_acknowledged": {}}]  # store-authoritative: nothing to apply
        raise DriverError("ProtocolViolation", f"unexpected request {name!r}")

    def dump(self, mat, binding):
        resource = resource_of(binding)
        if binding.get("delta_updates"):
            rows = [
                json.loads(d)
                for (d,) in self.store.db.execute(
                    "SELECT doc FROM deltas WHERE materialization = ? AND resource = ? ORDER BY id", (mat, resource)
                )
            ]
            return {"rows": rows, "delta_updates": True}
        rows = [
            [json.loads(k), json.loads(d)]
            for k, d in self.store.db.execute(
                "SELECT key, doc FROM docs WHERE materialization = ? AND resource = ? ORDER BY key", (mat, resource)
            )
        ]
        return {"rows": rows, "delta_updates": False}


def handle_retrying(driver, name, req, attempts=10):
    """``driver.handle``; a read-only request that meets SQLite's "locking protocol" error (a
    reader racing the recovery of a write-ahead log whose writer was killed, on a busy machine)
    is tried again: it changes nothing, so trying again is safe."""
    for attempt in range(attempts):
        try:
            return driver.handle(name, req)
        except sqlite3.OperationalError as exc:
            if name not in READ_ONLY or "locking protocol" not in str(exc) or attempt == attempts - 1:
                raise
            time.sleep(0.05 * (attempt + 1))


READ_ONLY = ("dump", "list_checkpoints", "list_identities")


def write(obj):
    sys.stdout.write(json.dumps(obj, separators=(",", ":"), ensure_ascii=True) + "\n")


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[1])
    parser.add_argument(
        "--state",
        default=os.environ.get("TIDEMARK_EXAMPLE_STATE"),
        help="the SQLite file holding the views (default: $TIDEMARK_EXAMPLE_STATE)",
    )
    args = parser.parse_args(argv)
    if not args.state:
        parser.error("--state PATH (or TIDEMARK_EXAMPLE_STATE) is required")
    driver = Driver(args.state)
    for line in sys.stdin:
        if not line.strip():
            continue
        try:
            request = json.loads(line)
            ((name, body),) = request.items()
            replies = handle_retrying(driver, name, body or {})
        except DriverError as exc:
            replies = [{"error": {"type": exc.type, "message": str(exc)}}]
        except Exception as exc:  # a bug or an unexpected input: report it, keep the details on stderr
            log(traceback.format_exc().rstrip())
            replies = [{"error": {"type": "DriverError", "message": f"{type(exc).__name__}: {exc}"}}]
        for reply in replies:
            write(reply)
        sys.stdout.flush()
    return 0


if __name__ == "__main__":
    sys.exit(main())
