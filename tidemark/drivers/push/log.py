"""The log part: what a push endpoint (Kafka, NATS, the webhook) supplies to the one
:class:`~tidemark.drivers.push.driver.PushDriver`.  Everything else -- Open (the local store
brought to the endpoint's frontier), dump, checkpoints, drop, capabilities, the rebuild
refusal -- is written once there.

``commits`` says whose commit counts.  True (Kafka, NATS): the endpoint's; it keeps the
view's records (frontiers, identities, quarantine, the rows a dump and a rebuild of the
local store read).  False (the webhook): the local store's; the endpoint keeps nothing tidemark
reads back, so the record methods answer None and the local store answers instead."""

from __future__ import annotations

from typing import Any, Iterable, Optional, Protocol, Sequence

from tidemark.drivers.base import CheckpointRow
from tidemark.drivers.limits import ValueLimits
from tidemark.protocol.messages import Applied, Apply, BindingSpec, Open, Range, SpecResponse, Store

#: a committed row at the endpoint: (resource, key, the document as JSON bytes or None: a delete)
Row = tuple[str, tuple, Optional[bytes]]


class LogSession(Protocol):
    """A range's session at the endpoint, from its fence to its close (one shard session's)."""

    checkpoint: Optional[dict]  # the range's frontier (Open's answer where the endpoint's commit counts)
    place: str  # where the endpoint keeps the frontier, in words (for a refusal)

    def send(self, msg: Store) -> None:
        """Hand this Store's rows to the endpoint (queue them, or send them into its open transaction)."""

    def publish(self, cp: dict, batch: Optional[int], quarantined: list[dict]) -> None:
        """Commit the batch at the endpoint: what :meth:`send` got, the ``quarantined`` rows
        (empty when the local store keeps them) and the runtime checkpoint ``cp``.  It may run
        again for the same batch after a crash: what it sends must be idempotent."""

    def committed(self) -> None:
        """After the batch committed (the endpoint and the local store): reset per-batch state."""

    def close(self) -> None:
        """Release what the session holds at the endpoint (a producer)."""


class PushLog(Protocol):
    """The endpoint's part of a push endpoint.  A part subclasses it explicitly to inherit
    the defaults of the record methods (None: the local store's)."""

    name: str
    commits: bool  # True: the endpoint's commit counts; False: the local store's
    settings: Any  # the endpoint's typed settings (their repr shows no secret)
    store_options: dict  # the local store's config (the store endpoint's settings: path, retry, ...)
    limits: ValueLimits = ValueLimits()  # what the endpoint cannot hold (e.g. a message size)

    def __init__(self, config: dict) -> None:
        """The part of the endpoint's config (its settings read and checked once)."""

    @staticmethod
    def resolve_config(config: dict, base_dir: str) -> dict:
        """The config with its local paths made absolute against the spec's folder."""
        ...

    def spec(self) -> SpecResponse: ...

    def resources(self, materialization: str, bindings: Sequence[BindingSpec]) -> list[str]:
        """Each binding's name at the endpoint (a topic, a subject, a view name), checked."""
        ...

    def validate(self, materialization: str, bindings: Sequence[BindingSpec], resources: Sequence[str]) -> None:
        """Refuse, before anything is written, what the endpoint cannot take (another view's resource)."""
        return None

    def apply(self, req: Apply, resources: Sequence[str]) -> Optional[Applied]:
        """Create or check the endpoint's resources, keeping the view-identity records there
        (None: nothing to make; the local store's manifest keeps the records)."""
        return None

    def identities(self, materialization: str, resources: Sequence[str]) -> Optional[list[Optional[dict]]]:
        """The view-identity record kept with each resource (None: the local store keeps them)."""
        return None

    def recover(self, materialization: str, checkpoint_id: Optional[str], ranges: Sequence[Range]) -> list[str]:
        """End what dead writers of this checkpoint left open at the endpoint (Driver.recover)."""
        return []

    def fence(self, req: Open, resources: Sequence[str]) -> LogSession:
        """Fence the range's older sessions at the endpoint and read its frontier."""
        ...

    def rows(self, materialization: str, resources: Sequence[str]) -> Optional[Iterable[Row]]:
        """The view's committed rows of ``resources``, in commit order (a rebuild of the local
        store and a dump read them); None: the endpoint cannot be read back."""
        return None

    def checkpoints(self, materialization: str) -> Optional[list[CheckpointRow]]:
        """Every range's frontier (None: the local store's checkpoints)."""
        return None

    def quarantined(self, materialization: str) -> Optional[list[dict]]:
        """The quarantined documents, oldest first (None: the local store keeps them)."""
        return None

    def drop(self, materialization: str, bindings: Sequence[BindingSpec], resources: Sequence[str]) -> list[str]:
        """Remove the view's resources and records at the endpoint; returns what was done."""
        return []

    def close(self) -> None:
        """Release the endpoint's client."""
        return None
