"""Who owns what an endpoint holds: a tidemark **checkpoint** (its id), not a view's name.

Two specs may give their views one name and point them at one endpoint; each has its own
checkpoint folder, so each has its own checkpoint id.  The endpoint records, with its
progress (the runtime checkpoint of each range) and with each resource (its view-identity
record), the checkpoint that writes it: its id, its folder and the host that wrote it.

Every command that removes something (``tidemark reset``, a rebuild's clean-up of its
shadow, ``rebuild --abandon``) first asks :func:`refuse_foreign_owners`: anything the
endpoint records for the names involved that another checkpoint owns stops the command
before anything is changed.  A checkpoint of the *same folder* with another id is this
folder's earlier life (the folder was deleted or restored from elsewhere): that one is
this view's own, and ``reset`` starts it over.

A refusal names both checkpoints (ids, folders, hosts) and the ways out: another view name,
the other spec's folder, ``tidemark adopt`` — never ``reset``, which cannot start another
checkpoint's view over from here.
"""

from __future__ import annotations

import os
import socket
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Optional, Sequence

from tidemark.errors import RecoveryError, TidemarkError, reset_hint

if TYPE_CHECKING:
    from tidemark.drivers.base import Driver, Position
    from tidemark.protocol.messages import BindingSpec, JsonObject
    from tidemark.runtime.recovery_log import LogEntry

LOCATION = "checkpoint_location"  # the field in runtime checkpoints and view-identity records
HOST = "host"
REBUILD_SUFFIX = "__rebuild"  # a rebuild's shadow view: NAME__rebuild (tidemark.runtime.rebuild)


def this_host() -> str:
    return socket.gethostname()


def folder_of(location: str) -> str:
    """A checkpoint folder as it is recorded: a URI as it is, a path made absolute."""
    if "://" in location:
        return location.rstrip("/")
    return os.path.abspath(location).rstrip("/") or "/"


def owner_fields(location: str) -> JsonObject:
    """What a runtime checkpoint and a view-identity record carry of their checkpoint."""
    return {LOCATION: folder_of(location), HOST: this_host()}


@dataclass(frozen=True)
class Owner:
    """A tidemark checkpoint that writes (or may write) something in an endpoint."""

    materialization: str
    checkpoint_id: Optional[str]
    location: Optional[str] = None  # None: not recorded (a tidemark before owners were recorded)
    host: Optional[str] = None

    @staticmethod
    def here(materialization: str, checkpoint_id: Optional[str], location: str) -> "Owner":
        return Owner(materialization, checkpoint_id, folder_of(location), this_host())

    @staticmethod
    def of(record: Any, materialization: Optional[str] = None) -> Optional["Owner"]:
        """The owner a runtime checkpoint or a view-identity record names (None: none)."""
        if not isinstance(record, dict) or not record.get("checkpoint_id"):
            return None
        name = record.get("materialization") or materialization
        if not isinstance(name, str):
            return None
        loc, host = record.get(LOCATION), record.get(HOST)
        return Owner(
            name,
            str(record["checkpoint_id"]),
            loc if isinstance(loc, str) else None,
            host if isinstance(host, str) else None,
        )

    def same_folder(self, other: "Owner") -> bool:
        """Both are one checkpoint folder (the same URI, or the same path on the same host); a
        rebuild's shadow folder (``NAME__rebuild`` beside it), whose checkpoint becomes the
        view's at the cut-over, counts as the view's folder."""
        if not self.location or not other.location:
            return False
        if other.location not in (self.location, self.location + REBUILD_SUFFIX):
            return False
        return "://" in self.location or (self.host is not None and self.host == other.host)

    def owns_with(self, other: "Owner") -> bool:
        """What ``other`` owns is this view's too: the same view name, and the same checkpoint
        or this checkpoint folder's earlier life."""
        return self.materialization == other.materialization and (
            (self.checkpoint_id is not None and self.checkpoint_id == other.checkpoint_id) or self.same_folder(other)
        )

    def describe(self) -> str:
        what = f"checkpoint {self.checkpoint_id or '(none yet)'}"
        if self.location:
            return f"{what} (folder {self.location}{f' on {self.host}' if self.host else ''})"
        return f"{what} (its folder is not recorded: written by an older tidemark)"


def completed(owners: Sequence[Owner]) -> list[Owner]:
    """``owners`` with a folder and host filled in from another record of the same checkpoint."""
    known = {o.checkpoint_id: o for o in owners if o.location}
    return [
        o
        if o.location or o.checkpoint_id not in known
        else Owner(o.materialization, o.checkpoint_id, known[o.checkpoint_id].location, known[o.checkpoint_id].host)
        for o in owners
    ]


def position_owner(p: Any) -> Optional[Owner]:
    """The owner a :class:`~tidemark.drivers.base.Position` names (None: nobody's yet)."""
    if not p.checkpoint_id:
        return None
    return Owner(p.materialization, p.checkpoint_id, p.location, p.host)


