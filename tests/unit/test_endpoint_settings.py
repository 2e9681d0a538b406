"""Every endpoint refuses a setting it does not know, with one message naming the closest
known setting, before it connects to anything (a misspelt ``path`` must not write to the
default one)."""

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
