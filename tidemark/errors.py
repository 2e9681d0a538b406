"""One error tree for tidemark.

::

    TidemarkError
    ├── SpecError                 (Terminal) the spec is wrong: names file and path in the spec
    ├── ProtocolViolation         (Terminal) a message arrived in the wrong state
    ├── DocumentError             (Terminal) a document is unparseable / invalid / has no key
    ├── ReductionError            (Terminal) two documents cannot be reduced (e.g. sum overflow)
    ├── DriverError               errors raised by a driver, translated at the boundary
    │   ├── EndpointUnavailable   (Transient) connection refused, timeout, serialization failure
    │   ├── AuthenticationFailed  (Terminal) wrong credentials (never includes them)
    │   ├── EndpointRefused       (Terminal) the endpoint answered and refused the request (HTTP 4xx, a limit)
    │   ├── FencedOff             (Terminal) a newer session owns this key range
    │   ├── IncompatibleSchema    (Terminal) Validate refused a binding change
    │   └── DriverProgramError    (Terminal) an external driver program crashed, hung or broke the wire form
    ├── RecoveryError             (Terminal) the recovery log and the endpoint disagree
    └── SourceGone                (Terminal) records a batch must read are no longer in its log source

``Transient`` errors may be retried under :class:`tidemark.policy.RetryPolicy`;
``Terminal`` errors fail the batch and nothing of it commits.  Library errors are
translated at the boundary with ``raise ... from``.
"""

from __future__ import annotations

from typing import Sequence


class TidemarkError(Exception):
    """Root of every error tidemark raises on purpose."""


class Transient:
    """Marker mixin: retrying the same operation may succeed."""


class Terminal:
    """Marker mixin: retrying cannot help; fail the batch."""


class SpecError(TidemarkError, Terminal):
    """The spec is invalid. The message names the file and the path inside it."""

    file: str | None = None
    path: str | None = None

    def __init__(self, message: str, *, file: str | None = None, path: str | None = None):
        self.file = file
        self.path = path
        where = ""
        if file:
            where += f"{file}"
        if path:
            where += f"{':' if file else ''}{path}"
        super().__init__(f"{where}: {message}" if where else message)


class SpecErrors(SpecError):
    """Several errors of one spec, each with its place (``errors``); the message lists them,
    one line each, the first one first.  :meth:`of` gives the one error itself when there is
    only one."""

    def __init__(self, errors: "list[SpecError]"):
        self.errors = list(errors)
        first = self.errors[0]
        TidemarkError.__init__(
            self, "\n".join(str(e) for e in self.errors) + f"\n({len(self.errors)} errors in the spec)"
        )
        self.file, self.path = first.file, first.path

    @staticmethod
    def of(errors: "list[SpecError]") -> SpecError:
        flat: list[SpecError] = []
        for e in errors:
            flat.extend(e.errors if isinstance(e, SpecErrors) else [e])
        return flat[0] if len(flat) == 1 else SpecErrors(flat)


class ProtocolViolation(TidemarkError, Terminal):
    """A protocol message arrived that the current state does not allow."""

    state = received = expected = None

    def __init__(self, state: str, message: str, expected: str | None = None, detail: str = ""):
        self.state = state
        self.received = message
        self.expected = expected
        text = f"protocol violation in state {state}: received {message}"
        if expected:
            text += f", expected {expected}"
        if detail:
            text += f" ({detail})"
        super().__init__(text)


class DocumentError(TidemarkError, Terminal):
    """A source document is unparseable, invalid against its schema, or lacks its key."""

    location: str | None = None
    key: object = None
    documents: list = []  # a failed batch: each invalid document's own DocumentError (up to a limit)
    total: int = 1  # a failed batch: how many of its documents are invalid

    def __init__(self, message: str, *, location: str | None = None, key: object = None):
        self.location = location
        self.key = key
        parts = []
        if location:
            parts.append(location)
        if key is not None:
            parts.append(f"key {key!r}")
        prefix = " ".join(parts)
        super().__init__(f"{prefix}: {message}" if prefix else message)


class ReductionError(TidemarkError, Terminal):
    """Two documents cannot be reduced; names the schema location and the strategy."""


class DriverError(TidemarkError):
    """An endpoint driver failed."""


class EndpointUnavailable(DriverError, Transient):
    """The endpoint could not be reached (retryable)."""


class AuthenticationFailed(DriverError, Terminal):
    """The endpoint refused the credentials. The message never contains them."""


class EndpointRefused(DriverError, Terminal):
    """The endpoint answered and refused the request (e.g. an HTTP 4xx other than 408/429),
    or the request is beyond a limit of the endpoint.  The message names the endpoint
    without credentials and what was refused."""


class FencedOff(DriverError, Terminal):
    """A newer session opened this key range; this session may not commit."""


class IncompatibleSchema(DriverError, Terminal):
    """Validate found a binding change that the endpoint cannot apply."""


class DriverProgramError(DriverError, Terminal):
    """An external driver program (``command:``) exited, timed out, or wrote a line that is
    not a wire message. The message names the program and, when it died, its exit code and
    the last lines of its stderr."""


class RecoveryError(TidemarkError, Terminal):
    """The recovery log, the Spark checkpoint and the endpoint disagree."""


class SourceGone(TidemarkError, Terminal):
    """Records a batch must read are no longer in its log source (a Kafka topic or partition
    deleted, offsets lost to retention, a NATS stream purged): the message names the part
    and the offsets; nothing of the batch was read."""


