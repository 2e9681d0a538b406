"""One shard session of a push endpoint: the one base that Kafka, NATS and the webhook specialize.

A push endpoint sends each batch's documents to a system that cannot answer a Load (a log,
a stream, an HTTP receiver).  tidemark keeps, beside it, a local transactional state store
(:class:`~tidemark.drivers.store.transactor.StoreTransactor` over a
:class:`~tidemark.store.RangeStore`) holding each key's full document as committed, and
answers the Loads from it.  The exactly-once core lives here, once:

* Acknowledge / Load / Flush: the store's session -- read-committed Loads (a Load that
  arrives before Acknowledged waits for Flush; each key is read from the range's newest
  commit).
* Store: a standard binding's full documents and deletes are staged in the store's open
  transaction; every row is handed to the endpoint (the log part's session:
  :meth:`~tidemark.drivers.push.log.LogSession.send`).
* Quarantine: the rows are kept for StartCommit, which knows the batch.
* StartCommit, in the order of the endpoint's commit pattern (:attr:`PushTransactor.commits`):

  - the endpoint's commit counts (Kafka, NATS: endpoint-authoritative): the endpoint commits
    the batch with its quarantined rows and its progress record
    (:meth:`LogSession.publish`, between the ``before_endpoint_commit`` and
    ``after_endpoint_commit`` fault points), then the store commits with the same runtime
    checkpoint.  A crash between the two (or a newer session's Open, which fences the store)
    leaves the store one batch behind the endpoint; the endpoint's next Open rebuilds it from
    what the endpoint holds, and StartCommit still reports the batch committed.
  - the store's commit counts (the webhook: store-authoritative): the quarantined rows go
    into the store's transaction, and :meth:`LogSession.publish` runs inside the store's
    commit, after its fence check and before its write
    (:meth:`tidemark.drivers.store.transactor.StoreTransactor.start_commit`).
"""

from __future__ import annotations

import logging
from typing import Optional, Sequence

from tidemark.drivers.base import Transactor, store_of_documents
from tidemark.drivers.common.columns import quarantine_row
from tidemark.drivers.push.log import LogSession
from tidemark.drivers.store.transactor import StoreTransactor
from tidemark.errors import FencedOff
from tidemark.faults import fault_point
from tidemark.protocol.messages import (
    Acknowledge,
    Acknowledged,
    AnyStore,
    Flush,
    Flushed,
    Load,
    Loaded,
    Quarantine,
    StartCommit,
    StartedCommit,
)
from tidemark.store.db import batch_of

log = logging.getLogger("tidemark")


class PushTransactor(Transactor):
    """The shard session of a push endpoint: the local store's session ``state`` and the
    endpoint's session ``log`` (its send and publish).  ``resources``: each binding's name at
    the endpoint, which the quarantined rows carry; ``commits``: whether the endpoint's
    commit counts (else the store's, with ``publish`` inside it)."""

    def __init__(
        self,
        state: StoreTransactor,
        log: LogSession,
        materialization: str,
        resources: Sequence[str],
        delta: Sequence[bool],
        commits: bool,
    ):
        self.state = state
        self.log = log
        self.materialization = materialization
        self.range = state.range
        self.resources = list(resources)
        self.delta = list(delta)
        self.commits = commits
        self._quarantine: list[dict] = []

    # ------------------------------------------------------------------ phases
    def acknowledge(self, msg: Acknowledge) -> Acknowledged:
        return self.state.acknowledge(msg)

    def load(self, msg: Load) -> Sequence[Loaded]:
        return self.state.load(msg)

    def flush(self, msg: Flush) -> tuple[Sequence[Loaded], Flushed]:
        return self.state.flush(msg)

    def store(self, msg: AnyStore) -> None:
        msg = store_of_documents(msg)
        if not self.delta[msg.binding]:
            self.state.store(msg)  # the full documents (and deletes) for later Loads
        self.log.send(msg)

    def quarantine(self, msg: Quarantine) -> None:
        if self.commits:
            self._quarantine.extend(msg.rows)
        else:
            self.state.quarantine(msg)

    def resource(self, row: dict) -> Optional[str]:
        b = row.get("binding")
        return self.resources[b] if isinstance(b, int) and 0 <= b < len(self.resources) else None

    def start_commit(self, msg: StartCommit) -> StartedCommit:
        cp = msg.runtime_checkpoint
        batch = batch_of(cp)
        if not self.commits:
            started = self.state.start_commit(msg, inside=lambda: self.log.publish(cp, batch, []))
            self.log.committed()
            return started
        rows = [quarantine_row(self.materialization, batch, self.resource(r), r) for r in self._quarantine]
        fault_point("before_endpoint_commit")
        self.log.publish(cp, batch, rows)
        fault_point("after_endpoint_commit")
        self._quarantine = []
        try:
            self.state.commit_quietly(cp)  # the local store follows the endpoint (fenced on this machine)
        except FencedOff:
            # A newer session opened an overlapping range here after the endpoint took the batch:
            # the batch is committed (that Open answers it and rebuilt its store from the
            # endpoint), so StartCommit says so; this range's store stays behind, as after a
            # crash between the two commits.
            log.info(
                "range %s: batch %s committed at the endpoint; a newer session owns the local store",
                self.range.name,
                batch,
            )
        self.log.committed()
        return StartedCommit()

    def close(self) -> None:
        try:
            self.log.close()
        finally:
            self.state.close()
