"""Library functions behind the CLI: run, check and status of a spec."""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from typing import Callable, Optional


@dataclass
class ShardStatus:
    range: str
    fence: Optional[int]
    batch_id: Optional[int]


@dataclass
class MaterializationStatus:
    name: str
    endpoint: str
    last_batch: Optional[int]
    spark_offsets: Optional[int]
    spark_commits: Optional[int]
    layout: list = field(default_factory=list)
    shards: list = field(default_factory=list)
    counts: dict = field(default_factory=dict)

    @property
    def lag_batches(self) -> Optional[int]:
        if self.spark_offsets is None:
            return None
        return self.spark_offsets - (self.last_batch if self.last_batch is not None else -1)


def run_spec(
    spec_path: str,
    *,
    available_now: bool = True,
    materializations: Optional[list[str]] = None,
    spark=None,
    on_batch: Optional[Callable] = None,
    max_files_per_trigger: Optional[int] = None,
):
    """Run every (or the named) materialization of a spec; return their runs when done."""
    from tidemark.collection.spec import load_spec
    from tidemark.spark.api import _spark, materialize

    spec = load_spec(spec_path)
    names = materializations or list(spec.materializations)
    spark = _spark(spark)
    runs = [
        materialize(
            spec,
            materialization=n,
            available_now=available_now,
            spark=spark,
            on_batch=on_batch,
            max_files_per_trigger=max_files_per_trigger,
        )
        for n in names
    ]
    for run in runs:
        run.await_termination()
    return runs


def pending_files(spec, materialization: str) -> Optional[int]:
    """Input lag of a spec's file sources: files under the bindings' source paths that
    Spark's file-source log has not yet planned into a batch. None where it cannot tell
    (no local source path)."""
    from tidemark.spark.api import _resolve

    mat = spec.materializations[materialization]
    spark_root = os.path.join(_resolve(spec.checkpoint, spec.base_dir), mat.name, "spark", "sources")
    pending = 0
    for i, b in enumerate(mat.bindings):
        src = spec.collections[b.source].source
        if src is None or not src.path or "://" in src.path:
            return None
        path = src.path if os.path.isabs(src.path) else os.path.join(spec.base_dir, src.path)
        present = set()
        for root, _dirs, names in os.walk(path):
            present.update(os.path.join(root, n) for n in names if not n.startswith((".", "_")))
        planned = set()
        log_dir = os.path.join(spark_root, str(i))
        for name in os.listdir(log_dir) if os.path.isdir(log_dir) else ():
            if name.startswith("."):
                continue
            with open(os.path.join(log_dir, name)) as f:
                for line in f:
                    if line.startswith("{"):
                        planned.add(json.loads(line)["path"].removeprefix("file://").removeprefix("file:"))
        pending += len(present - planned)
    return pending


def check_spec(spec_path: str) -> list[str]:
    """Validate the spec and dry-run Validate/Apply against each endpoint; return what was checked."""
    from tidemark.collection.collection import Collection
    from tidemark.collection.spec import load_spec
    from tidemark.drivers.base import capabilities_of
    from tidemark.drivers.registry import load_driver
    from tidemark.protocol.messages import Apply, Validate
    from tidemark.runtime.coordinator import check_capabilities

    spec = load_spec(spec_path)
    lines = [f"spec {spec_path}: {len(spec.collections)} collection(s), {len(spec.materializations)} materialization(s)"]
    for mat in spec.materializations.values():
        colls = [Collection(spec.collections[b.source]) for b in mat.bindings]
        bindings = tuple(c.binding_spec(b) for c, b in zip(colls, mat.bindings))
        with load_driver(mat.driver_name, mat.driver_config) as driver:
            check_capabilities(capabilities_of(driver), materialization=mat.name, driver_name=mat.driver_name,
                               bindings=bindings, on_invalid=mat.on_invalid)
            validated = driver.validate(Validate(mat.name, mat.driver_config, bindings))
            applied = driver.apply(Apply(mat.name, mat.driver_config, bindings, version=mat.version(spec), dry_run=True))
        lines.append(
            f"materialization {mat.name}: endpoint {mat.driver_name} ok, {len(validated.bindings)} binding(s)"
            + (f"; apply would: {applied.action_description}" if applied.action_description else "")
        )
    return lines


def _spark_log_max(path: str) -> Optional[int]:
    try:
        names = [n for n in os.listdir(path) if n.isdigit()]
    except FileNotFoundError:
        return None
    return max(map(int, names)) if names else None