def recorded_owners(driver: Any, name: str, bindings: Sequence[Any]) -> list[tuple[str, Owner]]:
    """Every (place, owner) the endpoint records for view ``name`` over ``bindings``: its
    progress per range or table, what it keeps by the name alone (:meth:`Driver.owners`), and
    the view-identity record of each bound resource."""
    found: list[tuple[str, Owner]] = []
    bindings = tuple(bindings)
    for p in [*(driver.positions(name, bindings) or []), *driver.owners(name)]:
        owner = position_owner(p)
        if owner is not None:
            found.append((p.place, owner))
    records = driver.identities(name, bindings) or []
    for b, rec in zip(bindings, records):
        owner = Owner.of(rec)
        if owner is not None:
            where = rec.get("resolved") if isinstance(rec, dict) else None
            found.append((f"resource {where or '/'.join(b.resource_path)}", owner))
    owners = completed([o for _, o in found])
    return [(place, o) for (place, _), o in zip(found, owners)]


def foreign_owners(
    driver: Any, mine: Owner, bindings: Sequence[Any], also: Sequence[Owner] = ()
) -> list[tuple[str, Owner]]:
    """The places in the endpoint that another checkpoint owns (see :meth:`Owner.owns_with`;
    ``also``: more owners that count as this view's)."""
    ours = (mine, *also)
    found = recorded_owners(driver, mine.materialization, bindings)
    return [(place, o) for place, o in found if not any(m.owns_with(o) for m in ours)]


def other_checkpoint(materialization: str, place: str, other: Owner, mine: Owner, at: str, *, action: str) -> str:
    """The refusal of ``action`` on a place another checkpoint owns, naming both checkpoints
    and the ways out (never ``reset``: it cannot start another checkpoint's view over)."""
    if other.materialization != materialization:
        whose = f"the view of materialization {other.materialization!r}"
        ways = (
            f"give {materialization!r} its own resources (another table or name); to change {other.materialization!r}, "
            "use its own spec"
        )
    else:
        whose = f"the view {materialization!r} of another tidemark checkpoint"
        ways = (
            f"if this is another job, give it another materialization name (and its own resources); if it is the same "
            f"job, run it from the other spec's checkpoint folder ({other.location or 'see the checkpoint id'}) or "
            "restore that folder here; to start this view from what the other one holds, stop that job and "
            "`tidemark adopt` its table"
        )
    return (
        f"materialization {materialization!r}: {place} holds {whose}, written by {other.describe()} ({at}), "
        f"not by this spec's {mine.describe()}. A view belongs to its checkpoint, not its name: {action} would "
        f"change another job's view. Ways out: {ways}. Nothing was changed"
    )


def refuse_foreign_owners(
    driver: Any, driver_name: str, mine: Owner, bindings: Sequence[Any], *, action: str, also: Sequence[Owner] = ()
) -> None:
    """Refuse ``action`` (a reset, a rebuild's clean-up) when another checkpoint owns anything
    the endpoint records for ``mine``'s view over ``bindings``.  Nothing is changed."""
    foreign = foreign_owners(driver, mine, bindings, also)
    if not foreign:
        return
    place, other = foreign[0]
    batches = [
        p.batch_id
        for p in (driver.positions(other.materialization, tuple(bindings)) or [])
        if p.checkpoint_id == other.checkpoint_id and p.batch_id >= 0
    ]
    at = f"batch {max(batches)}" if batches else "its batches"
    raise RecoveryError(
        other_checkpoint(mine.materialization, f"{place} of endpoint {driver_name!r}", other, mine, at, action=action)
    )


