"""The kit's value round trip with documents hypothesis draws (any JSON: integers past 64
bits, every float, any text, nesting), stored through the kit's runtime, Loaded back and
dumped: what the kit's ``values`` scenario checks with its fixed edges, here on generated ones."""

from __future__ import annotations

import random
import tempfile
import uuid
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tidemark.drivers import memory
from tidemark.drivers.base import capabilities_of
from tidemark.drivers.registry import load_driver
from tidemark.testing.kit.edges import has_nul
from tidemark.testing.kit.report import Recorder
from tidemark.testing.kit.sessions import KitCrash
from tidemark.testing.kit.values import TYPED, VALUES, Put, ValuesRuntime

scalars = (
    st.none()
    | st.booleans()
    | st.integers(min_value=-(2**80), max_value=2**80)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(st.characters(exclude_categories=["Cs"]), max_size=30)
)
json_values = st.recursive(
    scalars,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=6), inner, max_size=4),
    max_leaves=12,
)
# member names apart from the key and the typed fields (whose types the binding's schema fixes)
members = st.text(min_size=1, max_size=8).filter(lambda n: n != "k" and n not in TYPED)
documents = st.dictionaries(members, json_values, max_size=5)
batches = st.lists(
    st.tuples(st.text(st.characters(exclude_categories=["Cs"]), min_size=1, max_size=40), documents),
    min_size=1,
    max_size=8,
    unique_by=lambda kd: kd[0],
)


def factory_of(endpoint: str, folder: Path):
    if endpoint == "memory":
        name = f"rt-{uuid.uuid4().hex[:8]}"
        return lambda: memory.MemoryDriver({"name": name}), lambda: memory.reset(name)
    return lambda: load_driver("sqlite", {"path": str(folder / "views.db")}), lambda: None


@pytest.mark.parametrize("endpoint", ["sqlite", "memory"])
@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(first=batches, second=batches)
def test_any_documents_come_back_as_stored_through_a_crash(endpoint, first, second):
    with tempfile.TemporaryDirectory() as folder:
        factory, cleanup = factory_of(endpoint, Path(folder))
        rec = Recorder()
        rec.start("values")
        kit = ValuesRuntime(factory, rec, f"kit_{uuid.uuid4().hex[:8]}", capabilities_of(factory()))
        try:
            kit.start()
            kit.set_layout(2)
            limits = kit.limits
            puts = [
                [Put(VALUES, (k,), {"k": k, **doc}) for k, doc in batch if limits.nul_in_strings or not has_nul(doc)]
                for batch in (first, second)
            ]
            kit.run_batch(0, puts[0])
            try:  # the runtime dies after the second batch's commit in one range; it runs again
                kit.run_batch(1, puts[1], crash=("start_commit", random.Random(len(first)).randrange(2)))
            except KitCrash:
                kit.restart()
                kit.run_batch(1, puts[1])
            kit.check_views()
        finally:
            kit.close()
            cleanup()
        assert rec.checks["round-trip"] > 0
        assert not any(rec.failures.values()), {p: f for p, f in rec.failures.items() if f}
