"""A child process for the store's multi-process tests: ``python -m
tests.support.store_child COMMAND CONFIG_JSON``.  It prints one line per step
(``opened``, ``committing N``, ``committed N``, ``fenced`` ...) and flushes, so the
parent can await a step before it acts (SIGKILL, a competing Open, a reader)."""

from __future__ import annotations

import json
import sys

from tidemark.errors import FencedOff
from tidemark.protocol.messages import Range
from tidemark.store import RangeStore, StoreConfig, tidemark_key


def say(line: str) -> None:
    print(line, flush=True)


def cp(batch: int) -> dict:
    return {"materialization": "m", "checkpoint_id": "c1", "batch_id": batch}


def key(i: int) -> bytes:
    return tidemark_key([f"key-{i}"])


def batch_value(batch: int, i: int, size: int) -> bytes:
    return (b"b%08d-%06d-" % (batch, i)).ljust(size, b"x")


def main() -> None:
    command, args = sys.argv[1], json.loads(sys.argv[2])
    cfg = StoreConfig(
        path=args["path"],
        changelog=args.get("changelog"),
        max_uncommitted_bytes=args.get("max_uncommitted_bytes", 64 << 20),
    )
    key_range = Range(*args.get("range", [0, 0xFFFFFFFF]))
    store = RangeStore.open(cfg, key_range)
    say(f"opened {store.fence}")
    keys, size = args.get("keys", 100), args.get("value_size", 16)
    if command == "batches":
        # commit batches first..last; batch N writes every key with a value naming N
        for b in range(args["first"], args["last"] + 1):
            txn = store.transaction()
            for i in range(keys):
                txn.put(key(i), batch_value(b, i, size))
            say(f"committing {b}")
            txn.commit(cp(b))
            say(f"committed {b}")
        say("done")
    elif command == "hang_in_transaction":
        # one committed batch, then a transaction that writes (and spills), and waits
        txn = store.transaction()
        for i in range(keys):
            txn.put(key(i), batch_value(0, i, size))
        txn.commit(cp(0))
        txn = store.transaction()
        for i in range(keys * 3):
            txn.put(key(i), batch_value(1, i, size))
        for i in range(0, keys, 2):
            txn.delete(key(i))
        say(f"in-transaction spilled={txn.buffer.spilled}")
        sys.stdin.readline()  # the parent kills us here
    elif command == "commit_when_told":
        txn = store.transaction()
        for i in range(keys):
            txn.put(key(i), b"zombie")
        say("ready")
        sys.stdin.readline()
        try:
            txn.commit(cp(args["batch"]))
            say("committed")
        except FencedOff as exc:
            say(f"fenced {exc}")


if __name__ == "__main__":
    main()
