"""An external driver program's process: JSON lines in and out with timeouts, stderr
passed through, failures named; and the pool of idle programs per command line."""

from __future__ import annotations

import collections
import io
import os
import queue
import select
import subprocess
import sys
import threading
import time
import weakref
from typing import Any, Optional, Sequence

from tidemark import errors
from tidemark.errors import DriverError, DriverProgramError, ProtocolViolation
from tidemark.options import child_environment
from tidemark.policy import RetryPolicy
from tidemark.protocol import wire

STDERR_TAIL = 20  # lines of the program's stderr kept for error messages
_EOF = object()

# Error names a program may send in an ``error`` reply, and the class each one raises.
_ERROR_TYPES: dict[str, type] = {
    c.__name__: c
    for c in (
        errors.DriverError,
        errors.EndpointUnavailable,
        errors.AuthenticationFailed,
        errors.FencedOff,
        errors.IncompatibleSchema,
        errors.SpecError,
        errors.RecoveryError,
        errors.DocumentError,
        errors.ReductionError,
    )
}


def program_name(command: Sequence[str]) -> str:
    """A short name for messages: the script if the program is an interpreter, else the program."""
    words = list(command)
    if not words:
        return "?"
    interpreters = ("python", "python3", "node", "ruby", "perl", "bash", "sh", "java", "deno", "bun")
    if os.path.basename(words[0]).split(".")[0] in interpreters or os.path.basename(words[0]).startswith("python"):
        for w in words[1:]:
            if not w.startswith("-"):
                return f"{os.path.basename(words[0])} {w}"
    return words[0]


# --------------------------------------------------------------------------- a process


class Program:
    """One running driver program: write wire lines, read wire replies, with timeouts."""

    def __init__(self, command: list[str], env: Optional[dict], cwd: Optional[str], policy: RetryPolicy):
        self.command = command
        self.name = program_name(command)
        self.policy = policy
        full_env = child_environment(env) if env else None
        try:
            self.proc = subprocess.Popen(
                command,
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                env=full_env,
                cwd=cwd,
                bufsize=0,
            )
        except OSError as exc:
            raise DriverProgramError(f"driver program {self.name!r} could not be started: {exc}") from exc
        assert self.proc.stdin is not None  # stdin=subprocess.PIPE
        os.set_blocking(self.proc.stdin.fileno(), False)
        self.lines: queue.Queue = queue.Queue()
        self.stderr_tail: collections.deque = collections.deque(maxlen=STDERR_TAIL)
        self.broken: Optional[str] = None  # why the program may not be used any more
        threading.Thread(
            target=_read_stdout,
            args=(self.proc.stdout, self.lines),
            daemon=True,
            name=f"tidemark-stdout-{self.proc.pid}",
        ).start()
        self._stderr_done = threading.Event()
        threading.Thread(
            target=_pass_stderr,
            args=(self.proc.stderr, self.stderr_tail, self._stderr_done),
            daemon=True,
            name=f"tidemark-stderr-{self.proc.pid}",
        ).start()
        # Closing our end of stdin lets a program that is dropped (never closed) exit.
        self._finalizer = weakref.finalize(self, _release, self.proc)

    # ---------------------------------------------------------------- failures
    def fail(self, what: str, cause: Optional[BaseException] = None) -> DriverProgramError:
        """Mark the program unusable and return the error to raise (with exit code and stderr)."""
        self.broken = what
        code = self.proc.poll()
        if code is None and not what.startswith("exited"):
            self.kill()
            code = self.proc.poll()
        text = f"driver program {self.name!r} {what}"
        if code is not None:
            text += f" (exit code {code})"
        self._stderr_done.wait(1.0)  # let the last stderr lines arrive
        tail = [line for line in self.stderr_tail if line.strip()]
        if tail:
            text += "; its last stderr lines:\n    " + "\n    ".join(tail[-STDERR_TAIL:])
        exc = DriverProgramError(text)
        exc.__cause__ = cause
        return exc

    def _check_usable(self) -> None:
        if self.broken is not None:
            raise DriverProgramError(f"driver program {self.name!r} is unusable: it {self.broken}")

    # ------------------------------------------------------------------ writing
    def send(self, msg: Any) -> None:
        """Write one message; fail if the program has exited or stopped reading for ``reply_timeout``."""
        self._check_usable()
        data = (wire.encode(msg) + "\n").encode("ascii")
        assert self.proc.stdin is not None  # stdin=subprocess.PIPE
        fd = self.proc.stdin.fileno()
        deadline = time.monotonic() + self.policy.reply_timeout
        view = memoryview(data)
        while view:
            try:
                n = os.write(fd, view)
                view = view[n:]
                continue
            except BlockingIOError:
                pass
            except (BrokenPipeError, ConnectionResetError) as exc:
                self.proc_wait(1.0)
                raise self.fail(f"exited while being sent {type(msg).__name__}", exc) from exc
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise self.fail(
                    f"did not read its input for {self.policy.reply_timeout:g}s "
                    f"(sending {type(msg).__name__}); it was killed"
                )
            select.select([], [fd], [], min(remaining, 1.0))

    # ------------------------------------------------------------------ reading
    def _decode(self, line: bytes, waiting_for: str) -> Any:
        try:
            return wire.decode(line)
        except wire.WireError as exc:
            raise self.fail(f"wrote a line that is not a wire message while {waiting_for}: {exc}", exc) from exc

    def receive(self, waiting_for: str) -> Any:
        """The next message (an ``Error`` reply is raised); waits at most ``reply_timeout``."""
        self._check_usable()
        try:
            line = self.lines.get(timeout=self.policy.reply_timeout)
        except queue.Empty:
            raise self.fail(
                f"did not answer within {self.policy.reply_timeout:g}s while {waiting_for}; "
                "it was killed (raise retry.reply_timeout if it needs longer)"
            ) from None
        if line is _EOF:
            self.proc_wait(self.policy.connect_timeout)
            raise self.fail(f"exited while {waiting_for}")
        return self._raise_error(self._decode(line, waiting_for))

    def poll(self, waiting_for: str) -> list:
        """The messages that arrived already, without waiting (an ``Error`` reply is raised)."""
        self._check_usable()
        out: list[Any] = []
        while True:
            try:
                line = self.lines.get_nowait()
            except queue.Empty:
                return out
            if line is _EOF:
                self.lines.put(_EOF)  # seen again by the next receive
                return out
            out.append(self._raise_error(self._decode(line, waiting_for)))

    def _raise_error(self, msg: Any) -> Any:
        if isinstance(msg, wire.Error):
            raise error_from_wire(self.name, msg)
        return msg

    def request(self, msg: Any, reply_type: type, waiting_for: Optional[str] = None) -> Any:
        """Send a request and return its reply, which must be a ``reply_type``."""
        waiting_for = waiting_for or f"answering {type(msg).__name__}"
        self.send(msg)
        reply = self.receive(waiting_for)
        if not isinstance(reply, reply_type):
            raise self.fail(
                f"answered {type(msg).__name__} with {type(reply).__name__}, expected {reply_type.__name__}"
            )
        return reply

    # ---------------------------------------------------------------- lifecycle
    def proc_wait(self, timeout: float) -> Optional[int]:
        try:
            return self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            return None

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc_wait(self.policy.connect_timeout)

    def close(self) -> None:
        """Close its stdin (the program exits at end of input); kill it if it lingers."""
        if self.broken is None:
            self.broken = "was closed"
        _release(self.proc)
        if self.proc_wait(self.policy.connect_timeout) is None:
            self.kill()
        self._finalizer.detach()


