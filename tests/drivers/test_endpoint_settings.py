"""Every endpoint refuses a setting it does not know, with one message naming the closest
known setting, before it connects to anything (a misspelt ``path`` must not write to the
default one)."""

import difflib

import pytest

from tidemark.drivers.common.settings import refuse_unknown
from tidemark.drivers.registry import load_driver
from tidemark.errors import SpecError

# one misspelt setting per endpoint, beside what it needs to get that far (no server is reached)
CASES = {
    "sqlite": ({"paht": "/data/views.db"}, "path"),
    "postgres": ({"url": "postgresql://u@127.0.0.1:1/db", "schemaa": "x"}, "schema"),
    "mysql": ({"url": "mysql://u@127.0.0.1:1/db", "schemaa": "x"}, "schema"),
    "delta": ({"path": "/tmp/lake", "stagng": "/tmp/s"}, "staging"),
    "iceberg": (
        {"catalog": {"uri": "sqlite:////tmp/c.db", "warehouse": "/tmp/wh"}, "namespace": "n", "namespce": "m"},
        "namespace",
    ),
    "store": ({"path": "/tmp/st", "changelogg": "/tmp/cl"}, "changelog"),
    "kafka": ({"bootstrap_servers": "127.0.0.1:1", "progres_topic": "p"}, "progress_topic"),
    "nats": ({"url": "nats://127.0.0.1:1", "streem": "S"}, "stream"),
    "redis": ({"url": "redis://127.0.0.1:1/0", "namspace": "x:"}, "namespace"),
    "webhook": ({"url": "http://127.0.0.1:1/hook", "chunk_doc": 5}, "chunk_docs"),
}


@pytest.mark.parametrize("endpoint", sorted(CASES))
def test_every_endpoint_refuses_an_unknown_setting_naming_the_closest(endpoint):
    config, closest = CASES[endpoint]
    wrong = next(
        k for k in config if k not in ("url", "path", "catalog", "namespace", "bootstrap_servers") or k == "namespce"
    )
    with pytest.raises(SpecError) as info:
        load_driver(endpoint, config).close()
    text = str(info.value)
    assert text.startswith(f"endpoint {endpoint}: unknown setting(s) {wrong!r} (did you mean {closest!r}?)"), text
    assert "Nothing was changed" in text


def test_kafka_client_settings_pass_and_only_tidemarks_own_are_checked():
    load_driver("kafka", {"bootstrap_servers": "127.0.0.1:1", "security.protocol": "PLAINTEXT"}).close()
    with pytest.raises(SpecError, match=r"'bogus'; its settings are a, b\. Nothing"):
        refuse_unknown("x", {"bogus": 1, "a": 2}, ("b", "a"))


# ---------------------------------------------------------------- one declaration per endpoint


def _good(endpoint: str) -> dict:
    """The endpoint's case without its misspelt setting."""
    config, closest = CASES[endpoint]
    return {
        k: v for k, v in config.items() if difflib.get_close_matches(k, [closest], n=1) != [closest] or k == closest
    }


def _accepted(endpoint: str) -> list[str]:
    """The settings an endpoint names when it refuses an unknown one."""
    config, _ = CASES[endpoint]
    with pytest.raises(SpecError) as info:
        load_driver(endpoint, {**config, "zzz_unknown": 1}).close()
    text = str(info.value)
    listed = text.split("its settings are ", 1)[1].split(". Nothing", 1)[0]
    return sorted(listed.split(", and any key")[0].split(", "))


@pytest.mark.parametrize("endpoint", sorted(CASES))
def test_the_spec_schema_and_the_refusal_name_the_same_settings(endpoint):
    import jsonschema

    good = _good(endpoint)
    driver = load_driver(endpoint, good)
    try:
        schema = driver.spec().config_schema
    finally:
        driver.close()
    assert sorted(schema["properties"]) == _accepted(endpoint)
    assert schema["additionalProperties"] is (endpoint == "kafka")  # Kafka: client keys with a dot
    jsonschema.Draft202012Validator.check_schema(schema)
    jsonschema.validate(good, schema)
    if endpoint != "kafka":
        with pytest.raises(jsonschema.ValidationError):
            jsonschema.validate({**good, "zzz_unknown": 1}, schema)


# strings, as Spark options and environment variables give them, become the setting's type
CONVERTED = [
    ("sqlite", {"synchronous": "normal"}, lambda d: d.settings.synchronous == "NORMAL"),
    ("postgres", {"port": "5433", "fillfactor": "90"}, lambda d: d.settings.fillfactor == 90),
    ("mysql", {"port": "3307"}, lambda d: d.settings.port == 3307),
    ("store", {"snapshot_every": "7", "max_uncommitted_bytes": "1000"}, lambda d: d.base.snapshot_every == 7),
    (
        "redis",
        {"load_chunk": "50", "mode": "AT-LEAST-ONCE"},
        lambda d: d.cfg.load_chunk == 50 and d.cfg.mode == "at-least-once",
    ),
    ("nats", {"max_batch": "10", "duplicate_window": "30"}, lambda d: d.settings.settings.max_batch == 10),
    (
        "webhook",
        {"chunk_docs": "5", "chunk_bytes": "2048"},
        lambda d: (d.settings.chunk_docs, d.settings.chunk_bytes) == (5, 2048),
    ),
    ("kafka", {"partitions": "3", "replication_factor": "-1"}, lambda d: d.settings.partitions == 3),
]


