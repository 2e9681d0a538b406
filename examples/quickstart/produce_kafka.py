"""Write order documents to a Kafka topic for the quickstart's second example
(``kafka-postgres.yaml``), keyed by customer, in transactions (one in five aborted: a
view shows none of those).

Usage: python produce_kafka.py [--bootstrap 127.0.0.1:9092] [--topic orders] [--orders 5000]
"""

import argparse
import json
import random

from confluent_kafka import Producer

CITIES = ["Lisbon", "Oslo", "Quito", "Hanoi", "Accra", "Perth"]
ITEMS = ["tea", "rope", "lamp", "kite", "soap", "map"]


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--bootstrap", default="127.0.0.1:9092")
    ap.add_argument("--topic", default="orders")
    ap.add_argument("--orders", type=int, default=5000)
    ap.add_argument("--customers", type=int, default=50)
    ap.add_argument("--seed", type=int, default=7)
    args = ap.parse_args()
    draw = random.Random(args.seed)
    producer = Producer({"bootstrap.servers": args.bootstrap, "transactional.id": f"quickstart-{args.seed}"})
    producer.init_transactions(30)
    committed = 0
    for start in range(0, args.orders, 500):
        producer.begin_transaction()
        n = min(500, args.orders - start)
        for _ in range(n):
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
            producer.produce(args.topic, key=json.dumps([doc["customer"]]), value=json.dumps(doc))
        if draw.random() < 0.2:
            producer.abort_transaction(30)
        else:
            producer.commit_transaction(30)
            committed += n
    print(f"wrote {args.orders} orders to {args.topic} ({committed} committed, the rest in aborted transactions)")


if __name__ == "__main__":
    main()
