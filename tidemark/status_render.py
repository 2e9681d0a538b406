"""``tidemark status`` in a terminal: a :class:`~tidemark.status.MaterializationStatus` as lines
of a given width (:func:`render`), and its one-line :func:`verdict`."""

from __future__ import annotations

import json
import textwrap
import time
from typing import Optional, cast

from tidemark.status import MaterializationStatus


def _ago(seconds: float) -> str:
    seconds = max(0, int(seconds))
    if seconds < 120:
        return f"{seconds} s ago"
    if seconds < 7200:
        return f"{seconds // 60} min ago"
    if seconds < 172800:
        return f"{seconds // 3600} h ago"
    return f"{seconds // 86400} days ago"


def _size(n: float) -> str:
    for unit in ("B", "KB", "MB", "GB"):
        if n < 1024 or unit == "GB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return f"{n} B"  # pragma: no cover


def verdict(view: MaterializationStatus) -> str:
    if view.problems:
        return "broken: " + view.problems[0]
    waiting = []
    if view.input.files_waiting:
        waiting.append(f"{view.input.files_waiting} file(s) waiting")
    if view.input.offsets_waiting:
        waiting.append(f"{view.input.offsets_waiting} message(s) waiting")
    if view.batches_waiting:
        waiting.append(f"{view.batches_waiting} planned batch(es) not committed")
    if waiting:
        return "behind: " + ", ".join(waiting)
    if view.behind is None:
        return (
            "input waiting: unknown ("
            + ("give --kafka-bootstrap" if view.input.kind == "offsets" else "not a local file source")
            + ")"
        )
    return "up to date: no input waiting"


def render(view: MaterializationStatus, width: int = 80, now: Optional[float] = None) -> list[str]:
    """The status as lines of at most ``width`` characters."""
    now = time.time() if now is None else now
    label = 15
    lines: list[str] = []

    def row(name: str, text: str) -> None:
        lines.extend(
            textwrap.wrap(
                text,
                width=max(20, width),
                initial_indent=f"  {name:<{label - 2}}",
                subsequent_indent=" " * label,
                break_on_hyphens=False,
                break_long_words=True,
            )
            or [f"  {name}"]
        )

    def path_row(name: str, path: str) -> None:
        """A path, broken after a ``/`` where it does not fit."""
        room = max(20, width) - label
        parts = [p + "/" for p in path.split("/")[:-1]] + [path.split("/")[-1]]
        chunks, cur = [], ""
        for part in parts:
            while len(part) > room:  # one very long name
                if cur:
                    chunks.append(cur)
                    cur = ""
                chunks.append(part[:room])
                part = part[room:]
            if len(cur) + len(part) > room:
                chunks.append(cur)
                cur = ""
            cur += part
        chunks.append(cur)
        for i, chunk in enumerate(c for c in chunks if c):
            lines.append(f"  {name if i == 0 else '':<{label - 2}}{chunk}")

    head = f"{view.name} ({view.endpoint or 'endpoint not recorded'}): {verdict(view)}"
    lines.extend(textwrap.wrap(head, width=max(20, width), subsequent_indent="  "))
    if view.last_batch is None:
        row("last commit", "none yet")
    else:
        when = ""
        if view.committed_at:
            stamp = time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime(view.committed_at))
            when = f" at {stamp} ({_ago(now - view.committed_at)})"
        row("last commit", f"batch {view.last_batch}{when}")
        c = view.last_counts
        took = f", took {c['seconds']:.1f} s" if isinstance(c.get("seconds"), (int, float)) else ""
        row(
            "last batch",
            f"{c.get('documents', 0)} documents, {c.get('stored', 0)} stored, "
            f"{c.get('deleted', 0)} deleted, {c.get('invalid', 0)} quarantined{took}",
        )
        t = view.totals
        if t:
            row(
                "since start",
                f"{t.get('batches', 0)} batches, {t.get('documents', 0)} documents, {t.get('invalid', 0)} quarantined",
            )
    inp = view.input
    if inp.kind == "files" and inp.files_waiting is not None:
        size = f" ({_size(cast(int, inp.bytes_waiting))})" if inp.files_waiting else ""  # set with files_waiting
        row("input", f"{inp.files_waiting} file(s) waiting{size}")
        where = "read from" if inp.guessed else "source"
        for folder in inp.folders:
            path_row(where, folder)
            where = ""
        if inp.guessed:
            row("", "(the folders of the files read so far)")
    elif inp.kind == "offsets":
        if inp.offsets_waiting is not None:
            row("input", f"{inp.offsets_waiting} message(s) waiting")
        else:
            row("input", "unknown: give --kafka-bootstrap, or compare with the source's latest offsets")
        for n, offsets in inp.read_to.items():
            row(f"source {n}", "committed to " + json.dumps(offsets, separators=(",", ":")))
    elif inp.kind == "log":
        row("input", "unknown" if inp.offsets_waiting is None else f"{inp.offsets_waiting} record(s) waiting")
        for p in inp.lag:
            at = "nothing read" if p["read_to"] is None else f"read to {p['read_to']}"
            row("", f"{p['part']}: {p['behind']} behind ({at}, newest {p['newest']})")
    elif inp.kind == "files":
        row("input", "unknown: the folders read so far are gone")
    else:
        row("input", "unknown: no local file source")
    if view.verified:
        v = view.verified
        found = "equal" if v.get("ok") else f"{v.get('differences')} key(s) differ (tidemark verify shows them)"
        row("verified", f"{_ago(now - float(v.get('at') or now))}, as of batch {v.get('batch')}: {found}")
    if view.planned_batch is None:
        row("spark", "no batch planned yet")
    else:
        row("spark", f"planned up to batch {view.planned_batch}; {view.batches_waiting} not committed")
    path_row("checkpoint", view.checkpoint)
    if view.layouts:
        parts = []
        for r in view.layouts:
            span = f"{r['first']}" if r["first"] == r["last"] else f"{r['first']}-{r['last']}"
            parts.append(
                f"batch{'es' if r['first'] != r['last'] else ''} {span}: {r['shards']} shard(s), "
                f"{r['by']}{'' if r['committed'] else ' (in progress)'}"
            )
        row("layouts", "; ".join(parts))
    for req in view.pending_scale:
        row("scale", f"{req['shards']} shard(s) requested, applied at the next batch")
    if view.shards:
        wide = max(len(s.place) for s in view.shards)
        if wide + label + 14 <= width:
            lines.append(" " * label + f"{'range':<{wide}}  {'fence':>5}  {'batch':>5}")
            first = True
            for s in view.shards:
                fence = "-" if s.fence is None else str(s.fence)
                batch = "-" if s.batch_id is None else str(s.batch_id)
                lines.append(f"  {'shards' if first else '':<{label - 2}}{s.place:<{wide}}  {fence:>5}  {batch:>5}")
                first = False
        else:
            for s in view.shards:
                fence = "" if s.fence is None else f", fence {s.fence}"
                batch = "no batch" if s.batch_id is None else f"batch {s.batch_id}"
                row("shard", f"{s.place}: {batch}{fence}")
    for note in view.notes:
        row("note", note)
    return lines
