#!/usr/bin/env python3
"""The external example driver (examples/external_driver/driver.py) with ONE realistic defect,
chosen by ``--defect NAME`` (or ``TIDEMARK_EXAMPLE_DEFECT``).  Each is a mistake a driver
author can make while following docs/protocol.md, and each loses or doubles data:

``checkpoint-second-tx``  the runtime checkpoint is written in a second endpoint transaction
                          after the data: a kill between the two replays the batch
``fence-before-tx``       the fence is checked before the commit transaction, not inside it: an
                          Open that slips in between does not stop the commit
``exact-range-fence``     Open bumps only the fence of its exact range: a session of the old
                          layout commits after a split or merge
``loaded-100``            Loaded answers at most 100 documents per Load
``store-early``           a transaction of more than 500 documents is written to the view
                          early, at Store, before StartCommit
``binding-blind-load``    a Load looks its keys up in every resource of the materialization, not
                          in its binding's: it answers with whichever binding's document it finds
``binding-fallback-load`` a Load looks in its binding's resource first, then in the others:
                          a key the binding does not hold is answered from another binding
``doc-16k``               the stored document keeps its first 16 KiB (a VARCHAR(16384)-like
                          column); a longer one is read back as whatever of it parses
``value-16k``             each string of a document keeps its first 16 KiB (a bounded text field)
``identity-overwritten``  every Apply replaces the view-identity record, so the record no longer
                          says since when, and for whom, the resource holds the view
``drops-nulls``           members whose value is null are not stored (a document store's habit)
``real-floats``           numbers that are not integers are stored as 4-byte REALs (0.1 comes back
                          0.10000000149011612)
``empty-string-null``     an empty string is stored as null (Oracle's rule)
``key-255``               a key's strings are cut to 255 characters (a VARCHAR(255) key column in a
                          non-strict mode): two keys that share 255 characters become one row

``tests/testing/test_conformance.py`` checks that the kit fails each one on the property
it breaks.  Standard library only, like the example.
"""

import importlib.util
import json
import os
import struct
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
EXAMPLE = os.path.join(HERE, "..", "..", "examples", "external_driver", "driver.py")

spec = importlib.util.spec_from_file_location("example_driver", EXAMPLE)
example = importlib.util.module_from_spec(spec)
spec.loader.exec_module(example)

DriverError, log = example.DriverError, example.log
SPILL_DOCS = 500  # store-early: buffered documents above which a session writes ahead
MAX_LOADED = 100  # loaded-100: documents per Loaded


def _write_ops(db, mat, ops, quarantined=(), batch_id=None):
    db.executemany(
        "INSERT INTO quarantine (materialization, batch_id, row) VALUES (?, ?, ?)",
        [(mat, batch_id, json.dumps(r)) for r in quarantined],
    )
    for resource, delta, key, doc, delete in ops:
        if delta:
            db.execute(
                "INSERT INTO deltas (materialization, resource, doc) VALUES (?, ?, ?)", (mat, resource, json.dumps(doc))
            )
        elif delete:
            db.execute("DELETE FROM docs WHERE materialization = ? AND resource = ? AND key = ?", (mat, resource, key))
        else:
            db.execute("INSERT OR REPLACE INTO docs VALUES (?, ?, ?, ?)", (mat, resource, key, json.dumps(doc)))


def _write_checkpoint(db, mat, begin, end, checkpoint):
    db.execute("INSERT INTO counter VALUES (0, 1) ON CONFLICT (id) DO UPDATE SET seq = seq + 1")
    seq = db.execute("SELECT seq FROM counter").fetchone()[0]
    db.execute(
        "UPDATE checkpoints SET checkpoint = ?, seq = ? WHERE materialization = ? AND key_begin = ? AND key_end = ?",
        (json.dumps(checkpoint), seq, mat, begin, end),
    )


def _fence(db, mat, begin, end, fence):
    row = db.execute(
        "SELECT fence FROM checkpoints WHERE materialization = ? AND key_begin = ? AND key_end = ?", (mat, begin, end)
    ).fetchone()
    if row is None or row[0] != fence:
        raise DriverError(
            "FencedOff", f"a newer session opened range [{begin:#x}, {end:#x}] of {mat!r} (fence {fence} is stale)"
        )


class CheckpointSecondTx(example.Store):
    def commit(self, mat, begin, end, fence, ops, checkpoint, quarantined=()):
        with self.transaction():
            _fence(self.db, mat, begin, end, fence)
            _write_ops(self.db, mat, ops, quarantined, checkpoint.get("batch_id"))
        with self.transaction():  # DEFECT: the checkpoint commits apart from the data
            _write_checkpoint(self.db, mat, begin, end, checkpoint)


