"""A query stopped while a batch runs: the batch's error, made short enough for Spark to read.

``query.stop()`` interrupts the batch's Spark job; the batch function then fails with a
``Py4JJavaError`` whose text carries the JVM's whole stack (10 KB and more).  Spark decides
whether a failed batch was its own stop by matching a regular expression over the whole
message of the callback's error (``StreamExecution.isInterruptionException``); over a
message that long, Java's regular expressions recurse past the thread's stack, and the stop
ends in a ``StackOverflowError`` of a thousand lines on the console.  :func:`stop_interruption`
gives instead an error of the first two lines (the call and the interruption), which Spark
reads as its stop: the query ends quietly, nothing of the batch committed (it runs again on
the next start).
"""

from __future__ import annotations

from typing import Optional

#: what an interrupted JVM call raises (those Spark takes for its stop)
INTERRUPTIONS = (
    "java.lang.InterruptedException",
    "java.io.InterruptedIOException",
    "java.nio.channels.ClosedByInterruptException",
)


class QueryStopping(Exception):
    """The query was stopped while this batch ran (its message: the JVM call and the interruption)."""


def stop_interruption(exc: BaseException) -> Optional[QueryStopping]:
    """The short error for a batch that failed because its query is stopping, or None."""
    seen: set[int] = set()
    e: Optional[BaseException] = exc
    while e is not None and id(e) not in seen:
        seen.add(id(e))
        if type(e).__name__ == "Py4JJavaError":
            head = str(e).split("\n", 2)[:2]
            if len(head) == 2 and any(head[1].startswith(f": {name}") for name in INTERRUPTIONS):
                return QueryStopping(f"py4j.protocol.Py4JJavaError: {head[0]}\n{head[1].split(chr(9))[0].rstrip()}")
        e = e.__cause__ or e.__context__
    return None


__all__ = ["QueryStopping", "stop_interruption", "INTERRUPTIONS"]
