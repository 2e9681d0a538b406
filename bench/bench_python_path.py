"""Per-document cost of the Python path (the fallback's worker, and suspects of the compiled path).

    python bench/bench_python_path.py [--docs 100000] [--repeats 3]

One process, no Spark. For two schemas it times, per document:

* ``check``  -- :func:`tidemark.spark.combine.check_document` (parse, key, validate);
* ``reduce`` -- folding each key's documents with :meth:`Collection.reduce`, in order;
* ``fold``   -- the fallback's ``mapInArrow`` function on Arrow batches sorted by key
  (everything the Python worker does per document).

Schemas: ``orders`` (the combine benchmark's, compilable) and ``cdc`` (a deletion under
``if: _meta/op == "d"``, which never compiles: the reducer evaluates the condition for
every document).  Prints the best of ``--repeats`` runs in microseconds per document.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import random
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))
sys.path.insert(0, HERE)

CDC = {
    "type": "object",
    "required": ["id"],
    "reduce": {"strategy": "merge"},
    "properties": {
        "id": {"type": "integer"},
        "name": {"type": "string"},
        "qty": {"type": "integer", "reduce": {"strategy": "sum"}},
        "_meta": {"type": "object", "properties": {"op": {"enum": ["c", "u", "d"]}}},
    },
    "if": {"properties": {"_meta": {"properties": {"op": {"const": "d"}}}}},
    "then": {"reduce": {"delete": True}},
}


def documents(name: str, n: int) -> tuple[dict, tuple, list[str]]:
    from bench_combine import SCHEMA

    draw = random.Random(7)
    if name == "orders":
        lines = []
        for _ in range(n):
            amount = draw.randint(1, 500)
            doc = {
                "customer": f"customer-{draw.randrange(n // 10):07d}",
                "amount": amount,
                "orders": 1,
                "largest": amount,
                "smallest": amount / 4,
                "city": draw.choice(["Lisbon", "Oslo", "Quito", "Hanoi"]),
                "first_seen": f"2024-01-{draw.randint(1, 28):02d}",
                "vip": draw.random() < 0.1,
            }
            if draw.random() < 0.5:
                doc["items"] = [f"sku-{draw.randrange(100)}" for _ in range(draw.randint(1, 2))]
            lines.append(json.dumps(doc, separators=(",", ":")))
        return SCHEMA, ("/customer",), lines
    lines = [
        json.dumps({"id": draw.randrange(n // 10), "name": "x", "qty": 1, "_meta": {"op": draw.choice("cuuuuud")}})
        for _ in range(n)
    ]
    return CDC, ("/id",), lines


def best(fn, repeats: int) -> float:
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return min(times)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--docs", type=int, default=100_000)
    ap.add_argument("--repeats", type=int, default=3)
    args = ap.parse_args()

    import pyarrow as pa

    from tidemark.collection.collection import Collection
    from tidemark.spark.combined import check_document
    from tidemark.spark.fold import fold_partitions
    from tidemark.spec import CollectionSpec

    print(f"Python {platform.python_version()}, {args.docs:,} documents per schema, best of {args.repeats}")
    print("| schema | check µs/doc | reduce µs/doc | fold µs/doc |")
    print("|---|---|---|---|")
    for name in ("orders", "cdc"):
        schema, key, lines = documents(name, args.docs)
        coll = Collection(CollectionSpec(name, key, schema))
        checked = [check_document(coll, line) for line in lines]
        assert all(reason is None for reason, _kj, _doc in checked)

        def reduce_all():
            acc: dict = {}
            for _reason, kj, doc in checked:
                acc[kj] = doc if kj not in acc else coll.reduce(acc[kj], doc)

        order = sorted(range(len(lines)), key=lambda i: (checked[i][1], i))
        batch = pa.RecordBatch.from_pydict(
            {
                "value": [lines[i] for i in order],
                "_file": ["f"] * len(lines),
                "_block": [0] * len(lines),
                "_row": order,
                "_nk": [checked[i][1] for i in order],
            }
        )
        batches = [batch.slice(o, 10_000) for o in range(0, len(lines), 10_000)]
        fold = fold_partitions(coll, "fail")
        n = len(lines)
        check = best(lambda: [check_document(coll, line) for line in lines], args.repeats) / n * 1e6
        red = best(reduce_all, args.repeats) / n * 1e6
        folded = best(lambda: list(fold(iter(batches))), args.repeats) / n * 1e6
        print(f"| {name} | {check:.1f} | {red:.1f} | {folded:.1f} |", flush=True)


if __name__ == "__main__":
    main()
