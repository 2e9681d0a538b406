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

import shlex
import threading
import weakref
from typing import Any, Optional, Sequence

from tidemark.drivers.base import Capabilities, CheckpointRow, CommitPattern, Driver, Transactor
from tidemark.drivers.command.program import Program, give_back, program_name, take_idle
from tidemark.drivers.command.settings import SETTINGS
from tidemark.drivers.common.settings import read
from tidemark.drivers.limits import ValueLimits
from tidemark.errors import DriverProgramError, SpecError
from tidemark.protocol import wire
from tidemark.protocol.messages import (
    Acknowledge,
    Acknowledged,
    AnyStore,
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
    Validate,
    Validated,
)
from tidemark.protocol.state import RuntimeStateMachine, Status


def _parse_command(config: dict) -> list[str]:
    command = config.get("command")
    if isinstance(command, str):
        command = shlex.split(command)
    if not command or not isinstance(command, (list, tuple)) or not all(isinstance(w, str) for w in command):
        raise SpecError(
            "the command driver needs a program: use 'command:PROGRAM ARGS' or config {command: [PROGRAM, ARG, ...]}"
        )
    return list(command)


def capabilities_from_wire(program: str, d: dict) -> Capabilities:
    """Parse a ``described`` reply's capabilities (``commit_pattern`` is required)."""
    if not isinstance(d, dict) or "commit_pattern" not in d:
        raise DriverProgramError(
            f"driver program {program!r}: describe must answer "
            f'{{"described": {{"capabilities": {{"commit_pattern": ...}}}}}}, got {d!r}'
        )
    known = set(Capabilities.__dataclass_fields__)
    d = {k: v for k, v in d.items() if k != WIRE_IDENTITIES}
    unknown = set(d) - known
    if unknown:
        raise DriverProgramError(
            f"driver program {program!r}: unknown capabilities {sorted(unknown)} (known: {', '.join(sorted(known))})"
        )
    try:
        kwargs = dict(d)
        kwargs["commit_pattern"] = CommitPattern(d["commit_pattern"])
        if "limits" in kwargs:  # {"max_key_bytes": 255, ...}
            kwargs["limits"] = ValueLimits(**kwargs["limits"])
        return Capabilities(**kwargs)
    except (TypeError, ValueError) as exc:
        patterns = ", ".join(p.value for p in CommitPattern)
        raise DriverProgramError(
            f"driver program {program!r}: invalid capabilities {d!r} ({exc}; commit patterns: {patterns})"
        ) from exc


#: a ``described`` capability beside :class:`Capabilities`'s: the program keeps view-identity
#: records (written from ``apply``'s ``identities``, read by ``list_identities``)
WIRE_IDENTITIES = "identities"

_DESCRIBED: dict[tuple, tuple[Capabilities, bool]] = {}  # per command line, in this process
_CACHE_LOCK = threading.Lock()


class CommandDriver(Driver):
    """An external driver program. See the module docstring for its config."""

    name = "command"

    def __init__(self, config: dict | None = None):
        super().__init__(config)
        v = read("command", self.config, SETTINGS)
        self.command = _parse_command(self.config)
        self.program = program_name(self.command)
        self.env = dict(v["env"]) if v["env"] else None
        self.cwd = v["cwd"] or None
        self.program_config = dict(v["config"] or {})
        self.policy = v["retry"]
        self.reuse = v["reuse_processes"]
        self.key = (tuple(self.command), self.cwd, tuple(sorted((self.env or {}).items())), self.policy)
        self._sessions: "weakref.WeakSet[CommandTransactor]" = weakref.WeakSet()
        self.describe()  # a program that cannot describe itself is refused here

    def capabilities(self) -> Capabilities:
        return self.describe()

    def __reduce__(self):  # pickles as its config: the program is started again where it is unpickled
        return (CommandDriver, (self.config,))

    # ----------------------------------------------------------------- plumbing
    def _take(self) -> Program:
        """An idle program of this command line, or a new one."""
        program = take_idle(self.key) if self.reuse else None
        return program or Program(self.command, self.env, self.cwd, self.policy)

    def _release(self, program: Program) -> None:
        if self.reuse:
            give_back(self.key, program)
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
        return self._described()[0]

    def _described(self) -> tuple[Capabilities, bool]:
        with _CACHE_LOCK:
            found = _DESCRIBED.get(self.key)
        if found is None:
            reply = self._request(wire.Describe(), wire.Described)
            found = (
                capabilities_from_wire(self.program, reply.capabilities),
                bool(isinstance(reply.capabilities, dict) and reply.capabilities.get(WIRE_IDENTITIES)),
            )
            with _CACHE_LOCK:
                _DESCRIBED[self.key] = found
        return found

    # --------------------------------------------------------------- setup phase
    def spec(self) -> SpecResponse:
        return self._request(Spec(), SpecResponse)

    def validate(self, req: Validate) -> Validated:
        return self._request(Validate(req.materialization, self.program_config, req.bindings), Validated)

    def apply(self, req: Apply) -> Applied:
        return self._request(
            Apply(
                req.materialization,
                self.program_config,
                req.bindings,
                req.version,
                req.dry_run,
                req.checkpoint_id,
                req.identities if self._described()[1] else (),
            ),
            Applied,
        )

    def identities(self, materialization: str, bindings: Sequence[BindingSpec]) -> Optional[list[Optional[dict]]]:
        """``list_identities`` -> ``identities_listed`` (``records``: one per binding, or null), when
        the program declared the ``identities`` capability; otherwise None (it keeps none)."""
        if not self._described()[1]:
            return None
        reply = self._request(wire.ListIdentities(materialization, tuple(bindings)), wire.IdentitiesListed)
        records = list(reply.records)
        if len(records) != len(bindings) or not all(r is None or isinstance(r, dict) for r in records):
            raise DriverProgramError(
                f"driver program {self.program!r}: identities_listed needs one record (an object, "
                f"or null) per binding, got {records!r}"
            )
        return records

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
                raise DriverProgramError(
                    f"driver program {self.program!r}: dumped rows of a standard binding are "
                    f"[key, doc] pairs with the key an array, got {row!r}"
                )
            view[tuple(row[0])] = row[1]
        return view

    def checkpoints(self, materialization: str) -> list[CheckpointRow]:
        reply = self._request(wire.ListCheckpoints(materialization), wire.CheckpointsListed)
        out = []
        for row in reply.rows:
            try:
                out.append(
                    CheckpointRow(
                        materialization,
                        Range(int(row["key_begin"]), int(row["key_end"])),
                        int(row.get("fence", 0)),
                        row.get("runtime_checkpoint"),
                    )
                )
            except (TypeError, ValueError, KeyError, AttributeError) as exc:
                raise DriverProgramError(
                    f"driver program {self.program!r}: a checkpoint row needs key_begin, "
                    f"key_end, fence and runtime_checkpoint, got {row!r}"
                ) from exc
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

    def __init__(self, program: Program, bindings: Sequence[BindingSpec], release=None):
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

    def store(self, msg: AnyStore) -> None:
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


__all__ = ["CommandDriver", "CommandTransactor", "capabilities_from_wire"]
