"""One live run per checkpoint: a lease file in the checkpoint folder.

A run takes the lease at start-up, before it writes anything (no driver recovery, no Apply,
no Acknowledge), renews it every ``ttl / 3`` seconds from a daemon thread while its query
runs, and gives it back when the query stops.  A second run of the same checkpoint — a cron
overlap, a second terminal — is refused at once with who holds it (host, pid, since when),
before it could, say, delete the first run's staged files.

A lease is live while it was renewed within ``ttl`` seconds, and — when it was taken on
this host — its process is alive: a run killed with SIGKILL on this machine is taken over
at once; one killed on another machine after ``ttl`` (default 30 s).  The same process
(another ``tidemark.materialize`` of the same checkpoint after the first stopped) takes its
own lease again.

Another process may ask the live run to stop at its next batch boundary (``tidemark rebuild``
does, to cut over): :func:`request_stop` writes ``tidemark.stop`` beside the lease; the live
run's lease thread sees it within a second and calls the run's ``on_stop`` (``tidemark run``:
as on Ctrl-C, the batch in progress finishes and commits, then the process exits), and no
batch begins while it is there (:func:`stop_request`; a run starting then is refused).  A
request whose process died on this host is stale and ignored.

Taking and renewing happen under an exclusive ``flock`` on a lock file beside the lease, so
two runs starting at the same instant on one machine cannot both win.  On a checkpoint on
an object store (``s3://…``) there is no such lock: the lease is written and read back
(best effort; a race of two starts within a second can go unnoticed there).
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import socket
import threading
import time
import uuid
from datetime import datetime, timezone
from typing import Callable, Iterator, Optional

from tidemark.errors import RecoveryError
from tidemark.options import process_options
from tidemark.protocol.messages import JsonObject

log = logging.getLogger("tidemark")

LEASE_FILE = "tidemark.lease"
STOP_FILE = "tidemark.stop"  # a request that the live run stop at its next batch boundary
DEFAULT_TTL = 30.0
# the lease this process holds of each lease file: a later Lease of the same file in this
# process (``tidemark run`` takes it before Spark starts, the coordinator at start-up) takes it
# over, and the earlier one stops renewing without giving it back
_HELD: dict[str, "Lease"] = {}
_HELD_LOCK = threading.Lock()
# how this process stops its runs between batches when asked (``tidemark run``: as on Ctrl-C);
# set, it is called instead of a lease's own ``on_stop``
_PROCESS_ON_STOP: list[Callable[[JsonObject], None]] = []


def on_stop_requests(handler: Optional[Callable[[JsonObject], None]]) -> None:
    """``handler(request)`` stops this process's runs between batches when another process asks
    one of them to stop (:func:`request_stop`); None: each lease's own ``on_stop``."""
    _PROCESS_ON_STOP[:] = [handler] if handler is not None else []


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _stamp(t: float) -> str:
    return datetime.fromtimestamp(t, timezone.utc).strftime("%Y-%m-%d %H:%M:%S UTC")


def _stop_path(checkpoint_location: str) -> Optional[str]:
    location = checkpoint_location.rstrip("/")
    if location.startswith("file://"):
        location = location[len("file://") :]
    return None if "://" in location else os.path.join(location, STOP_FILE)


def request_stop(checkpoint_location: str, by: str) -> None:
    """Ask the live run of ``checkpoint_location`` to stop at its next batch boundary (``by``:
    who asks, for its message; e.g. ``rebuild 3f2a...``).  Local folders only."""
    path = _stop_path(checkpoint_location)
    if path is None:
        raise RecoveryError(f"cannot ask the run of {checkpoint_location} to stop: not a local folder")
    body = {"by": by, "host": socket.gethostname(), "pid": os.getpid(), "at": time.time()}
    tmp = f"{path}.{uuid.uuid4().hex}.tmp"
    with open(tmp, "w", encoding="utf-8") as f:
        json.dump(body, f)
    os.replace(tmp, path)


def clear_stop(checkpoint_location: str) -> None:
    path = _stop_path(checkpoint_location)
    if path is not None:
        with contextlib.suppress(FileNotFoundError):
            os.remove(path)


def stop_request(checkpoint_location: str) -> Optional[JsonObject]:
    """The request that the live run stop (:func:`request_stop`), or None (none, or its process
    died on this host)."""
    path = _stop_path(checkpoint_location)
    if path is None:
        return None
    try:
        with open(path, encoding="utf-8") as f:
            body = json.load(f)
    except (FileNotFoundError, OSError, ValueError):
        return None
    if not isinstance(body, dict):
        return None
    if body.get("host") == socket.gethostname() and not _pid_alive(int(body.get("pid", -1))):
        return None  # whoever asked is gone
    return body