def is_transient(exc: BaseException) -> bool:
    return isinstance(exc, Transient)


def reset_hint(materialization: str) -> str:
    """The way to start a view over on purpose, for messages that refuse to go on."""
    return (
        f"`tidemark reset SPEC -m {materialization}` (from Python: `tidemark.reset(...)` with the "
        "arguments given to materialize)"
    )


def rebuild_hint(materialization: str) -> str:
    """The way to change a live view without taking it away, for messages that refuse a change."""
    return (
        f"`tidemark rebuild SPEC -m {materialization}` (builds the edited view beside the live one while it keeps "
        "serving, then replaces its contents in one transaction)"
    )


# ------------------------------------------------------------------ across processes
# A shard task runs in a Spark executor's Python worker; Spark hands its failure to the
# driver as text (a Python traceback inside a JVM exception).  The task marks a tidemark
# error with one line that names its class and message, and the driver turns the marked
# text back into that error, so the user reads one message, not three stack traces.

import base64 as _base64
import json as _json
import re as _re

_MARK = "tidemark-error:"
_MARKED = _re.compile(r"\[" + _MARK + r"([A-Za-z0-9+/=]+)\]")


def mark_for_driver(exc: TidemarkError) -> TidemarkError:
    """Add the marker line to ``exc`` (in place) and return it, to be raised in a task."""
    if _MARK in str(exc):
        return exc
    payload = _base64.b64encode(_json.dumps({"type": type(exc).__name__, "message": str(exc)}).encode()).decode()
    exc.args = (f"{exc}\n[{_MARK}{payload}]",)
    return exc


def from_task_failure(exc: BaseException | None) -> "TidemarkError | None":
    """The tidemark error a task raised, recovered from Spark's wrapper (or ``exc`` itself
    when it is one); None when ``exc`` carries none."""
    seen = set()
    while exc is not None and id(exc) not in seen:
        seen.add(id(exc))
        match = _MARKED.search(str(exc))
        if match:
            obj = _json.loads(_base64.b64decode(match.group(1)))
            cls = globals().get(obj.get("type"))
            if not (isinstance(cls, type) and issubclass(cls, TidemarkError)):
                cls = TidemarkError
            err = cls.__new__(cls)
            Exception.__init__(err, obj.get("message", ""))
            return err
        if isinstance(exc, TidemarkError):
            return exc
        exc = exc.__cause__ or exc.__context__
    return None


# ------------------------------------------------------------------ the machine under a run

#: (text in the failure, what it is); the first that matches names it
INFRASTRUCTURE = (
    ("No space left on device", "the disk is full"),
    ("Disk quota exceeded", "the disk quota is used up"),
    ("Read-only file system", "the file system is read-only"),
    ("Permission denied", "permission denied"),
    ("java.lang.OutOfMemoryError", "Spark ran out of memory"),
)


#: what Python and Spark say of a file or folder that is not there (a checkpoint folder that
#: vanished under a run, when the text names it)
GONE = ("does not exist", "No such file or directory")


def infrastructure_error(exc: BaseException, places: "Sequence[str]" = ()) -> "TidemarkError | None":
    """A failure of the machine under the run -- a full disk, a read-only or forbidden
    folder, an out-of-memory JVM, a checkpoint folder that vanished -- raised by Python or
    inside Spark's own writes, as one line: what it is, where (each checkpoint folder and the
    space free there), what to do."""
    import os
    import shutil

    texts: list[str] = []
    seen: set[int] = set()
    e: BaseException | None = exc
    while e is not None and id(e) not in seen:
        seen.add(id(e))
        texts.append(str(e))
        e = e.__cause__ or e.__context__
    text = "\n".join(texts)
    what = next((name for marker, name in INFRASTRUCTURE if marker in text), None)
    if what is None and any(m in text for m in GONE) and any(place and place in text for place in places):
        gone = next(place for place in places if place and place in text)
        err = TidemarkError(
            f"the checkpoint folder {gone} is gone (deleted or moved while the run ran): put it back where it was, "
            "then run again; nothing of the batch in progress was committed. If it is lost, the endpoint refuses "
            "the next run: `tidemark reset SPEC -m NAME` starts the view over (--verbose shows the failure)"
        )
        err.__cause__ = exc
        return err
    if what is None:
        return None
    where = []
    for place in places:
        probe = place
        while probe and not os.path.exists(probe):
            probe = os.path.dirname(probe)
        try:
            free = shutil.disk_usage(probe).free if probe else None
        except OSError:
            free = None
        where.append(place + ("" if free is None else f" ({free / 2**20:,.1f} MiB free)"))
    at = f" at {', '.join(where)}" if where else ""
    if what == "Spark ran out of memory":
        todo = (
            "give it more (--conf spark.driver.memory=4g, or spark.executor.memory on a cluster) or make batches "
            "smaller (maxFilesPerTrigger)"
        )
    elif what == "permission denied" or what == "the file system is read-only":
        todo = "make the checkpoint folder writable for this user (or move it: the spec's checkpoint)"
    else:
        todo = "free space there (or move the checkpoint: the spec's checkpoint)"
    err = TidemarkError(
        f"{what}{at}: {todo}, then run again; nothing of the batch in progress was committed, and the run "
        "goes on from the last committed batch (--verbose shows the failure)"
    )
    err.__cause__ = exc  # (--verbose prints it)
    return err
