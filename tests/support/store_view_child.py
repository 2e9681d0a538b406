"""A writer for the store view tests: ``python -m tests.support.store_view_child
CONFIG_JSON`` commits batches through the StoreDriver, shard after shard, and prints
``committed N`` after each whole batch.

Batch ``b`` holds the keys ``k{i}`` with ``(i + b) % 5 != 0`` (others are deleted), each
with the document ``{"k": ..., "b": b}``: a view showing part of a batch has mixed
``b`` or the wrong key set.
"""

from __future__ import annotations

import json
import sys

from tidemark.drivers.store import StoreDriver
from tidemark.protocol.messages import (
    Acknowledge,
    Apply,
    BindingSpec,
    Field,
    Flush,
    Load,
    Open,
    Range,
    StartCommit,
    Store,
)
from tidemark.store import key_hash_of, tidemark_key

BINDING = BindingSpec({"name": "totals"}, "events", ("/k",), (Field("k", "/k", "string", is_key=True),))


def expected_keys(batch: int, keys: int) -> set[str]:
    return {f"k{i}" for i in range(keys) if (i + batch) % 5 != 0}


def cp(batch: int) -> dict:
    return {"checkpoint_id": "cp", "batch_id": batch, "materialization": "m"}


def main() -> None:
    args = json.loads(sys.argv[1])
    driver = StoreDriver(args["config"])
    driver.apply(Apply("m", {}, (BINDING,), checkpoint_id="cp"))
    ranges = Range.split(args.get("shards", 2))
    keys = args.get("keys", 500)
    for batch in range(args.get("batches", 20)):
        for key_range in ranges:
            txn, opened = driver.open(Open("m", "v1", key_range, bindings=(BINDING,)))
            txn.acknowledge(Acknowledge())
            mine = [f"k{i}" for i in range(keys) if key_range.contains(key_hash_of(tidemark_key([f"k{i}"])))]
            loaded = list(txn.load(Load(0, tuple((k,) for k in mine))))
            loaded += txn.flush(Flush())[0]
            have = {lk[0] for ld in loaded for lk in ld.keys}
            want = expected_keys(batch, keys)
            rows = [(k, k not in want) for k in mine if k in want or k in have]
            txn.store(
                Store(
                    0,
                    tuple((k,) for k, _ in rows),
                    tuple(() for _ in rows),
                    tuple({"k": k, "b": batch} for k, _ in rows),
                    tuple(k in have for k, _ in rows),
                    tuple(d for _, d in rows),
                )
            )
            txn.start_commit(StartCommit(cp(batch)))
            txn.close()
        print(f"committed {batch}", flush=True)


if __name__ == "__main__":
    main()
