"""The fenced batch publish of a channel claimed by :meth:`~tidemark.drivers.nats.channel.AsyncNats.open`.

:func:`publish_batch` writes one batch over an :class:`~tidemark.drivers.nats.channel.AsyncNats`:

* **atomic mode** (stream ``allow_atomic``, server >= 2.12): the documents go in chunks of
  at most ``max_batch - 1`` data messages, each chunk one atomic batch whose *last*
  message is a progress record (``chunk``, and ``commit`` for the last chunk) carrying
  the fence.  A fenced or abandoned chunk leaves nothing in the stream.
* **ordered mode** (no atomic publish): data messages one by one, each with its
  deterministic ``Nats-Msg-Id``, then the ``commit`` record with the fence.  A crash
  leaves a prefix-free subset of the batch in the stream; a zombie's data is dropped by
  the duplicate window, and a read-committed reader ignores data no commit covers.

In both modes a replay first asks :meth:`~tidemark.drivers.nats.channel.AsyncNats.written_after`
which counters of the in-flight batch the stream already holds and skips exactly those.
"""

from __future__ import annotations

import asyncio
import json
import uuid
from typing import Iterable, Optional, Sequence

from tidemark.drivers.nats import wire
from tidemark.drivers.nats.channel import AsyncNats, Committed, OutDoc, Session
from tidemark.drivers.nats.errors import ERR_ATOMIC_UNSUPPORTED_HEADER, ERR_WRONG_LAST_SEQUENCE, NatsApiError
from tidemark.drivers.nats.wire import BatchId, Frontier, InFlight, ProgressRecord


async def publish_batch(
    aio: AsyncNats,
    session: Session,
    batch: BatchId,
    docs: Iterable[OutDoc],
    checkpoint: dict,
    *,
    skip: Optional[InFlight] = None,
    subjects: Optional[Sequence[str]] = None,
) -> Committed:
    """Write ``batch``'s documents (counters 1..n in iteration order) and its commit record.

    Safe to call again for the same batch, after a crash or an error:

    1. Re-read the progress subject: the fence must still be ours (else FencedOff);
       when the batch is already committed, write nothing.
    2. Skip the counters already in the stream (``skip``, else scan for them).
    3. Atomic mode: chunks of data + a ``chunk``/``commit`` record, each one atomic
       batch fenced on the progress subject.  Ordered mode: data with message ids,
       acks awaited, then the fenced ``commit`` record.
    """
    channel = session.channel
    docs = list(docs)
    # Step 1
    await aio._resync(session)
    if not batch.after(session.frontier.committed):
        return Committed(batch, session.frontier.committed_seq, len(docs), 0, len(docs))
    # Step 2
    if skip is None:
        skip = await aio.written_after(channel, session.frontier, subjects)
    todo = [(i + 1, d) for i, d in enumerate(docs) if not skip.skip(batch, i + 1)]
    skipped = len(docs) - len(todo)
    commit = ProgressRecord(
        kind=wire.KIND_COMMIT,
        materialization=channel.materialization,
        range=channel.range.name,
        session=session.id,
        committed=batch,
        count=len(docs),
        checkpoint=checkpoint,
    )
    # Step 3
    if not session.atomic:
        await _publish_ordered(aio, session, batch, todo)
        await aio._append_record(session, commit)
        return Committed(batch, session.frontier.seq, len(docs), len(todo), skipped)
    per = max(1, aio.settings.max_batch - 1)
    chunks = [todo[i : i + per] for i in range(0, len(todo), per)] or [[]]
    for n, chunk in enumerate(chunks):
        if n == len(chunks) - 1:
            rec = commit
        else:
            rec = session.frontier.carried_forward(
                wire.KIND_CHUNK,
                channel.materialization,
                channel.range.name,
                session.id,
                inflight=wire.InFlightMark(batch, chunk[-1][0]),
            )
        await _publish_atomic(aio, session, batch, chunk, rec)
    return Committed(batch, session.frontier.seq, len(docs), len(todo), skipped, len(chunks))


async def _publish_ordered(aio: AsyncNats, session: Session, batch: BatchId, todo: list[tuple[int, OutDoc]]) -> None:
    """Data messages with message ids, pipelined; acks awaited every ``ack_every``."""
    channel = session.channel
    window = max(1, aio.settings.ack_every)
    for start in range(0, len(todo), window):
        futures = []
        for counter, d in todo[start : start + window]:
            headers = wire.data_headers(channel, batch, counter, d.key, delete=d.delete)
            futures.append(await aio.js.publish_async(d.subject, d.payload(), headers=headers))
        done = await asyncio.wait_for(
            asyncio.gather(*futures, return_exceptions=True), timeout=aio.settings.request_timeout
        )
        for r in done:
            if isinstance(r, BaseException):
                raise r


async def _publish_atomic(
    aio: AsyncNats, session: Session, batch: BatchId, chunk: list[tuple[int, OutDoc]], rec: ProgressRecord
) -> None:
    """One atomic batch: ``chunk``'s data, then ``rec`` (commit message) fenced."""
    channel = session.channel
    bid = uuid.uuid4().hex
    msgs = [
        (
            d.subject,
            wire.data_headers(channel, batch, c, d.key, delete=d.delete, with_msg_id=session.msg_ids_in_batches),
            d.payload(),
        )
        for c, d in chunk
    ]
    msgs.append((channel.progress_subject, {wire.H_EXPECTED_LAST_SUBJECT_SEQ: str(session.frontier.seq)}, rec.encode()))
    last = len(msgs)
    timeout = aio.settings.request_timeout
    try:
        for i, (subject, headers, payload) in enumerate(msgs, start=1):
            headers = {**headers, wire.H_BATCH_ID: bid, wire.H_BATCH_SEQ: str(i)}
            if i == last:
                headers[wire.H_BATCH_COMMIT] = "1"
            if i == 1 or i == last or i % aio.settings.ack_every == 0:
                reply = await aio.nc.request(subject, payload, headers=headers, timeout=timeout)
                resp = json.loads(reply.data) if reply.data else {}
                if "error" in resp:
                    error = resp["error"]
                    raise NatsApiError(
                        int(error.get("code", 0)), int(error.get("err_code", 0)), error.get("description", "")
                    )
                if i == last:
                    session.frontier = Frontier(rec, int(resp["seq"]))
            else:
                await aio.nc.publish(subject, payload, headers=headers)
    except NatsApiError as exc:
        if exc.err_code == ERR_WRONG_LAST_SEQUENCE:
            await aio._fenced_or_ours(session, rec, exc)
            return
        if exc.err_code == ERR_ATOMIC_UNSUPPORTED_HEADER and session.msg_ids_in_batches:
            # Servers before message-id support in batches (ADR-50 rev. 1-4): the chunk
            # fence alone keeps zombies out; retry the chunk without ids.
            session.msg_ids_in_batches = False
            await _publish_atomic(aio, session, batch, chunk, rec)
            return
        raise
