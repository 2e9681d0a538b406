"""tidemark.drivers.kafka without a broker: transactional ids, progress records, error translation."""

from __future__ import annotations

import re

import pytest

from tidemark.drivers.kafka.ids import layout_ids, transactional_id
from tidemark.drivers.kafka.progress import FORMAT_VERSION, ProgressRecord, decode_key, progress_key, progress_partition
from tidemark.errors import (
    AuthenticationFailed,
    DriverError,
    EndpointUnavailable,
    FencedOff,
    RecoveryError,
    SpecError,
)
from tidemark.protocol.messages import Range

SAFE_ID = re.compile(r"^[A-Za-z0-9._-]{1,160}$")


def test_transactional_id_is_a_readable_pure_function_of_materialization_and_range():
    r = Range(0x40000000, 0x7FFFFFFF)
    assert transactional_id("customer_view", r) == "tidemark.customer_view.40000000-7fffffff"
    assert transactional_id("customer_view", r) == transactional_id("customer_view", Range(0x40000000, 0x7FFFFFFF))
    assert transactional_id("v", Range(), prefix="team-a") == "team-a.v.00000000-ffffffff"
    ids = layout_ids("v", Range.split(4))
    assert len(set(ids)) == 4 and all(i.startswith("tidemark.v.") for i in ids)


@pytest.mark.parametrize(
    "name", ["a.b", "a/b", "a b", "ü", "x" * 500, "a" * 81, "view;rm -rf", "a.b.00000000-ffffffff"]
)
def test_transactional_id_of_an_unusual_name_is_safe_bounded_and_distinct(name):
    tid = transactional_id(name, Range())
    assert SAFE_ID.match(tid), tid
    assert tid.count(".") == 2  # prefix.name.range: a name cannot forge the range part
    others = {transactional_id(n, Range()) for n in ("a_b", "a-b", "ab", name + "x", name[:-1] or "z")}
    assert tid not in others


def test_transactional_id_refuses_an_empty_name_or_a_bad_prefix():
    with pytest.raises(SpecError):
        transactional_id("", Range())
    with pytest.raises(SpecError):
        transactional_id("v", Range(), prefix="a.b")


def test_progress_record_round_trips_and_its_key_is_stable():
    r = Range(0, 0x7FFFFFFF)
    rec = ProgressRecord.first(
        "view",
        r,
        {"checkpoint_id": "q1", "batch_id": 3, "materialization": "view"},
        {"docs": 10, "deletes": 2},
        transactional_id="tidemark.view.00000000-7fffffff",
    )
    again = ProgressRecord.decode(rec.encode())
    assert again == rec
    assert again.sequence == 1 and again.version == FORMAT_VERSION
    assert rec.key == progress_key("view", r) == b'{"key_begin":0,"key_end":2147483647,"materialization":"view"}'
    assert decode_key(rec.key) == ("view", r)
    assert decode_key(b"not json") is None and decode_key(None) is None
    nxt = rec.next({"checkpoint_id": "q1", "batch_id": 4, "materialization": "view"}, {"docs": 1})
    assert nxt.sequence == 2 and nxt.range == r and nxt.counts == {"docs": 1}
    split = rec.next({"batch_id": 5}, range=Range(0, 0x3FFFFFFF))
    assert split.range == Range(0, 0x3FFFFFFF) and split.key != rec.key


def test_progress_partition_is_deterministic_and_in_range():
    keys = [progress_key("v", r) for r in Range.split(16)]
    parts = [progress_partition(k, 3) for k in keys]
    assert parts == [progress_partition(k, 3) for k in keys]
    assert set(parts) <= {0, 1, 2} and len(set(parts)) > 1
    assert progress_partition(keys[0], 0) == 0


@pytest.mark.parametrize(
    "value, match",
    [
        (b"\xff", "not JSON"),
        (b"[1]", "no format version"),
        (b'{"v": 99, "materialization": "v"}', "newer than this tidemark"),
        (b'{"v": 1, "materialization": "v", "key_begin": 0, "key_end": 1}', "malformed"),
        (
            b'{"v": 1, "materialization": "v", "key_begin": 5, "key_end": 1, "sequence": 1, "runtime_checkpoint": {}}',
            "malformed",
        ),
    ],
)
def test_a_progress_record_tidemark_cannot_read_is_a_recovery_error(value, match):
    with pytest.raises(RecoveryError, match=match):
        ProgressRecord.decode(value, where="progress[0]@7")


# ------------------------------------------------------------------ the confluent-kafka boundary

try:
    import confluent_kafka as ck
except ImportError:  # pragma: no cover - the tests below need it; the ones above do not
    ck = None
needs_ck = pytest.mark.skipif(ck is None, reason="confluent-kafka is not installed (pip install -e '.[kafka]')")


def kerr(code, text="boom", **kw):
    return ck.KafkaException(ck.KafkaError(code, text, **kw))


@needs_ck
@pytest.mark.parametrize(
    "code, cls",
    []
    if ck is None
    else [
        (ck.KafkaError._FENCED, FencedOff),
        (ck.KafkaError.PRODUCER_FENCED, FencedOff),
        (ck.KafkaError.INVALID_PRODUCER_EPOCH, FencedOff),
        (ck.KafkaError.SASL_AUTHENTICATION_FAILED, AuthenticationFailed),
        (ck.KafkaError.TRANSACTIONAL_ID_AUTHORIZATION_FAILED, AuthenticationFailed),
        (ck.KafkaError._TRANSPORT, EndpointUnavailable),
        (ck.KafkaError._TIMED_OUT, EndpointUnavailable),
        (ck.KafkaError.COORDINATOR_LOAD_IN_PROGRESS, EndpointUnavailable),
        (ck.KafkaError.CONCURRENT_TRANSACTIONS, EndpointUnavailable),
        (ck.KafkaError.INVALID_CONFIG, DriverError),
    ],
)
def test_confluent_kafka_errors_become_tidemark_errors(code, cls):
    from tidemark.drivers.kafka.client import translate

    err = translate(kerr(code), "committing")
    assert type(err) is cls
    assert "kafka: committing failed: " in str(err)


@needs_ck
def test_an_error_that_requires_an_abort_is_not_transient():
    from tidemark.drivers.kafka.client import translate

    err = translate(kerr(ck.KafkaError._STATE, txn_requires_abort=True, retriable=True), "committing")
    assert type(err) is DriverError and "aborted" in str(err)


@needs_ck
def test_secrets_never_appear_in_messages():
    from tidemark.drivers.kafka.client import call, client_config, redacted, translate

    config = {
        "bootstrap.servers": "127.0.0.1:1",
        "sasl.username": "app",
        "sasl.password": "hunter2-secret",
        "ssl.key.password": "k3y-pass",
    }
    shown = redacted(config)
    assert shown["sasl.password"] == shown["ssl.key.password"] == "***" and shown["sasl.username"] == "app"
    err = translate(kerr(ck.KafkaError._AUTHENTICATION, 'bad credentials "hunter2-secret"'), "connecting", config)
    assert isinstance(err, AuthenticationFailed) and "hunter2-secret" not in str(err) and "***" in str(err)

    def bad():
        raise ValueError("invalid value k3y-pass for property")

    with pytest.raises(DriverError) as exc:
        call(bad, "creating a producer", config)
    assert "k3y-pass" not in str(exc.value)
    with pytest.raises(DriverError, match="bootstrap.servers"):
        client_config({})
    assert client_config(config)["logger"].name == "tidemark.drivers.kafka"
