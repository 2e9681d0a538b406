"""The commands of ``tidemark`` that start Spark: ``run`` (:func:`tidemark.spark.runner.run_spec`),
``adopt`` (:func:`tidemark.spark.adopt.adopt`) and ``rebuild`` (:func:`tidemark.spark.rebuild.rebuild`);
registered on :data:`tidemark.cli_common.app` when :mod:`tidemark.cli` imports this module."""

from __future__ import annotations

import time
from typing import List, Optional

import typer
from rich.markup import escape

from tidemark.cli_common import _fail, _state, _user_error, app, console, out
from tidemark.errors import TidemarkError
from tidemark.interrupt import Interruptible as _interruptible
from tidemark.interrupt import say_long_batches as _say_long_batches
from tidemark.options import set_process_option


@app.command()
def run(
    spec: str = typer.Argument(..., help="the spec file (YAML or JSON)"),
    available_now: bool = typer.Option(False, "--available-now", help="process the input that is there, then exit 0"),
    materialization: Optional[List[str]] = typer.Option(None, "--materialization", "-m", help="run only these"),
    master: Optional[str] = typer.Option(None, "--master", help="Spark master (default local[*])"),
    max_files_per_trigger: Optional[int] = typer.Option(None, "--max-files-per-trigger", help="files per batch"),
    metrics_port: Optional[str] = typer.Option(
        None,
        "--metrics-port",
        help="serve Prometheus metrics at http://HOST:PORT/metrics (PORT, or HOST:PORT; 0 picks a port)",
    ),
    conf: Optional[List[str]] = typer.Option(
        None, "--conf", help="a Spark setting KEY=VALUE (repeatable), e.g. --conf spark.executor.memory=4g"
    ),
    spark_ui: bool = typer.Option(
        True, "--spark-ui/--no-spark-ui", help="Spark's web UI (http://localhost:4040, the next free port when taken)"
    ),
):
    """Run the materializations of SPEC, with live progress.  Ctrl-C stops it (exit code 130);
    every batch committed by then stays, and the next run goes on from there."""
    from tidemark.ops import check_spec, pending_files, take_leases
    from tidemark.spec import load_spec

    started = time.perf_counter()
    totals = {"batches": 0, "documents": 0}
    last_batches: dict = {}

    try:
        parsed = load_spec(spec)
        spark_conf = _spark_conf(conf or [], spark_ui)
    except TidemarkError as exc:
        _fail(exc)

    def on_batch(r):
        totals["batches"] += 1
        last_batches[r.materialization] = r.batch_id
        lag = pending_files(parsed, r.materialization)
        totals["documents"] += r.documents
        rate = r.documents / r.wall if r.wall > 0 else 0.0
        phases = " ".join(f"{k}={v:.2f}s" for k, v in r.timings.items() if not k.startswith("shard."))
        if r.skipped:
            console.print(f"[dim]{r.materialization} batch {r.batch_id}: already committed, acknowledged[/]")
            return
        console.print(
            f"[bold]{r.materialization}[/] batch [cyan]{r.batch_id}[/]: {r.documents} docs "
            f"({rate:,.0f}/s), {r.keys} keys over {r.shards} shard(s), stored {r.stored}, "
            f"loaded {r.loaded}, deleted {r.deleted}"
            + (f", [yellow]{r.invalid} quarantined[/]" if r.invalid else "")
            + (f", {r.replayed_shards} shard(s) already committed" if r.replayed_shards else "")
            + f" | {phases}"
            + ("" if lag is None else f" | lag {lag} file(s)"),
            soft_wrap=True,
        )

    from tidemark.faults import pin_group

    pin_group()
    with _interruptible() as stop:
        stop.last_batches = last_batches
        try:
            from tidemark.spark.runner import run_spec
            from tidemark.spark.session import local_session

            # one live run per checkpoint: the leases first, so that a second run is refused at
            # once (the run's coordinators take them over in this process when Spark is up)
            leases = take_leases(parsed, materialization or None)  # the spec as read once, above
            stop.leases = leases
            # the endpoints next (credentials, reachability, the tables), before Spark starts
            check_spec(parsed, materialization or None, to_run=True)
            for n in materialization or list(parsed.materializations):
                if n in parsed.materializations:
                    waiting = pending_files(parsed, n)
                    console.print(
                        f"{n}: endpoint {parsed.materializations[n].driver_name} ready"
                        + ("" if waiting is None else f", {waiting} file(s) waiting"),
                        highlight=False,
                    )
            console.print(
                f"starting Spark ({master or 'local[*]'}; the first batch starts when it is up)", highlight=False
            )
            if _state["verbose"]:  # Spark's own logging too: failed task attempts, their stacks
                set_process_option("spark_log_defaults", True)
            spark = local_session("tidemark", master=master or "local[*]", **spark_conf)
            stop.started(spark)
            _say_long_batches(stop)
            # Spark logs a failed batch with every stack trace; the CLI prints the one message.
            spark.sparkContext.setLogLevel("ERROR" if _state["verbose"] else "FATAL")
            run_spec(
                parsed,
                available_now=available_now,
                materializations=materialization or None,
                spark=spark,
                on_batch=on_batch,
                max_files_per_trigger=max_files_per_trigger,
                metrics_port=metrics_port,
                on_metrics=lambda url: console.print(f"metrics: {url}", highlight=False),
            )
        except KeyboardInterrupt:
            stop.finish()
        except Exception as exc:
            if stop.requested:
                stop.finish()
            places = [parsed.checkpoint_location(n) for n in materialization or parsed.materializations]
            err = _user_error(exc, places)
            if err is None:
                raise
            _fail(err)
        finally:
            for lease in getattr(stop, "leases", ()):
                lease.release()  # (a lease its coordinator took over is the coordinator's to give back)
        if stop.requested:
            stop.finish()
    console.print(
        f"[green]done[/]: {totals['batches']} batch(es), {totals['documents']} documents in "
        f"{time.perf_counter() - started:.1f}s"
    )