class FenceBeforeTx(example.Store):
    def commit(self, mat, begin, end, fence, ops, checkpoint, quarantined=()):
        _fence(self.db, mat, begin, end, fence)  # DEFECT: checked before the transaction
        with self.transaction():
            _write_ops(self.db, mat, ops, quarantined, checkpoint.get("batch_id"))
            _write_checkpoint(self.db, mat, begin, end, checkpoint)


class ExactRangeFence(example.Store):
    def open_range(self, mat, begin, end):
        with self.transaction():
            rows = [
                r
                for r in self.db.execute(
                    "SELECT key_begin, key_end, fence, checkpoint, seq FROM checkpoints WHERE materialization = ?",
                    (mat,),
                )
                if example.overlaps(r[0], r[1], begin, end)
            ]
            covering = sorted((r for r in rows if r[0] <= begin and end <= r[1]), key=lambda r: r[1] - r[0])
            source = covering[0] if covering else None
            latest = max(rows, key=lambda r: r[4], default=None)
            if latest is not None and latest[3] is not None and (source is None or latest[4] > source[4]):
                source = latest
            exact = next((r for r in rows if r[0] == begin and r[1] == end), None)
            if exact is None:
                fence = 1
                self.db.execute("INSERT INTO checkpoints VALUES (?, ?, ?, ?, NULL, 0)", (mat, begin, end, fence))
            else:  # DEFECT: only the exact range's fence is bumped, not the overlapping ranges'
                fence = exact[2] + 1
                self.db.execute(
                    "UPDATE checkpoints SET fence = ? WHERE materialization = ? AND key_begin = ? AND key_end = ?",
                    (fence, mat, begin, end),
                )
            checkpoint = None
            if source is not None:
                checkpoint = source[3]
                self.db.execute(
                    "UPDATE checkpoints SET checkpoint = ?, seq = ? WHERE materialization = ? AND "
                    "key_begin = ? AND key_end = ?",
                    (source[3], source[4], mat, begin, end),
                )
            return fence, (json.loads(checkpoint) if checkpoint else None)


class BindingBlindLoad(example.Store):
    def __init__(self, path):
        super().__init__(path)
        self.db.execute("CREATE INDEX IF NOT EXISTS docs_by_key ON docs (materialization, key)")

    def read(self, mat, resource, keys):
        found = []
        for key in keys:  # DEFECT: the resource is not part of the lookup
            row = self.db.execute(
                "SELECT doc FROM docs WHERE materialization = ? AND key = ?", (mat, example.key_text(key))
            ).fetchone()
            if row is not None:
                found.append((list(key), json.loads(row[0])))
        return found


class BindingFallbackLoad(BindingBlindLoad):
    def read(self, mat, resource, keys):
        own = dict((tuple(k), d) for k, d in super(BindingBlindLoad, self).read(mat, resource, keys))
        rest = [k for k in keys if tuple(k) not in own]  # DEFECT: a missing key is looked up elsewhere
        return [(list(k), d) for k, d in own.items()] + super().read(mat, resource, rest)


MAX_TEXT = 16 * 1024


class _Cut(example.Store):
    """Writes documents through :meth:`cut` (the defect), reads them as the example does."""

    def commit(self, mat, begin, end, fence, ops, checkpoint, quarantined=()):
        ops = [
            (r, delta, key, self.cut(doc) if not delta and not delete else doc, delete)
            for r, delta, key, doc, delete in ops
        ]
        super().commit(mat, begin, end, fence, ops, checkpoint, quarantined)

    def read(self, mat, resource, keys):
        out = []
        for key in keys:
            row = self.db.execute(
                "SELECT doc FROM docs WHERE materialization = ? AND resource = ? AND key = ?",
                (mat, resource, example.key_text(key)),
            ).fetchone()
            if row is not None:
                out.append((list(key), self.parse(row[0])))
        return out


class Doc16k(_Cut):
    @staticmethod
    def cut(doc):
        return {"_text": json.dumps(doc)[:MAX_TEXT]}  # DEFECT: the column holds 16 KiB of the JSON text

    @staticmethod
    def parse(text):
        cut = json.loads(text)["_text"]
        try:
            return json.loads(cut)
        except ValueError:  # what of it parses: the fields before the cut
            head = cut[: cut.rfind(",")] + "}" if "," in cut else "{}"
            try:
                return json.loads(head)
            except ValueError:
                return {}


