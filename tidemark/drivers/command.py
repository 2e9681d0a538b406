"""A driver that is an external program speaking the JSON-lines wire form over stdin/stdout.

Config (``command:PROGRAM ARGS`` in a spec or on the CLI fills ``command``)::

    {"command": ["python", "driver.py", "--state", "/tmp/x.db"],   # or one shell-quoted string
     "env": {"NAME": "value"},         # added to this process's environment
     "cwd": "/path",                   # working directory of the program
     "config": {...},                  # the program's own config: sent as Open/Validate/Apply.config
     "reuse_processes": true,          # keep idle programs for later requests and sessions
     "retry": {"reply_timeout": 300, "connect_timeout": 10}}

A program serves requests one after the other until its stdin closes: setup and
inspection requests (Describe, Spec, Validate, Apply, Dump, ListCheckpoints,
CoordinatorAcknowledge) and sessions (Open, then the transaction loop).  Every session
has a process of its own while it runs (a Spark task, a retried task and a zombie each
talk to their own program); a process whose session was closed between transactions,
or that answered a request, goes back to a small pool of idle programs per command line
and may serve a request or a new ``open`` next (``reuse_processes: false`` turns that
off).  A session dropped without ``close`` (a crash) is never reused: its program gets
end of input and exits.

Capabilities are the program's answer to ``describe`` (asked on first use, cached per
command line and process).  A program that declares ``quarantine`` receives the
``quarantine`` message after a transaction's Stores.

Failures become :mod:`tidemark.errors`, naming the program: an ``error`` reply maps to the
class it names (``FencedOff``, ``EndpointUnavailable``, ...; unknown names become
:class:`~tidemark.errors.DriverError`); a program that exits, does not answer within
``reply_timeout`` or writes a line that is not a wire message raises
:class:`~tidemark.errors.DriverProgramError` (with its exit code and last stderr lines).
The program's stderr is passed through to ours, line by line.
"""

from __future__ import annotations

import collections
import os
import queue
import select
import shlex
import subprocess
import sys
import threading
import time
import weakref
from typing import Any, Optional, Sequence

from tidemark import errors
from tidemark.drivers.base import Capabilities, CheckpointRow, CommitPattern, Driver, Transactor
from tidemark.errors import DriverError, DriverProgramError, ProtocolViolation, SpecError
from tidemark.policy import RetryPolicy
from tidemark.protocol import wire
from tidemark.protocol.messages import (
    Acknowledge,
    Acknowledged,
    Applied,
    Apply,
    BindingSpec,
    Flush,
    Flushed,
    Load,
    Loaded,
    Open,
    Opened,
    Quarantine,
    Range,
    Spec,
    SpecResponse,
    StartCommit,
    StartedCommit,
    Store,
    Validate,
    Validated,
)
from tidemark.protocol.state import RuntimeStateMachine, Status

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


class _Program:
    """One running driver program: write wire lines, read wire replies, with timeouts."""

    def __init__(self, command: list[str], env: Optional[dict], cwd: Optional[str], policy: RetryPolicy):
        self.command = command
        self.name = program_name(command)
        self.policy = policy
        full_env = None
        if env:
            full_env = dict(os.environ)
            full_env.update({str(k): str(v) for k, v in env.items()})
        try:
            self.proc = subprocess.Popen(
                command, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                env=full_env, cwd=cwd, bufsize=0,
            )
        except OSError as exc:
            raise DriverProgramError(f"driver program {self.name!r} could not be started: {exc}") from exc
        os.set_blocking(self.proc.stdin.fileno(), False)
        self.lines: queue.Queue = queue.Queue()
        self.stderr_tail: collections.deque = collections.deque(maxlen=STDERR_TAIL)
        self.broken: Optional[str] = None  # why the program may not be used any more
        threading.Thread(target=_read_stdout, args=(self.proc.stdout, self.lines), daemon=True,
                         name=f"tidemark-stdout-{self.proc.pid}").start()
        self._stderr_done = threading.Event()
        threading.Thread(target=_pass_stderr, args=(self.proc.stderr, self.stderr_tail, self._stderr_done),
                         daemon=True, name=f"tidemark-stderr-{self.proc.pid}").start()
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
                raise self.fail(f"did not read its input for {self.policy.reply_timeout:g}s "
                                f"(sending {type(msg).__name__}); it was killed")
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
            raise self.fail(f"did not answer within {self.policy.reply_timeout:g}s while {waiting_for}; "
                            "it was killed (raise retry.reply_timeout if it needs longer)") from None
        if line is _EOF:
            self.proc_wait(self.policy.connect_timeout)
            raise self.fail(f"exited while {waiting_for}")
        return self._raise_error(self._decode(line, waiting_for))

    def poll(self, waiting_for: str) -> list:
        """The messages that arrived already, without waiting (an ``Error`` reply is raised)."""
        self._check_usable()
        out = []
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
            raise self.fail(f"answered {type(msg).__name__} with {type(reply).__name__}, "
                            f"expected {reply_type.__name__}")
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