def status_spec(spec_path: str) -> list[MaterializationStatus]:
    """Per materialization and shard: last committed batch, fence and lag."""
    from tidemark.collection.spec import load_spec
    from tidemark.drivers.registry import load_driver
    from tidemark.runtime.recovery_log import RecoveryLog
    from tidemark.spark.api import _resolve

    spec = load_spec(spec_path)
    out = []
    for mat in spec.materializations.values():
        location = os.path.join(_resolve(spec.checkpoint, spec.base_dir), mat.name)
        last = None
        if os.path.exists(os.path.join(location, "tidemark")) or "://" in location:
            last = RecoveryLog(location, mat.name).last()
        st = MaterializationStatus(
            name=mat.name,
            endpoint=mat.driver_name,
            last_batch=last.batch_id if last else None,
            spark_offsets=_spark_log_max(os.path.join(location, "spark", "offsets")),
            spark_commits=_spark_log_max(os.path.join(location, "spark", "commits")),
            layout=last.layout if last else [],
            counts=last.counts if last else {},
        )
        with load_driver(mat.driver_name, mat.driver_config) as driver:
            for row in driver.checkpoints(mat.name):
                cp = row.runtime_checkpoint or {}
                st.shards.append(ShardStatus(row.range.name, row.fence, cp.get("batch_id")))
        if not st.shards and last:
            st.shards = [ShardStatus(f"{b:08x}-{e:08x}", None, last.batch_id) for b, e in last.layout]
        out.append(st)
    return out


@dataclass
class ResetPlan:
    """What ``tidemark reset`` removes for one materialization."""

    materialization: str
    endpoint: str
    resources: list
    checkpoint_location: str

    def describe(self) -> str:
        res = ", ".join("/".join(r) for r in self.resources)
        return (f"materialization {self.materialization}: drop {res} in endpoint {self.endpoint} with its checkpoint "
                f"rows, fences, staged files and quarantine rows; delete checkpoint folder {self.checkpoint_location}")


def _bound(spec, mat):
    from tidemark.collection.collection import Collection

    colls = [Collection(spec.collections[b.source]) for b in mat.bindings]
    return tuple(c.binding_spec(b) for c, b in zip(colls, mat.bindings))


def reset_plans(spec_path: str, materializations: Optional[list[str]] = None) -> list[ResetPlan]:
    from tidemark.collection.spec import load_spec
    from tidemark.errors import SpecError
    from tidemark.spark.api import _resolve

    spec = load_spec(spec_path)
    names = materializations or list(spec.materializations)
    unknown = [n for n in names if n not in spec.materializations]
    if unknown:
        raise SpecError(f"unknown materialization {unknown[0]!r} (known: {', '.join(sorted(spec.materializations))})",
                        file=spec.file)
    out = []
    for n in names:
        mat = spec.materializations[n]
        out.append(ResetPlan(n, mat.driver_name, [b.resource_path for b in _bound(spec, mat)],
                             os.path.join(_resolve(spec.checkpoint, spec.base_dir), n)))
    return out


def reset_spec(spec_path: str, materializations: Optional[list[str]] = None) -> list[str]:
    """Start views over on purpose: drop each materialization's resources and everything its
    endpoint records of it, then delete its checkpoint folder.  Returns what was done."""
    from tidemark.collection.spec import load_spec

    spec = load_spec(spec_path)
    done = []
    for plan in reset_plans(spec_path, materializations):
        mat = spec.materializations[plan.materialization]
        done += reset_view(plan.materialization, mat.driver_name, mat.driver_config, _bound(spec, mat),
                           plan.checkpoint_location)
    return done


def reset_view(materialization: str, driver_name: str, driver_config: dict, bindings, checkpoint_location: str) -> list[str]:
    """Drop one view's endpoint side first, then its checkpoint folder (a reset cut short by
    a crash leaves a checkpoint whose endpoint is gone: the next run refuses it, and the reset
    can be run again)."""
    from tidemark.drivers.registry import load_driver
    from tidemark.runtime.recovery_log import filesystem

    with load_driver(driver_name, driver_config) as driver:
        done = [f"{materialization}: {d}" for d in driver.drop(materialization, tuple(bindings))]
    fs, path = filesystem(checkpoint_location)
    if fs.get_file_info(path).type.name != "NotFound":
        fs.delete_dir(path)
        done.append(f"{materialization}: deleted checkpoint folder {checkpoint_location}")
    return done
