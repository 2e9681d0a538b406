"""Spark-free operations (tidemark.ops), typed runtime options, and each driver resolving
its own config against the spec's folder."""

from __future__ import annotations

import dataclasses
import inspect
import os
import subprocess
import sys
import textwrap

import pytest
import yaml

from tidemark.drivers.base import Driver
from tidemark.errors import SpecError
from tidemark.options import ENV, RuntimeOptions
from tidemark.spec import load_spec, parse_spec

SCHEMA = {
    "type": "object",
    "properties": {"id": {"type": "string"}, "n": {"type": "integer", "reduce": {"strategy": "sum"}}},
    "reduce": {"strategy": "merge"},
}


def write_spec(folder, endpoint, **mat) -> str:
    os.makedirs(folder, exist_ok=True)
    spec = {
        "collections": {"c": {"key": ["/id"], "schema": SCHEMA, "source": {"path": "data"}}},
        "materializations": {
            "view": {"endpoint": endpoint, "bindings": [{"source": "c", "resource": {"table": "t"}}], **mat}
        },
        "checkpoint": "chk",
    }
    path = os.path.join(folder, "spec.yaml")
    with open(path, "w") as f:
        yaml.safe_dump(spec, f)
    return path


# ----------------------------------------------------------------------------- no Spark

PROBE = textwrap.dedent("""
    import runpy, sys
    sys.argv = ["tidemark", *sys.argv[1:]]
    try:
        runpy.run_module("tidemark", run_name="__main__")
        code = 0
    except SystemExit as exc:
        code = exc.code or 0
    loaded = sorted(m for m in sys.modules if m == "pyspark" or m.startswith("pyspark."))
    print("EXIT", code, "PYSPARK", len(loaded), loaded[:3], file=sys.stderr)
""")


def _cli(*args, cwd):
    env = {**os.environ, "COLUMNS": "200", "PYTHONPATH": os.pathsep.join(sys.path)}
    return subprocess.run(
        [sys.executable, "-c", PROBE, *args], capture_output=True, text=True, cwd=cwd, env=env, timeout=120
    )


def test_check_status_and_reset_never_import_pyspark(tmp_path):
    from tidemark.protocol.messages import KEY_SPACE_MAX
    from tidemark.runtime.recovery_log import LogEntry, RecoveryLog

    spec_path = write_spec(tmp_path / "project", {"sqlite": {"path": "views.db"}})
    spec = load_spec(spec_path)
    os.makedirs(spec.collections["c"].source.path, exist_ok=True)  # check refuses a missing source folder
    # a recovery log, so that status reads it
    log = RecoveryLog(spec.checkpoint_location("view"), "view")
    log.append(
        LogEntry(0, {"batch_id": 0}, None, [[0, KEY_SPACE_MAX]], spec.materializations["view"].version(spec), {})
    )
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    for args, expect in [
        (("check", spec_path), "endpoint sqlite ok"),
        (("status", spec_path), "last commit  batch 0"),
        (("status", "--checkpoint", spec.checkpoint_location("view")), "last commit  batch 0"),
        (("reset", spec_path, "--yes"), "deleted checkpoint folder"),
    ]:
        done = _cli(*args, cwd=elsewhere)
        assert "EXIT 0 PYSPARK 0 " in done.stderr, done.stdout + done.stderr
        assert expect in done.stdout + done.stderr, done.stdout + done.stderr
    # relative paths meant the spec's folder, not the working directory
    assert (tmp_path / "project" / "views.db").exists() and not (elsewhere / "views.db").exists()
    assert not os.path.exists(spec.checkpoint_location("view"))


def test_materialize_shows_its_real_signature():
    import tidemark

    params = inspect.signature(tidemark.materialize).parameters
    assert {"source", "collection", "endpoint", "checkpoint", "options", "available_now", "start"} <= set(params)
    assert "MaterializationRun" in tidemark.materialize.__doc__
    # help() shows the parameters, and a stream's default: run until stopped
    import pydoc

    text = pydoc.render_doc(tidemark.materialize)
    assert "*args" not in text and "**kwargs" not in text and "available_now: 'bool' = False" in text
    assert params["available_now"].default is False
    assert "not a ``StreamingQuery``" in tidemark.materialize.__doc__
    assert tidemark.reset.__module__ == "tidemark.ops_reset"  # needs no Spark
    assert tidemark.RuntimeOptions is RuntimeOptions


# ----------------------------------------------------------------------------- drivers resolve their config