class Value16k(_Cut):
    @staticmethod
    def cut(doc):
        return {k: v[:MAX_TEXT] if isinstance(v, str) else v for k, v in doc.items()}  # DEFECT

    @staticmethod
    def parse(text):
        return json.loads(text)


def _each(value, fn):
    """``value`` with ``fn`` applied to every member and item, inside out (``fn`` returns
    ``_GONE`` to drop a member)."""
    if isinstance(value, dict):
        out = {k: _each(v, fn) for k, v in value.items()}
        return fn({k: v for k, v in out.items() if v is not _GONE})
    if isinstance(value, list):
        return fn([None if x is _GONE else x for x in (_each(v, fn) for v in value)])  # items stay
    return fn(value)


_GONE = object()


class DropsNulls(_Cut):
    @staticmethod
    def cut(doc):
        return _each(doc, lambda v: _GONE if v is None else v)  # DEFECT: a null member is not stored

    @staticmethod
    def parse(text):
        return json.loads(text)


def _real(v):
    if isinstance(v, float):
        try:
            return struct.unpack("f", struct.pack("f", v))[0]  # DEFECT: a 4-byte REAL
        except OverflowError:
            return float("inf") if v > 0 else float("-inf")
    return v


class RealFloats(DropsNulls):
    @staticmethod
    def cut(doc):
        return _each(doc, _real)


class EmptyStringNull(DropsNulls):
    @staticmethod
    def cut(doc):
        return _each(doc, lambda v: None if v == "" else v)  # DEFECT: '' is NULL


def key_text_255(key):
    """DEFECT: the key column keeps the first 255 characters of each string of the key."""
    return json.dumps([k[:255] if isinstance(k, str) else k for k in key], separators=(",", ":"), ensure_ascii=False)


class Loaded100(example.Session):
    def evaluate(self, load):
        out = super().evaluate(load)
        for reply in out:  # DEFECT: a Loaded holds at most MAX_LOADED documents
            body = reply["loaded"]
            body["keys"], body["docs"] = body["keys"][:MAX_LOADED], body["docs"][:MAX_LOADED]
        return out


class StoreEarly(example.Session):
    def store_docs(self, req):
        replies = super().store_docs(req)
        if len(self.ops) > SPILL_DOCS:  # DEFECT: a large transaction is written ahead, outside the commit
            with self.store.transaction():
                _write_ops(self.store.db, self.mat, self.ops)
            self.ops = []
        return replies


class IdentityOverwritten(example.Driver):
    def handle(self, name, req):
        if name == "apply" and not req.get("dry_run") and req.get("checkpoint_id"):
            for binding, record in zip(req["bindings"], req.get("identities") or []):
                resource = example.resource_of(binding)
                self.store.db.execute(  # DEFECT: every Apply replaces the record (its batch, its owner)
                    "INSERT OR REPLACE INTO identities (materialization, resource, record) VALUES (?, ?, ?)",
                    (req["materialization"], resource, json.dumps({**record, "resolved": resource})),
                )
            return [{"applied": {"action_description": "nothing to create"}}]
        return super().handle(name, req)


DEFECTS = {
    "checkpoint-second-tx": ("Store", CheckpointSecondTx),
    "fence-before-tx": ("Store", FenceBeforeTx),
    "exact-range-fence": ("Store", ExactRangeFence),
    "loaded-100": ("Session", Loaded100),
    "store-early": ("Session", StoreEarly),
    "binding-blind-load": ("Store", BindingBlindLoad),
    "binding-fallback-load": ("Store", BindingFallbackLoad),
    "doc-16k": ("Store", Doc16k),
    "value-16k": ("Store", Value16k),
    "identity-overwritten": ("Driver", IdentityOverwritten),
    "drops-nulls": ("Store", DropsNulls),
    "real-floats": ("Store", RealFloats),
    "empty-string-null": ("Store", EmptyStringNull),
    "key-255": ("key_text", key_text_255),
}


def main(argv):
    defect = os.environ.get("TIDEMARK_EXAMPLE_DEFECT")
    if "--defect" in argv:
        i = argv.index("--defect")
        defect, argv = argv[i + 1], argv[:i] + argv[i + 2 :]
    if defect not in DEFECTS:
        print(f"--defect must be one of {', '.join(DEFECTS)}", file=sys.stderr)
        return 2
    name, cls = DEFECTS[defect]
    setattr(example, name, cls)  # the example builds its Store and Sessions (and key texts) through these names
    return example.main(argv)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
