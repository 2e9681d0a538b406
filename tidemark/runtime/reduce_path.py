"""Which bindings the endpoint reduces itself: one decision, made where a run starts and
shown by ``tidemark check``.

A binding is reduced by its endpoint (no Loads; each Store carries the batch's combined
document, which the endpoint reduces into the stored one in the commit's transaction) when
the driver declares the strategies it reduces (``Capabilities.endpoint_reduce``), the
runtime option ``endpoint_reduce`` is on, the binding is not delta-updates, and the
collection's schema reduces with those strategies only
(:func:`tidemark.collection.sql_plan.sql_reduction`).  Any other binding Loads the stored
documents and reduces in Python.  Both paths give the same view.
"""

from __future__ import annotations

import dataclasses
from typing import Sequence

from tidemark.collection.collection import Collection
from tidemark.collection.sql_plan import sql_reduction
from tidemark.drivers.base import Capabilities
from tidemark.protocol.messages import BindingSpec


def reduce_paths(
    bindings: Sequence[BindingSpec], collections: Sequence[Collection], caps: Capabilities, enabled: bool = True
) -> tuple[tuple[BindingSpec, ...], list[str]]:
    """``bindings`` with ``endpoint_reduce`` set where the endpoint reduces them, and per
    binding one line saying which path it takes and why."""
    out: list[BindingSpec] = []
    lines: list[str] = []
    for b, coll in zip(bindings, collections):
        name = "/".join(b.resource_path)
        if b.delta_updates:
            out.append(b)
            lines.append(f"binding {name}: delta updates (each batch's combined documents appended)")
            continue
        if not caps.endpoint_reduce:
            why = "the endpoint does not reduce in place"
        elif not enabled:
            why = "options.endpoint_reduce is false"
        else:
            plan, why = sql_reduction(coll, caps.endpoint_reduce)
            if plan is not None:
                out.append(dataclasses.replace(b, endpoint_reduce=True))
                lines.append(f"binding {name}: reduced by the endpoint in its commit (no Load)")
                continue
        out.append(dataclasses.replace(b, endpoint_reduce=False) if b.endpoint_reduce else b)
        lines.append(f"binding {name}: Load + reduce in Python ({why})")
    return tuple(out), lines