def test_each_driver_resolves_its_own_paths_against_the_spec_folder(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    folder = tmp_path / "specs"
    cases = {
        "sqlite": ({"path": "v.db"}, str(folder / "v.db")),
        "memory": ({"path": "m.json"}, str(folder / "m.json")),
        "delta": ({"path": "lake"}, str(folder / "lake")),
    }
    for driver, (config, expected) in cases.items():
        mat = load_spec(write_spec(folder, {driver: config})).materializations["view"]
        assert mat.driver_name == driver and mat.driver_config["path"] == expected, (driver, mat.driver_config)
        assert mat.endpoint == {driver: config}  # as written (the version hashes it)
    for config in ({"path": ":memory:"}, {"path": "file:v.db?mode=memory"}, {"path": "/abs/v.db"}):
        mat = load_spec(write_spec(folder, {"sqlite": config})).materializations["view"]
        assert mat.driver_config == config
    mat = load_spec(write_spec(folder, {"delta": {"path": "s3://bucket/lake"}})).materializations["view"]
    assert mat.driver_config["path"] == "s3://bucket/lake"
    mat = load_spec(write_spec(folder, {"delta": {"path": "lake", "staging": "stage"}})).materializations["view"]
    assert mat.driver_config["staging"] == str(folder / "stage")
    mat = load_spec(write_spec(folder, {"store": {"path": "st", "changelog": "cl"}})).materializations["view"]
    assert (mat.driver_config["path"], mat.driver_config["changelog"]) == (str(folder / "st"), str(folder / "cl"))


def test_the_default_hook_leaves_the_config_as_it_is():
    class Toy(Driver):
        def apply(self, req):  # pragma: no cover
            raise NotImplementedError

        def open(self, req):  # pragma: no cover
            raise NotImplementedError

    config = {"path": "relative", "x": 1}
    assert Toy.resolve_config(config, "/somewhere") == {"path": "relative", "x": 1}


def test_the_spec_is_frozen_and_resolved_once(tmp_path):
    spec = load_spec(write_spec(tmp_path, {"sqlite": {"path": "v.db"}}))
    mat = spec.materializations["view"]
    with pytest.raises(dataclasses.FrozenInstanceError):
        mat.shards = 3
    assert mat.driver_config is mat.driver_config and os.path.isabs(mat.driver_config["path"])
    assert spec.checkpoint_location("view") == str(tmp_path / "chk" / "view")
    assert spec.collections["c"].source.path == str(tmp_path / "data")


def test_a_missing_driver_library_names_the_endpoint(tmp_path, monkeypatch):
    from tidemark.drivers import registry

    monkeypatch.setitem(registry.DRIVERS, "ghost", "tidemark_no_such_module:Driver")
    with pytest.raises(SpecError, match=r"materializations\.view\.endpoint\.ghost: driver 'ghost' needs a library"):
        load_spec(write_spec(tmp_path, {"ghost": {}}))


# ----------------------------------------------------------------------------- runtime options


def test_options_come_from_the_spec_and_are_checked(tmp_path):
    spec = load_spec(write_spec(tmp_path, {"memory": {}}, options={"memory_budget_bytes": 4096}))
    assert spec.materializations["view"].options == RuntimeOptions(memory_budget_bytes=4096)
    assert load_spec(write_spec(tmp_path, {"memory": {}})).materializations["view"].options == RuntimeOptions()
    with pytest.raises(SpecError, match=r"materializations\.view\.options\.budget: unknown runtime option 'budget'"):
        load_spec(write_spec(tmp_path, {"memory": {}}, options={"budget": 1}))
    with pytest.raises(SpecError, match=r"materializations\.view\.options\.max_quarantine: must be a positive integer"):
        load_spec(write_spec(tmp_path, {"memory": {}}, options={"max_quarantine": 0}))
    with pytest.raises(SpecError, match=r"materializations\.view\.options: must be a mapping"):
        load_spec(write_spec(tmp_path, {"memory": {}}, options=[1]))


def test_options_are_not_part_of_the_version(tmp_path):
    a = load_spec(write_spec(tmp_path / "a", {"memory": {}}))
    b = load_spec(write_spec(tmp_path / "b", {"memory": {}}, options={"max_loaded_in_memory": 5}))
    assert a.materializations["view"].version(a) == b.materializations["view"].version(b)


def test_environment_variables_override_options():
    opts = RuntimeOptions(memory_budget_bytes=100, max_loaded_in_memory=7)
    env = {ENV["memory_budget_bytes"]: "4096", ENV["max_quarantine"]: " "}
    assert opts.with_env(env) == RuntimeOptions(memory_budget_bytes=4096, max_loaded_in_memory=7)
    assert opts.with_env({}) is opts
    with pytest.raises(SpecError, match="TIDEMARK_SHARD_MAX_LOADED must be a positive integer, got 'many'"):
        opts.with_env({"TIDEMARK_SHARD_MAX_LOADED": "many"})
    with pytest.raises(SpecError, match="TIDEMARK_SHARD_MAX_LOADED must be a positive integer"):
        opts.with_env({"TIDEMARK_SHARD_MAX_LOADED": "0"})
    with pytest.raises(SpecError, match="must be a positive integer"):
        RuntimeOptions(max_quarantine=-1)


def test_small_batch_keys_may_be_zero_to_keep_every_batch_on_spark(tmp_path):
    spec = load_spec(write_spec(tmp_path, {"memory": {}}, options={"small_batch_keys": 0}))
    assert spec.materializations["view"].options.small_batch_keys == 0
    assert RuntimeOptions().with_env({ENV["small_batch_keys"]: "0"}).small_batch_keys == 0
    with pytest.raises(SpecError, match=r"options\.small_batch_keys: must be a non-negative integer, got -3"):
        load_spec(write_spec(tmp_path, {"memory": {}}, options={"small_batch_keys": -3}))
    with pytest.raises(SpecError, match="TIDEMARK_SMALL_BATCH_KEYS must be a non-negative integer, got 'few'"):
        RuntimeOptions().with_env({"TIDEMARK_SMALL_BATCH_KEYS": "few"})
    with pytest.raises(SpecError, match="small_batch_keys must be a non-negative integer, got True"):
        RuntimeOptions(small_batch_keys=True)
    assert RuntimeOptions().with_env({"TIDEMARK_REDUCED_BATCH_KEYS": "0"}).reduced_batch_keys == 0
    with pytest.raises(SpecError, match=r"options\.reduced_batch_keys: must be a non-negative integer, got -1"):
        load_spec(write_spec(tmp_path, {"memory": {}}, options={"reduced_batch_keys": -1}))


def test_materialize_options_replace_or_override_the_specs(tmp_path, monkeypatch):
    from tidemark.ops import target
    from tidemark.spark.processor import Materializer

    path = write_spec(tmp_path, {"memory": {}}, options={"memory_budget_bytes": 4096, "max_quarantine": 9})
    _, mat, _ = target(path, options={"max_loaded_in_memory": 3})
    assert mat.options == RuntimeOptions(memory_budget_bytes=4096, max_loaded_in_memory=3, max_quarantine=9)
    spec, mat, location = target(path, options=RuntimeOptions(max_loaded_in_memory=3))
    assert mat.options == RuntimeOptions(max_loaded_in_memory=3) and spec.materializations["view"] is mat
    with pytest.raises(SpecError, match=r"options\.nope: unknown runtime option"):
        target(path, options={"nope": 1})
    # the DataFrame form: no spec file
    _, mat, _ = target(
        object(),
        collection={"key": ["/id"], "schema": SCHEMA},
        endpoint={"memory": {}},
        checkpoint=str(tmp_path / "df-chk"),
        options={"max_quarantine": 2},
    )
    assert mat.options.max_quarantine == 2

    # the run's options: the materialization's, with the environment's overrides
    from tidemark.collection.collection import Collection

    for var in ENV.values():
        monkeypatch.delenv(var, raising=False)
    spec, mat, location = target(path)
    colls = [Collection(spec.collections[b.source]) for b in mat.bindings]
    assert Materializer(spec, mat, colls, location).options.memory_budget_bytes == 4096
    monkeypatch.setenv("TIDEMARK_SHARD_MEMORY_BYTES", "8192")
    assert Materializer(spec, mat, colls, location).options == RuntimeOptions(
        memory_budget_bytes=8192, max_quarantine=9
    )


def test_parse_spec_accepts_options_for_a_python_built_spec():
    spec = parse_spec(
        {
            "collections": {"c": {"key": ["/id"], "schema": SCHEMA}},
            "materializations": {
                "m": {
                    "endpoint": {"memory": {}},
                    "options": {"max_quarantine": 1},
                    "bindings": [{"source": "c", "resource": {"table": "t"}}],
                }
            },
        }
    )
    assert spec.materializations["m"].options.max_quarantine == 1
