"""The Redis endpoint library against a real Redis: fenced opens, the one-script commit,
split/merge inheritance, chunked loads, at-least-once writes, persistence warnings."""

from __future__ import annotations

import threading

import pytest

pytest.importorskip("redis")

from tests.support.helpers import free_port
from tests.support.redis_support import redis_ns, redis_url
from tidemark.drivers.redis.layout import data_key, parse_states
from tidemark.drivers.redis.persistence import Persistence
from tidemark.drivers.redis.store import AT_LEAST_ONCE, RedisConfig, RedisStore
from tidemark.errors import (
    DocumentError,
    EndpointRefused,
    EndpointUnavailable,
    FencedOff,
    RecoveryError,
    SpecError,
)
from tidemark.protocol.messages import KEY_SPACE_MAX, Range

FULL = Range()
LOW, HIGH = Range.split(2)


def cp(batch: int, **extra) -> dict:
    return {"checkpoint_id": "ck-1", "materialization": "view", "batch_id": batch, "query_id": "q", **extra}


@pytest.fixture
def store(redis_url, redis_ns):
    s = RedisStore(RedisConfig.from_config({"url": redis_url, "namespace": redis_ns}))
    yield s
    s.close()


@pytest.fixture
def prefix(redis_ns):
    return redis_ns + "orders:"


def docs(prefix, n, tag="v", start=0):
    return [(prefix, (f"c{i:04d}",), {"customer": f"c{i:04d}", "tag": tag, "n": i}) for i in range(start, start + n)]


# ------------------------------------------------------------------------- layout


def test_data_keys_are_prefix_and_canonical_key_json():
    assert data_key("p:", ("a", 1, True)) == b'p:["a",1,true]'
    assert data_key("", ("é",)) == '["é"]'.encode()
    with pytest.raises(DocumentError):
        data_key("p:", ("\ud800",))


def test_config_is_typed_and_checked():
    c = RedisConfig.from_config({"url": "redis://h/0", "load_chunk": "7", "retry": {"attempts": "2"}})
    assert c.load_chunk == 7 and c.policy.attempts == 2 and c.exactly_once
    with pytest.raises(SpecError, match="mode"):
        RedisConfig.from_config({"url": "redis://h/0", "mode": "sometimes"})
    with pytest.raises(SpecError, match="unknown"):
        RedisConfig.from_config({"url": "redis://h/0", "prefix": "x"})


# ------------------------------------------------------------------------- commit


def test_commit_writes_data_and_checkpoint_together(store, prefix):
    fence = store.open_range("view", FULL)
    assert (fence.fence, fence.checkpoint) == (1, None)
    store.commit(fence, cp(0), docs(prefix, 5))
    done = store.commit(fence, cp(1), docs(prefix, 2, "w"), deletes=[(prefix, ("c0004",))])
    assert (done.upserts, done.deletes) == (2, 1)
    view = store.dump(prefix)
    assert sorted(view) == [("c0000",), ("c0001",), ("c0002",), ("c0003",)]
    assert view[("c0000",)]["tag"] == "w" and view[("c0002",)]["tag"] == "v"
    [row] = store.checkpoints("view")
    assert (row.range, row.fence, row.runtime_checkpoint) == (FULL, 1, cp(1))
    assert store.open_range("view", FULL).checkpoint == cp(1)  # a new session resumes from it


def test_commit_twice_for_one_batch_is_safe(store, prefix):
    fence = store.open_range("view", FULL)
    for _ in range(2):  # e.g. a retry after the reply was lost
        store.commit(fence, cp(3), docs(prefix, 3), deletes=[(prefix, ("gone",))])
    assert len(store.dump(prefix)) == 3 and store.checkpoints("view")[0].runtime_checkpoint == cp(3)


def test_zombie_is_fenced_off_and_writes_nothing(store, prefix):
    old = store.open_range("view", FULL)
    store.commit(old, cp(0), docs(prefix, 3))
    zombie = old
    new = store.open_range("view", FULL)  # a retried task attempt
    assert new.fence == zombie.fence + 1 and new.checkpoint == cp(0)
    with pytest.raises(FencedOff, match="fence 1 is stale"):
        store.commit(zombie, cp(1), docs(prefix, 10, "zombie"), deletes=[(prefix, ("c0000",))])
    view = store.dump(prefix)
    assert len(view) == 3 and all(d["tag"] == "v" for d in view.values())  # no upsert, no delete
    assert store.checkpoints("view")[0].runtime_checkpoint == cp(0)
    store.commit(new, cp(1), docs(prefix, 1, "new"))
    assert store.dump(prefix)[("c0000",)]["tag"] == "new"


