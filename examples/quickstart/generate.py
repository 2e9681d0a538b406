"""Write a few files of order documents (JSON lines) for the quickstart.

Usage: python generate.py [--files 6] [--per-file 500] [--customers 50] [--seed 7]
"""

import argparse
import json
import os
import random

CITIES = ["Lisbon", "Oslo", "Quito", "Hanoi", "Accra", "Perth"]
ITEMS = ["tea", "rope", "lamp", "kite", "soap", "map"]


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--files", type=int, default=6)
    ap.add_argument("--per-file", type=int, default=500)
    ap.add_argument("--customers", type=int, default=50)
    ap.add_argument("--seed", type=int, default=7)
    ap.add_argument("--out", default=os.path.join(os.path.dirname(os.path.abspath(__file__)), "data", "orders"))
    args = ap.parse_args()
    draw = random.Random(args.seed)
    os.makedirs(args.out, exist_ok=True)
    existing = len([n for n in os.listdir(args.out) if n.endswith(".json")])
    for f in range(existing, existing + args.files):
        with open(os.path.join(args.out, f"orders-{f:04d}.json"), "w") as out:
            for _ in range(args.per_file):
                amount = round(draw.uniform(1, 200), 2)
                doc = {
                    "customer": f"c{draw.randrange(args.customers):03d}",
                    "amount": amount,
                    "orders": 1,
                    "largest": amount,
                    "city": draw.choice(CITIES),
                    "items": [draw.choice(ITEMS)],
                    "flags": {"big_spender": True} if amount > 190 else {},
                }
                out.write(json.dumps(doc) + "\n")
    print(f"wrote {args.files} file(s) of {args.per_file} orders to {args.out}")


if __name__ == "__main__":
    main()