class Lease:
    """The lease of one checkpoint folder (a local path, or a URI)."""

    def __init__(self, checkpoint_location: str, materialization: str, *, ttl: Optional[float] = None):
        self.location = checkpoint_location.rstrip("/")
        self.materialization = materialization
        self.ttl = float(ttl if ttl is not None else process_options().lease_ttl)
        self.local = "://" not in self.location or self.location.startswith("file://")
        base = self.location[len("file://") :] if self.location.startswith("file://") else self.location
        self.path = os.path.join(base, LEASE_FILE) if self.local else f"{self.location}/{LEASE_FILE}"
        self.token = uuid.uuid4().hex
        self.host = socket.gethostname()
        self.pid = os.getpid()
        self.since = time.time()
        self.held = False
        self.lost = False
        self._created_dir = False
        self._created_top = ""  # the outermost folder acquire() created
        self._stop = threading.Event()
        self._thread: Optional[threading.Thread] = None
        self._alive: Optional[Callable[[], bool]] = None
        self._on_stop: Optional[Callable[[JsonObject], None]] = None
        self._stop_seen = False

    @property
    def created_folder(self) -> bool:
        """True when taking the lease created the checkpoint folder (it held nothing)."""
        return self._created_dir

    # ------------------------------------------------------------------ file access
    @contextlib.contextmanager
    def _locked(self) -> Iterator[None]:
        if not self.local:
            yield
            return
        import fcntl

        fd = os.open(self.path + ".lock", os.O_CREAT | os.O_RDWR, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            yield
        finally:
            os.close(fd)  # closing releases the lock

    def _read(self) -> Optional[JsonObject]:
        try:
            if self.local:
                with open(self.path, encoding="utf-8") as f:
                    text = f.read()
            else:
                from tidemark.files import filesystem

                fs, p = filesystem(self.path)
                with fs.open_input_stream(p) as f:
                    text = f.read().decode("utf-8")
        except (FileNotFoundError, OSError):
            return None
        try:
            body = json.loads(text)
        except ValueError:
            return None  # a torn write of a dead run: not a live lease
        return body if isinstance(body, dict) else None

    def _write(self) -> None:
        body = json.dumps(
            {
                "token": self.token,
                "materialization": self.materialization,
                "host": self.host,
                "pid": self.pid,
                "since": self.since,
                "renewed": time.time(),
                "ttl": self.ttl,
            }
        )
        if self.local:
            tmp = f"{self.path}.{self.token}.tmp"
            with open(tmp, "w", encoding="utf-8") as f:
                f.write(body)
            os.replace(tmp, self.path)
        else:
            from tidemark.files import filesystem

            fs, p = filesystem(self.path)
            with fs.open_output_stream(p) as f:
                f.write(body.encode("utf-8"))

    def _remove(self) -> None:
        if self.local:
            with contextlib.suppress(FileNotFoundError):
                os.remove(self.path)
            if self._created_dir:  # a first run that ended (or was refused) before writing anything else
                with contextlib.suppress(FileNotFoundError):
                    os.remove(self.path + ".lock")  # (otherwise the lock file stays: unlinking it under a waiter races)
                folder = os.path.dirname(self.path)
                with contextlib.suppress(OSError):  # each only if the run left it empty
                    while True:
                        os.rmdir(folder)
                        if folder == self._created_top:
                            break
                        folder = os.path.dirname(folder)
        else:
            from tidemark.files import filesystem

            fs, p = filesystem(self.path)
            with contextlib.suppress(OSError):
                fs.delete_file(p)

    def _live_other(self, body: Optional[JsonObject]) -> bool:
        if not body or body.get("token") == self.token:
            return False
        if body.get("host") == self.host and body.get("pid") == self.pid:
            return False  # this process's own earlier run (it stopped, or it would not start again)
        if time.time() - float(body.get("renewed", 0)) > float(body.get("ttl", self.ttl)):
            return False  # expired: its run stopped renewing
        if body.get("host") == self.host:
            return _pid_alive(int(body.get("pid", -1)))
        return True

    # ------------------------------------------------------------------ the lease
    def _refuse_if_held(self, body: Optional[JsonObject]) -> None:
        if self._live_other(body):
            assert body is not None  # _live_other is False without a body
            since = _stamp(float(body.get("since", 0)))
            expires = _stamp(float(body.get("renewed", 0)) + float(body.get("ttl", self.ttl)))
            raise RecoveryError(
                f"materialization {self.materialization!r}: its checkpoint {self.location} is in use by another "
                f"run, running since {since} (host {body.get('host')}, pid {body.get('pid')}). One checkpoint "
                f"has one live run; this one started nothing. Wait for that run to end (or stop it); if it is "
                f"dead on another machine, its lease expires at {expires}"
            )

    def check_free(self) -> None:
        """Raise as :meth:`acquire` would, without taking the lease (``tidemark check``, and
        ``tidemark run`` before Spark starts)."""
        self._refuse_if_held(self._read())

    def acquire(self) -> None:
        """Take the lease, or raise :class:`RecoveryError` naming the run that holds it."""
        if self.local:
            folder = os.path.dirname(self.path)
            if not os.path.isdir(folder):
                top = folder
                while not os.path.isdir(os.path.dirname(top)):
                    top = os.path.dirname(top)
                os.makedirs(folder, exist_ok=True)
                self._created_dir, self._created_top = True, top
        try:
            with self._locked():
                self._refuse_if_held(self._read())
                with _HELD_LOCK:
                    earlier = _HELD.get(self.path)
                    if earlier is not None and earlier is not self:
                        earlier._hand_over(self)
                self._write()
        except BaseException:
            if self._created_dir:
                self.held = True  # so that release() cleans up what acquire() created
                self.release()
            raise
        if not self.local and (self._read() or {}).get("token") != self.token:
            raise RecoveryError(
                f"materialization {self.materialization!r}: another run took the lease of "
                f"{self.location} at the same moment; this one started nothing"
            )
        self.held = True
        with _HELD_LOCK:
            _HELD[self.path] = self

    def _hand_over(self, later: "Lease") -> None:
        """Stop renewing: ``later``, of this process, holds the lease file from now on (and
        removes what this one's acquire created, when it gives the lease back)."""
        self._stop.set()
        self.held = False
        if self._created_dir and not later._created_dir:
            later._created_dir, later._created_top = True, self._created_top
        self._created_dir = False

    def renew(self) -> bool:
        """Renew the lease; False (and ``lost``) when another run holds it now."""
        if not self.held:
            return False
        with self._locked():
            if not self.held:  # handed over while this waited for the lock
                return False
            body = self._read()
            if body is not None and body.get("token") != self.token:
                self.lost, self.held = True, False
                log.error(
                    "materialization %s: the lease of %s was taken by another run (host %s, pid %s); this "
                    "run stops committing",
                    self.materialization,
                    self.location,
                    body.get("host"),
                    body.get("pid"),
                )
                return False
            self._write()
        return True

    def keep(
        self, alive: Optional[Callable[[], bool]] = None, on_stop: Optional[Callable[[JsonObject], None]] = None
    ) -> None:
        """Renew in a daemon thread until :meth:`release`, or until ``alive()`` says the run ended;
        ``on_stop(request)``, once, when another process asks the run to stop (:func:`request_stop`)."""
        self._alive = alive
        if on_stop is not None:
            self._on_stop = on_stop
        if self._thread is not None:
            return
        self._thread = threading.Thread(target=self._loop, name=f"tidemark-lease-{self.materialization}", daemon=True)
        self._thread.start()

    def _loop(self) -> None:
        tick = min(1.0, self.ttl / 3)  # a stop request is seen within a second; renewals every ttl / 3
        due = time.monotonic() + self.ttl / 3
        while not self._stop.wait(tick):
            own: list[Optional[Callable[[JsonObject], None]]] = [self._on_stop]
            handler = (_PROCESS_ON_STOP or own)[0]
            if handler is not None and not self._stop_seen:
                request = stop_request(self.location)
                if request is not None:
                    self._stop_seen = True
                    try:
                        handler(request)
                    except Exception as exc:  # noqa: BLE001 - the run stops at its next batch anyway
                        log.warning("materialization %s: stopping on request failed: %s", self.materialization, exc)
            if time.monotonic() < due:
                continue
            due = time.monotonic() + self.ttl / 3
            try:
                ended = self._alive is not None and not self._alive()
            except Exception:  # noqa: BLE001 - the session is gone: so is the run
                ended = True
            if ended:
                self.release()
                return
            try:
                if not self.renew():
                    return
            except Exception as exc:  # noqa: BLE001 - a renewal that fails is retried; expiry is the backstop
                log.warning("materialization %s: renewing the lease failed: %s", self.materialization, exc)

    def check(self) -> None:
        """Raise when the lease was lost (called before each commit)."""
        if self.lost:
            raise RecoveryError(
                f"materialization {self.materialization!r}: this run lost its lease of "
                f"{self.location} to another run; it commits nothing more. Nothing of the batch "
                "was committed by this run"
            )

    def release(self) -> None:
        """Give the lease back (idempotent); the next run starts without waiting."""
        self._stop.set()
        if not self.held:
            return
        self.held = False
        with _HELD_LOCK:
            if _HELD.get(self.path) is self:
                del _HELD[self.path]
        with contextlib.suppress(OSError):
            with self._locked():
                body = self._read()
                if body is None or body.get("token") == self.token:
                    self._remove()


__all__ = [
    "DEFAULT_TTL",
    "LEASE_FILE",
    "STOP_FILE",
    "Lease",
    "clear_stop",
    "on_stop_requests",
    "request_stop",
    "stop_request",
]