READ_BUFFER = 1 << 16  # bytes read from a program's stdout or stderr at a time


def _read_stdout(stream, lines: queue.Queue) -> None:
    """The program's lines into ``lines``.  The pipe is unbuffered (``bufsize=0``, for stdin's
    writes): read through a buffer, or ``readline`` takes a system call per byte (a 10 MB line:
    seconds)."""
    try:
        for line in iter(io.BufferedReader(stream, READ_BUFFER).readline, b""):
            if line.strip():
                lines.put(line)
    except (OSError, ValueError):
        pass
    finally:
        lines.put(_EOF)


def _pass_stderr(stream, tail: collections.deque, done: threading.Event) -> None:
    try:
        for raw in iter(io.BufferedReader(stream, READ_BUFFER).readline, b""):
            text = raw.decode("utf-8", "replace").rstrip("\n")
            tail.append(text)
            try:
                sys.stderr.write(text + "\n")
                sys.stderr.flush()
            except (OSError, ValueError):  # our stderr is closed: keep draining the pipe
                pass
    except (OSError, ValueError):
        pass
    finally:
        done.set()


def _release(proc: subprocess.Popen) -> None:
    try:
        assert proc.stdin is not None  # stdin=subprocess.PIPE
        proc.stdin.close()
    except (OSError, ValueError):
        pass


def error_from_wire(program: str, err: wire.Error) -> errors.TidemarkError:
    """The :mod:`tidemark.errors` exception for an ``error`` reply of ``program``."""
    text = f"driver program {program!r}: {err.message}"
    if err.type == "ProtocolViolation":
        exc = ProtocolViolation.__new__(ProtocolViolation)
        Exception.__init__(exc, f"driver program {program!r} reports a protocol violation: {err.message}")
        exc.state, exc.received, exc.expected = "unknown (checked by the driver program)", err.message, None
        return exc
    cls = _ERROR_TYPES.get(err.type)
    if cls is None:
        return DriverError(f"{text} ({err.type})")
    return cls(text)


# ------------------------------------------------------------------ the idle pool

# Idle programs per command line, reused by every CommandDriver of this process.
MAX_IDLE_PROGRAMS = 4
_IDLE: dict[tuple, list[Program]] = {}
_IDLE_LOCK = threading.Lock()


def usable(program: Program) -> bool:
    return program.broken is None and program.proc.poll() is None and program.lines.empty()


def take_idle(key: tuple) -> Optional[Program]:
    """A healthy idle program of this command line, or None (unhealthy ones are closed)."""
    with _IDLE_LOCK:
        idle = _IDLE.get(key, [])
        while idle:
            program = idle.pop()
            if usable(program):
                return program
            program.close()
    return None


def give_back(key: tuple, program: Program) -> None:
    """Keep an idle, healthy program for the next request or session; close it otherwise."""
    if usable(program):
        with _IDLE_LOCK:
            idle = _IDLE.setdefault(key, [])
            if len(idle) < MAX_IDLE_PROGRAMS:
                idle.append(program)
                return
    program.close()


def close_idle_programs() -> None:
    """Close every idle program of this process (tests; programs also exit when we do)."""
    with _IDLE_LOCK:
        programs = [p for idle in _IDLE.values() for p in idle]
        _IDLE.clear()
    for p in programs:
        p.close()