def _read_stdout(stream, lines: queue.Queue) -> None:
    try:
        for line in iter(stream.readline, b""):
            if line.strip():
                lines.put(line)
    except (OSError, ValueError):
        pass
    finally:
        lines.put(_EOF)


def _pass_stderr(stream, tail: collections.deque, done: threading.Event) -> None:
    try:
        for raw in iter(stream.readline, b""):
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


# ------------------------------------------------------------------------ the driver


def _parse_command(config: dict) -> list[str]:
    command = config.get("command")
    if isinstance(command, str):
        command = shlex.split(command)
    if not command or not isinstance(command, (list, tuple)) or not all(isinstance(w, str) for w in command):
        raise SpecError("the command driver needs a program: use 'command:PROGRAM ARGS' or config "
                        "{command: [PROGRAM, ARG, ...]}")
    return list(command)


def capabilities_from_wire(program: str, d: dict) -> Capabilities:
    """Parse a ``described`` reply's capabilities (``commit_pattern`` is required)."""
    if not isinstance(d, dict) or "commit_pattern" not in d:
        raise DriverProgramError(f"driver program {program!r}: describe must answer "
                                 f"{{\"described\": {{\"capabilities\": {{\"commit_pattern\": ...}}}}}}, got {d!r}")
    known = set(Capabilities.__dataclass_fields__)
    unknown = set(d) - known
    if unknown:
        raise DriverProgramError(f"driver program {program!r}: unknown capabilities {sorted(unknown)} "
                                 f"(known: {', '.join(sorted(known))})")
    try:
        kwargs = dict(d)
        kwargs["commit_pattern"] = CommitPattern(d["commit_pattern"])
        return Capabilities(**kwargs)
    except (TypeError, ValueError) as exc:
        patterns = ", ".join(p.value for p in CommitPattern)
        raise DriverProgramError(f"driver program {program!r}: invalid capabilities {d!r} ({exc}; commit patterns: "
                                 f"{patterns})") from exc


_DESCRIBED: dict[tuple, Capabilities] = {}
_CACHE_LOCK = threading.Lock()

# Idle programs per command line, reused by every CommandDriver of this process.
MAX_IDLE_PROGRAMS = 4
_IDLE: dict[tuple, list[_Program]] = {}
_IDLE_LOCK = threading.Lock()


def _usable(program: _Program) -> bool:
    return program.broken is None and program.proc.poll() is None and program.lines.empty()


def _give_back(key: tuple, program: _Program) -> None:
    """Keep an idle, healthy program for the next request or session; close it otherwise."""
    if _usable(program):
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


class CommandDriver(Driver):
    """An external driver program. See the module docstring for its config."""

    name = "command"

    def __init__(self, config: dict | None = None):
        super().__init__(config)
        self.command = _parse_command(self.config)
        self.program = program_name(self.command)
        env = self.config.get("env") or None
        if env is not None and not isinstance(env, dict):
            raise SpecError("command driver: env must be a mapping")
        self.env = env
        self.cwd = self.config.get("cwd") or None
        self.program_config = dict(self.config.get("config") or {})
        self.policy = RetryPolicy.from_config(self.config.get("retry"))
        self.reuse = bool(self.config.get("reuse_processes", True))
        self.key = (tuple(self.command), self.cwd, tuple(sorted((self.env or {}).items())), self.policy)
        self._sessions: "weakref.WeakSet[CommandTransactor]" = weakref.WeakSet()
        self.describe()  # a program that cannot describe itself is refused here

    def capabilities(self) -> Capabilities:
        return self.describe()

    def __reduce__(self):  # pickles as its config: the program is started again where it is unpickled
        return (CommandDriver, (self.config,))

    # ----------------------------------------------------------------- plumbing
    def _take(self) -> _Program:
        """An idle program of this command line, or a new one."""
        if self.reuse:
            with _IDLE_LOCK:
                idle = _IDLE.get(self.key, [])
                while idle:
                    program = idle.pop()
                    if _usable(program):
                        return program
                    program.close()
        return _Program(self.command, self.env, self.cwd, self.policy)

    def _release(self, program: _Program) -> None:
        if self.reuse:
            _give_back(self.key, program)
        else:
            program.close()

    def _request(self, msg: Any, reply_type: type) -> Any:
        program = self._take()
        try:
            return program.request(msg, reply_type)
        finally:
            self._release(program)  # an error reply leaves it usable; a crash or timeout does not

    def describe(self) -> Capabilities:
        """The program's capabilities (asked once per command line and process)."""
        with _CACHE_LOCK:
            caps = _DESCRIBED.get(self.key)
        if caps is None:
            reply = self._request(wire.Describe(), wire.Described)
            caps = capabilities_from_wire(self.program, reply.capabilities)
            with _CACHE_LOCK:
                _DESCRIBED[self.key] = caps
        return caps

    # --------------------------------------------------------------- setup phase
    def spec(self) -> SpecResponse:
        return self._request(Spec(), SpecResponse)

    def validate(self, req: Validate) -> Validated:
        return self._request(Validate(req.materialization, self.program_config, req.bindings), Validated)

    def apply(self, req: Apply) -> Applied:
        return self._request(
            Apply(req.materialization, self.program_config, req.bindings, req.version, req.dry_run, req.checkpoint_id),
            Applied
        )

    # --------------------------------------------------------- transaction phase
    def open(self, req: Open) -> tuple["CommandTransactor", Opened]:
        program = self._take()
        msg = Open(req.materialization, req.version, req.range, req.state, self.program_config, req.bindings)
        try:
            opened = program.request(msg, Opened, f"answering Open of range {req.range.name}")
        except BaseException:
            program.close()
            raise
        transactor = CommandTransactor(program, req.bindings, self._release)
        self._sessions.add(transactor)
        return transactor, opened

    def coordinator_acknowledge(
        self, materialization: str, state: Any, runtime_checkpoint: dict, bindings: Sequence[BindingSpec]
    ) -> None:
        self._request(
            wire.CoordinatorAcknowledge(materialization, state, runtime_checkpoint, tuple(bindings)),
            wire.CoordinatorAcknowledged,
        )

    # ---------------------------------------------------------------- inspection
    def dump(self, materialization: str, binding: BindingSpec):
        reply = self._request(wire.Dump(materialization, binding), wire.Dumped)
        if binding.delta_updates:
            return list(reply.rows)
        view = {}
        for row in reply.rows:
            if not (isinstance(row, (list, tuple)) and len(row) == 2 and isinstance(row[0], (list, tuple))):
                raise DriverProgramError(f"driver program {self.program!r}: dumped rows of a standard binding are "
                                         f"[key, doc] pairs with the key an array, got {row!r}")
            view[tuple(row[0])] = row[1]
        return view

    def checkpoints(self, materialization: str) -> list[CheckpointRow]:
        reply = self._request(wire.ListCheckpoints(materialization), wire.CheckpointsListed)
        out = []
        for row in reply.rows:
            try:
                out.append(CheckpointRow(materialization, Range(int(row["key_begin"]), int(row["key_end"])),
                                         int(row.get("fence", 0)), row.get("runtime_checkpoint")))
            except (TypeError, ValueError, KeyError, AttributeError) as exc:
                raise DriverProgramError(f"driver program {self.program!r}: a checkpoint row needs key_begin, "
                                         f"key_end, fence and runtime_checkpoint, got {row!r}") from exc
        return out

    def close(self) -> None:
        """Close the sessions this driver opened that are still open."""
        for session in list(self._sessions):
            session.close()


