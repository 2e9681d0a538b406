"""``tidemark reset`` and :func:`tidemark.reset`: start views over on purpose, without Spark.

Each view's endpoint side is dropped first (:func:`reset_view`: its resources and everything
its endpoint records of it), then its checkpoint folder.  The spec and the arguments of
:func:`tidemark.materialize` are read as :mod:`tidemark.ops` reads them (:func:`tidemark.ops.target`).
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass
from typing import Optional

from tidemark.ops import bound, named, target
from tidemark.spec import load_spec


@dataclass
class ResetPlan:
    """What ``tidemark reset`` removes for one materialization."""

    materialization: str
    endpoint: str
    resources: list
    checkpoint_location: str

    def describe(self) -> str:
        res = ", ".join("/".join(r) for r in self.resources)
        return (
            f"materialization {self.materialization}: drop {res} in endpoint {self.endpoint} with everything "
            f"tidemark keeps there for the view (its progress records, fences, staged data and quarantine); "
            f"delete checkpoint folder {self.checkpoint_location}"
        )


def reset_plans(spec_path: str, materializations: Optional[list[str]] = None) -> list[ResetPlan]:
    from tidemark.runtime.ownership import refuse_not_owned

    spec = load_spec(spec_path)
    out = []
    for n in named(spec, materializations):
        mat = spec.materializations[n]
        bindings = bound(spec, mat)
        location = spec.checkpoint_location(n)
        refuse_not_owned(n, mat.driver_name, mat.driver_config, bindings, location=location)  # before anything is asked
        out.append(ResetPlan(n, mat.driver_name, [b.resource_path for b in bindings], location))
    return out


def reset_spec(spec_path: str, materializations: Optional[list[str]] = None) -> list[str]:
    """Start views over on purpose: drop each materialization's resources and everything its
    endpoint records of it, then delete its checkpoint folder.  Returns what was done."""
    spec = load_spec(spec_path)
    done = []
    for plan in reset_plans(spec_path, materializations):
        mat = spec.materializations[plan.materialization]
        done += reset_view(
            plan.materialization, mat.driver_name, mat.driver_config, bound(spec, mat), plan.checkpoint_location
        )
    return done


def reset(
    source=None,
    *,
    materialization: Optional[str] = None,
    collection: Optional[dict] = None,
    endpoint: Optional[dict] = None,
    resource: Optional[dict] = None,
    checkpoint: Optional[str] = None,
    name: Optional[str] = None,
    delta_updates: bool = False,
) -> list[str]:
    """Start a view over on purpose: drop its resources and everything its endpoint records
    of it (checkpoint rows, fences, staged files, quarantine), then its checkpoint folder.

    Takes the arguments given to :func:`tidemark.materialize` (a spec and a materialization
    name, or ``collection=``, ``endpoint=``, ``resource=``, ``checkpoint=`` and ``name=``); the
    DataFrame itself is not needed (pass ``None``).  Returns what was done.  The next run
    replays the source from its start into a fresh view.  Needs no Spark."""
    spec, mat, checkpoint_location = target(
        source,
        materialization=materialization,
        collection=collection,
        endpoint=endpoint,
        resource=resource,
        checkpoint=checkpoint,
        name=name,
        delta_updates=delta_updates,
    )
    return reset_view(mat.name, mat.driver_name, mat.driver_config, bound(spec, mat), checkpoint_location)


def reset_view(
    materialization: str, driver_name: str, driver_config: dict, bindings, checkpoint_location: str, driver=None
) -> list[str]:
    """Drop one view's endpoint side first, then its checkpoint folder (a reset cut short by
    a crash leaves a checkpoint whose endpoint is gone: the next run refuses it, and the reset
    can be run again).  Only what this checkpoint owns is dropped: anything of the view that
    another checkpoint wrote refuses the reset first (:func:`tidemark.runtime.ownership.refuse_not_owned`).  ``driver``:
    an open driver to use (the conformance kit's), else one is loaded from the config."""
    from tidemark.drivers.registry import load_driver
    from tidemark.files import filesystem
    from tidemark.runtime.lease import Lease
    from tidemark.runtime.ownership import refuse_not_owned

    lease = Lease(checkpoint_location, materialization)
    lease.acquire()  # a view that is running now is refused: stop it first
    try:
        opened = contextlib.nullcontext(driver) if driver is not None else load_driver(driver_name, driver_config)
        with opened as d:
            refuse_not_owned(materialization, driver_name, driver_config, bindings, d, location=checkpoint_location)
            done = [f"{materialization}: {line}" for line in d.drop(materialization, tuple(bindings))]
        fs, path = filesystem(checkpoint_location)
        if fs.get_file_info(path).type.name != "NotFound" and not lease.created_folder:
            fs.delete_dir(path)
            done.append(f"{materialization}: deleted checkpoint folder {checkpoint_location}")
    finally:
        lease.release()
    return done
