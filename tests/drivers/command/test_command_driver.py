"""CommandDriver against real child processes: the example driver, and tiny programs that
misbehave on purpose (error replies, crashes, garbage, silence, protocol violations)."""

from __future__ import annotations

import json
import pickle
import sys
import textwrap
from pathlib import Path

import pytest

from tests.support.paths import REPO, SUPPORT
from tidemark.drivers.command import CommandDriver, close_idle_programs
from tidemark.drivers.registry import load_driver
from tidemark.errors import DriverError, DriverProgramError, FencedOff, ProtocolViolation, SpecError
from tidemark.protocol.messages import Acknowledge, Apply, Flush, Load, Open, Quarantine, Range, StartCommit, Store
from tidemark.testing.workload import bindings as kit_bindings

ROOT = Path(REPO)
EXAMPLE_DRIVER = ROOT / "examples" / "external_driver" / "driver.py"
BINDINGS = kit_bindings("cmdtest")
CHECKPOINT = {"checkpoint_id": "cp", "batch_id": 0, "materialization": "m"}

# A program that describes itself, then does what BEHAVIOR says when it is opened.
PROGRAM = textwrap.dedent("""
    import json, sys
    behavior = sys.argv[1]
    def out(obj):
        sys.stdout.write(json.dumps(obj) + "\\n"); sys.stdout.flush()
    for line in sys.stdin:
        (name, body), = json.loads(line).items()
        if name == "describe":
            caps = {"commit_pattern": "store-authoritative"}
            if behavior == "bad-capabilities":
                caps = {"commit_pattern": "sometimes"}
            out({"described": {"capabilities": caps}})
        elif name == "open":
            if behavior == "fenced":
                out({"error": {"type": "FencedOff", "message": "range is owned by a newer session"}})
            elif behavior == "odd-error":
                out({"error": {"type": "Kaboom", "message": "something odd"}})
            elif behavior == "crash":
                print("boom: the endpoint is on fire", file=sys.stderr, flush=True)
                sys.exit(3)
            elif behavior == "garbage":
                print("hello, I am not JSON", flush=True)
            elif behavior == "wrong-reply":
                out({"flushed": {}})
            elif behavior == "silent":
                pass
            else:
                print("opening", body["range"], file=sys.stderr, flush=True)
                out({"opened": {"runtime_checkpoint": None}})
        elif name == "acknowledge":
            if behavior == "early-loaded":
                out({"loaded": {"binding": 0, "keys": [["a"]], "docs": [{"k": "a"}]}})
            out({"acknowledged": {}})
        elif name == "load":
            pass
        elif name == "flush":
            out({"flushed": {}})
        elif name == "store":
            if behavior == "talks-during-store":
                out({"flushed": {}})
        elif name == "start_commit":
            out({"started_commit": {}})
""")


@pytest.fixture
def program(tmp_path):
    path = tmp_path / "program.py"
    path.write_text(PROGRAM)

    def make(behavior: str, **config) -> CommandDriver:
        config.setdefault("retry", {"reply_timeout": 20, "connect_timeout": 5})
        config.setdefault("reuse_processes", False)
        return load_driver(f"command:{sys.executable} {path} {behavior}", config)

    yield make
    close_idle_programs()


def open_msg(key_range: Range = Range()) -> Open:
    return Open("m", "v1", key_range, bindings=BINDINGS)


def test_a_good_session_and_stderr_pass_through(program, capfd):
    driver = program("good")
    transactor, opened = driver.open(open_msg())
    assert opened.runtime_checkpoint is None
    transactor.acknowledge(Acknowledge())
    assert transactor.load(Load(0, (("a",),))) == []
    loaded, flushed = transactor.flush(Flush())
    assert loaded == []
    transactor.store(Store(0, (("a",),), ((1, "x"),), ({"k": "a", "n": 1, "last": "x"},), (False,), (False,)))
    transactor.start_commit(StartCommit(CHECKPOINT))
    program_process = transactor.program
    transactor.close()
    driver.close()
    # The line reaches our stderr from a thread of its own, which may lag behind the replies
    # on stdout: wait until it has passed on all of the (now exited) program's stderr.
    assert program_process._stderr_done.wait(20)
    assert "opening {'key_begin': 0, 'key_end': 4294967295}" in capfd.readouterr().err


def test_an_error_reply_becomes_the_named_error(program):
    driver = program("fenced")
    with pytest.raises(FencedOff, match=r"driver program 'python\S* \S*program.py': range is owned by a newer"):
        driver.open(open_msg())
    with pytest.raises(DriverError, match=r"something odd \(Kaboom\)"):
        program("odd-error").open(open_msg())


def test_a_crash_names_the_program_exit_code_and_stderr(program):
    with pytest.raises(DriverProgramError) as err:
        program("crash").open(open_msg())
    text = str(err.value)
    assert "program.py" in text and "exited while answering Open" in text
    assert "exit code 3" in text and "boom: the endpoint is on fire" in text


def test_malformed_output_is_a_driver_program_error(program):
    with pytest.raises(DriverProgramError, match="wrote a line that is not a wire message.*hello, I am not JSON"):
        program("garbage").open(open_msg())


def test_the_wrong_reply_is_refused(program):
    with pytest.raises(DriverProgramError, match="answered Open with Flushed, expected Opened"):
        program("wrong-reply").open(open_msg())