# ----------------------------------------------------------------------- a session


class CommandTransactor(Transactor):
    """One session, in its own program process.

    The program may send ``loaded`` at any time between Acknowledged and Flushed (it may
    answer Loads at once or defer them to Flush); every line it writes is checked by a
    :class:`~tidemark.protocol.state.RuntimeStateMachine`, so that a Loaded before
    Acknowledged, a Loaded for a key never requested or any output during the Store phase
    raises :class:`~tidemark.errors.ProtocolViolation` naming the program."""

    def __init__(self, program: _Program, bindings: Sequence[BindingSpec], release=None):
        self.program = program
        self.release = release
        self.machine = RuntimeStateMachine(bindings, opened=True)
        self.machine.side = f"driver program {program.name!r} over the wire"

    def _receive(self, waiting_for: str) -> Any:
        msg = self.program.receive(waiting_for)
        self.machine.receive(msg)
        return msg

    def _arrived(self, waiting_for: str) -> list:
        out = self.program.poll(waiting_for)
        for msg in out:
            self.machine.receive(msg)
        return out

    def _send(self, msg: Any) -> None:
        self.machine.send(msg)
        self.program.send(msg)

    def acknowledge(self, msg: Acknowledge) -> Acknowledged:
        self._send(msg)
        reply = self._receive("answering Acknowledge")
        if not isinstance(reply, Acknowledged):  # the machine lets nothing else through here
            raise self.program.fail(f"answered Acknowledge with {type(reply).__name__}")
        return reply

    def load(self, msg: Load) -> list[Loaded]:
        self._send(msg)
        return self._arrived("answering Load")  # only Loaded can pass the machine in this state

    def flush(self, msg: Flush) -> tuple[list[Loaded], Flushed]:
        self._send(msg)
        loaded: list[Loaded] = []
        while True:
            reply = self._receive("answering Flush")
            if isinstance(reply, Flushed):
                return loaded, reply
            loaded.append(reply)

    def store(self, msg: Store) -> None:
        self._send(msg)
        self._arrived("storing")  # any output now is a violation the machine raises

    def quarantine(self, msg: Quarantine) -> None:
        self._send(msg)
        self._arrived("storing")

    def start_commit(self, msg: StartCommit) -> StartedCommit:
        self._arrived("storing")
        self._send(msg)
        return self._receive("answering StartCommit")

    def close(self) -> None:
        """Between transactions the program may serve another session; otherwise it is closed."""
        if self.machine.status is Status.CLOSED:
            return
        between = self.machine.status is Status.ACKNOWLEDGE and not self.machine.acknowledge_sent
        self.machine.close()
        if between and self.release is not None:
            self.release(self.program)
        else:
            self.program.close()


__all__ = ["CommandDriver", "CommandTransactor", "error_from_wire", "capabilities_from_wire", "program_name"]
