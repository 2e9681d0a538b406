"""Advisory file locks (``flock``) between the processes that share a store directory.

A reader (shared) and a writer (exclusive) of a range meet at two locks: the range lock
and its *turnstile*.  Both pass the turnstile (exclusive, held only until the range lock
is theirs), so a reader waiting for the range lock holds the turnstile and the writer's
next commit waits for it: back-to-back commits cannot starve a reader, which waits for
at most the commit in progress (:func:`turnstile_acquire`).

``flock`` locks belong to an open file description, so two sessions conflict even
inside one process, and the kernel drops a dead process's locks: a SIGKILLed writer
never leaves a range locked.  Waiting polls with a capped backoff until a deadline
(:attr:`tidemark.policy.RetryPolicy.lock_timeout`); running out of time is
:class:`~tidemark.errors.EndpointUnavailable` (transient: the holder may be a slow
commit, and a retry of the task may succeed).
"""

from __future__ import annotations

import fcntl
import os
import time
from typing import Iterable, Sequence

from tidemark.errors import EndpointUnavailable


class FileLock:
    def __init__(self, path: str):
        self.path = path
        self._fd: int | None = None

    def try_acquire(self, exclusive: bool = True) -> bool:
        if self._fd is not None:
            raise RuntimeError(f"lock {self.path} is already held by this object")
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, (fcntl.LOCK_EX if exclusive else fcntl.LOCK_SH) | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            return False
        self._fd = fd
        return True

    def acquire(self, exclusive: bool = True, timeout: float = 60.0) -> "FileLock":
        deadline = time.monotonic() + timeout
        delay = 0.001
        while not self.try_acquire(exclusive):
            if time.monotonic() >= deadline:
                raise EndpointUnavailable(
                    f"store lock {self.path} is still held by another process after {timeout:.0f}s "
                    "(a commit or an Open of this range is in progress); retry, or raise retry.lock_timeout"
                )
            time.sleep(delay)
            delay = min(delay * 2, 0.01)
        return self

    def release(self) -> None:
        if self._fd is not None:
            fd, self._fd = self._fd, None
            fcntl.flock(fd, fcntl.LOCK_UN)
            os.close(fd)

    @property
    def held(self) -> bool:
        return self._fd is not None

    def __enter__(self) -> "FileLock":
        return self

    def __exit__(self, *exc) -> None:
        self.release()


def acquire_all(paths: Sequence[str], timeout: float) -> list[FileLock]:
    """Exclusive locks on every path, all or nothing: never holds some while waiting for
    others, so two Opens of overlapping ranges cannot deadlock."""
    deadline = time.monotonic() + timeout
    delay = 0.001
    while True:
        held: list[FileLock] = []
        for p in sorted(set(paths)):
            lock = FileLock(p)
            if not lock.try_acquire(True):
                release_all(held)
                break
            held.append(lock)
        else:
            return held
        if time.monotonic() >= deadline:
            raise EndpointUnavailable(
                f"store locks {sorted(set(paths))} are still held by other sessions after {timeout:.0f}s; "
                "retry, or raise retry.lock_timeout"
            )
        time.sleep(delay)
        delay = min(delay * 2, 0.01)


def release_all(locks: Iterable[FileLock]) -> None:
    for lock in locks:
        lock.release()


def turnstile_acquire(path: str, exclusive: bool, timeout: float) -> FileLock:
    """The lock at ``path``, taken through the turnstile ``path + ".turnstile"``."""
    with FileLock(path + ".turnstile").acquire(True, timeout):
        return FileLock(path).acquire(exclusive, timeout)
