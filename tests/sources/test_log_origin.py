"""Where a view began reading a log (tidemark/sources/origin.py): kept when its first batch
is planned, so a restart before it commits, a rebuild and an adopt start from it; a rebuild is
refused, before anything is built, when the log no longer holds it."""

from __future__ import annotations

import pytest

from tests.support.adopt_tables import hand_table_sqlite
from tests.support.helpers import normalize, reduce_orders, sqlite_view
from tests.support.kafka_broker import confluent_kafka_or_skip, kafka_bootstrap, kafka_broker
from tests.support.log_sources import create_topic, kafka_source_spec, produce_orders
from tidemark.errors import SpecError
from tidemark.sources.log import Bounds
from tidemark.sources.origin import check_replayable, origin_path, read_origin

confluent_kafka_or_skip()


def test_the_first_batchs_start_is_kept_and_read_back(tmp_path, kafka_bootstrap):
    from tidemark.spark.logsource import OPTION_ORIGIN, LogStreamReader

    create_topic(kafka_bootstrap, "origin-latest", partitions=2)
    produce_orders(kafka_bootstrap, "origin-latest", transactions=1, per_transaction=10, customers=5, seed=1)
    path = origin_path(str(tmp_path / "chk"), 0)
    options = {"bootstrap_servers": kafka_bootstrap, "topic": "origin-latest", "starting_offsets": "latest"}
    first = LogStreamReader("kafka", {**options, OPTION_ORIGIN: path}).initialOffset()
    assert sum(first.values()) == 12 and read_origin(path) == first  # the end: 10 records, 2 commit markers
    produce_orders(kafka_bootstrap, "origin-latest", transactions=1, per_transaction=10, customers=5, seed=2)
    # a restart before the first batch committed: the same start, not the new end
    assert LogStreamReader("kafka", {**options, OPTION_ORIGIN: path}).initialOffset() == first


def test_what_the_log_no_longer_holds_is_named():
    origin = {"orders/0": 0, "orders/1": 5}
    assert check_replayable("kafka", "orders", origin, {"orders/0": Bounds(0, 9), "orders/1": Bounds(5, 9)}) == []
    assert check_replayable("kafka", "orders", origin, {"orders/0": Bounds(3, 9)}) == [
        "kafka orders: orders/0 holds offsets from 3 on; the view read it from offset 0",
        "kafka orders: orders/1 no longer exists (the view read it from offset 5)",
    ]


def test_a_rebuild_reads_from_where_the_view_began_and_refuses_a_lost_topic(spark, tmp_path, kafka_bootstrap):
    import yaml
    from confluent_kafka.admin import AdminClient

    from tidemark.spark.rebuild import rebuild
    from tidemark.spark.runner import run_spec

    create_topic(kafka_bootstrap, "origin-rebuild", partitions=2)
    produce_orders(kafka_bootstrap, "origin-rebuild", transactions=2, per_transaction=20, customers=10, seed=3)
    db = tmp_path / "view.db"
    spec = kafka_source_spec(
        tmp_path,
        bootstrap=kafka_bootstrap,
        topic="origin-rebuild",
        endpoint={"sqlite": {"path": str(db)}},
        starting_offsets="latest",
    )
    run_spec(spec, spark=spark)  # begins at the end: the first 40 records are not the view's
    docs = produce_orders(kafka_bootstrap, "origin-rebuild", transactions=2, per_transaction=20, customers=10, seed=4)
    run_spec(spec, spark=spark)
    assert normalize(sqlite_view(db, json_columns=("items", "flags"))) == reduce_orders(docs)

    with open(spec) as f:  # an edit a rebuild takes: largest from maximize to minimize
        obj = yaml.safe_load(f)
    obj["collections"]["orders"]["schema"]["properties"]["largest"]["reduce"] = {"strategy": "minimize"}
    with open(spec, "w") as f:
        yaml.safe_dump(obj, f)
    rebuild(spec, spark=spark, wait=0)
    want = reduce_orders(docs)
    for doc in want.values():
        doc["largest"] = min(d["largest"] for d in docs if d["customer"] == doc["customer"] and "largest" in d)
    got = normalize(sqlite_view(db, json_columns=("items", "flags")))
    assert {k: v["largest"] for k, v in got.items()} == {k: v["largest"] for k, v in want.items()}

    admin = AdminClient({"bootstrap.servers": kafka_bootstrap})
    for fut in admin.delete_topics(["origin-rebuild"]).values():
        fut.result(30)
    obj["collections"]["orders"]["schema"]["properties"]["largest"]["reduce"] = {"strategy": "maximize"}
    with open(spec, "w") as f:
        yaml.safe_dump(obj, f)
    before = sqlite_view(db, json_columns=("items", "flags"))
    with pytest.raises(SpecError, match=r"origin-rebuild/0 no longer exists \(the view read it from offset \d+\)"):
        rebuild(spec, spark=spark, wait=0)
    assert sqlite_view(db, json_columns=("items", "flags")) == before


@pytest.mark.slow  # (after the default run)
def test_an_adopted_view_of_a_topic_reads_what_comes_after_the_adopt(spark, tmp_path, kafka_bootstrap):
    from tidemark.spark.adopt import adopt
    from tidemark.spark.runner import run_spec

    create_topic(kafka_bootstrap, "origin-adopt", partitions=2)
    before = produce_orders(kafka_bootstrap, "origin-adopt", transactions=2, per_transaction=20, customers=10, seed=5)
    db = tmp_path / "view.db"
    hand_table_sqlite(db, "by_hand", reduce_orders(before))  # a hand-written job's table of what came before
    spec = kafka_source_spec(
        tmp_path, bootstrap=kafka_bootstrap, topic="origin-adopt", endpoint={"sqlite": {"path": str(db)}}
    )
    with pytest.raises(SpecError, match="--since applies to file sources"):
        adopt(spec, from_="by_hand", since=1_700_000_000, spark=spark)
    adopt(spec, from_="by_hand", spark=spark)
    after = produce_orders(kafka_bootstrap, "origin-adopt", transactions=2, per_transaction=20, customers=10, seed=6)
    run_spec(spec, spark=spark)
    assert normalize(sqlite_view(db, json_columns=("items", "flags"))) == reduce_orders(before + after)
