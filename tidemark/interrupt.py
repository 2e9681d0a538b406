"""``tidemark run`` in a terminal: Ctrl-C between batches, and a line for a long batch.

The CLI's part of a run that is not the run itself (``tidemark.cli`` stays a list of commands)."""

from __future__ import annotations

import contextlib
import os
import sys
import time

from rich.console import Console
from rich.markup import escape

console = Console(stderr=True, soft_wrap=True)


def say_long_batches(stop, every: float = 10.0) -> None:
    """A line every ``every`` seconds for each batch that has been running longer (a daemon
    thread: a long batch is not silence)."""
    import threading

    from tidemark.spark.processor import IN_PROGRESS

    said: dict[tuple, int] = {}  # (name, batch, start) -> how many lines it had

    def loop() -> None:
        # looks every second, so that each batch's line comes ``every`` s after its own start
        # (a loop ticking every ``every`` s from its own start misses a batch of 10-20 s)
        while not stop.finished.wait(min(1.0, every)):
            now = time.monotonic()
            running = list(IN_PROGRESS.items())
            for done in [k for k in said if (k[0], (k[1], k[2])) not in running]:
                del said[done]  # that batch has ended
            for name, (batch, since) in running:
                due = int((now - since) // every)
                if due > said.get((name, batch, since), 0):
                    said[(name, batch, since)] = due
                    console.print(f"{name} batch {batch}: in progress for {now - since:.0f} s", highlight=False)

    threading.Thread(target=loop, name="tidemark-progress", daemon=True).start()


def _say(line: str) -> None:
    """One line on stderr from a signal handler (no rich: it may hold its own lock)."""
    with contextlib.suppress(OSError):
        os.write(2, (line + "\n").encode("utf-8", "replace"))


class Interruptible:
    """Ctrl-C (SIGINT) during ``run``: stop at the next safe point -- the batch in progress
    finishes and commits, no later batch starts -- then print one line and exit with code
    130.  A second Ctrl-C exits at once (also safe: a batch cut short is not committed and
    runs again next time)."""

    EXIT = 130
    ASKED = 75  # stopped because another process asked (EX_TEMPFAIL)
    stops_between_batches = True  # tidemark.materialize's run leaves Ctrl-C to this handler

    def __init__(self):
        import threading

        self.spark = None
        self.requested = False
        self.finished = threading.Event()  # the run is over (the progress thread stops)
        self.last_batches: dict = {}
        self._previous = None
        import threading

        self._finishing = threading.Lock()  # finish() once: the main thread may get there too
        self.asked_by: str = ""  # another process asked the run to stop (tidemark rebuild's cut-over)

    def _handler(self, signum, frame):
        import threading

        if self.requested:
            _say("interrupted again: exiting now; the batch in progress is not committed and runs again next time")
            os._exit(self.EXIT)
        self.requested = True
        if self.spark is None:
            raise KeyboardInterrupt  # Spark not started yet: nothing to wait for
        _say(
            "stopping: the batch in progress finishes and commits, no later batch starts "
            "(Ctrl-C again to exit now; a batch cut short is not committed and runs again next time)"
        )
        threading.Thread(target=self._stop_between_batches, daemon=True).start()

    def stop_requested(self, request: dict) -> None:
        """Another process asks this run to stop (``tidemark rebuild``, to cut over): as on
        Ctrl-C, the batch in progress finishes and commits, no later batch starts; then exit
        with code 75 ("try again later": a supervisor that starts the run again meets a refusal
        until the rebuild is done, then the edited spec)."""
        import threading

        if self.requested or self.spark is None:
            return  # stopping already; or Spark not up yet, whose first batch is refused instead
        self.requested = True
        self.asked_by = str(request.get("by") or "another process")
        _say(f"stopping: {self.asked_by} asked this run to stop; the batch in progress finishes and commits")
        threading.Thread(target=self._stop_between_batches, daemon=True).start()

    def _stop_between_batches(self) -> None:
        from tidemark.spark.processor import GATE

        GATE.close_and_wait()
        self.finish()

    def __enter__(self):
        import signal

        self._previous = signal.signal(signal.SIGINT, self._handler)
        return self

    def started(self, spark) -> None:
        """Spark is up: take SIGINT back from PySpark (whose handler cancels the jobs from
        inside the signal handler, over the py4j connection the main thread is reading)."""
        import signal

        self.spark = spark
        signal.signal(signal.SIGINT, self._handler)
        from tidemark.runtime.lease import on_stop_requests

        on_stop_requests(self.stop_requested)

    def __exit__(self, *exc):
        import signal

        from tidemark.runtime.lease import on_stop_requests

        self.finished.set()
        signal.signal(signal.SIGINT, self._previous)
        on_stop_requests(None)
        return False

    def finish(self) -> None:
        if not self._finishing.acquire(blocking=False):
            import threading

            threading.Event().wait()  # the first caller ends the process
        done = ", ".join(f"{m} batch {b}" for m, b in sorted(self.last_batches.items())) or "nothing new"
        console.print(
            f"stopped for {escape(self.asked_by)}; committed this run: {escape(done)}; run again (the spec as "
            "edited) once it is done"
            if self.asked_by
            else f"interrupted: stopped; committed this run: {escape(done)}; run again to go on from there",
            highlight=False,
            soft_wrap=True,
        )
        sys.stderr.flush()
        sys.stdout.flush()
        # that line is the last: what the ending JVM's connections make PySpark's servers print is noise
        quiet = os.open(os.devnull, os.O_WRONLY)
        os.dup2(quiet, 1)
        os.dup2(quiet, 2)
        # leave without stopping Spark's queries (Spark would cut a batch short and print its
        # traces) and without py4j's shutdown.  The JVM goes first, at once: left to see its
        # pipe close, its stream thread prints an RpcEnvStoppedException trace after the
        # prompt is back.  No batch is running (the gate); what Spark had not recorded of the
        # last one is recognised as committed next time, as after any crash.
        from tidemark.spark.session import end_jvm

        end_jvm()
        os._exit(self.ASKED if self.asked_by else self.EXIT)