def test_commit_after_the_view_was_dropped_is_refused(store, prefix):
    fence = store.open_range("view", FULL)
    store.drop("view", [prefix])
    with pytest.raises(FencedOff, match="gone"):
        store.commit(fence, cp(0), docs(prefix, 1))
    assert store.dump(prefix) == {}


def test_commit_above_max_commit_bytes_is_refused_before_sending(redis_url, redis_ns, prefix):
    s = RedisStore(RedisConfig.from_config({"url": redis_url, "namespace": redis_ns, "max_commit_bytes": 1000}))
    fence = s.open_range("view", FULL)
    with pytest.raises(EndpointRefused, match="max_commit_bytes"):
        s.commit(fence, cp(0), docs(prefix, 50))
    assert s.dump(prefix) == {} and s.checkpoints("view")[0].runtime_checkpoint is None


def test_other_materializations_fences_are_untouched(store, prefix):
    a = store.open_range("a", FULL)
    store.open_range("b", FULL)
    store.open_range("b", FULL)
    store.commit(a, cp(0), docs(prefix, 1))  # b's opens did not fence a


def test_concurrent_opens_get_distinct_fences(redis_url, redis_ns):
    fences, errors = [], []

    def opener():
        s = RedisStore(RedisConfig.from_config({"url": redis_url, "namespace": redis_ns}))
        try:
            fences.append(s.open_range("view", LOW).fence)
            s.open_range("view", HIGH)  # touches the same hash: WATCH conflicts, retried
        except Exception as exc:  # pragma: no cover - reported below
            errors.append(exc)
        finally:
            s.close()

    threads = [threading.Thread(target=opener) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors
    assert sorted(fences) == list(range(1, 9))


# ------------------------------------------------------------------ split / merge


def test_split_inherits_the_parent_checkpoint_and_fences_the_parent(store, prefix):
    parent = store.open_range("view", FULL)
    store.commit(parent, cp(5), docs(prefix, 4))
    low, high = store.open_range("view", LOW), store.open_range("view", HIGH)
    assert low.checkpoint == cp(5) and high.checkpoint == cp(5)
    with pytest.raises(FencedOff):  # a zombie of the parent range
        store.commit(parent, cp(6), docs(prefix, 4, "zombie"))
    store.commit(low, cp(6), docs(prefix, 2, "low"))
    store.commit(high, cp(6), docs(prefix, 2, "high", start=2))
    merged = store.open_range("view", FULL)  # a merge: the halves hold a later batch
    assert merged.checkpoint == cp(6)
    rows = {r.range: r for r in store.checkpoints("view")}
    assert rows[FULL].runtime_checkpoint == cp(6)  # refreshed in the Open transaction
    with pytest.raises(FencedOff):  # zombies of the halves
        store.commit(low, cp(7), [])
    store.commit(merged, cp(7), docs(prefix, 1, "merged"))


def test_merge_of_disagreeing_ranges_is_refused_and_changes_nothing(store, prefix):
    low, high = store.open_range("view", LOW), store.open_range("view", HIGH)
    store.commit(low, cp(3), [])
    store.commit(high, cp(4), [])
    before = store.client.hgetall(f"{store.config.namespace}checkpoints:view")
    with pytest.raises(RecoveryError, match="cannot inherit"):
        store.open_range("view", FULL)
    assert store.client.hgetall(f"{store.config.namespace}checkpoints:view") == before


def test_a_range_inside_a_gap_starts_fresh(store):
    store.open_range("view", Range(0, 99))
    fence = store.open_range("view", Range(1000, KEY_SPACE_MAX))
    assert fence.checkpoint is None and fence.fence == 1


def test_checkpoint_hash_layout_is_readable(store):
    f = store.open_range("view", LOW)
    store.commit(f, cp(2, offsets={"big": 2**62 + 1}), [])
    raw = store.client.hgetall(f"{store.config.namespace}checkpoints:view")
    assert raw[f"{LOW.name}:fence".encode()] == b"1"
    [state] = parse_states(raw)
    assert state.checkpoint["offsets"]["big"] == 2**62 + 1  # never parsed by Lua: exact


# --------------------------------------------------------------------------- load


def test_load_in_chunks_beyond_the_chunk_size(redis_url, redis_ns, prefix, monkeypatch):
    import redis

    s = RedisStore(RedisConfig.from_config({"url": redis_url, "namespace": redis_ns, "load_chunk": 7}))
    fence = s.open_range("view", FULL)
    s.commit(fence, cp(0), docs(prefix, 40))
    calls = {"mget": 0, "execute": 0}
    mget, execute = redis.client.Pipeline.mget, redis.client.Pipeline.execute

    def counting_mget(self, *a, **k):
        calls["mget"] += 1
        return mget(self, *a, **k)

    def counting_execute(self, *a, **k):
        calls["execute"] += 1
        return execute(self, *a, **k)

    monkeypatch.setattr(redis.client.Pipeline, "mget", counting_mget)
    monkeypatch.setattr(redis.client.Pipeline, "execute", counting_execute)
    keys = [(f"c{i:04d}",) for i in range(50)]  # 40 exist, 10 do not
    got = s.load(prefix, keys)
    assert calls == {"mget": 8, "execute": 1}  # ceil(50 / 7) chunks, one round trip
    assert sorted(got) == keys[:40]
    assert got[("c0039",)] == {"customer": "c0039", "tag": "v", "n": 39}
    assert s.load(prefix, []) == {}


# ----------------------------------------------------------------- at-least-once


def test_at_least_once_writes_without_fence_or_checkpoint(redis_url, redis_ns, prefix):
    s = RedisStore(
        RedisConfig.from_config({"url": redis_url, "namespace": redis_ns, "mode": AT_LEAST_ONCE, "write_chunk": 3})
    )
    fence = s.open_range("view", FULL)
    assert (fence.fence, fence.checkpoint) == (0, None)
    assert s.write(docs(prefix, 10)) == 10
    assert s.write(docs(prefix, 2, "w"), deletes=[(prefix, ("c0009",))]) == 3
    view = s.dump(prefix)
    assert len(view) == 9 and view[("c0001",)]["tag"] == "w"
    assert s.checkpoints("view") == []  # nothing of tidemark's own in Redis
    with pytest.raises(SpecError, match="at-least-once"):
        s.commit(fence, cp(0), [])


# ------------------------------------------------------------- errors, persistence


def test_unreachable_server_is_transient_and_hides_the_password(redis_ns):
    url = f"redis://:hunter2@127.0.0.1:{free_port()}/0"
    s = RedisStore(
        RedisConfig.from_config(
            {"url": url, "namespace": redis_ns, "retry": {"attempts": 2, "base_delay": 0, "max_delay": 0}}
        )
    )
    with pytest.raises(EndpointUnavailable) as info:
        s.open_range("view", FULL)
    assert "hunter2" not in str(info.value) and "127.0.0.1" in str(info.value)


def test_persistence_of_the_test_server_and_its_warning(store):
    p = store.persistence()
    assert p.error is None and p.appendonly in ("yes", "no") and p.appendfsync in ("always", "everysec", "no")
    warning = p.warning()
    if p.appendonly == "yes" and p.appendfsync == "always":
        assert warning is None
    else:
        assert warning and "appendfsync always" in warning
        assert ("appendonly no" in warning) == (p.appendonly == "no")


@pytest.mark.parametrize(
    "settings, expect",
    [
        (("yes", "always", ""), None),
        (("yes", "everysec", "3600 1"), "about the last second"),
        (("yes", "no", ""), "kernel decides"),
        (("no", "everysec", "3600 1 300 100"), "since the last RDB snapshot"),
        (("no", "everysec", ""), "the whole view"),
    ],
)
def test_persistence_warning_texts(settings, expect):
    warning = Persistence(*settings).warning()
    if expect is None:
        assert warning is None
    else:
        assert expect in warning and "tidemark reset" in warning


def test_persistence_unreadable_is_a_warning_too():
    assert "could not read" in Persistence(None, None, None, "ResponseError: unknown command 'CONFIG'").warning()
