"""A query stopped during a batch: the batch's error is the two lines Spark reads as its stop
(Spark matches a regular expression over the whole message, which overflows the JVM's stack
on the 10 KB of a Py4JJavaError's Java trace and prints a thousand lines).  No Spark here."""

from __future__ import annotations

from tidemark.spark.stopping import stop_interruption


class Py4JJavaError(Exception):  # the name is what stop_interruption looks at (py4j's needs a JVM)
    def __str__(self) -> str:
        return self.args[0]


TRACE = "".join(f"\tat org.apache.spark.Frame{i}.run(Frame.java:{i})\n" for i in range(400))


def test_an_interrupted_jvm_call_becomes_two_lines():
    err = Py4JJavaError(
        f"An error occurred while calling o910.collectToPython.\n: java.lang.InterruptedException\n{TRACE}"
    )
    try:
        try:
            raise err
        except Py4JJavaError as inner:
            raise RuntimeError("batch 3 failed") from inner  # how a path may wrap it
    except RuntimeError as outer:
        stopping = stop_interruption(outer)
    assert stopping is not None
    assert str(stopping) == (
        "py4j.protocol.Py4JJavaError: An error occurred while calling o910.collectToPython.\n"
        ": java.lang.InterruptedException"
    )


def test_other_errors_are_left_as_they_are():
    assert (
        stop_interruption(
            Py4JJavaError(f"An error occurred while calling o1.x.\n: java.lang.OutOfMemoryError\n{TRACE}")
        )
        is None
    )
    assert stop_interruption(ValueError("no")) is None