@pytest.mark.parametrize("endpoint,extra,check", CONVERTED, ids=[c[0] for c in CONVERTED])
def test_string_settings_are_converted(endpoint, extra, check):
    good = _good(endpoint)
    driver = load_driver(endpoint, {**good, **extra})
    try:
        assert check(driver)
    finally:
        driver.close()


BAD = [
    ("webhook", {"chunk_docs": "many"}, "endpoint webhook: chunk_docs must be an integer >= 1, got 'many'"),
    ("webhook", {"chunk_docs": 0}, "endpoint webhook: chunk_docs must be an integer >= 1, got 0"),
    ("webhook", {"headers": "Bearer s3cr3t-token"}, "endpoint webhook: headers must be a mapping, got ***"),
    ("postgres", {"fillfactor": 5}, "endpoint postgres: fillfactor must be an integer from 10 to 100, got 5"),
    ("postgres", {"port": True}, "endpoint postgres: port must be an integer from 1 to 65535, got True"),
    ("sqlite", {"synchronous": "OFF"}, "endpoint sqlite: synchronous must be one of FULL, NORMAL, EXTRA, got 'OFF'"),
    ("redis", {"mode": "twice"}, "endpoint redis: mode must be one of exactly-once, at-least-once, got 'twice'"),
    ("nats", {"max_batch": 1}, "endpoint nats: max_batch must be an integer >= 2, got 1"),
    ("nats", {"duplicate_window": "inf"}, "endpoint nats: duplicate_window must be a number >= 0, got 'inf'"),
    ("store", {"keep_snapshots": "2.5"}, "endpoint store: keep_snapshots must be an integer >= 1, got '2.5'"),
    ("delta", {"retry": {"attempts": "x"}}, "endpoint delta: retry: retry.attempts must be a number, got 'x'"),
]


@pytest.mark.parametrize("endpoint,extra,message", BAD, ids=[f"{b[0]}-{sorted(b[1])[0]}" for b in BAD])
def test_a_bad_setting_names_the_endpoint_the_key_and_the_rule(endpoint, extra, message):
    good = _good(endpoint)
    with pytest.raises(SpecError) as info:
        load_driver(endpoint, {**good, **extra}).close()
    assert str(info.value) == message
    assert "s3cr3t" not in str(info.value)


def test_a_required_setting_is_named_with_what_it_is():
    with pytest.raises(SpecError, match=r"^endpoint delta: path is required \(the tables' root"):
        load_driver("delta", {"staging": "/tmp/s"})
    with pytest.raises(SpecError, match=r"^endpoint store: path is required"):
        load_driver("store", {"path": ""})


SECRET = "s3cr3tpw"
WITH_SECRETS = {
    "postgres": {"url": f"postgresql://u:{SECRET}@127.0.0.1:1/db"},
    "mysql": {"url": f"mysql://u:{SECRET}@127.0.0.1:1/db"},
    "redis": {"url": f"redis://:{SECRET}@127.0.0.1:1/0"},
    "nats": {"url": f"nats://user:{SECRET}@127.0.0.1:1"},
    "kafka": {"bootstrap_servers": "127.0.0.1:1", "sasl.password": SECRET},
    "webhook": {"url": f"https://h.example/x?token={SECRET}", "headers": {"Authorization": f"Bearer {SECRET}"}},
    "delta": {"path": "lake", "storage_options": {"AWS_SECRET_ACCESS_KEY": SECRET}},
    "iceberg": {"catalog": {"uri": f"postgresql://u:{SECRET}@127.0.0.1:1/db", "warehouse": "wh"}, "namespace": "v"},
}


@pytest.mark.parametrize("endpoint", sorted(WITH_SECRETS))
def test_no_settings_object_shows_a_secret(endpoint, tmp_path, monkeypatch):
    """The driver and every settings object it holds: their repr (what a log or a traceback's
    locals show) masks passwords, tokens and credentials."""
    import dataclasses

    monkeypatch.chdir(tmp_path)
    driver = load_driver(endpoint, WITH_SECRETS[endpoint])
    try:
        held = [v for v in vars(driver).values() if dataclasses.is_dataclass(v) and not isinstance(v, type)]
        assert held, "the driver holds its settings object"
        for shown in [repr(driver), *map(repr, held)]:
            assert SECRET not in shown, shown
    finally:
        driver.close()