def refuse_foreign(
    materialization: str,
    driver_name: str,
    positions: Sequence[Position],
    mine: Optional[str],
    last: Optional[LogEntry],
    checkpoint_location: str,
) -> None:
    """Refuse an endpoint whose places are written by another materialization or another
    checkpoint (``mine``: this checkpoint's id; None: no checkpoint folder yet).  At start-up,
    and in ``tidemark check``/``run`` before Spark starts.  A checkpoint of this very folder
    with another id (the folder was deleted and made again) is this view's earlier life: the
    refusal offers ``reset``; another folder's never (see the module's docstring)."""
    foreign = [
        p for p in positions if p.checkpoint_id and (p.checkpoint_id != mine or p.materialization != materialization)
    ]
    if not foreign:
        return
    p = max(foreign, key=lambda place: place.batch_id)  # a place that holds a batch names it
    at = f"batch {p.batch_id}" if p.batch_id >= 0 else "no batch yet"
    this = f"this checkpoint ({mine}, {'no batch yet' if last is None else f'batch {last.batch_id}'})"
    if p.materialization != materialization:
        # another view's: a reset of this one cannot help (and must not drop the other's)
        raise RecoveryError(
            f"materialization {materialization!r}: {p.place} of endpoint {driver_name!r} holds the view of "
            f"materialization {p.materialization!r} (checkpoint {p.checkpoint_id}, {at}), not {this}. Give "
            f"{materialization!r} its own resources (another table or name); to start {p.materialization!r} over "
            f"on purpose, reset it with its own spec (`tidemark reset SPEC -m {p.materialization}`). "
            "Nothing was changed"
        )
    owners = completed([o for o in map(position_owner, positions) if o is not None])
    other = next(o for o in owners if o.checkpoint_id == p.checkpoint_id)
    here = Owner.here(materialization, mine, checkpoint_location)
    if not here.same_folder(other):
        raise RecoveryError(
            other_checkpoint(
                materialization, f"{p.place} of endpoint {driver_name!r}", other, here, at, action="this run"
            )
        )
    raise RecoveryError(
        f"materialization {materialization!r}: {p.place} of endpoint {driver_name!r} is written by another "
        f"tidemark checkpoint of {materialization!r} in this same folder (checkpoint {p.checkpoint_id}, {at}), "
        f"not by {this}: the checkpoint folder was deleted or replaced. Restore it ({checkpoint_location}); "
        f"to start this view over on purpose: {reset_hint(materialization)}. Nothing was changed"
    )


def owner_batch(driver: Driver, owner: str, bindings: Sequence[BindingSpec]) -> Optional[int]:
    """The last batch the endpoint holds of materialization ``owner`` (None: it cannot tell)."""
    try:
        positions = driver.positions(owner, tuple(bindings)) or []
    except TidemarkError:  # only for a message
        return None
    held = [p.batch_id for p in positions if p.materialization == owner and p.batch_id >= 0]
    return max(held) if held else None


def refuse_not_owned(
    materialization: str,
    driver_name: str,
    driver_config: JsonObject,
    bindings: Sequence[BindingSpec],
    driver: Optional[Driver] = None,
    *,
    location: str,
) -> None:
    """``tidemark reset`` drops only what ``materialization``'s checkpoint (in folder
    ``location``) owns: refuse a resource that the endpoint records as another
    materialization's view (its identity record, or its owner and checkpoint rows), naming the
    owner and the batch it holds; anything a view of this name keeps that another checkpoint
    wrote (another spec's folder: :mod:`tidemark.runtime.ownership`); and a resource that exists
    without a record of this view (made by hand, or by something else), where the endpoint can
    tell.  Nothing is changed."""
    from tidemark.drivers.registry import load_driver
    from tidemark.protocol.messages import Apply
    from tidemark.runtime.recovery_log import RecoveryLog

    if driver is None:
        with load_driver(driver_name, driver_config) as d:
            return refuse_not_owned(materialization, driver_name, driver_config, bindings, d, location=location)
    bindings = tuple(bindings)
    records = driver.identities(materialization, bindings)
    positions = driver.positions(materialization, bindings) or []
    owners: list[tuple[str, str]] = []  # (where, owner)
    for i, b in enumerate(bindings):
        rec = records[i] if records and i < len(records) else None
        name = "/".join(b.resource_path)
        if isinstance(rec, dict) and rec.get("materialization") not in (None, materialization):
            owners.append((rec.get("resolved") or name, str(rec["materialization"])))
    for p in positions:
        if p.checkpoint_id and p.materialization != materialization:
            owners.append((p.place, p.materialization))
    if owners:
        where, owner = owners[0]
        batch = owner_batch(driver, owner, bindings)
        at = f"batch {batch}" if batch is not None else "its batches"
        raise RecoveryError(
            f"materialization {materialization!r}: {where} of endpoint {driver_name!r} holds the view of "
            f"materialization {owner!r} ({at}), not of {materialization!r}; reset drops only what the named "
            f"view owns. Give {materialization!r} its own resource; to start {owner!r} over on purpose, reset it "
            f"with its own spec (`tidemark reset SPEC -m {owner}`). Nothing was changed"
        )
    mine = Owner.here(materialization, RecoveryLog(location, materialization, create=False).checkpoint_id, location)
    refuse_foreign_owners(driver, driver_name, mine, bindings, action="reset")
    if records is None or not getattr(driver, "reports_created", False):
        return
    try:
        created = set(driver.apply(Apply(materialization, driver_config, bindings, dry_run=True)).created)
    except TidemarkError:
        created = set()  # a resource Apply cannot take exists
    for i, b in enumerate(bindings):
        if records[i] is None and b.resource_path not in created:
            raise RecoveryError(
                f"materialization {materialization!r}: {'/'.join(b.resource_path)} of endpoint {driver_name!r} "
                f"exists but keeps no record of this view (made by hand, or by another program); reset drops only "
                f"what {materialization!r} owns. Drop it yourself if it should go, or bind another resource "
                "(to start a view from a table you have: `tidemark adopt`). Nothing was changed"
            )