def test_a_silent_program_times_out_and_is_killed(program):
    driver = program("silent", retry={"reply_timeout": 0.5, "connect_timeout": 5})
    with pytest.raises(DriverProgramError, match=r"did not answer within 0.5s while answering Open") as err:
        driver.open(open_msg())
    assert "exit code" in str(err.value)  # it was killed, not left running


def test_loaded_before_acknowledged_is_a_protocol_violation(program):
    transactor, _ = program("early-loaded").open(open_msg())
    with pytest.raises(ProtocolViolation, match="program.py.*over the wire") as err:
        transactor.acknowledge(Acknowledge())
    assert (err.value.state, err.value.received) == ("ACKNOWLEDGE", "Loaded")
    transactor.close()


def test_output_during_the_store_phase_is_a_protocol_violation(program):
    """The program answers Store with a line.  Where the runtime sees it depends on timing
    alone: in ``store`` (the line arrived before it looked), at the start of
    ``start_commit`` (before StartCommit is sent), or as the reply to StartCommit.  The
    violation must be raised in every case, so both calls are inside ``pytest.raises``."""
    transactor, _ = program("talks-during-store").open(open_msg())
    transactor.acknowledge(Acknowledge())
    transactor.flush(Flush())
    with pytest.raises(ProtocolViolation, match="program.py.*over the wire") as err:
        transactor.store(Store(1, (("a",),), ((1, "x"),), ({"k": "a"},), (False,), (False,)))
        transactor.start_commit(StartCommit(CHECKPOINT))
    assert (err.value.state, err.value.received, err.value.expected) in (
        ("STORE", "Flushed", "nothing during the Store phase"),
        ("COMMIT", "Flushed", "StartedCommit"),
    )
    transactor.close()


def test_invalid_capabilities_and_missing_programs_are_refused(program, tmp_path):
    with pytest.raises(DriverProgramError, match="invalid capabilities.*sometimes"):
        program("bad-capabilities")
    with pytest.raises(DriverProgramError, match="could not be started"):
        load_driver(f"command:{tmp_path / 'no-such-program'}")
    with pytest.raises(SpecError, match=r"^endpoint command: command is required \(the program and its arguments"):
        CommandDriver({})
    with pytest.raises(SpecError, match=r"unknown setting\(s\) 'reuse_process' \(did you mean 'reuse_processes'\?\)"):
        CommandDriver({"command": ["true"], "reuse_process": False})


def test_processes_are_reused_between_transactions_only(tmp_path):
    name = f"command:{sys.executable} {EXAMPLE_DRIVER} --state {tmp_path / 'v.db'}"
    try:
        driver = load_driver(name)
        driver.apply(Apply("m", {}, BINDINGS))
        t1, _ = driver.open(open_msg())
        pid = t1.program.proc.pid
        t1.close()  # between transactions: back to the pool
        t2, _ = driver.open(open_msg())
        assert t2.program.proc.pid == pid
        t2.acknowledge(Acknowledge())
        t2.close()  # mid-transaction: closed, never reused
        t3, _ = driver.open(open_msg())
        assert t3.program.proc.pid != pid
        # A zombie and a newer session on one range each have their own process; the older one is fenced.
        t4, _ = load_driver(name).open(open_msg())
        assert t4.program.proc.pid != t3.program.proc.pid
        t3.acknowledge(Acknowledge())
        t3.flush(Flush())
        with pytest.raises(FencedOff, match="driver.py.*newer session opened range"):
            t3.start_commit(StartCommit(CHECKPOINT))
        t4.close()
        driver.close()
    finally:
        close_idle_programs()


def test_command_driver_pickles_as_its_config(tmp_path):
    name = f"command:{sys.executable} {EXAMPLE_DRIVER} --state {tmp_path / 'v.db'}"
    try:
        driver = load_driver(name, {"retry": {"reply_timeout": 30}})
        clone = pickle.loads(pickle.dumps(driver))
        assert type(clone) is type(driver) and clone.config == driver.config
        assert clone.checkpoints("nothing-yet") == []
    finally:
        close_idle_programs()


def test_quarantine_passes_through_to_a_program_that_declares_it(program, tmp_path):
    import sqlite3

    from tidemark.drivers.base import capabilities_of

    assert not capabilities_of(program("good")).quarantine  # undeclared: off
    db = tmp_path / "v.db"
    try:
        driver = load_driver(f"command:{sys.executable} {EXAMPLE_DRIVER} --state {db}")
        assert capabilities_of(driver).quarantine
        driver.apply(Apply("m", {}, BINDINGS))
        row = {"binding": 0, "location": "f.json:3", "key_json": None, "reason": "unparseable JSON", "value": "x{"}
        for commit in (False, True):
            t, _ = driver.open(open_msg())
            t.acknowledge(Acknowledge())
            t.flush(Flush())
            t.quarantine(Quarantine((row,)))
            if commit:
                t.start_commit(StartCommit(CHECKPOINT))
            t.close()  # without StartCommit: nothing of the transaction commits
        driver.close()
    finally:
        close_idle_programs()
    con = sqlite3.connect(db)
    rows = con.execute("SELECT materialization, batch_id, row FROM quarantine").fetchall()
    con.close()
    assert [(m, b, json.loads(r)) for m, b, r in rows] == [("m", 0, row)]