@app.command()
def adopt(
    spec: str = typer.Argument(..., help="the spec file"),
    materialization: Optional[str] = typer.Option(None, "--materialization", "-m", help="the materialization"),
    from_: List[str] = typer.Option(
        ...,
        "--from",
        help="the existing table (NAME or SCHEMA.NAME; a Delta "
        "table's path) or SELECT query whose rows become the view; with several "
        "bindings RESOURCE=TABLE_OR_QUERY, repeated",
    ),
    since: Optional[str] = typer.Option(
        None,
        "--since",
        help="the table holds the input up to this time "
        "(RFC 3339 or epoch seconds; default: now): source files modified "
        "later are reduced on top",
    ),
    master: Optional[str] = typer.Option(None, "--master", help="Spark master (default local[*])"),
):
    """Start a view from a table that exists (a hand-written upsert's): its rows become the
    view's batch 0, and `tidemark run` reduces only newer input on top, exactly once.
    Stopped part-way, the same command finishes it."""
    from tidemark.faults import pin_group
    from tidemark.spark.adopt import adopt as do_adopt
    from tidemark.spark.adopt import parse_from

    pin_group()
    try:
        sources = parse_from(from_)
        from tidemark.spark.session import local_session

        def session():  # made once the table is read and checked
            if _state["verbose"]:
                set_process_option("spark_log_defaults", True)
            spark = local_session("tidemark", master=master or "local[*]", **{"spark.ui.enabled": "false"})
            spark.sparkContext.setLogLevel("ERROR" if _state["verbose"] else "FATAL")
            return spark

        result = do_adopt(spec, materialization=materialization, from_=sources, since=since, spark=session)
    except Exception as exc:
        err = _user_error(exc)
        if err is None:
            raise
        _fail(err)
    rows = ", ".join(f"{n} row(s) into {r}" for r, n in result["rows"].items())
    batch = result["batch"]
    newer = batch.documents - sum(result["rows"].values()) if batch is not None else 0
    on_top = f"; {newer} newer document(s) reduced on top" if newer > 0 else ""
    out.print(
        f"adopted {rows} as batch 0 (the input up to {result['since']}){on_top}; `tidemark run` goes on from there",
        highlight=False,
        soft_wrap=True,
    )


@app.command()
def rebuild(
    spec: str = typer.Argument(..., help="the spec file, as edited"),
    materialization: Optional[str] = typer.Option(None, "--materialization", "-m", help="the materialization"),
    abandon: bool = typer.Option(False, "--abandon", help="drop the shadow of the rebuild in progress, nothing else"),
    master: Optional[str] = typer.Option(None, "--master", help="Spark master (default local[*])"),
    wait: float = typer.Option(
        600.0, "--wait", help="seconds the cut-over waits for the live run to stop when asked (0: do not ask)"
    ),
):
    """Change a live view without taking it away: build the edited spec into shadow resources
    while the live view keeps running, then replace the live contents in one endpoint
    transaction. For the cut-over the live `tidemark run` is asked to stop at its next batch
    boundary (it exits with code 75; start it again with the edited spec). Stopped part-way,
    the same command goes on; --abandon drops only the shadow."""
    from tidemark.faults import pin_group
    from tidemark.spark.rebuild import rebuild as do_rebuild

    pin_group()

    def session():  # made only if something is built
        from tidemark.spark.session import local_session

        if _state["verbose"]:
            set_process_option("spark_log_defaults", True)
        spark = local_session("tidemark-rebuild", master=master or "local[*]", **{"spark.ui.enabled": "false"})
        spark.sparkContext.setLogLevel("ERROR" if _state["verbose"] else "FATAL")
        return spark

    def on_batch(r):
        console.print(
            f"{r.materialization} batch {r.batch_id}: "
            + ("already committed" if r.skipped else f"{r.documents} docs, {r.keys} keys, stored {r.stored}"),
            highlight=False,
        )

    try:
        said = do_rebuild(
            spec,
            materialization=materialization,
            spark=session,
            abandon=abandon,
            wait=wait,
            on_batch=on_batch,
            say=lambda line: console.print(escape(line), highlight=False, soft_wrap=True),
        )
    except Exception as exc:
        err = _user_error(exc)
        if err is None:
            raise
        _fail(err)
    out.print(escape(said), highlight=False, soft_wrap=True)


def _spark_conf(pairs: List[str], ui: bool) -> dict:
    """``--conf KEY=VALUE`` settings (and ``--spark-ui``) as a dict for the SparkSession."""
    out = {"spark.ui.enabled": "true" if ui else "false"}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or not key.strip().startswith("spark."):
            raise TidemarkError(f"--conf takes KEY=VALUE with a Spark key (spark.…), got {pair!r}")
        out[key.strip()] = value
    return out
