"""What every command of ``tidemark`` shares: the Typer app, its consoles, the ``--verbose`` and
``--version`` options, and how an error is reported (:func:`_fail`).  The commands are in
:mod:`tidemark.cli` and :mod:`tidemark.cli_spark`."""

from __future__ import annotations

from typing import Sequence

import typer
from rich.console import Console
from rich.markup import escape

from tidemark.errors import TidemarkError, from_task_failure, infrastructure_error

app = typer.Typer(
    add_completion=False,
    no_args_is_help=True,
    help="Exactly-once materialized views of streams on Spark.",
    context_settings={"help_option_names": ["-h", "--help"]},
)
# soft_wrap: a line is never cut at the terminal's (or, off a terminal, 80) columns: logs stay greppable
console = Console(stderr=True, soft_wrap=True)
out = Console(soft_wrap=True)
_state = {"verbose": False}


def _version(value: bool) -> None:
    if value:
        from importlib.metadata import PackageNotFoundError, version

        try:
            out.print(f"tidemark {version('tidemark')}", highlight=False)
        except PackageNotFoundError:  # pragma: no cover - run from a source tree
            out.print("tidemark (not installed)", highlight=False)
        raise typer.Exit()


@app.callback()
def _options(
    verbose: bool = typer.Option(False, "--verbose", "-v", help="print tracebacks with errors"),
    version: bool = typer.Option(False, "--version", callback=_version, is_eager=True, help="print the version"),
):
    _state["verbose"] = verbose


def _fail(exc: BaseException) -> None:
    """One clear message and exit code 1; the traceback only with ``--verbose``."""
    import logging
    import traceback

    logging.getLogger("tidemark").debug("error", exc_info=exc)
    if _state["verbose"]:
        console.print(escape("".join(traceback.format_exception(exc))), highlight=False, soft_wrap=True)
    console.print(f"[bold red]error:[/] {escape(str(exc))}", soft_wrap=True, highlight=False)
    raise typer.Exit(1)


def _user_error(exc: BaseException, places: Sequence[str] = ()) -> "TidemarkError | None":
    """The tidemark error behind ``exc`` (raised here, or in a Spark task), if any; else the
    infrastructure failure it is, in one line (``places``: the checkpoint folders)."""
    err = exc if isinstance(exc, TidemarkError) else from_task_failure(exc)
    return err if err is not None else infrastructure_error(exc, places)
