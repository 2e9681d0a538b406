"""``python -m tests.support.cluster_child SPEC MASTER [KEY=VALUE ...]``: run a spec to the
end of its input on a Spark master with extra Spark conf (e.g. speculation, executor env);
prints one JSON line per batch. Used by the standalone-cluster tests."""

from __future__ import annotations

import json
import sys


def main(argv: list[str]) -> int:
    spec, master, *pairs = argv
    conf = dict(p.split("=", 1) for p in pairs)
    from tidemark.spark.runner import run_spec
    from tidemark.spark.session import local_session

    spark = local_session(master=master, **conf)
    try:
        run_spec(
            spec,
            spark=spark,
            available_now=True,
            on_batch=lambda r: print(json.dumps({"batch": r.batch_id, "shards": r.shards}), flush=True),
        )
    finally:
        spark.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
