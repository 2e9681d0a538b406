"""The coordinator's start-up checks: what it refuses before anything is written anywhere.

:func:`check_capabilities` (start-up Step 0: the endpoint's capabilities cover the spec),
:func:`check_position` (Step 2: a place of the endpoint holds the batch the recovery log
says; also every shard session's check) and :func:`refuse_gone` (Step 3: a resource the
last batch wrote that a dry-run Apply would create was dropped); ``tidemark check`` and
``tidemark status`` use them too.  See :mod:`tidemark.runtime.coordinator`.
"""

from __future__ import annotations

from typing import Iterable, Optional, Sequence

from tidemark.drivers.base import Capabilities
from tidemark.errors import RecoveryError, SpecError, reset_hint
from tidemark.protocol.messages import BindingSpec
from tidemark.runtime.recovery_log import LogEntry


def check_capabilities(
    caps: Capabilities,
    *,
    materialization: str,
    driver_name: str,
    bindings: Sequence[BindingSpec],
    on_invalid: str = "fail",
) -> None:
    """Refuse, before anything is written, what the endpoint declares it cannot do."""
    problems = []
    if on_invalid == "quarantine" and not caps.quarantine:
        problems.append(
            f"on_invalid: quarantine needs a dead-letter place, which endpoint {driver_name!r} does "
            "not have (it does not declare the quarantine capability); use on_invalid: fail, or an "
            "endpoint that quarantines (sqlite, postgres, delta)"
        )
    for b in bindings:
        where = "/".join(b.resource_path)
        if b.delta_updates and not caps.delta_updates:
            problems.append(f"binding {where}: endpoint {driver_name!r} does not take delta updates")
        if not b.delta_updates and not caps.standard_updates:
            problems.append(
                f"binding {where}: endpoint {driver_name!r} takes only delta updates (set delta_updates: true)"
            )
        problems += key_beyond_limits(caps, b, driver_name)
    if problems:
        raise SpecError(f"materialization {materialization!r}: " + "; ".join(problems) + ". Nothing was changed")


def key_beyond_limits(caps: Capabilities, b: BindingSpec, driver_name: str) -> list[str]:
    """A key property the schema makes longer than the endpoint holds (its ``minLength``):
    every document would be refused, so the spec is (a longer key of an unbounded one is
    refused at its batch, naming it)."""
    limits, out = caps.limits, []
    props = b.schema.get("properties") if isinstance(b.schema, dict) else None
    for pointer in b.key:
        prop = props.get(pointer.lstrip("/")) if isinstance(props, dict) and pointer.count("/") == 1 else None
        least = prop.get("minLength") if isinstance(prop, dict) else None
        if not isinstance(least, int) or isinstance(least, bool):
            continue
        most = min(x for x in (limits.max_key_characters, limits.max_key_bytes, least) if x is not None)
        if least > most:
            out.append(
                f"binding {'/'.join(b.resource_path)}: key {pointer} is at least {least} characters (minLength), "
                f"and endpoint {driver_name!r} holds {limits.describe(keys_only=True)}"
            )
    return out


def check_position(
    materialization: str, driver_name: str, place: str, at: int, logged: int, *, ahead_ok: int = 0, behind_ok: int = 0
) -> None:
    """Refuse a place of the endpoint that holds batch ``at`` (-1: none) when the recovery
    log's last batch is ``logged``, unless ``logged - behind_ok <= at <= logged + ahead_ok``.
    Used at start-up (before anything is written) and by every shard session."""
    if logged - behind_ok <= at <= logged + ahead_ok:
        return
    if at < 0:
        what = "holds no batch of this view (were its tables or checkpoint rows dropped?)"
    elif at < logged:
        what = (
            f"holds batch {at}, older than the recovery log's batch {logged} (restored from an older backup, "
            "or a lagging replica?)"
        )
    else:
        what = (
            f"holds batch {at}, newer than the recovery log's batch {logged} (was the checkpoint folder "
            "restored from an older copy?)"
        )
    raise RecoveryError(
        f"materialization {materialization!r}: {place} of endpoint {driver_name!r} {what}. Running on would "
        f"{'lose' if at < logged else 'double-apply or skip'} batches. Restore the endpoint (or the checkpoint "
        f"folder) to batch {logged}, or start the view over with {reset_hint(materialization)}. Nothing was changed"
    )


def gone_message(
    materialization: str, driver_name: str, last: Optional[LogEntry], created: Iterable[Sequence[str]]
) -> Optional[str]:
    """What is wrong when resources that the recovery log says hold the view no longer exist
    (``created``: what a dry-run Apply would create); None when nothing is."""
    if last is None:
        return None
    written = {tuple(r) for r in last.resources}
    gone = [r for r in created if tuple(r) in written]
    if not gone:
        return None
    names = ", ".join("/".join(r) for r in gone)
    return (
        f"materialization {materialization!r}: {names} held the view up to batch {last.batch_id}, which the "
        f"recovery log records, but no longer exists in endpoint {driver_name!r} (dropped?). "
        f"Restore it from a backup taken at batch {last.batch_id} or later, or start the view over "
        f"with {reset_hint(materialization)}. Nothing was changed"
    )


def refuse_gone(
    materialization: str, driver_name: str, last: Optional[LogEntry], created: Iterable[Sequence[str]]
) -> None:
    """Refuse a run (or ``tidemark check``) of a view whose resources were dropped: Apply
    would create them empty, and the view would hold only what later batches touch."""
    text = gone_message(materialization, driver_name, last, created)
    if text:
        raise RecoveryError(text)
