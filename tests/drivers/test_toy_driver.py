"""A new driver touches only what docs/protocol.md "Writing a driver" lists: its module, one
registry line, and a line in the conformance suite.  The toy driver (tests/support/toy_driver.py) is
registered the way a shipped one is, found by name, checked against a spec, and passes the kit."""

from __future__ import annotations

import pytest

from tidemark.drivers import registry
from tidemark.testing.conformance import assert_conformance


@pytest.fixture
def toy_registered(monkeypatch):
    monkeypatch.setitem(registry.DRIVERS, "toy", "tests.support.toy_driver:ToyDriver")  # the one registry line


def test_a_toy_driver_passes_the_kit_through_the_registry(toy_registered, tmp_path):
    path = str(tmp_path / "toy.json")
    report = assert_conformance(lambda: registry.load_driver("toy", {"path": path}), quick=True)
    assert report.commit_pattern == "store-authoritative"
    assert report.properties["fencing"].passed and report.properties["no-loss"].passed


def test_a_toy_driver_is_checked_against_a_spec(toy_registered, tmp_path):
    from tidemark.drivers.base import capabilities_of
    from tidemark.errors import SpecError
    from tidemark.protocol.messages import BindingSpec, Field
    from tidemark.runtime.startup_checks import check_capabilities

    driver = registry.load_driver("toy", {"path": str(tmp_path / "toy.json")})
    fields = (Field("k", "/k", "string", is_key=True, nullable=False),)
    check_capabilities(
        capabilities_of(driver),
        materialization="m",
        driver_name="toy",
        bindings=(BindingSpec({"name": "v"}, "c", ("/k",), fields, delta_updates=True),),
    )
    with pytest.raises(SpecError, match="on_invalid: quarantine needs a dead-letter place"):
        check_capabilities(
            capabilities_of(driver), materialization="m", driver_name="toy", bindings=(), on_invalid="quarantine"
        )
