"""Plot the endpoints' per-shard write rates recorded in docs/benchmarks.md as a PNG.

    pip install matplotlib && python bench/plot_endpoints.py [OUT.png]

The numbers are the lower ends of the ranges in the summary table (each measured by its
``bench/bench_<endpoint>*.py``, one shard, driver level); update both together.
"""

from __future__ import annotations

import sys

# endpoint -> (documents/s stored and committed, where it comes from)
RATES = {
    "redis (exactly-once)": (150_000, "bench_redis.py, commits of 10k"),
    "webhook (+ local state)": (114_000, "bench_webhook.py, chunks of 500"),
    "store (RocksDB)": (99_000, "bench_store.py, 1M keys"),
    "postgres": (85_000, "bench_postgres_driver.py, 100k docs"),
    "kafka (+ local state)": (81_000, "bench_kafka.py, 8 batches of 25k"),
    "mysql / MariaDB": (78_000, "bench_mysql_driver.py, 100k docs"),
    "delta": (20_000, "bench_delta.py"),
}


def main(out: str = "docs/img/endpoint-rates.png") -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    names = list(RATES)[::-1]
    values = [RATES[n][0] for n in names]
    fig, ax = plt.subplots(figsize=(7, 3.2), dpi=120)
    bars = ax.barh(names, values, color="#3b7dd8")
    for bar, v in zip(bars, values):
        ax.text(v + 2000, bar.get_y() + bar.get_height() / 2, f"{v / 1000:.0f}k", va="center", fontsize=8)
    ax.set_xlabel("documents/s stored and committed, one shard (driver level)")
    ax.set_xlim(0, max(values) * 1.15)
    ax.set_title("tidemark endpoints: write rate per shard", fontsize=10)
    fig.tight_layout()
    fig.savefig(out)
    print(out)


if __name__ == "__main__":
    main(*sys.argv[1:])
