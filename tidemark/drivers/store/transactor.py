"""One shard session of the ``store`` endpoint over a :class:`tidemark.store.RangeStore`.

* Acknowledge: nothing to apply (the previous transaction committed synchronously in
  its StartCommit); from now on Loads are answered.
* Load: read-committed (:class:`~tidemark.drivers.base.ReadCommittedLoads`): Loads that
  arrive before Acknowledged wait for Flush; each key is looked up in the committed state
  of the range (the session's read-only snapshot, which is the range's newest commit: any
  later commit would be another session's, and that session fenced this one).
* Store: puts and deletes into the KIP-892 buffer of the open transaction (memory up to
  ``max_uncommitted_bytes``, then a private spill store); delta-updates rows are appended
  under their own keys (:mod:`.naming`).
* Quarantine: the rows are kept and written by StartCommit, with the transaction.
* StartCommit: one atomic commit of the data, the quarantined rows and the runtime
  checkpoint, with the fence verified inside the range's exclusive lock
  (:meth:`tidemark.store.Transaction.commit`; a stale fence is
  :class:`~tidemark.errors.FencedOff` and writes nothing).  With a changelog, StartedCommit
  patches the driver checkpoint with the entry's digest (``{"store": {RANGE: {batch,
  digest}}}``), so the recovery log names the commit that counts.
"""

from __future__ import annotations

from typing import Optional, Sequence

from tidemark.collection.keys import compact_json
from tidemark.drivers.base import ReadCommittedLoads, Transactor, store_of_documents
from tidemark.drivers.common.columns import quarantine_row
from tidemark.drivers.store.naming import delta_key, quarantine_key, resource_name
from tidemark.faults import fault_point
from tidemark.jsontext import loads
from tidemark.protocol.messages import (
    Acknowledge,
    Acknowledged,
    AnyStore,
    BindingSpec,
    Load,
    Loaded,
    Quarantine,
    StartCommit,
    StartedCommit,
    StateUpdate,
)
from tidemark.store import CommitInfo, Isolation, RangeStore, tidemark_key
from tidemark.store.db import batch_of


def encode_doc(doc) -> bytes:
    return compact_json(doc).encode("utf-8")


class StoreTransactor(ReadCommittedLoads, Transactor):
    def __init__(self, store: RangeStore, materialization: str, bindings: Sequence[BindingSpec], ids: Sequence[int]):
        self.rs = store
        self.materialization = materialization
        self.range = store.range
        self.ids = list(ids)
        self.delta = [b.delta_updates for b in bindings]
        self.names = [resource_name(b) for b in bindings]
        self._acknowledged = False
        self._deferred: list[Load] = []
        self._quarantine: list[dict] = []
        self._rows = 0  # delta-updates rows of this transaction
        self.last_commit: Optional[CommitInfo] = None  # tidemark.store.CommitInfo of the last StartCommit

    @property
    def _seq(self) -> int:
        """The committed batch this transaction builds on, + 1 (delta-updates row keys)."""
        return max(batch_of(self.rs.checkpoint), -1) + 1

    # ------------------------------------------------------------------ phases
    def acknowledge(self, msg: Acknowledge) -> Acknowledged:
        self._acknowledged = True
        return Acknowledged()

    def _evaluate(self, msg: Load) -> list[Loaded]:
        return committed_loads(self.rs, self.ids[msg.binding], msg)

    def store(self, msg: AnyStore) -> None:
        msg = store_of_documents(msg)
        txn = self.rs.transaction()
        bid = self.ids[msg.binding]
        if self.delta[msg.binding]:
            seq = self._seq
            for key, doc in zip(msg.keys, msg.docs):
                txn.put(delta_key(key, bid, seq, self._rows), encode_doc(doc))
                self._rows += 1
            return
        for key, doc, delete in zip(msg.keys, msg.docs, msg.deletes):
            if delete:
                txn.delete(tidemark_key(key, bid))
            else:
                txn.put(tidemark_key(key, bid), encode_doc(doc))

    def quarantine(self, msg: Quarantine) -> None:
        self._quarantine.extend(msg.rows)

    def start_commit(self, msg: StartCommit, inside=None) -> StartedCommit:
        """``inside()``: run under the range's lock after the fence check, before the write
        (:meth:`tidemark.store.Transaction.commit`; the webhook endpoint POSTs there)."""
        cp = msg.runtime_checkpoint
        txn = self.rs.transaction()
        batch = batch_of(cp)
        for n, row in enumerate(self._quarantine):
            b = row.get("binding")
            name = self.names[b] if isinstance(b, int) and 0 <= b < len(self.names) else None
            txn.put(
                quarantine_key(self.range, batch, n), encode_doc(quarantine_row(self.materialization, batch, name, row))
            )
        fault_point("before_endpoint_commit")
        self.last_commit = txn.commit(cp, inside)
        fault_point("after_endpoint_commit")
        self._quarantine = []
        self._rows = 0
        self._acknowledged = False
        digest = self.last_commit.digest
        if digest is None:
            return StartedCommit()
        # The recovery log keeps the digest of the changelog entry that won: if attempts on
        # two machines both committed a batch, it names the one to keep.
        return StartedCommit(StateUpdate({"store": {self.range.name: {"batch": batch, "digest": digest}}}))

    def commit_quietly(self, cp: dict):
        """Commit the staged writes with ``cp``, without fault points or changelog digests:
        for drivers whose own endpoint commit is the one that counts and that keep this
        store as a follower of it (the log sinks)."""
        info = self.rs.transaction().commit(cp)
        self._rows = 0
        self._acknowledged = False
        return info

    def close(self) -> None:
        self.rs.close()


def committed_loads(rs: RangeStore, bid: int, msg: Load) -> list[Loaded]:
    """Answer ``msg`` from the committed state of ``rs`` (binding id ``bid``): only the keys
    that exist. Shared by the drivers whose Loads read a local state store."""
    if not msg.keys:
        return []
    txn = rs.transaction()
    keys, docs = [], []
    for key in msg.keys:
        raw = txn.get(tidemark_key(key, bid), Isolation.READ_COMMITTED)
        if raw is not None:
            keys.append(tuple(key))
            docs.append(loads(raw))
    return [Loaded(msg.binding, tuple(keys), tuple(docs))] if keys else []
